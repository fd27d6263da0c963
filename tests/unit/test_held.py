"""What `factory plan` believes of a holding (compile/held.py): signed under the object cache's
key, for this cell, naming an object that is there, its project files and op namespace those
of the source planned."""

from __future__ import annotations

import hashlib
from pathlib import Path

from factory.compile.held import cell_holdings, held_units, holding

KEY = b"k" * 32
CELL = cell_holdings("", "relu-cu130torch211-x86_64")
NAMESPACE = "_relu_abc123"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source(tmp_path: Path) -> Path:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "relu.cu").write_bytes(b"kernel")
    (tmp_path / "csrc" / "relu.h").write_bytes(b"header")
    return tmp_path


def inputs(unit: bytes = b"kernel", namespace: str | None = None) -> list[list[str]]:
    found = [["$WORK/src/csrc/relu.cu", digest(unit)],
             ["$WORK/src/csrc/relu.h", digest(b"header")],
             ["$WORK/src/registration.h", digest(b"written by the factory")],
             ["/opt/cuda/include/cuda.h", digest(b"toolkit")]]
    return found + ([["$TORCH_EXTENSION_NAME", namespace]] if namespace else [])


def test_a_unit_is_held_while_its_project_files_are_those_recorded(tmp_path: Path) -> None:
    root = source(tmp_path)
    record = holding(KEY, CELL, "csrc/relu.cu", "a" * 64, inputs())
    # only the project's files (and the namespace) are recorded, not the toolkit's
    assert [name for name, _ in record["files"]] == ["csrc/relu.cu", "csrc/relu.h",
                                                     "registration.h"]
    assert held_units(KEY, CELL, [record], root, NAMESPACE) == {"csrc/relu.cu"}
    (root / "csrc" / "relu.h").write_bytes(b"another header")
    assert held_units(KEY, CELL, [record], root, NAMESPACE) == set()


def test_a_holding_not_signed_for_this_cell_under_this_key_is_not_believed(
        tmp_path: Path) -> None:
    root = source(tmp_path)
    record = holding(KEY, CELL, "csrc/relu.cu", "a" * 64, inputs())
    assert held_units(b"x" * 32, CELL, [record], root, NAMESPACE) == set()
    assert held_units(KEY, cell_holdings("", "other-cell"), [record], root, NAMESPACE) == set()
    renamed = {**record, "unit": "csrc/other.cu"}
    assert held_units(KEY, CELL, [renamed, None, "text", {"format": 1}], root,
                      NAMESPACE) == set()


def test_an_object_gone_or_another_namespace_is_not_held(tmp_path: Path) -> None:
    root = source(tmp_path)
    record = holding(KEY, CELL, "csrc/relu.cu", "a" * 64, inputs(namespace=NAMESPACE))
    assert held_units(KEY, CELL, [record], root, NAMESPACE) == {"csrc/relu.cu"}
    assert held_units(KEY, CELL, [record], root, "_relu_def456") == set()
    assert held_units(KEY, CELL, [record], root, NAMESPACE,
                      present=lambda obj: obj != "a" * 64) == set()
    # of two holdings of a unit, the one whose files match is enough
    older = holding(KEY, CELL, "csrc/relu.cu", "b" * 64, inputs(b"old kernel"))
    assert held_units(KEY, CELL, [older, record], root, NAMESPACE) == {"csrc/relu.cu"}
