"""The one codec of a Cell: a record (what provenance keeps, what a builder container is given)
and back, for every kind of cell a plan makes. Pure: no compiler, no network."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from factory.cells.kinds import kind_of
from factory.config.buildtoml import read_build_toml
from factory.errors import ConfigError
from factory.plan.codec import cell_from_record, cell_record
from factory.plan.model import Cell
from factory.sources.facts import read_facts

from ..support.plans import MATRIX, plan_of


def round_trip(cell: Cell) -> Cell:
    """The cell read back from its record after the record has been through JSON."""
    record = json.loads(json.dumps(cell_record(cell)))
    spec = read_build_toml(cell.source.root)
    return cell_from_record(record, spec, kind_of(spec), cell.source, cell.version,
                            read_facts(spec), cell.spec.build_toml)


def test_every_cell_of_a_plan_survives_its_record(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MATRIX)
    assert len(plan.cells) == 3  # two torch versions of multikernel, one noarch wheel
    for cell in plan.cells:
        again = round_trip(cell)
        assert cell_record(again) == cell_record(cell)
        assert (again.id, again.key, again.label, again.label_template, again.wheel_version,
                again.ops_namespace) == (cell.id, cell.key, cell.label, cell.label_template,
                                         cell.wheel_version, cell.ops_namespace)
        # everything the compiler is told: SMs, each section's archs, every unit
        assert (again.sms, again.sections, again.units, again.gpu_code) == (
            cell.sms, cell.sections, cell.units, cell.gpu_code)


def test_the_record_holds_what_the_gates_check(tmp_path: Path) -> None:
    cell = next(c for c in plan_of(tmp_path, MATRIX).cells if c.torch is not None)
    record = cell_record(cell)
    assert record["label"] == "cu130pt211" and record["label_template"] == "cu{cuda}pt{torch}"
    assert record["sms"] == ["8.0", "8.6", "9.0", "10.0"] and record["ptx"] is False
    # the plan's promise: scale for every SM, offset for 8.0 and 9.0 with PTX, 8.6 and 9.0a
    assert record["gpu_code"] == ["compute_90", "sm_100", "sm_80", "sm_86", "sm_90", "sm_90a"]


def test_a_record_that_no_longer_fits_the_source_is_refused(tmp_path: Path) -> None:
    cell = next(c for c in plan_of(tmp_path, MATRIX).cells if c.torch is not None)
    record = cell_record(cell)
    narrow = shutil.copytree(cell.source.root, tmp_path / "narrow")
    toml = narrow / "build.toml"
    toml.write_text(toml.read_text().replace("[torch]", '[torch]\nmaxver = "2.10"'))
    with pytest.raises(ConfigError, match=r"cannot be built from this source: torch 2\.11 is "
                                          r"above the kernel's torch maxver 2\.10"):
        spec = read_build_toml(narrow)
        cell_from_record(record, spec, kind_of(spec), cell.source, cell.version, read_facts(spec),
                         narrow / "build.toml")
    with pytest.raises(ConfigError, match="incomplete or malformed"):
        cell_from_record({**record, "sms": None}, cell.spec, cell.kind, cell.source,
                         cell.version, cell.facts, cell.spec.build_toml)
