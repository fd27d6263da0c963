"""matrix.yaml's torch: the releases, latest:, index-only and installed torches."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from ... import defaults
from ...errors import ConfigError
from ...policy import cuda_policy, cuda_releases, torch_release, torch_releases
from ...values.versions import Version, major_minor
from ..model import CudaEntry, Exclude, LatestTorch, Matrix, ResolvedTorch, TorchEntry
from ..nodes import Node
from .fields import nonempty_list, read_image_reference, read_index_url, read_version

__all__ = ["MAX_LATEST", "read_command_line_torches", "read_known_builds", "read_latest",
           "read_torch_entries", "with_resolved_torches"]


MAX_LATEST = 20  # more torch releases than any matrix builds


def read_latest(node: Node) -> LatestTorch:
    """torch: {latest: N, pre: false, index: URL}."""
    fields = node.table(["latest", "pre", "index"], required=["latest"])
    count = fields["latest"].int()
    if not 1 <= count <= MAX_LATEST:
        raise fields["latest"].error(f"give how many of the newest torch releases to build, "
                                     f"1 to {MAX_LATEST}")
    index = read_index_url(fields["index"]) if "index" in fields else defaults.TORCH_INDEX
    return LatestTorch(count, fields["pre"].bool() if "pre" in fields else False, index,
                       node.line)


def read_known_builds(matrix: Matrix, node: Node) -> list[ResolvedTorch]:
    """The PyPI builds of the matrix's listed torch releases, as the factory knows them."""
    found = []
    for entry in matrix.torch:
        release = torch_release(entry.version) if entry.version is not None else None
        if entry.python is not None or release is None:
            raise node.error(f"follow: torch needs the CUDA version of {entry.describe()}, "
                             "which the factory does not know; list the CUDA versions")
        found.append(ResolvedTorch(release.version, str(release.version), release.pypi_cuda))
    return found


def with_resolved_torches(matrix: Matrix, resolved: list[ResolvedTorch]) -> Matrix:
    """The matrix with `torch: {latest: N}` and `cuda: {follow: torch}` filled in: the
    resolved releases as its torch list; with follow, each build's CUDA version as the CUDA
    list, each torch paired with its own only. Without follow, a release the factory does
    not know is kept from the CUDA versions its index has no build for."""
    torch = matrix.torch
    if matrix.torch_latest is not None:
        torch = tuple(TorchEntry(found.release, line=matrix.torch_latest.line,
                                 key="torch.latest") for found in resolved)
    cuda, excludes = matrix.cuda, list(matrix.excludes)
    follow = matrix.cuda_follow
    if follow is not None:
        entries = []
        for version in sorted({found.cuda for found in resolved}, reverse=True):
            policy = cuda_policy(version)
            if policy is None or version not in cuda_releases():
                users = ", ".join(str(found.release) for found in resolved
                                  if found.cuda == version)
                raise ConfigError(f"torch {users} is built with CUDA {version}, which this "
                                  "factory does not know", file=matrix.path, line=follow.line,
                                  key="cuda.follow")
            sms = policy.default if follow.sms is None else \
                tuple(sm for sm in follow.sms if sm in policy.sms)
            if not sms:
                raise ConfigError(f"CUDA {version} compiles none of cuda.sms", file=matrix.path,
                                  line=follow.line, key="cuda.sms")
            entries.append(CudaEntry(version, sms, follow.ptx, None, None, follow.line))
        cuda = tuple(entries)
    for found in resolved:
        for entry in cuda:
            other = major_minor(entry.version) != found.cuda
            unknown = torch_release(found.release) is None and entry.torch_index is None
            if other and (follow is not None or unknown):
                excludes.append(Exclude(None, found.release, major_minor(entry.version), None,
                                        None))
    return replace(matrix, torch=torch, cuda=cuda, excludes=tuple(excludes),
                   resolved=tuple(resolved))


def read_torch_entries(node: Node, base: Path) -> tuple[TorchEntry, ...]:
    entries: list[TorchEntry] = []
    for item in nonempty_list(node):
        if isinstance(item.value, dict) and "version" in item.value:
            entries.append(_index_only_torch(item, entries))
            continue
        if isinstance(item.value, dict):
            entries.append(_installed_torch(item, base))
            continue
        version = _torch_version(item, entries)
        if torch_release(version) is None:
            known = ", ".join(str(v) for v in sorted(torch_releases()))
            raise item.error(f"torch {version} is not a PyTorch release the factory knows "
                             f"(known: {known}); a torch already installed can be named by its "
                             "interpreter: {python: /path/to/bin/python}, and a newer one "
                             f"served without a build: {{version: \"{version}\", index-only: "
                             "true}")
        entries.append(TorchEntry(version, line=item.line, key=item.key))
    return tuple(entries)


def _torch_version(item: Node, entries: list[TorchEntry]) -> Version:
    version = read_version(item)
    if len(version.release) < 2:
        raise item.error(f"give torch as major.minor (e.g. 2.11), got '{version}'")
    if any(entry.version == major_minor(version) for entry in entries):
        raise item.error(f"torch {major_minor(version)} is listed twice")
    return major_minor(version)


def _index_only_torch(item: Node, entries: list[TorchEntry]) -> TorchEntry:
    """{version: "2.14", index-only: true}: a torch whose per-cell indexes the matrix serves
    (stable-ABI and pure-Python wheels are listed there) but that nothing is compiled
    against: a torch released after the factory, or one not worth a build of every kernel.
    Any major.minor is taken: that is the point of serving a torch on the day it ships."""
    fields = item.table(["version", "index-only"], required=["version", "index-only"])
    if not fields["index-only"].bool():
        raise fields["index-only"].error("a torch entry with a version is index-only: write "
                                         "index-only: true, or give the version alone")
    version = _torch_version(fields["version"], entries)
    return TorchEntry(version, line=item.line, key=item.key, index_only=True)


def _installed_torch(item: Node, base: Path) -> TorchEntry:
    """{python: PATH}: the torch of an interpreter of this machine; {image: REF, python: PATH}:
    the torch (and CUDA toolkit) of a container image, PATH inside it (default python3)."""
    fields = item.table(["python", "image"])
    if not fields:
        raise item.error("give the torch's interpreter ({python: /path/to/bin/python}) or a "
                         "container image that has torch and nvcc ({image: NAME})")
    if "image" in fields:
        image = read_image_reference(fields["image"], "a container image holding torch and nvcc",
                                 template=False)
        python = fields["python"].nonempty_str() if "python" in fields else "python3"
        if "\0" in python or any(c.isspace() for c in python):
            raise fields["python"].error(f"'{python}' is not a path to an interpreter")
        return TorchEntry(None, python=python, image=image, line=item.line, key=item.key)
    node = fields["python"]
    return TorchEntry(None, python=str(_interpreter(node, node.nonempty_str(), base)),
                      line=item.line, key=item.key)


def _interpreter(node: Node, text: str, base: Path) -> Path:
    try:
        return _find_interpreter(text, base)
    except ValueError as exc:
        raise node.error(str(exc)) from None


def read_command_line_torches(pythons: list[Path]) -> tuple[TorchEntry, ...]:
    entries = []
    for python in pythons:
        try:
            path = _find_interpreter(str(python), Path.cwd())
        except ValueError as exc:
            raise ConfigError(str(exc), key="--torch-python") from None
        entries.append(TorchEntry(None, python=str(path), key="--torch-python"))
    return tuple(entries)


def _find_interpreter(text: str, base: Path) -> Path:
    """An interpreter on this machine: a command on PATH, or a path (relative to `base`);
    ValueError with the reason when there is none."""
    if "/" not in text:
        found = shutil.which(text)
        if found is None:
            raise ValueError(f"'{text}' is not a command on PATH; give the interpreter's path")
        return Path(found)
    if "\0" in text:
        raise ValueError("the path holds a NUL byte")
    # Not resolved: a venv's python is a link, and the venv is known by where the link is.
    path = Path(os.path.abspath(base / Path(text).expanduser()))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ValueError(f"'{text}' is not an interpreter (no executable file there)")
    return path
