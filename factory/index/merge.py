"""`factory index --merge DIR...`: the output folders of several build jobs as one index.

Everything is checked before anything is written: a wheel name that two folders (or the
target) hold with different bytes stops the merge, since published files are immutable. Then
wheels, logs and cell records are copied in, and the index is made from all of them, so it is
the index one `factory build` of the whole matrix would have made.
"""

from __future__ import annotations

from pathlib import Path

from ..atomic import copy_atomic
from ..build import sha256_file
from ..errors import ConfigError
from ..layout import Layout
from .records import CellOutcome, IndexConflict, load_manifest
from .update import IndexSummary, update_index

# When a cell appears in several folders (a job run again), the best outcome stands.
_RANK = {"built": 3, "unchanged": 3, "skipped": 2, "failed": 1}


def merge_outputs(out: Path, folders: list[Path], force: bool = False) -> IndexSummary:
    target = Layout(out)
    copies: dict[str, Path] = {}  # wheel name -> the folder file it comes from
    digests: dict[str, str] = {}
    outcomes: dict[str, CellOutcome] = {}
    for folder in folders:
        layout = Layout(folder)
        if not layout.files.is_dir() and not layout.manifest.is_file():
            raise ConfigError("is not a factory output folder (no files/ and no "
                              ".factory/manifest.json)", file=folder, key="--merge")
        if folder.resolve() == out.resolve():
            raise ConfigError("is the output folder itself", file=folder, key="--merge")
        for wheel in sorted(layout.files.glob("*.whl")) if layout.files.is_dir() else []:
            digest = sha256_file(wheel)
            known = digests.get(wheel.name)
            if known is None and (target.files / wheel.name).is_file():
                known = sha256_file(target.files / wheel.name)
            if known is not None and known != digest and not force:
                raise IndexConflict(f"{wheel} differs from another {wheel.name} (sha256 "
                                    f"{known[:12]}, this one {digest[:12]}); published files "
                                    "are immutable, so the merge stops before writing anything")
            digests[wheel.name] = digest
            copies[wheel.name] = wheel
        for name, outcome in load_manifest(layout.manifest).cells.items():
            old = outcomes.get(name)
            if old is None or _RANK.get(outcome.status, 0) >= _RANK.get(old.status, 0):
                outcomes[name] = outcome

    target.files.mkdir(parents=True, exist_ok=True)
    for name, wheel in sorted(copies.items()):
        destination = target.files / name
        if not destination.is_file() or sha256_file(destination) != digests[name]:
            copy_atomic(wheel, destination)
    for folder in folders:
        layout = Layout(folder)
        for source, destination in ((layout.logs, target.logs), (layout.state, target.state)):
            for path in sorted(source.glob("*")) if source.is_dir() else []:
                destination.mkdir(parents=True, exist_ok=True)
                copy_atomic(path, destination / path.name)
    return update_index(out, force=force, outcomes=outcomes.values(), full=True)
