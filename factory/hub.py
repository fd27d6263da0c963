"""The Hugging Face Hub as the factory meets it: huggingface_hub's exceptions turned into the
factory's errors (one adapter for fetching sources and for publishing), and `hf://` targets
read with huggingface_hub's own parser.

huggingface_hub does all the talking, so HF_ENDPOINT, HF_TOKEN (or a stored login), its cache
and HF_HUB_OFFLINE work as they do for any other tool.
"""

from __future__ import annotations

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


def parse_hf_target(spec: str, key: str) -> tuple[str, str, str | None, str]:
    """(repo type, repo id, revision or None, path in the repo) of an hf:// URL, read by
    huggingface_hub's parser (which knows special revisions such as refs/pr/1)."""
    from huggingface_hub import parse_hf_uri
    from huggingface_hub.errors import HfUriError

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
