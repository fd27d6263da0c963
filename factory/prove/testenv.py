"""The environment a kernel's tests run in: a fresh one beside the cell's torch, holding the
wheel, pytest and what the tests need, made with uv from the index, uv's cache and the
wheelhouses given (folders of wheels, for machines with no network).

What is installed beside the cell's torch (its own requirements, and on a machine's own
interpreter whatever else it has: pytest, numpy, transformers) counts as installed: the new
environment holds a view of it while uv installs (toolchain/torch.py), so a requirement that
needs torch is met by the cell's torch, and nothing already there is downloaded again. A
requirement that cannot be had is one line: the package, who asked for it and the ways out."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .. import defaults
from ..config.model import TestSelection
from ..errors import BuildError, CommandFailed
from ..system.process import Log, first_error, run
from ..system.uv import uv_bin, uv_env
from ..toolchain.emulated import emulated_env_beside, install_emulated
from ..toolchain.torch import TorchEnv, env_beside_torch
from ..wheel.read import read_wheel

__all__ = ["TEST_TOOLS", "Needed", "TestEnvUnavailable", "installed_beside_torch",
           "make_test_env", "requirement_sources", "test_requirements"]

TEST_TOOLS = ("pytest",)
# Requirements the environment provides otherwise: the cell's torch, and the stand-in for
# `kernels` (which would download the kernel from the Hub).
_PROVIDED = {"torch", "kernels"}
_NAME = r"([A-Za-z0-9][A-Za-z0-9._-]*)"
# uv with --no-build where a requirement is only a source distribution
_SOURCE_ONLY = re.compile(rf"Because {_NAME}\S* has no usable wheels")
# uv's resolver: "Because numpy was not found in the cache and all versions of torchmetrics
# depend on numpy>1.20.0, ... And because you require torchmetrics, ..."
_NOT_FOUND = (re.compile(rf"Because {_NAME} was not found in"),
              re.compile(rf"there (?:is|are) no versions? of {_NAME}"),
              re.compile(rf"Because {_NAME} has no (?:versions|wheels)"), _SOURCE_ONLY)
_ROOT = re.compile(rf"you require {_NAME}")


@dataclass(frozen=True)
class Needed:
    """A requirement of the test environment and who asked for it."""

    requirement: str
    source: str

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)


class TestEnvUnavailable(BuildError):
    """The test environment could not be made: the tests cannot start (the cell is untested,
    not failed)."""

    __test__ = False


def test_requirements(wheel: Path, needs: tuple[str, ...] = (),
                      selection: TestSelection | None = None) -> list[Needed]:
    """What the test environment installs besides the wheel, with who asked for each: pytest,
    what the kernel's flake.nix names for its tests (`needs`), what matrix.yaml adds, and the
    wheel's own Requires-Dist; but for torch (the cell's is there), `kernels` (the stand-in is)
    and the names the matrix leaves out."""
    return requirement_sources(f"{wheel.name} (Requires-Dist)", read_wheel(wheel).requires,
                               needs, selection)


def requirement_sources(wheel: str, requires: tuple[str, ...], needs: tuple[str, ...] = (),
                        selection: TestSelection | None = None) -> list[Needed]:
    """test_requirements for a wheel known by its Requires-Dist (`requires`), `wheel` saying
    where they come from."""
    without = {canonicalize_name(name) for name in (selection.without if selection else ())}
    asked = [Needed(name, "the factory's test runner") for name in TEST_TOOLS]
    asked += [Needed(text, "flake.nix (pythonCheckInputs)") for text in needs]
    asked += [Needed(text, "matrix.yaml (tests: requires)")
              for text in (selection.requires if selection else ())]
    asked += [Needed(text, wheel) for text in requires]
    return [needed for needed in asked if installed_beside_torch(needed.requirement, without)]


def installed_beside_torch(requirement: str, without: Collection[str] = ()) -> bool:
    """Whether an environment beside the cell's torch installs `requirement`: not for torch
    (the cell's is there), `kernels` (the stand-in is), a name in `without` or a line that is
    no requirement."""
    try:
        name = canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement:
        return False
    return name not in _PROVIDED and name not in without


def make_test_env(root: Path, torch: TorchEnv, wheel: Path, needed: list[Needed], cache: Path,
                  log: Log, offline: bool, wheelhouses: tuple[Path, ...]) -> Path:
    """A fresh environment at `root` beside `torch` with the wheel and `needed` installed; its
    site folder. TestEnvUnavailable when a requirement cannot be had."""
    requires = [needed.requirement for needed in needed]
    what = "installing the test requirements"
    try:
        if torch.platform is not None:  # an emulated torch: wheels for its platform
            site = emulated_env_beside(root, torch, requires, cache, log, offline, what,
                                       wheelhouses)
            install_emulated(wheel, site, torch, cache, log, offline)
            return site
        site = env_beside_torch(root, torch, requires, cache, log, offline, what,
                                "a requirement of the wheel installed a torch of its own; its "
                                "tests must use the cell's torch", wheelhouses, view=True)
        run([uv_bin(), "pip", "install", "--quiet", "--no-deps", "--python",
             root / "bin" / "python", wheel], log,
            timeout=defaults.STEP_TIMEOUT, env=uv_env(cache, offline),
            what=f"installing {wheel.name}")
    except CommandFailed as exc:
        raise TestEnvUnavailable(unavailable(exc.output, needed, offline, wheelhouses)) from None
    return site


def unavailable(output: str, needed: list[Needed], offline: bool,
                wheelhouses: tuple[Path, ...], environment: str = "test") -> str:
    """One line for a test (or, for the import gate, import) environment uv could not make:
    which package could not be had, who asked for it, and the ways out (a test requirement may
    also be left out); else uv's own first error."""
    missing = next((found[1] for pattern in _NOT_FOUND
                    if (found := pattern.search(output)) is not None), None)
    if missing is None:
        return f"its {environment} environment could not be made: {first_error(output)}"
    name = canonicalize_name(missing)
    roots = {canonicalize_name(root) for root in _ROOT.findall(output)}
    asker = next((n for n in needed if n.name == name), None) or \
        next((n for n in needed if n.name in roots), None)
    why = f"asked for by {asker.source}: {asker.requirement}" if asker is not None else \
        f"needed by the {environment} requirements"
    if asker is not None and asker.name != name:
        why += f", which needs {name}"
    where, ways = _ways_to_have(output, offline, wheelhouses)
    if environment == "test" and (asker is None or asker.name not in TEST_TOOLS):
        ways += (f"leave it out with tests: {{without: [{name}]}} in matrix.yaml",)
    listed = f"{', '.join(ways[:-1])} or {ways[-1]}" if len(ways) > 1 else ways[0]
    return f"{name} cannot be had {where} ({why}): {listed}"


def _ways_to_have(output: str, offline: bool,
                  wheelhouses: tuple[Path, ...]) -> tuple[str, tuple[str, ...]]:
    """Where uv looked for a requirement it could not have, and the ways to give it."""
    if _SOURCE_ONLY.search(output):
        return ("as a wheel: only its source is there, and a requirement is never built from "
                "source (its build would run its code with the factory's rights)",
                ("give a wheel of it, built where its code is trusted, in a --wheelhouse "
                 "folder",))
    held = "the wheelhouse" + ("s" if len(wheelhouses) > 1 else "")
    if offline:
        where = f"offline: neither uv's cache nor {held} holds it" if wheelhouses else \
            "offline: uv's cache does not hold it"
    else:
        where = f"neither the index nor {held} has it" if wheelhouses else \
            "the index does not have it"
    ways = ("give it in a --wheelhouse folder (`factory wheelhouse MATRIX DIR` makes one "
            "where the network is)",)
    return where, ways + (("build with the network",) if offline else ())
