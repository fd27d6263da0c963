"""Reading a simple repository over HTTP: a registry's index before and after a publish, and a
published index that `factory index --merge` takes in.

Pages are fetched with requests (PEP 691 JSON asked for, PEP 503 HTML accepted) and parsed by
pypi-simple, which knows both forms: hashes in link fragments or JSON, `data-yanked` and its
reason, `<base href>`, relative links. What is fetched, and how failures read, is the caller's:
credentials asked for on a 401, redirects kept to the index's own host where a registry sends
unknown projects elsewhere, and the error class of the step that reads.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from .. import defaults
from ..errors import FactoryError
from ..sources.simple import shown
from ..values.units import human_size
from .records import index_time

if TYPE_CHECKING:  # imported where used: a merge of folders needs neither (nor pydantic)
    import requests

    from ..sources.http import BoundedSession

__all__ = ["JSON_ACCEPT", "ListedFile", "SimpleIndex", "TooLarge", "stream_sha256"]

JSON_ACCEPT = ("application/vnd.pypi.simple.v1+json, "
               "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")
_REDIRECTS = 10


@dataclass(frozen=True)
class ListedFile:
    """One file of a project page."""

    filename: str
    url: str  # absolute, without the hash fragment
    sha256: str | None  # lowercase hex; None when the page lists no sha256
    yanked: str | None  # the reason ("yanked" when none is given); None when not yanked
    upload_time: str | None = None  # PEP 700's, as the index's pages write it; None: not given
    provenance: str | None = None  # its PEP 740 provenance file's URL; None: not attested


class SimpleIndex:
    """The simple index at `url` (ending in /simple/ or the like)."""

    def __init__(self, url: str, session: BoundedSession, *, timeout: float,
                 failure: Callable[[str], FactoryError],
                 http_error: Callable[[requests.Response], FactoryError] | None = None,
                 credentials: Callable[[], tuple[str, str]] | None = None,
                 same_host: bool = False) -> None:
        self.url = url if url.endswith("/") else url + "/"
        self.session = session
        self.timeout = timeout
        self.failure = failure
        self.http_error = http_error
        self.credentials = credentials
        self.same_host = same_host

    def get(self, url: str, stream: bool = False) -> requests.Response:
        """A GET, its redirects followed (on the index's host only, with `same_host`: a
        redirect elsewhere then reads as a 404), credentials given once on a 401. A 404 is
        returned; any other failure raises."""
        import requests

        from ..sources.http import Overrun

        try:
            for _ in range(_REDIRECTS):
                response = self.session.get(url, headers={"Accept": JSON_ACCEPT},
                                            timeout=self.timeout, allow_redirects=False,
                                            stream=stream)
                if response.status_code == 401 and self.session.auth is None \
                        and self.credentials is not None:
                    self.session.auth = self.credentials()
                    continue
                if not response.is_redirect:
                    break
                url = urljoin(url, response.headers["Location"])
                if self.same_host and urlsplit(url).netloc != urlsplit(self.url).netloc:
                    response.status_code = 404
                    break
        except Overrun as exc:
            raise self.failure(shown(exc)) from None
        except requests.RequestException as exc:
            raise self.failure(f"cannot reach {self.url}: {shown(exc)}") from None
        if response.status_code != 404 and not response.ok:
            if self.http_error is not None:
                raise self.http_error(response)
            raise self.failure(f"{url}: HTTP {response.status_code} {response.reason}")
        return response

    def page(self, url: str) -> requests.Response:
        """A GET of a page, its body read whole within the session's bounds (its deadline and
        defaults.PAGE_LIMIT): a server that sends on and on, or drip by drip, is refused."""
        return self.get(url)

    def project_names(self) -> list[str] | None:
        """The projects the root page lists; None when there is no root page (a 404)."""
        from pypi_simple import IndexPage

        response = self.page(self.url)
        if response.status_code == 404:
            return None
        try:
            return list(IndexPage.from_response(response).projects)
        except Exception as exc:  # pypi-simple's content-type, version and schema errors
            raise self.failure(f"{self.url} is not a simple index page ({shown(exc)})") \
                from None

    def project_files(self, project: str) -> dict[str, ListedFile]:
        """The files of a project's page, by name; none when the index has no such project."""
        from pypi_simple import ProjectPage

        page_url = urljoin(self.url, f"{project}/")
        response = self.page(page_url)
        if response.status_code == 404:
            return {}
        try:
            page = ProjectPage.from_response(response, project)
        except Exception as exc:  # pypi-simple's content-type, version and schema errors
            raise self.failure(f"{page_url} is not a simple project page ({shown(exc)})") \
                from None
        files = {}
        for package in page.packages:
            sha256 = package.digests.get("sha256")
            yanked = (package.yanked_reason or "yanked") if package.is_yanked else None
            uploaded = package.upload_time
            files[package.filename] = ListedFile(
                package.filename, package.url, sha256.lower() if sha256 else None, yanked,
                index_time(uploaded.timestamp()) if uploaded is not None else None,
                package.provenance_url)
        return files


class TooLarge(FactoryError):
    """A streamed download went on past its limit; what was read of it is removed."""


def stream_sha256(response: requests.Response, into: Path | None = None,
                  limit: int | None = None) -> str:
    """The sha256 of a streamed response's body, written to `into` on the way when given;
    TooLarge when the body goes on past `limit` bytes (defaults.DOWNLOAD_LIMIT)."""
    digest = hashlib.sha256()
    size = 0
    limit = defaults.DOWNLOAD_LIMIT if limit is None else limit
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(open(into, "wb")) if into is not None else None
        for block in response.iter_content(1 << 20):
            size += len(block)
            if size > limit:
                response.close()
                if handle is not None and into is not None:
                    handle.close()
                    into.unlink()
                raise TooLarge(f"{response.url} sends more than {human_size(limit)}")
            digest.update(block)
            if handle is not None:
                handle.write(block)
    return digest.hexdigest()

