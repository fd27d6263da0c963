"""`factory init [PATH]`: write a first matrix.yaml (and a GitHub workflow) for a kernel repo."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import __version__, defaults
from ..errors import ConfigError
from ..values.versions import Version
from .common import path_argument, positive, writable_folder

__all__ = ["add", "run"]

WORKFLOW = Path(".github") / "workflows" / "wheels.yml"


def _versions(text: str) -> tuple[Version, ...]:
    try:
        found = tuple(Version(part.strip()) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not found:
        raise argparse.ArgumentTypeError("names no version")
    return found


def add(commands: Any) -> None:
    init = commands.add_parser(
        "init", help="write a first matrix.yaml for a kernel repo",
        description="Read the kernel repo at PATH (a kernel-builder build.toml, or a setup.py / "
                    "pyproject.toml project) and write a matrix.yaml for it: the newest torch "
                    "releases the kernel accepts, the CUDA version of each one's PyPI build, "
                    "and each CUDA version's default SMs that the kernel's cuda-capabilities "
                    "serve. With --github, also a workflow that builds it on every push and "
                    "publishes the index to GitHub Pages.")
    init.add_argument("path", nargs="?", type=path_argument, default=Path("."),
                      help="the kernel repo (default: this folder)")
    init.add_argument("--out", type=path_argument, metavar="FILE",
                      help="the matrix file to write (default: PATH/matrix.yaml)")
    init.add_argument("--newest", type=positive, default=defaults.NEWEST_TORCHES, metavar="N",
                      help="how many of the newest torch releases to cover (default "
                           f"{defaults.NEWEST_TORCHES})")
    init.add_argument("--torch", type=_versions, default=(), metavar="VERSIONS",
                      help="these torch releases instead, comma-separated (2.11,2.12)")
    init.add_argument("--sms", type=_versions, default=(), metavar="SMS",
                      help="only these SMs, comma-separated (9.0,10.0), instead of each CUDA "
                           "version's default list")
    init.add_argument("--follow", action="store_true",
                      help="follow torch releases instead of listing them: torch: {latest: N} "
                           "and cuda: {follow: torch}, resolved by `factory lock`")
    init.add_argument("--python", type=_versions, default=(), metavar="VERSIONS",
                      help="the CPythons of a setup.py project's per-Python wheels, "
                           "comma-separated (default: the Python the factory runs on)")
    init.add_argument("--github", action="store_true",
                      help=f"also write {WORKFLOW.as_posix()} beside the matrix: a caller of "
                           "the factory's reusable workflow")
    init.add_argument("--ref", metavar="COMMIT",
                      help="the commit of kernel-wheel-factory the workflow's caller pins (40 "
                           "hex digits; default: the commit this factory was installed from)")
    init.add_argument("--force", action="store_true",
                      help="replace files that are already there")


def _target(path: Path, force: bool, key: str | None, base: Path | None = None) -> Path:
    """`path`, checked before anything is written: not a folder, not there unless `force`,
    its folder writable, and no link on the way from `base` to it (a .github that is a link
    would take the file wherever the link leads)."""
    if base is not None:
        current = base
        for part in path.relative_to(base).parts:
            current = current / part
            if current.is_symlink():
                raise ConfigError(f"is a link to {os.readlink(current)}; the factory writes "
                                  "only inside the kernel's folder: remove the link, or make it "
                                  "a folder", file=current, key=key)
    if path.is_dir() or (path.exists() and not path.is_file()):
        raise ConfigError("is in the way: it is not a file", file=path, key=key)
    if path.exists() and not force:
        raise ConfigError("is already there; pass --force to replace it", file=path, key=key)
    writable_folder(path.parent, key or "PATH")
    return path


def _pinned(given: str | None) -> str:
    """The commit the caller's `uses:` names: --ref, else the one this factory came from."""
    from ..sources.itself import COMMIT, own_commit

    if given is not None:
        if not COMMIT.fullmatch(given):
            raise ConfigError(f"is {given!r}; a caller pins the reusable workflow by a full "
                              "commit (40 hex digits), which no one can move as a tag can be "
                              "moved", key="--ref")
        return given
    found = own_commit()
    if found is None:
        raise ConfigError(f"this factory ({__version__}) records no commit it was installed "
                          "from (installed from an index, not from git): name the commit of "
                          f"the release to pin with --ref", key="--github")
    return found


def run(args: argparse.Namespace, console: Console) -> int:
    from ..outputs.files import write_atomic
    from ..plan.starter import propose, read_kernel, relative, render_matrix, render_workflow

    spec = read_kernel(args.path)
    matrix = _target(args.out or args.path / "matrix.yaml", args.force,
                     "--out" if args.out else None)
    workflow = _target(matrix.parent / WORKFLOW, args.force, "--github", matrix.parent) \
        if args.github else None
    commit = _pinned(args.ref) if workflow is not None else None
    proposal = propose(spec, args.newest, args.torch, args.sms)
    texts = {matrix: render_matrix(proposal, relative(args.path, matrix.parent), args.python,
                                   args.follow)}
    if workflow is not None:
        assert commit is not None
        texts[workflow] = render_workflow(relative(matrix, matrix.parent), commit,
                                          f"v{__version__}")
    for path, text in texts.items():  # all made before any is written
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    cells = sum(len(versions) for _, _, versions in proposal.cudas)
    console.print(f"wrote {matrix}: {spec.name}, torch "
                  f"{', '.join(map(str, proposal.torches))}, {cells} cell(s)", markup=False,
                  soft_wrap=True)
    for reason in proposal.dropped:
        console.print(f"left out {reason}", markup=False, soft_wrap=True)
    for reason in proposal.skipped:
        console.print(f"{spec.name} fits no cell of {reason}", markup=False, soft_wrap=True)
    if workflow is not None:
        console.print(f"wrote {workflow}", markup=False, soft_wrap=True)
    console.print(f"next: factory plan {matrix}", markup=False, soft_wrap=True)
    return 0
