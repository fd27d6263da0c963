"""Credentials never reach a page, a log, a wheel or the terminal.

A URL the user gives (a git source, a torch index, an index to merge, a registry, a publish
target) must not carry a credential: a password or token in its user part
(`https://user:TOKEN@host`, `s3://KEY:SECRET@bucket`, `hf://user:TOKEN@...`) or in its query
(`?token=...`, a signed URL's `X-Amz-Signature=...`). Such a URL is refused as bad input, and
the refusal shows it redacted. Credentials belong in the environment or a credential store
(TWINE_PASSWORD, keyring, ~/.pypirc, HF_TOKEN, AWS_* variables), where the tools that use
them read them.

`redact` is also applied to every line the command line prints and every line a cell's log
gets, as a last line of defence for text that quotes a URL (an HTTP library's exception, a
tool's first error line, a hostile setup.py's output). It masks by default: every URL's user
part (but for a plain login such as ssh's `git`), every query value and every fragment, unless
its key is known to be harmless (`rev`, `sha256`, ...); and the value of every variable of the
environment whose name says it is a secret (`*TOKEN*`, `*PASSWORD*`, `*SECRET*`, `*_KEY`, ...),
wherever it stands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from ..errors import ConfigError

__all__ = ["MASK", "SAFE_KEYS", "credential_in", "escape_controls", "mask_url",
           "passed_environment", "redact", "refuse_credentials", "secret_values",
           "without_inherited_secrets"]

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
    scp = _SCP_LIKE.match(url) if "://" not in url else None
    if scp and _userinfo_secret(scp.group("user")):
        return "a password" if ":" in scp.group("user") else "a token in its user part"
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _SECRET_PARAMETERS.fullmatch(name):
            return f"a '{name}' query parameter"
        if value and not _safe_key(name):
            # masked by default: a key the factory does not know may carry a secret
            return f"a '{name}' query parameter, which may be a secret"
    if parts.fragment and _masked_pairs(parts.fragment, "&") != parts.fragment:
        return "a fragment, which may be a secret"
    return None


# Query and fragment keys whose values say where or what, never who: kept when printed.
SAFE_KEYS = frozenset({
    "rev", "ref", "revision", "branch", "tag", "commit", "version", "subdirectory", "subdir",
    "egg", "path", "file", "filename", "name", "format", "page", "per_page", "sha256", "sha384",
    "sha512", "md5", "sha1", "blake2b", "arch", "platform", "python", "torch", "cuda", "sort",
    "lang", "download", "raw", "plain", "view", "tab", "q", "search"})
# Logins that name no one (ssh's git@, anonymous FTP): kept in a URL's user part.
SAFE_LOGINS = frozenset({"git", "hg", "svn", "anonymous", "ftp"})
# scheme://... up to a character no URL holds unquoted, or a quote or bracket around it.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}`|\\^]+")
# git's scp-like form, USER@HOST:PATH, where no scheme is written (ssh's `git@github.com:...`)
_SCP_LIKE = re.compile(r"(?<![\w.:/@-])(?P<user>[^\s@/'\"<>]+)@"
                       r"(?P<rest>[A-Za-z0-9.-]+:[^\s'\"<>]+)")
# Environment variables whose values are secrets, by name.
_SECRET_NAME = re.compile(
    r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL|_KEY$|^KEY$|APIKEY|_AUTH|^AUTH|SESSION|COOKIE|"
    r"PRIVATE|SIGNATURE|_PAT$|^PAT$", re.IGNORECASE)
_MIN_SECRET = 6  # shorter values (a "1", a "true") are too common to mask everywhere


def _safe_key(key: str) -> bool:
    """Whether a query or fragment key says where or what (SAFE_KEYS; case, - and _ alike)."""
    return key.lower().replace("-", "_") in SAFE_KEYS


def mask_url(url: str) -> str:
    """The URL with its user part (but a plain login), every query value and the fragment
    masked, except where the key is known to be harmless (SAFE_KEYS). The rest is kept as
    written (no decoding), so that the URL stays recognisable."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, hash_sign, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if at and userinfo not in SAFE_LOGINS:
        authority = f"{MASK}@{host}"
    masked = f"{scheme}://{authority}{slash}{path}"
    if question:
        masked += "?" + _masked_pairs(query, "&;")
    if hash_sign:
        masked += "#" + _masked_pairs(fragment, "&")
    return masked


def _masked_pairs(text: str, separators: str) -> str:
    """key=value pairs with each value masked unless its key is safe; text that is no pair
    masked whole."""
    parts = re.split(f"([{re.escape(separators)}])", text)
    for index in range(0, len(parts), 2):
        key, equals, value = parts[index].partition("=")
        if not equals:
            parts[index] = key if not key or _safe_key(key) else MASK
        elif value and not _safe_key(key):
            parts[index] = f"{key}={MASK}"
    return "".join(parts)


def _mask_found_url(match: re.Match[str]) -> str:
    """A URL found in text, masked; punctuation that ends the sentence around it is kept."""
    url = match.group(0)
    end = len(url.rstrip(".,;:!?"))
    return mask_url(url[:end]) + url[end:]


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment's variables whose names say they are secrets, longest
    first (so that a secret holding another is masked whole)."""
    environ = os.environ if environ is None else environ
    found = {value for name, value in environ.items()
             if _SECRET_NAME.search(name) and len(value.strip()) >= _MIN_SECRET}
    return sorted(found, key=lambda value: (-len(value), value))


# What a program running someone else's code (a setup.py, a kernel's tests) may see of the
# factory's environment; everything else (TWINE_PASSWORD, HF_TOKEN, AWS_*, GITHUB_TOKEN, ...)
# stays out.
_PASSED_VARIABLES = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM",
                     "TZ", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH",
                     "CPLUS_INCLUDE_PATH", "PKG_CONFIG_PATH", "SOURCE_DATE_EPOCH")


def passed_environment(environ: Mapping[str, str] | None = None,
                       prefixes: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables of `environ` (the factory's own) in _PASSED_VARIABLES, and those whose
    names start with one of `prefixes` (CUDA_, for a GPU's tests) unless the name says it is a
    secret."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items()
            if name in _PASSED_VARIABLES or (name.startswith(prefixes)
                                            and not _SECRET_NAME.search(name))}


# Credentials the programs the factory starts read themselves: uv's and pip's for an index
# they install from (UV_INDEX_<NAME>_PASSWORD, PIP_* settings).
_CHILD_CREDENTIALS = ("UV_", "PIP_")


def without_inherited_secrets(env: Mapping[str, str] | None = None,
                              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a program the factory starts gets: `env` (else `environ`, the
    factory's own) without the variables it took from `environ` whose names say they are
    secrets. The factory reads those itself, in its own process (twine TWINE_*,
    huggingface_hub HF_TOKEN, boto3 AWS_*, the object cache's key; see trust/keys.py and
    publish/); no compiler, installer, git or docker command needs them, and none of the
    kernel's code may see them. A secret set on purpose for the program (a matrix's `env:`
    value of its own) stays, and so do uv's and pip's index credentials."""
    environ = os.environ if environ is None else environ
    env = environ if env is None else env
    return {name: value for name, value in env.items()
            if not (_SECRET_NAME.search(name) and environ.get(name) == value
                    and not name.startswith(_CHILD_CREDENTIALS))}


def redact(text: str, environ: Mapping[str, str] | None = None,
           secrets: Sequence[str] | None = None) -> str:
    """`text` with every URL masked (mask_url), every secret query parameter outside a URL
    masked, and every secret of the environment (secret_values, or `secrets` where a caller
    that redacts many lines found them once) replaced by ***."""
    for value in secret_values(environ) if secrets is None else secrets:
        text = text.replace(value, MASK)
    text = _URL.sub(_mask_found_url, text)
    text = _SCP_LIKE.sub(lambda m: f"{MASK}@{m.group('rest')}"
                         if _userinfo_secret(m.group("user")) else m.group(0), text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('name')}={MASK}", text)


def escape_controls(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, NUL, a line break) written as
    an escape, \\x1b: what the factory prints of text it was given never drives the terminal."""
    return "".join(char if char.isprintable() else f"\\x{ord(char):02x}" for char in text)


def refuse_credentials(url: str, *, key: str, file: Path | str | None = None,
                       line: int | None = None, instead: str = "") -> None:
    """Bad input (exit 2) when `url` carries a credential; the message shows it redacted."""
    found = credential_in(url)
    if found is None:
        return
    hint = f"; {instead}" if instead else ""
    raise ConfigError(f"'{redact(url)}' holds {found}, which the factory would print and "
                      f"record: remove it{hint}", file=file, line=line, key=key)
