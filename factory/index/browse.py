"""The browse page's data. browse.json lists the packages and the torch and CUDA versions the
index covers; browse/<project>.json holds one package's releases, each with a torch x CUDA
coverage grid (built, skipped with the reason, failed), what proved each cell's wheel (the ops
its import gate saw, with their torch.compile readiness, and its kernel tests) and the facts of
each wheel. The page
itself (index.html, browse.css, browse.js) is static; it fetches a package's file when the
package is shown, so adding a wheel rewrites one small file, not one for the whole index.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from functools import cache
from importlib.resources import files
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import __version__
from ..wheel.variant import property_lines
from .records import Catalogue, CellOutcome, FileRecord, Manifest, cell_catalogue, served_cells
from .variants import variant_url

ASSETS = ("index.html", "browse.css", "browse.js", "favicon.svg")


def asset(name: str) -> bytes:
    return files("factory.data").joinpath("browse", name).read_bytes()


def browse_index(manifest: Manifest) -> bytes:
    names: dict[str, str] = {}
    versions: dict[str, set[str]] = defaultdict(set)
    torches: set[str] = set()
    cudas: set[str] = set()
    for outcome in manifest.cells.values():
        project = canonicalize_name(outcome.kernel)
        names.setdefault(project, outcome.kernel)
        versions[project].add(outcome.version)
        if outcome.torch and outcome.cuda:
            torches.add(outcome.torch)
            cudas.add(outcome.cuda)
    for record in manifest.files.values():
        names[record.project] = record.display_name
        versions[record.project].add(record.version.split("+")[0])
        torch, cuda = record.summary.get("torch"), record.summary.get("cuda")
        if record.label is not None and torch and cuda:
            torches.add(torch)
            cudas.add(cuda)
    latest = {project: max(found, key=_version_key) for project, found in versions.items()}
    document = {
        "generator": f"kernel-wheel-factory {__version__}",
        "torch": sorted(torches, key=_version_key, reverse=True),
        "cuda": sorted(cudas, key=_version_key, reverse=True),
        "packages": [{"name": names[p], "project": p, "latest": latest[p]}
                     for p in sorted(names)],
    }
    return _json(document)


def browse_project(project: str, records: Iterable[FileRecord],
                   outcomes: Iterable[CellOutcome]) -> bytes:
    releases: dict[str, dict[str, Any]] = {}

    def release(version: str) -> dict[str, Any]:
        return releases.setdefault(version, {"version": version, "cells": {}, "anywhere": []})

    outcomes = list(outcomes)
    name = outcomes[-1].kernel if outcomes else project
    for (cell_torch, cell_cuda, label, version), cell in _cells_built(outcomes).items():
        release(version)["cells"][(cell_torch, cell_cuda, label)] = cell
    catalogue = cell_catalogue(outcomes)
    # variant wheels last: each joins the cell of the wheel it was made from
    for record in sorted(records, key=lambda r: ("variant" in r.summary, r.filename)):
        name = record.display_name
        _place_wheel(record, release(record.version.split("+")[0]), catalogue)
    # a wheel that runs anywhere carries what its build's tests said of it, and is listed
    # in each CUDA cell it was proven in too (with that cell's verdict)
    tested = {outcome.wheel: outcome.tests for outcome in outcomes
              if outcome.wheel and outcome.served_by is None}
    for entry in releases.values():
        anywhere = {wheel["filename"]: wheel for wheel in entry["anywhere"]}
        for wheel in entry["anywhere"]:
            wheel["tests"] = tested.get(wheel["filename"])
        for cell in entry["cells"].values():
            proven = anywhere.get(cell.pop("proven_wheel", None) or "")
            if proven is not None and not cell["wheels"]:
                cell["wheels"].append({key: value for key, value in proven.items()
                                       if key != "tests"})
    ordered = sorted(releases.values(), key=lambda r: _version_key(r["version"]), reverse=True)
    for entry in ordered:
        entry["cells"] = [entry["cells"][key] for key in sorted(
            entry["cells"], key=lambda k: (_version_key(k[0]), _version_key(k[1]), k[2] or ""))]
    return _json({"name": name, "project": project, "versions": ordered})


def _cells_built(outcomes: list[CellOutcome]) -> dict[tuple[str, str, str | None, str],
                                                      dict[str, Any]]:
    """The browse entry of each torch x CUDA x label cell of a release, by (torch, CUDA, label,
    version), from the outcomes of the builds of its cells."""
    proof = {outcome.cell: outcome for outcome in outcomes if outcome.stable_abi}
    # keyed by label too: two builds of one torch x CUDA pair for other GPUs (label templates
    # that tell them apart) are two cells, each with its own index
    grouped: dict[tuple[str, str, str | None, str], list[CellOutcome]] = {}
    for outcome in outcomes:
        # a stable-ABI cell's wheel is shown in the cells it serves, not as a cell of its own
        if outcome.torch is None or outcome.cuda is None or outcome.stable_abi:
            continue
        key = (outcome.torch, outcome.cuda, outcome.label, outcome.version)
        grouped.setdefault(key, []).append(outcome)
    cells = {}
    for (cell_torch, cell_cuda, label, version), found in grouped.items():
        # several cells of one label (a wheel per CPython, a free-threaded one): the label's
        # cell is built where any of them is, and each of the others that is not says why
        built = [outcome for outcome in found if outcome.status in ("built", "unchanged")]
        shown = built[0] if built else found[-1]
        status = "built" if built else shown.status
        builder = proof.get(shown.served_by or shown.cell, shown)
        cells[(cell_torch, cell_cuda, label, version)] = {
            "torch": cell_torch, "cuda": cell_cuda, "label": label,
            "status": status, "detail": None if status == "built" else shown.detail,
            "wheels": [], "ops": builder.ops, "tests": builder.tests,
            "served_by": shown.served_by,
            # a cell a pure-Python wheel for all was proven in: that wheel (placed below)
            **({"proven_wheel": shown.wheel} if shown.served_by and shown.wheel else {}),
            **({"others": others} if (others := [
                {"cell": outcome.cell, "status": outcome.status, "detail": outcome.detail}
                for outcome in found
                if outcome is not shown and outcome.status not in ("built", "unchanged")])
               else {})}
    return cells


def _place_wheel(record: FileRecord, entry: dict[str, Any], catalogue: Catalogue) -> None:
    """A published wheel into its release's entry: under each cell it serves (a variant wheel
    beside the cell's own wheel), or among the wheels that run anywhere."""
    wheel = _wheel(record)
    torch, cuda = record.summary.get("torch"), record.summary.get("cuda")
    if record.label is None or not torch or not cuda:
        entry["anywhere"].append(wheel)
        return
    variant = record.summary.get("variant")
    for label, cell_torch, cell_cuda in served_cells(record, catalogue) or \
            [(record.label, torch, cuda)]:
        if variant is not None:
            # the same binaries as the cell's wheel, in its torch release's variants index
            twin = entry["cells"].get((cell_torch, cell_cuda, label))
            url = variant_url(cell_torch)
            if twin is not None and url is not None:
                twin.setdefault("variants", []).append(
                    {**wheel, "variant": {"label": record.label, "index": url,
                                          "properties": property_lines(variant)}})
            continue
        cell = entry["cells"].setdefault((cell_torch, cell_cuda, label), {
            "torch": cell_torch, "cuda": cell_cuda, "label": label, "detail": None,
            "wheels": [], "ops": None, "tests": None, "served_by": None})
        cell["status"] = "built"  # a published wheel, whatever a later build of it did
        cell["wheels"].append(wheel)


def _wheel(record: FileRecord) -> dict[str, Any]:
    summary = record.summary
    return {
        "filename": record.filename, "url": "files/" + quote(record.filename),
        "size": record.size, "sha256": record.sha256, "version": record.version,
        "label": record.label, "requires_python": record.requires_python,
        "torch": record.torch, "upload_time": record.upload_time, "yanked": record.yanked,
        "sms": summary.get("sms", []), "gpu_code": summary.get("gpu_code", []),
        "stable_abi": summary.get("stable_abi"),
        "platform": summary.get("platform"), "cross": summary.get("cross") is True,
        "installed_size": summary.get("installed_size"),
        "gpu_code_sizes": summary.get("gpu_code_sizes"),
        "gpu_code_beyond": summary.get("gpu_code_beyond", []),
        "provenance": {key: summary[key] for key in ("source", "toolchain", "factory",
                                                     "build_time", "platform")
                       if summary.get(key)},
        # its PEP 740 provenance file (factory attest), or None: published unattested
        "attestation": "files/" + quote(record.filename + ".provenance")
        if summary.get("provenance") else None,
    }


@cache
def _version_key(text: str) -> tuple[int, Version, str]:
    try:
        return (1, Version(text), "")
    except InvalidVersion:
        return (0, Version("0"), text)


def _json(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n").encode()
