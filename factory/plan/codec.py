"""The one codec of a Cell: its JSON record and back.

The record is what a wheel's provenance keeps of its cell, what the docker runner hands the
factory inside a builder container, and what `factory verify` rebuilds from. Reading a record
needs the kernel itself (its source tree and build.toml): the cell is made again by the same
constructor the planner uses, so both sides agree on every SM and section.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from .. import defaults
from ..config.model import COMPRESS_MODES, CompressMode, CudaEntry, is_project_name
from ..config.rules import ToolchainRule
from ..config.spec import KernelSpec, ProjectKind
from ..config.torches import InstalledTorch
from ..errors import ConfigError
from ..sources.depends import Dependency
from ..sources.facts import SourceFacts
from ..sources.tree import SourceTree
from ..values.versions import parse_release
from .cells import make_cell, make_cpu_cell, noarch_cell, skip_reason
from .model import Cell, KindPlan, PythonSettings

__all__ = ["cell_from_record", "cell_record", "recorded_kind"]


def cell_record(cell: Cell) -> dict[str, Any]:
    cuda = cell.cuda
    return {
        "id": cell.id, "label": cell.label, "label_template": cell.label_template,
        "torch": str(cell.torch) if cell.torch else None,
        "cuda": str(cuda.version) if cuda else None,
        "sms": [str(sm) for sm in cuda.sms] if cuda else [],
        "ptx": cuda.ptx if cuda else False,
        "torch_index": cuda.torch_index if cuda else cell.cpu_index,
        "cuda_home": str(cuda.home) if cuda and cuda.home else None,
        "platform": cell.platform,
        "gpu_code": sorted(cell.gpu_code),
        **({"cross": True} if cell.cross else {}),
        **({"backend": "cpu"} if cell.backend == "cpu" else {}),
        **({"compress": cell.compress} if cell.compress else {}),
        **({"distribution": cell.dist_name} if cell.dist_name else {}),
        **({"stable_abi": str(cell.stable_abi), "torch_pin": cell.torch_pin}
           if cell.stable_abi is not None else {}),
        **({"installed_torch": cell.installed.to_json()} if cell.installed else {}),
        **({"depends": [dependency.record() for dependency in cell.depends]}
           if cell.depends else {}),
        **cell.kind.record(cell),
        **({"needs_gil": True} if cell.needs_gil else {}),
        **({"rules": [rule.to_json() for rule in cell.rules]} if cell.rules else {}),
    }


def recorded_kind(record: Mapping[str, Any]) -> ProjectKind:
    """The form of project a cell record was built from, as its files are read: a cuTile
    project is found by reading a PEP 517 one, a pure-Python kernel-builder repo by reading
    its build.toml."""
    return "pep517" if record.get("project") == "pep517" else "kernel-builder"


def cell_from_record(record: dict[str, Any], spec: KernelSpec, kind: KindPlan,
                     source: SourceTree, version: str, facts: SourceFacts, origin: Path,
                     cuda_home: Path | None = None,
                     dependency: Callable[[dict[str, Any]], Dependency] | None = None) -> Cell:
    """The cell a record describes, for the kernel whose build.toml is `spec`, of the `kind`
    its files were read as, whose files are `source` and of whose files `facts` were read.
    `origin` names where the record came from in errors; `cuda_home` replaces the recorded
    toolkit folder (a container has its own);
    `dependency` finds the header folders of a recorded C++ dependency (the record does not
    say where a machine keeps them)."""
    if not record.get("torch"):
        cell = noarch_cell(spec, kind, source, version, facts=facts)
    elif record.get("backend") == "cpu":
        cell = _cpu_cell(record, spec, kind, source, version, facts, origin, dependency)
    else:
        try:
            torch = parse_release(record["torch"])
            installed = (InstalledTorch.from_json(record["installed_torch"])
                         if record.get("installed_torch") else None)
            cuda = CudaEntry(parse_release(record["cuda"]),
                             tuple(parse_release(sm) for sm in record["sms"]), bool(record["ptx"]),
                             cuda_home or (Path(record["cuda_home"]) if record.get("cuda_home")
                                           else None),
                             record.get("torch_index"), None)
            dependencies = _recorded_dependencies(record, dependency, origin)
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"the cell record is incomplete or malformed ({error!r})",
                              file=origin) from None
        reason = skip_reason(spec, kind, torch, cuda, record["platform"], None, installed,
                             record.get("cross") is True)
        if reason is not None:
            raise ConfigError(f"cell {record['id']} cannot be built from this source: {reason}",
                              file=origin)
        python, per_python, env = _project_settings(record, spec, kind, origin)
        cell = make_cell(spec, kind, source, version, torch, cuda, record["platform"],
                         record["label"], record.get("label_template") or defaults.LABEL_TEMPLATE,
                         installed, dependencies, python, per_python, env,
                         record.get("guard") is not False, _compress(record, origin),
                         facts=facts)
        if record.get("cross") is True:
            cell = replace(cell, cross=True)
        cell, reason = kind.shape(cell)
        if reason is not None:
            raise ConfigError(f"cell {record['id']} cannot be built from this source: "
                              f"{reason}", file=origin)
    if record.get("rules"):
        cell = replace(cell, rules=_rules(record, origin))
    if record.get("needs_gil") is True:
        cell = replace(cell, needs_gil=True)
    renamed = record.get("distribution")
    if renamed is not None:
        if not isinstance(renamed, str) or not is_project_name(renamed):
            raise ConfigError(f"the cell record's distribution {renamed!r} is not a "
                              "distribution name", file=origin)
        cell = replace(cell, dist_name=renamed)
    if cell.id != record.get("id"):
        raise ConfigError(f"cell {record.get('id')} cannot be made from this source (it gives "
                          f"{cell.id})", file=origin)
    return cell


def _recorded_dependencies(record: dict[str, Any],
                           dependency: Callable[[dict[str, Any]], Dependency] | None,
                           origin: Path) -> dict[str, Dependency]:
    """The C++ dependencies the record names, found by `dependency`, by name."""
    wanted = list(record.get("depends", []))
    if wanted and dependency is None:
        raise ConfigError("the cell needs C++ dependencies, and nothing fetches them",
                          file=origin)
    return {str(item["name"]): dependency(item) for item in wanted} if dependency else {}


def _cpu_cell(record: dict[str, Any], spec: KernelSpec, kind: KindPlan, source: SourceTree,
              version: str, facts: SourceFacts, origin: Path,
              dependency: Callable[[dict[str, Any]], Dependency] | None) -> Cell:
    try:
        torch = parse_release(record["torch"])
        index = record.get("torch_index")
        found = _recorded_dependencies(record, dependency, origin)
        if "cpu" not in spec.backends:
            raise ConfigError(f"cell {record['id']} cannot be built from this source: the "
                              "kernel has no CPU backend", file=origin)
        return make_cpu_cell(spec, kind, source, version, torch, str(record["platform"]),
                             str(index) if index else None, found, facts=facts)
    except (KeyError, TypeError, ValueError) as error:
        raise ConfigError(f"the cell record is incomplete or malformed ({error!r})",
                          file=origin) from None


def _rules(record: dict[str, Any], origin: Path) -> tuple[ToolchainRule, ...]:
    """The toolchain rules a cell was built under, as recorded (the table may have changed
    since): a record without any was built before rules existed, or with none in force."""
    rules = record["rules"]
    if not isinstance(rules, list):
        raise ConfigError("the cell record's rules are not a list", file=origin)
    return tuple(ToolchainRule.from_json(rule, origin) for rule in rules)


def _compress(record: dict[str, Any], origin: Path) -> CompressMode | None:
    """The compression a cell was built with; None for a wheel built before the setting."""
    mode = record.get("compress")
    if mode is not None and mode not in COMPRESS_MODES:
        raise ConfigError(f"the cell record's compression '{mode}' is not one this factory "
                          f"knows ({', '.join(COMPRESS_MODES)})", file=origin)
    return cast(CompressMode | None, mode)


def _project_settings(record: dict[str, Any], spec: KernelSpec, kind: KindPlan,
                      origin: Path) -> PythonSettings:
    """A cell's CPython (a PEP 517 project's, or a free-threaded one), whether its wheel is
    per-Python, and its build variables, as the record of its kind names them."""
    if recorded_kind(record) != kind.form:
        raise ConfigError(f"cell {record.get('id')} was built from a "
                          f"{record.get('project') or 'kernel-builder'} project; this source is "
                          f"a {spec.kind} one", file=origin)
    try:
        return kind.settings(record)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ConfigError(f"the cell record's Python settings are malformed ({error!r})",
                          file=origin) from None
