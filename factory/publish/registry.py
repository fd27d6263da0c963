"""`factory publish`: an output folder's wheels onto a PyPI-compatible registry, through twine.

What the registry already holds is read first, from its simple index (PEP 691 JSON when it
answers with it, PEP 503 HTML otherwise, both read by pypi-simple): a wheel there with the same
sha256 is skipped, one there with other bytes stops the publish before anything is uploaded
(published files are immutable, on the registry as here). The rest go up one by one with
twine's own upload, and the index is read again to check that each is listed with its sha256.

Credentials are twine's: TWINE_USERNAME / TWINE_PASSWORD, the keyring, ~/.pypirc, or PyPI's
trusted publishing in CI. The factory hands them to twine and to the index reads and never
prints them; a URL with a password in it is refused, so it cannot reach a log either.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from packaging.utils import canonicalize_name, parse_wheel_filename

from .. import defaults
from ..errors import ConfigError, PublishError
from ..index.records import load_manifest
from ..index.remote import ListedFile, SimpleIndex, TooLarge, stream_sha256
from ..outputs.files import file_sha256
from ..outputs.layout import Layout
from ..sources.http import BoundedSession, within
from ..sources.simple import shown
from ..wheel.variant import split_variant

__all__ = ["RegistryReport", "index_url_for", "publish_to_registry"]

PYPI_UPLOAD = {"https://upload.pypi.org/legacy/": "https://pypi.org/simple/",
               "https://test.pypi.org/legacy/": "https://test.pypi.org/simple/"}

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
        if split_variant(path.name)[1] is not None:
            continue  # a variant wheel (PEP 825): no registry takes one yet; its twin goes
        record = records.get(path.name)
        if record is not None and record.yanked is not None:
            yanked.append(path.name)
            continue
        digest = file_sha256(path)
        # only what the folder's index publishes, with those bytes: a wheel dropped into files/
        # is not uploaded with the registry's credentials
        if record is None or record.sha256 != digest:
            raise PublishError(
                f"{path}: the index of {out} " + ("does not record it" if record is None else
                                                   f"records other bytes ({record.sha256[:12]})")
                + "; nothing was uploaded: remove it, or run `factory index --out "
                f"{out}` to index a wheel put there by hand")
        name, version, _, _ = parse_wheel_filename(path.name)
        wheels.append(LocalWheel(path, canonicalize_name(name), str(version), digest))
    return wheels, yanked


def twine_settings(repository_url: str | None, repository: str | None,
                   attestations: bool = False) -> Any:
    """twine's Settings as `twine upload` makes them: the same environment variables
    (TWINE_REPOSITORY_URL, TWINE_USERNAME, TWINE_PASSWORD, TWINE_CERT), ~/.pypirc and keyring,
    never a prompt; with `attestations`, each wheel's <wheel>.publish.attestation (factory
    attest) goes with it."""
    from twine import exceptions as twine_errors
    from twine.settings import Settings

    parser = argparse.ArgumentParser(add_help=False)
    Settings.register_argparse_arguments(parser)
    argv = ["--non-interactive", "--disable-progress-bar", *(["--attestations"]
                                                             if attestations else [])]
    if repository_url is not None:
        argv += ["--repository-url", repository_url]
    if repository is not None:
        argv += ["--repository", repository]
    for key, url in (("--repository-url", repository_url),
                     ("TWINE_REPOSITORY_URL", os.environ.get("TWINE_REPOSITORY_URL"))):
        if url and urlsplit(url).password is not None:  # whichever of them twine takes
            raise ConfigError("holds a password: give credentials through TWINE_USERNAME and "
                              "TWINE_PASSWORD or the keyring, never in the URL", key=key)
    try:
        return Settings.from_argparse(parser.parse_args(argv))
    except twine_errors.TwineException as exc:
        key = "--repository-url" if repository_url is not None else "--repository"
        raise ConfigError(_one_line(str(exc)), key=key) from None


def _attested(wheels: list[LocalWheel]) -> bool:
    """Whether any wheel has a publish attestation (factory attest) for twine to upload."""
    return any(wheel.path.with_name(f"{wheel.path.name}.publish.attestation").is_file()
               for wheel in wheels)


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
    settings = twine_settings(repository_url, repository, _attested(wheels))
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

    pending, conflicts = [], []
    for wheel in wheels:
        there = reader.files(wheel.project).get(wheel.path.name)
        if there is None:
            pending.append(wheel)
            continue
        digest = there.sha256 or reader.digest_of(wheel.project, wheel.path.name)
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
        listed = _listed_after_upload(reader, wheel)
        if listed is None:
            raise PublishError(f"{wheel.path.name} was accepted by {upload_url} but "
                               f"{simple} does not list it (is --index-url right?)")
        digest = listed.sha256 or reader.digest_of(wheel.project, wheel.path.name)
        if digest != wheel.sha256:
            raise PublishError(f"{simple} lists {wheel.path.name} with sha256 {digest[:12]}, "
                               f"not the uploaded {wheel.sha256[:12]}")
    return report


def _listed_after_upload(reader: _IndexReader, wheel: LocalWheel) -> ListedFile | None:
    """The uploaded file's listing, or None when the index does not list it. Registries
    behind a cache (PyPI's CDN, Artifactory's remote indexes) may show a new file a little
    late: the page is read again for up to half a minute."""
    for pause in defaults.LISTING_RETRIES:
        if pause:
            time.sleep(pause)
            reader.forget(wheel.project)
        listed = reader.files(wheel.project).get(wheel.path.name)
        if listed is not None:
            return listed
    return None


def _check_credentials(settings: Any, upload_url: str) -> None:
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


def _upload(settings: Any, wheel: LocalWheel, upload_url: str) -> None:
    """twine's upload of one file; its console output is dropped (the caller reports), its
    errors become one line."""
    from twine import exceptions as twine_errors
    from twine.commands.upload import upload

    quiet = io.StringIO()
    twine_logger = logging.getLogger("twine")
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            twine_logger.disabled = True
            upload(settings, [str(wheel.path)])
    except requests.HTTPError as exc:
        raise _http_error(exc.response, upload_url, settings,
                          f"upload of {wheel.path.name}") from None
    except requests.RequestException as exc:
        raise PublishError(f"cannot reach {upload_url}: {type(exc).__name__}") from None
    except twine_errors.TwineException as exc:
        raise PublishError(f"{wheel.path.name}: {_one_line(str(exc))}") from None
    finally:
        twine_logger.disabled = False


def _http_error(response: requests.Response, url: str, settings: Any,
                what: str) -> PublishError:
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
    """A registry's simple index: the files of a project with their sha256 when listed. Reads
    use twine's credentials when the index asks for them, and follow redirects on the
    registry's own host only: one to another host (pypiserver sends unknown projects to
    pypi.org) means the registry does not hold the project."""

    def __init__(self, url: str, settings: Any) -> None:
        session = BoundedSession(defaults.PAGE_DEADLINE, each=True)
        session.verify = settings.cacert or True
        if settings.client_cert:
            session.cert = settings.client_cert
        self.settings = settings
        self.index = SimpleIndex(
            url, session, timeout=defaults.REGISTRY_TIMEOUT,
            failure=PublishError,
            http_error=lambda response: _http_error(response, self.index.url, settings,
                                                    "index read"),
            credentials=self._credentials, same_host=True)
        self.pages: dict[str, dict[str, ListedFile]] = {}

    def forget(self, project: str) -> None:
        self.pages.pop(project, None)

    def files(self, project: str) -> dict[str, ListedFile]:
        """The project's files as the index lists them (read once, until forgotten)."""
        if project not in self.pages:
            self.pages[project] = self.index.project_files(project)
        return self.pages[project]

    def digest_of(self, project: str, filename: str) -> str:
        """A listed file's sha256 when the page gives none: its bytes, downloaded."""
        url = self.pages[project][filename].url
        try:
            return within(defaults.DOWNLOAD_DEADLINE,
                          lambda: stream_sha256(self.index.get(url, stream=True)), url)
        except requests.RequestException as exc:  # past the deadline, or cut off
            raise PublishError(f"cannot read {url} back: {shown(exc)}") from None
        except TooLarge as exc:
            raise PublishError(f"{exc}: no wheel is that big") from None

    def _credentials(self) -> tuple[str, str]:
        from twine import exceptions as twine_errors

        try:
            username, password = self.settings.username, self.settings.password
        except twine_errors.NonInteractive:
            username = password = None
        if not username or not password:
            raise PublishError(f"{self.index.url} asks for credentials and none are set: "
                               "TWINE_USERNAME and TWINE_PASSWORD, or the keyring")
        return username, password


def _one_line(text: str) -> str:
    return " ".join(text.split())
