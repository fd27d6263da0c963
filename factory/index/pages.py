"""The simple repository pages, rendered from file records: pure functions, no I/O.

HTML follows PEP 503 (normalised names, `#sha256=` links, percent-encoded file names),
PEP 592 (data-yanked), PEP 629 (the repository-version meta tag), PEP 658/714
(data-core-metadata and the older data-dist-info-metadata) and PEP 740 (data-provenance, where
a wheel's provenance file exists, by full URL once the index knows where it is served). JSON
follows PEP 691 with the PEP 700 fields (versions, size, upload-time) and PEP 740's
provenance. Other links are relative, so the tree can be served from any host and any path
prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import cache
from html import escape
from typing import Any
from urllib.parse import quote

from packaging.version import Version

from .records import FileRecord

API_VERSION = "1.1"
JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPE = "application/vnd.pypi.simple.v1+html"


def project_html(name: str, records: Iterable[FileRecord], files_url: str,
                 documents: Sequence[tuple[str, str]] = (),
                 provenance: str | None = None) -> bytes:
    """A project's page; `files_url` is the relative URL of files/ seen from the page;
    `documents` (name, sha256) are files beside the page that it links too (a release's
    variants.json, PEP 825); `provenance` the full URL of files/ where the index is served,
    which provenance files are linked by."""
    rows = []
    for record in sorted(records, key=lambda r: r.filename):
        attributes = [f'href="{escape(_file_url(record, files_url))}#sha256={record.sha256}"']
        if record.requires_python:
            attributes.append(f'data-requires-python="{escape(record.requires_python)}"')
        metadata = f"sha256={record.metadata_sha256}"
        attributes.append(f'data-dist-info-metadata="{metadata}"')
        attributes.append(f'data-core-metadata="{metadata}"')
        if record.yanked is not None:
            attributes.append(f'data-yanked="{escape(record.yanked)}"')
        if provenance and record.summary.get("provenance"):
            attributes.append(f'data-provenance="{escape(_provenance_url(record, provenance))}"')
        rows.append(f"    <a {' '.join(attributes)}>{escape(record.filename)}</a><br>")
    rows += [f'    <a href="{escape(quote(document))}#sha256={sha256}">{escape(document)}</a><br>'
             for document, sha256 in documents]
    return _html(f"Links for {name}", rows)


def project_json(name: str, records: Iterable[FileRecord], files_url: str,
                 documents: Sequence[tuple[str, str]] = (),
                 provenance: str | None = None) -> bytes:
    ordered = sorted(records, key=lambda r: r.filename)
    files = []
    for record in ordered:
        entry: dict[str, Any] = {
            "filename": record.filename,
            "url": _file_url(record, files_url),
            "hashes": {"sha256": record.sha256},
        }
        if record.requires_python:
            entry["requires-python"] = record.requires_python
        entry["core-metadata"] = {"sha256": record.metadata_sha256}
        entry["dist-info-metadata"] = {"sha256": record.metadata_sha256}
        # PEP 691: a reason is a non-empty string; a yank without one is plain true
        entry["yanked"] = (record.yanked or True) if record.yanked is not None else False
        entry["size"] = record.size
        entry["upload-time"] = record.upload_time
        if provenance and record.summary.get("provenance"):
            entry["provenance"] = _provenance_url(record, provenance)
        files.append(entry)
    files += [{"filename": document, "url": quote(document), "hashes": {"sha256": sha256}}
              for document, sha256 in documents]
    versions = sorted({r.version for r in ordered}, key=_version)
    return _json({"meta": {"api-version": API_VERSION}, "name": name, "versions": versions,
                  "files": files})


def root_html(projects: dict[str, str]) -> bytes:
    """The list of projects: normalised name -> the name as its METADATA spells it."""
    rows = [f'    <a href="{quote(project)}/">{escape(display)}</a><br>'
            for project, display in sorted(projects.items())]
    return _html("Simple index", rows)


def root_json(projects: dict[str, str]) -> bytes:
    return _json({"meta": {"api-version": API_VERSION},
                  "projects": [{"name": display} for _, display in sorted(projects.items())]})


def _file_url(record: FileRecord, files_url: str) -> str:
    return files_url + _quoted(record.filename)


def _provenance_url(record: FileRecord, files_url: str) -> str:
    """The PEP 740 provenance object beside the wheel (factory attest wrote it)."""
    return files_url + _quoted(record.filename + ".provenance")


@cache
def _quoted(filename: str) -> str:
    return quote(filename)


@cache
def _version(text: str) -> Version:
    return Version(text)


def _html(title: str, rows: list[str]) -> bytes:
    lines = [
        "<!DOCTYPE html>",
        "<html>",
        "  <head>",
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">',
        f"    <title>{escape(title)}</title>",
        "  </head>",
        "  <body>",
        f"    <h1>{escape(title)}</h1>",
        *rows,
        "  </body>",
        "</html>",
    ]
    return ("\n".join(lines) + "\n").encode()


def _json(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()
