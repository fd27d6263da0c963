"""The Hugging Face Hub as the factory meets it: huggingface_hub's exceptions turned into the
factory's errors (one adapter for fetching sources and for publishing), and `hf://` targets
read with huggingface_hub's own parser.

huggingface_hub does all the talking, so HF_ENDPOINT, HF_TOKEN (or a stored login), its cache
and HF_HUB_OFFLINE work as they do for any other tool.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import ConfigError, FactoryError

__all__ = ["HUB_ERROR_MODULES", "hub_errors", "parse_hf_target"]

# The HTTP clients huggingface_hub may raise from (connection refused, time-outs).
HUB_ERROR_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2", "requests")


@contextmanager
def hub_errors(repo: str, revision: str | None, *, where: str,
               refused: type[FactoryError], failed: type[FactoryError],
               access: str = "or it is private and HF_TOKEN does not grant access"
               ) -> Iterator[None]:
    """Run Hub calls for `repo`: a repo or revision that is not there raises `refused`, any
    other failure `failed`, each as one line that starts with `where` where it needs to."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    _redacted_logs()
    try:
        yield
    except GatedRepoError:
        raise failed(f"{repo} on {constants.ENDPOINT} is gated: accept its terms and set "
                     "HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise refused(f"{repo} is not a repo on {constants.ENDPOINT} ({access})") from None
    except RevisionNotFoundError:
        raise refused(f"{repo} on {constants.ENDPOINT} has no revision "
                      f"'{revision}'") from None
    except LocalEntryNotFoundError:
        raise failed(f"{where} is not in the Hugging Face cache and the Hub cannot be used "
                     "(offline, or unreachable)") from None
    except HfHubHTTPError as error:
        text = " ".join(str(error).split())[:300]
        raise failed(f"{where}: {text or type(error).__name__}") from None
    except FactoryError:
        raise
    except Exception as error:
        if isinstance(error, OSError | ValueError) or \
                type(error).__module__.split(".")[0] in HUB_ERROR_MODULES:
            raise failed(f"{where}: {error or type(error).__name__}") from None
        raise


class _Redacted(logging.Filter):
    """huggingface_hub's own log lines (its retries name the URL it requested, HF_ENDPOINT's
    password included) with every credential masked, as the factory's errors are."""

    def filter(self, record: logging.LogRecord) -> bool:
        from .trust.credentials import redact

        record.msg, record.args = redact(record.getMessage()), ()
        return True


def _redacted_logs() -> None:
    """Every handler of huggingface_hub's log lines (it adds its own, to stderr) masks them
    with _Redacted; where it has none, one is added, and nothing reaches the root logger."""
    logger = logging.getLogger("huggingface_hub")
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler())
    for handler in logger.handlers:
        if not any(isinstance(item, _Redacted) for item in handler.filters):
            handler.addFilter(_Redacted())
    logger.propagate = False


def parse_hf_target(spec: str, key: str) -> tuple[str, str, str | None, str]:
    """(repo type, repo id, revision or None, path in the repo) of an hf:// URL, read by
    huggingface_hub's parser (which knows special revisions such as refs/pr/1)."""
    from huggingface_hub import parse_hf_uri
    from huggingface_hub.errors import HfUriError

    head, _, rest = spec.removeprefix("hf://").partition("/")
    if "@" in head:  # hf://TOKEN@owner/name: a credential where the owner goes
        shown = f"hf://***@{head.rpartition('@')[2]}/{rest}"
        raise ConfigError(f"'{shown}' holds something before the repo's owner (a token?), "
                          "which the factory would print and record: remove it and give the "
                          "token through HF_TOKEN or `hf auth login`", key=key)
    try:
        uri = parse_hf_uri(spec)
    except HfUriError as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"'{spec}' does not name a repo on the Hub ({reason}); give "
                          "hf://[datasets/|spaces/]OWNER/NAME[@REVISION][/PATH]",
                          key=key) from None
    if uri.type == "bucket":
        raise ConfigError(f"'{spec}' is a bucket; publish to a model, dataset or space repo",
                          key=key)
    return uri.type, uri.id, uri.revision, uri.path_in_repo.strip("/")
