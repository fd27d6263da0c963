"""Credentials never reach a page, a log, a wheel or the terminal.

A URL the user gives (a git source, a torch index, an index to merge, a registry, a publish
target) must not carry a credential: a password or token in its user part
(`https://user:TOKEN@host`, `s3://KEY:SECRET@bucket`, `hf://user:TOKEN@...`) or in its query
(`?token=...`, a signed URL's `X-Amz-Signature=...`). Such a URL is refused as bad input, and
the refusal shows it redacted. Credentials belong in the environment or a credential store
(TWINE_PASSWORD, keyring, ~/.pypirc, HF_TOKEN, AWS_* variables), where the tools that use
them read them.

`redact` is also applied to every line the command line prints, as a last line of defence for
text that quotes a URL (an HTTP library's exception, a tool's first error line).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .errors import ConfigError

__all__ = ["MASK", "credential_in", "redact", "refuse_credentials"]

MASK = "***"

# Query parameters that carry a secret, by name (case-insensitive, - and _ alike).
_SECRET_PARAMETERS = re.compile(
    r"(?:access[-_]?)?token|(?:api[-_]?)?key|secret|password|passwd|pwd|auth|authorization|"
    r"credentials?|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
    r"x-goog-signature|client[-_]secret|session",
    re.IGNORECASE)

# scheme://USERINFO@ where USERINFO holds a ':' (user:password) or is a token on its own.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/@]+)@")
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:" + _SECRET_PARAMETERS.pattern + r"))=(?P<value>[^&;#\s'\"()]+)",
    re.IGNORECASE)


def _userinfo_secret(userinfo: str) -> bool:
    """A user part is secret when it has a password (`user:pw`) or is itself a token (long and
    not a plain login name such as ssh's `git`)."""
    return ":" in userinfo or len(userinfo) >= 20


def credential_in(url: str) -> str | None:
    """What secret a URL carries ("a password", "a token in its user part", "a 'token'
    query parameter"), or None."""
    match = _USERINFO.search(url)
    if match and _userinfo_secret(match.group("userinfo")):
        return "a password" if ":" in match.group("userinfo") else "a token in its user part"
    try:
        query = urlsplit(url).query
    except ValueError:
        query = ""
    for name, _value in parse_qsl(query, keep_blank_values=True):
        if _SECRET_PARAMETERS.fullmatch(name):
            return f"a '{name}' query parameter"
    return None


def redact(text: str) -> str:
    """`text` with every URL credential replaced by ***."""
    def userinfo(match: re.Match[str]) -> str:
        if not _userinfo_secret(match.group("userinfo")):
            return match.group(0)
        return f"{match.group('scheme')}{MASK}@"
    text = _USERINFO.sub(userinfo, text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('name')}={MASK}", text)


def refuse_credentials(url: str, *, key: str, file: Path | str | None = None,
                       line: int | None = None, instead: str = "") -> None:
    """Bad input (exit 2) when `url` carries a credential; the message shows it redacted."""
    found = credential_in(url)
    if found is None:
        return
    hint = f"; {instead}" if instead else ""
    raise ConfigError(f"'{redact(url)}' holds {found}, which the factory would print and "
                      f"record: remove it{hint}", file=file, line=line, key=key)
