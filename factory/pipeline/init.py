"""`factory init PATH`: a first matrix.yaml for a kernel repo (and, with --github, a caller of
the factory's reusable workflow), every file checked before any is written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, defaults
from ..cells.kinds import kind_of
from ..config.project import project_kind, read_project
from ..config.spec import KernelSpec
from ..errors import ConfigError
from ..outputs.files import write_atomic
from ..outputs.layout import writable_folder
from ..plan.starter import Proposal, propose, render_matrix, render_workflow
from ..sources.itself import COMMIT, own_commit
from ..values.versions import Version

__all__ = ["InitOutcome", "InitRequest", "init_kernel", "read_kernel"]

@dataclass(frozen=True)
class InitRequest:
    path: Path  # the kernel repo
    out: Path | None  # the matrix to write (default: PATH/matrix.yaml)
    newest: int
    torch: tuple[Version, ...] = ()
    sms: tuple[Version, ...] = ()
    python: tuple[Version, ...] = ()
    follow: bool = False
    github: bool = False
    ref: str | None = None
    force: bool = False


@dataclass(frozen=True)
class InitOutcome:
    matrix: Path
    workflow: Path | None
    proposal: Proposal


def init_kernel(request: InitRequest) -> InitOutcome:
    spec = read_kernel(request.path)
    matrix = _target(request.out or request.path / "matrix.yaml", request.force,
                     "--out" if request.out else None)
    workflow = _target(matrix.parent / defaults.INIT_WORKFLOW, request.force, "--github",
                       matrix.parent) if request.github else None
    commit = _pinned(request.ref) if workflow is not None else None
    proposal = propose(spec, request.newest, request.torch, request.sms)
    texts = {matrix: render_matrix(proposal, kind_of(spec),
                                   relative(request.path, matrix.parent), request.python,
                                   request.follow)}
    if workflow is not None:
        assert commit is not None
        texts[workflow] = render_workflow(relative(matrix, matrix.parent), commit,
                                          f"v{__version__}")
    for path, text in texts.items():  # all made before any is written
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return InitOutcome(matrix, workflow, proposal)


def read_kernel(root: Path) -> KernelSpec:
    """The spec of the kernel repo in `root`; one line when it is not one."""
    if not root.is_dir():
        raise ConfigError("is not a folder", file=root)
    kind = project_kind(root)
    if kind is None:
        raise ConfigError("is not a kernel repo: it has no build.toml, setup.py or "
                          "pyproject.toml", file=root)
    spec = read_project(root, kind)
    refused = kind_of(spec).unsupported(spec)
    if refused is not None:
        raise ConfigError(refused, file=spec.build_toml)
    return spec


def relative(path: Path, start: Path) -> str:
    """`path` as the file in `start` names it (the matrix names its kernel so)."""
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


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
