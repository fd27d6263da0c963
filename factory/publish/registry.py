"""`factory publish`: an output folder's wheels onto a PyPI-compatible registry, through twine.

What the registry already holds is read first, from its simple index (PEP 691 JSON when it
answers with it, PEP 503 HTML otherwise): a wheel there with the same sha256 is skipped, one
there with other bytes stops the publish before anything is uploaded (published files are
immutable, on the registry as here). The rest go up one by one with twine's own upload, and
the index is read again to check that each is listed with its sha256.

Credentials are twine's: TWINE_USERNAME / TWINE_PASSWORD, the keyring, ~/.pypirc, or PyPI's
trusted publishing in CI. The factory hands them to twine and to the index reads and never
prints them; a URL with a password in it is refused, so it cannot reach a log either.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..build import sha256_file
from ..errors import ConfigError, FactoryError
from ..index.records import load_manifest
from ..layout import Layout

PYPI_UPLOAD = {"https://upload.pypi.org/legacy/": "https://pypi.org/simple/",
               "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/"}
JSON_ACCEPT = ("application/vnd.pypi.simple.v1+json, "
               "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")
TIMEOUT = 60


class PublishError(FactoryError):
    """The registry refused something, or holds other bytes under a published name."""


@dataclass(frozen=True)
class LocalWheel:
    path: Path
    project: str
    version: str
    sha256: str


@dataclass
class RegistryReport:
    repository: str
    index: str
    uploaded: list[str]
    skipped: list[str]
    yanked: list[str]


def local_wheels(out: Path) -> tuple[list[LocalWheel], list[str]]:
    """The wheels of files/ to publish, and the names of those left out because they are
    yanked here (uploading one would offer it again)."""
    layout = Layout(out)
    if not layout.files.is_dir():
        raise ConfigError("has no files/ folder: not a factory output folder", file=out)
    records = load_manifest(layout.manifest).files
    wheels, yanked = [], []
    for path in sorted(layout.files.glob("*.whl")):
        record = records.get(path.name)
        if record is not None and record.yanked is not None:
            yanked.append(path.name)
            continue
        name, version, _, _ = parse_wheel_filename(path.name)
        wheels.append(LocalWheel(path, canonicalize_name(name), str(version), sha256_file(path)))
    return wheels, yanked


def twine_settings(repository_url: str | None, repository: str | None):
    """twine's Settings as `twine upload` makes them: the same environment variables
    (TWINE_REPOSITORY_URL, TWINE_USERNAME, TWINE_PASSWORD, TWINE_CERT), ~/.pypirc and keyring,
    never a prompt."""
    from twine import exceptions as twine_errors
    from twine.settings import Settings

    parser = argparse.ArgumentParser(add_help=False)
    Settings.register_argparse_arguments(parser)
    argv = ["--non-interactive", "--disable-progress-bar"]
    if repository_url is not None:
        argv += ["--repository-url", repository_url]
    if repository is not None:
        argv += ["--repository", repository]
    if urlsplit(repository_url or os.environ.get("TWINE_REPOSITORY_URL", "")).password \
            is not None:
        raise ConfigError("holds a password: give credentials through TWINE_USERNAME and "
                          "TWINE_PASSWORD or the keyring, never in the URL",
                          key="--repository-url")
    try:
        return Settings.from_argparse(parser.parse_args(argv))
    except twine_errors.TwineException as exc:
        key = "--repository-url" if repository_url is not None else "--repository"
        raise ConfigError(_one_line(str(exc)), key=key) from None


def index_url_for(repository_url: str) -> str:
    """The simple index beside an upload URL: PyPI's and TestPyPI's are known; elsewhere
    (pypiserver, Artifactory, Nexus, GitLab) it is `<upload URL>/simple/`, with a trailing
    `legacy/` dropped."""
    if repository_url in PYPI_UPLOAD:
        return PYPI_UPLOAD[repository_url]
    base = repository_url if repository_url.endswith("/") else repository_url + "/"
    if base.endswith("/legacy/"):
        base = base[: -len("legacy/")]
    return base + "simple/"


def publish_to_registry(out: Path, *, repository_url: str | None, repository: str | None,
                        index_url: str | None, dry_run: bool,
                        say: Callable[[str], None]) -> RegistryReport:
    wheels, yanked = local_wheels(out)
    settings = twine_settings(repository_url, repository)
    upload_url = settings.repository_config["repository"]
    if upload_url in PYPI_UPLOAD:
        labelled = [w.path.name for w in wheels if "+" in w.version]
        if labelled:
            raise ConfigError(
                f"{upload_url} refuses local version labels such as "
                f"{labelled[0].split('-')[1]}; publish these wheels to a registry of your own "
                "(--repository-url) or as a static index (--to)", file=out)
    simple = index_url or index_url_for(upload_url)
    reader = _IndexReader(simple, settings)
    report = RegistryReport(upload_url, simple, [], [], yanked)
    say(f"registry {upload_url} (index {simple}): {len(wheels)} wheel(s) in {out}/files"
        + (f", {len(yanked)} yanked left out" if yanked else ""))

    listed: dict[str, dict[str, str | None]] = {}
    for project in sorted({w.project for w in wheels}):
        listed[project] = reader.files(project)
    pending, conflicts = [], []
    for wheel in wheels:
        there = listed[wheel.project]
        if wheel.path.name not in there:
            pending.append(wheel)
            continue
        digest = there[wheel.path.name] or reader.digest_of(wheel.project, wheel.path.name)
        if digest == wheel.sha256:
            report.skipped.append(wheel.path.name)
        else:
            conflicts.append(f"{wheel.path.name} (there sha256 {digest[:12]}, here "
                             f"{wheel.sha256[:12]})")
    if conflicts:
        raise PublishError(f"the registry already holds other bytes under {len(conflicts)} "
                           f"name(s): {'; '.join(conflicts)}; published files are immutable, "
                           "so nothing was uploaded (raise the version to publish new bytes)")
    for name in report.skipped:
        say(f"  already there, same sha256: {name}")
    if dry_run:
        for wheel in pending:
            say(f"  would upload {wheel.path.name}")
        return report
    if pending:
        _check_credentials(settings, upload_url)
    for wheel in pending:
        _upload(settings, wheel, upload_url)
        say(f"  uploaded {wheel.path.name}")
        report.uploaded.append(wheel.path.name)
    for project in {wheel.project for wheel in pending}:
        reader.forget(project)
    for wheel in pending:
        there = _listed_after_upload(reader, wheel)
        if there == "missing":
            raise PublishError(f"{wheel.path.name} was accepted by {upload_url} but "
                               f"{simple} does not list it (is --index-url right?)")
        digest = there or reader.digest_of(wheel.project, wheel.path.name)
        if digest != wheel.sha256:
            raise PublishError(f"{simple} lists {wheel.path.name} with sha256 {digest[:12]}, "
                               f"not the uploaded {wheel.sha256[:12]}")
    return report


def _listed_after_upload(reader: _IndexReader, wheel: LocalWheel) -> str | None:
    """The uploaded file's listing: its sha256, None when listed without one, "missing".
    Registries behind a cache (PyPI's CDN, Artifactory's remote indexes) may show a new file
    a little late: the page is read again for up to half a minute."""
    for pause in (0, 1, 2, 4, 8, 15):
        if pause:
            time.sleep(pause)
            reader.forget(wheel.project)
        there = reader.files(wheel.project).get(wheel.path.name, "missing")
        if there != "missing":
            return there
    return "missing"


def _check_credentials(settings, upload_url: str) -> None:
    """Credentials as twine finds them (environment, ~/.pypirc, keyring, trusted publishing);
    none at all is said plainly instead of as the registry's 401."""
    from twine import exceptions as twine_errors

    try:
        found = bool(settings.username) and bool(settings.password)
    except twine_errors.NonInteractive:
        found = False
    if not found:
        raise PublishError(f"no credentials for {upload_url}: set TWINE_USERNAME and "
                           "TWINE_PASSWORD, or store them in the keyring (keyring set "
                           f"{upload_url} USER)")


def _upload(settings, wheel: LocalWheel, upload_url: str) -> None:
    """twine's upload of one file; its console output is dropped (the caller reports), its
    errors become one line."""
    import requests
    from twine import exceptions as twine_errors
    from twine.commands.upload import upload

    quiet = io.StringIO()
    twine_logger = logging.getLogger("twine")
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            twine_logger.disabled = True
            upload(settings, [str(wheel.path)])
    except requests.HTTPError as exc:
        raise _http_error(exc.response, upload_url, settings, f"upload of {wheel.path.name}")
    except requests.RequestException as exc:
        raise PublishError(f"cannot reach {upload_url}: {type(exc).__name__}") from None
    except twine_errors.TwineException as exc:
        raise PublishError(f"{wheel.path.name}: {_one_line(str(exc))}") from None
    finally:
        twine_logger.disabled = False


def _http_error(response, url: str, settings, what: str) -> PublishError:
    status = response.status_code
    if status in (401, 403):
        return PublishError(
            f"{url} refused the credentials of user {settings.username!r} (HTTP {status} "
            f"{response.reason}) at the {what}: check TWINE_USERNAME and TWINE_PASSWORD, the "
            "keyring entry or ~/.pypirc")
    body = _one_line(response.text)[:200]
    return PublishError(f"{url} refused the {what}: HTTP {status} {response.reason}"
                        + (f" ({body})" if body else ""))


class _IndexReader:
    """A registry's simple index: the files of a project with their sha256 when listed."""

    def __init__(self, url: str, settings) -> None:
        import requests

        self.url = url if url.endswith("/") else url + "/"
        self.settings = settings
        self.session = requests.Session()
        self.session.verify = settings.cacert or True
        if settings.client_cert:
            self.session.cert = settings.client_cert
        self.pages: dict[str, dict[str, str | None]] = {}
        self.links: dict[tuple[str, str], str] = {}

    def forget(self, project: str) -> None:
        self.pages.pop(project, None)

    def files(self, project: str) -> dict[str, str | None]:
        if project not in self.pages:
            self.pages[project] = self._read(project)
        return self.pages[project]

    def digest_of(self, project: str, filename: str) -> str:
        """A listed file's sha256 when the page gives none: its bytes, downloaded."""
        response = self._get(self.links[(project, filename)], stream=True)
        digest = hashlib.sha256()
        for block in response.iter_content(1 << 20):
            digest.update(block)
        return digest.hexdigest()

    def _get(self, url: str, **kwargs):
        """A GET of the registry's own URL. Redirects are followed on the registry's host only:
        one to another host (pypiserver sends unknown projects to pypi.org) means the
        registry does not hold the project, and is answered as a 404."""
        import requests

        try:
            for _ in range(10):
                response = self.session.get(url, headers={"Accept": JSON_ACCEPT},
                                            timeout=TIMEOUT, allow_redirects=False, **kwargs)
                if response.status_code == 401 and self.session.auth is None:
                    self.session.auth = self._credentials()
                    continue
                if not response.is_redirect:
                    break
                url = urljoin(url, response.headers["Location"])
                if urlsplit(url).netloc != urlsplit(self.url).netloc:
                    response.status_code = 404
                    break
        except requests.RequestException as exc:
            raise PublishError(f"cannot reach {self.url}: {type(exc).__name__}") from None
        if response.status_code != 404 and not response.ok:
            raise _http_error(response, self.url, self.settings, "index read")
        return response

    def _credentials(self) -> tuple[str, str]:
        from twine import exceptions as twine_errors

        try:
            username, password = self.settings.username, self.settings.password
        except twine_errors.NonInteractive:
            username = password = None
        if not username or not password:
            raise PublishError(f"{self.url} asks for credentials and none are set: "
                               "TWINE_USERNAME and TWINE_PASSWORD, or the keyring")
        return username, password

    def _read(self, project: str) -> dict[str, str | None]:
        page = urljoin(self.url, f"{project}/")
        response = self._get(page)
        if response.status_code == 404:
            return {}
        kind = response.headers.get("Content-Type", "").split(";")[0].strip()
        found: dict[str, str | None] = {}
        if kind == "application/vnd.pypi.simple.v1+json":
            for entry in json.loads(response.content).get("files", []):
                name = entry["filename"]
                found[name] = entry.get("hashes", {}).get("sha256")
                self.links[(project, name)] = urljoin(response.url, entry["url"])
            return found
        anchors = _Anchors()
        anchors.feed(response.text)
        for href in anchors.hrefs:
            link, _, fragment = href.partition("#")
            name = unquote(urlsplit(link).path.rsplit("/", 1)[-1])
            algorithm, _, value = fragment.partition("=")
            found[name] = value.lower() if algorithm == "sha256" and value else None
            self.links[(project, name)] = urljoin(response.url, link)
        return found


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _one_line(text: str) -> str:
    return " ".join(text.split())
