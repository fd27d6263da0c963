"""`factory wheelhouse`: every test and runtime requirement of a matrix's kernels, downloaded
as wheels into one folder on a machine with a network, so that a machine with none (a GPU
machine behind an air gap) can make the test environments from it (`--wheelhouse DIR`).

Each kernel's requirements (testenv.requirement_sources: pytest, flake.nix's, matrix.yaml's,
the wheel's Requires-Dist) are resolved by uv for each target (torch release, CPython,
platform) with that torch among them; what torch brings with it (its own requirements) is
left out, since the test environment sees the cell's torch environment, and so is what the
target machine already has (`installed`: its `pip freeze`, whose pins the resolution keeps).
The wheels are downloaded by pip (`pip download --no-deps`, for the target's tags): uv
resolves for another machine but downloads no wheel files.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .. import defaults
from ..errors import BuildError, ConfigError
from ..system.process import TimedOut, bounded_run, first_error
from ..system.uv import uv_bin, uv_env
from ..values.pythons import CPython
from .testenv import Needed

__all__ = ["Target", "Wheelhouse", "download", "installed_pins", "manylinux_platforms", "resolve",
           "torch_closure"]

_PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")
_RESOLVE_TIMEOUT = defaults.REGISTRY_TIMEOUT * 5  # seconds: uv reads many projects' metadata
_DOWNLOAD_TIMEOUT = defaults.DOWNLOAD_TIMEOUT * 10  # seconds for all of a target's wheels


@dataclass(frozen=True)
class Target:
    """A machine the tests will run on: its CPython, platform and glibc, and the torch release
    (with the index it comes from)."""

    python: str  # 3.12
    platform: str  # x86_64
    glibc: str  # 2.28: the oldest manylinux tag its wheels may need
    torch: str  # a requirement: torch==2.11.*
    index: str | None = None  # the torch index (None: the default index)

    def describe(self) -> str:
        return f"CPython {self.python}, {self.platform}, {self.torch}"

    @property
    def uv_platform(self) -> str:
        return f"{self.platform}-manylinux_{self.glibc.replace('.', '_')}"


@dataclass(frozen=True)
class Wheelhouse:
    """What went into a wheelhouse, and what was left out and why."""

    wheels: tuple[Path, ...]
    with_torch: tuple[str, ...]  # names left out: they come with torch
    installed: tuple[str, ...]  # names left out: the target has them


def installed_pins(text: str, path: Path) -> dict[str, str]:
    """name: version of each `name==version` line of a `pip freeze` (other lines, editable
    installs and local versions such as torch's +cu130, which no index serves, are not pins)."""
    pins: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        found = _PINNED.fullmatch(line)
        if found is None:
            try:
                Requirement(line)
            except InvalidRequirement:
                raise ConfigError(f"'{line[:80]}' is not a line of `pip freeze`", file=path,
                                  line=number, key="--installed") from None
            continue
        if "+" not in found[2]:
            pins[canonicalize_name(found[1])] = found[2]
    return pins


def resolve(target: Target, needed: list[Needed], pins: dict[str, str], cache: Path,
            folder: Path, offline: bool = False) -> dict[str, str]:
    """name: version of everything `needed` takes on the target beside its torch, as uv
    resolves it, preferring the versions the target has (`pins`): a requirement they do not
    meet (transformers<5 where the machine has 5.17) gets a version of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = folder / "requirements.in"
    wanted.write_text("".join(f"{line}\n" for line in
                              [target.torch, *(n.requirement for n in needed)]))
    return _compile(target, wanted, folder / "resolved.txt", pins, cache, offline, needed)


def torch_closure(target: Target, cache: Path, folder: Path,
                  offline: bool = False) -> set[str]:
    """The names torch's release brings with it on the target (torch too)."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = folder / "torch.in"
    wanted.write_text(f"{target.torch}\n")
    return set(_compile(target, wanted, folder / "torch.txt", {}, cache, offline, []))


def _compile(target: Target, wanted: Path, output: Path, preferred: dict[str, str],
             cache: Path, offline: bool, needed: list[Needed]) -> dict[str, str]:
    """uv's resolution of `wanted` for the target, written to `output`; uv prefers the
    versions an output file already names, so `preferred` is written there first."""
    output.write_text("".join(f"{name}=={version}\n" for name, version in preferred.items()
                              if name != "torch"))
    index = ["--index", target.index] if target.index else []
    argv = [uv_bin(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
            "--python-version", CPython.parse(target.python).series,
            "--python-platform", target.uv_platform,
            *index, "--output-file", str(output), str(wanted)]
    try:
        done = bounded_run(argv, _RESOLVE_TIMEOUT, env={**os.environ, **uv_env(cache, offline)})
    except TimedOut:
        raise BuildError(f"uv could not resolve the requirements for {target.describe()} in "
                         f"{_RESOLVE_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        asked = "; ".join(f"{n.requirement} ({n.source})" for n in needed)
        raise BuildError(f"the requirements for {target.describe()} cannot be resolved: "
                         f"{first_error(done.stderr)}" + (f" (asked: {asked})" if asked else ""))
    return {canonicalize_name(found[1]): found[2] for line in output.read_text().splitlines()
            if (found := _PINNED.fullmatch(line.strip())) is not None}


# The glibc each legacy manylinux name stands for (PEP 600).
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def manylinux_platforms(glibc: str, platform: str) -> list[str]:
    """The manylinux platform tags a machine of this glibc takes, newest first. Written by
    hand: pip's --platform takes the tags it is given and no older one, and packaging lists
    them only for the running machine."""
    minor = int(glibc.split(".")[1])
    lowest = 5 if platform == "x86_64" else 17
    tags = []
    for version in range(minor, lowest - 1, -1):
        tags.append(f"manylinux_2_{version}_{platform}")
        if version in _LEGACY and (version >= 17 or platform == "x86_64"):
            tags.append(f"{_LEGACY[version]}_{platform}")
    return tags


def download(target: Target, pins: dict[str, str], folder: Path, scratch: Path) -> None:
    """The wheels of `pins` (name: version) for the target, into `folder` (those already there
    are kept). pip is the tool made for fetching wheels of another machine's tags."""
    if not pins:
        return
    scratch.mkdir(parents=True, exist_ok=True)
    wanted = scratch / "download.txt"
    wanted.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    python = CPython.parse(target.python)
    # a free-threaded CPython loads no abi3 module: its own ABI's wheels, and pure ones
    abis = [python.abi_tag, *([] if python.free_threaded else ["abi3"]), "none"]
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--only-binary=:all:", "--dest", str(folder), "--python-version", python.series,
            "--implementation", "cp", *(argument for abi in abis for argument in ("--abi", abi)),
            *(argument for platform in manylinux_platforms(target.glibc, target.platform)
              for argument in ("--platform", platform)), "--requirement", str(wanted)]
    if target.index:
        argv += ["--extra-index-url", target.index]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    try:
        done = bounded_run(argv, _DOWNLOAD_TIMEOUT, env=env)
    except TimedOut:
        raise BuildError(f"pip did not download the wheels for {target.describe()} in "
                         f"{_DOWNLOAD_TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        raise BuildError(f"the wheels for {target.describe()} cannot be downloaded: "
                         f"{first_error(done.stderr or done.stdout)}")
