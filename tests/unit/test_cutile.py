"""cuTile projects: the declaration read from pyproject.toml, the loader's choice of shipped
code (with cuTile's own signature objects), the cubin gate and the planned cells."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from factory.config.cutile import array_parameter
from factory.config.project import read_project
from factory.data.cutile import runtime
from factory.errors import ConfigError
from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import cubin_sm, inspect_wheel

from ..support.checks import present
from ..support.factory import write

HEADER = """
    [build-system]
    requires = ["setuptools>=77"]
    build-backend = "setuptools.build_meta"
    [project]
    name = "tile-thing"
    version = "1.0.0"
    dependencies = ["cuda-tile>=1.7", "torch"]
"""

KERNEL = """
    [[tool.kernel-wheel-factory.cutile.kernel]]
    function = "tile_thing.kernels:scale"
    dtypes = ["float16", "float32"]
    parameters = [{array = "dtype", ndim = 2}, {array = "dtype", ndim = 2}, {constant = [64, 128]}]
"""


def project(tmp_path: Path, declaration: str = KERNEL) -> Path:
    write(tmp_path / "pyproject.toml", HEADER + declaration)
    return tmp_path


def refusal(tmp_path: Path, declaration: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        read_project(project(tmp_path, declaration), "pep517")
    return caught.value


def test_a_cutile_project_expands_its_declaration(tmp_path: Path) -> None:
    spec = read_project(project(tmp_path), "pep517")
    assert spec.kind == "cutile"
    assert spec.cutile_requirement == "cuda-tile>=1.7"
    (kernel,) = spec.cutile
    assert kernel.function == "tile_thing.kernels:scale"
    # 2 dtypes x divisibility 16 and 1 x 2 constant values
    assert len(kernel.signatures) == 8
    first = kernel.signatures[0]
    assert first[0] == array_parameter("float16", 2, 16)
    assert first[0]["stride_div"] == [8, 1] and first[0]["shape_div"] == [16, 16]
    assert first[2] == {"kind": "constant", "value": 64}
    assert {s[0]["dtype"] for s in kernel.signatures} == {"float16", "float32"}


def test_a_plain_project_is_not_a_cutile_one(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", HEADER.replace('"cuda-tile>=1.7", ', ""))
    assert read_project(tmp_path, "pep517").kind == "pep517"


def test_a_function_declared_twice_adds_its_signatures(tmp_path: Path) -> None:
    spec = read_project(project(tmp_path, KERNEL + KERNEL.replace("[64, 128]", "256")),
                        "pep517")
    assert len(spec.cutile) == 1 and len(spec.cutile[0].signatures) == 12


@pytest.mark.parametrize("declaration, words, key", [
    ("", "must declare the signatures", "tool.kernel-wheel-factory.cutile"),
    (KERNEL.replace("tile_thing.kernels:scale", "tile_thing.kernels.scale"), "not module:name",
     "function"),
    (KERNEL.replace('"float32"', '"float33"'), "not a cuTile dtype", "dtypes"),
    (KERNEL.replace('dtypes = ["float16", "float32"]\n', ""), "add dtypes", "array"),
    (KERNEL.replace("ndim = 2}, {array", "dims = 2}, {array"), "unknown key", "dims"),
    (KERNEL.replace("{constant = [64, 128]}", "{constant = \"x\"}"), "number or a boolean",
     "constant"),
    (KERNEL.replace("parameters", "divisible = [3]\n    parameters"), "power of two",
     "divisible"),
    (KERNEL.replace("[{array", "[{scalar = \"float32\", array"), "exactly one of", None),
])
def test_a_bad_declaration_is_one_line_naming_its_key(tmp_path: Path, declaration: Any, words: str,
                                                      key: str | None) -> None:
    error = refusal(tmp_path, declaration)
    assert words in error.message
    assert error.file is not None and error.file.name == "pyproject.toml"
    if key is not None:
        assert key in (error.key or "")
    assert error.line is not None or not declaration


def signature(dtype: str = "float32", divisor: int = 16, base: int = 16,
              constant: int = 256) -> list[dict[str, Any]]:
    arrays = [dict(array_parameter(dtype, 1, divisor), base=base) for _ in range(3)]
    return [*arrays, {"kind": "constant", "value": constant}]


def test_shipped_code_serves_launches_that_promise_at_least_its_assumptions() -> None:
    strong, weak = signature(divisor=16), signature(divisor=1)
    assert runtime._serves(weak, strong) and runtime._serves(strong, strong)
    assert not runtime._serves(strong, weak)  # an extent of 1000 is not divisible by 16
    assert runtime._serves(strong, signature(divisor=64, base=256))
    assert not runtime._serves(strong, signature(base=1))  # a misaligned view
    assert not runtime._serves(strong, signature(dtype="float16"))
    assert not runtime._serves(strong, signature(constant=512))
    unit_extent = signature(divisor=1)
    for array in unit_extent[:3]:
        array["shape_constant"] = [1]
    assert not runtime._serves(weak, unit_extent)  # cuTile compiles an extent of 1 apart
    assert runtime._strength(strong) > runtime._strength(weak)


def test_the_loader_picks_the_most_specialised_cubin_for_the_sm(tmp_path: Path) -> None:
    folder = tmp_path / "_kwf_cutile"
    for sm in ("sm_80", "sm_90"):
        (folder / sm).mkdir(parents=True)
        for name in ("strong", "weak"):
            (folder / sm / f"{name}.cubin").write_bytes(f"{name} {sm}".encode())
    entries = [(folder, {"symbol": f"k_{name}", "parameters": signature(divisor=divisor),
                         "cubins": {sm: f"{sm}/{name}.cubin" for sm in ("sm_80", "sm_90")},
                         "tileir": f"tileir/{name}.tileirbc"})
               for name, divisor in (("weak", 1), ("strong", 16))]

    class Given:
        def __init__(self, parameters: Any) -> None:
            self.parameters = parameters

    class Kernel:
        class _annotated_function:
            @staticmethod
            def pyfunc() -> None:
                pass
        _annotated_function.pyfunc.__module__ = "tile_thing.kernels"
        _annotated_function.pyfunc.__qualname__ = "scale"

    registry = {"tile_thing.kernels:scale": entries}
    described: dict[str, Any] = {}

    def describe(signature: Any) -> Any:
        return described["now"]

    original = runtime.describe
    runtime.describe = describe
    try:
        described["now"] = signature(divisor=16)
        blob, symbol, _, _ = present(runtime._serve(registry, Kernel(), Given(None), (9, 0)))
        assert (blob, symbol) == (b"strong sm_90", "k_strong")
        described["now"] = signature(divisor=1)
        blob, symbol, _, _ = present(runtime._serve(registry, Kernel(), Given(None), (8, 0)))
        assert (blob, symbol) == (b"weak sm_80", "k_weak")
        described["now"] = signature(dtype="float16")
        assert runtime._serve(registry, Kernel(), Given(None), (9, 0)) is None
    finally:
        runtime.describe = original


def cubin(sm: int) -> bytes:
    """An ELF header as tileiras writes one for sm_<sm> (ABI version 8, EM_CUDA)."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[7], header[8] = 2, 1, 0x41, 8
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<I", header, 48, 0xB000004 | (sm << 8))
    return bytes(header)


def test_a_cubin_names_its_sm() -> None:
    assert cubin_sm(cubin(90)) == "sm_90" and cubin_sm(cubin(120)) == "sm_120"
    assert cubin_sm(b"\x7fELF" + bytes(60)) is None


def test_the_cubin_gate_wants_every_sm_of_every_signature(tmp_path: Path) -> None:
    content = tmp_path / "content"
    folder = content / "tile_thing" / "_kwf_cutile"
    (content / "tile_thing").mkdir(parents=True)
    (content / "tile_thing" / "__init__.py").write_text("")
    for sm in (80, 90):
        (folder / f"sm_{sm}").mkdir(parents=True)
        (folder / f"sm_{sm}" / "a.cubin").write_bytes(cubin(sm))
    (folder / "sm_90" / "wrong.cubin").write_bytes(cubin(80))
    manifest = {"format": 1, "sms": ["sm_80", "sm_90"], "kernels": {"tile_thing.k:f": [
        {"symbol": "f_a", "parameters": [], "cubins": {"sm_80": "sm_80/a.cubin",
                                                        "sm_90": "sm_90/a.cubin"}},
        {"symbol": "f_b", "parameters": [], "cubins": {"sm_90": "sm_90/wrong.cubin"}}]}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    metadata = CoreMetadata("tile-thing", "1.0.0+cu130", "", ">=3.10", ("torch==2.11.*",), None,
                            None)
    wheel = write_wheel(content, tmp_path / "dist", metadata, "py3-none-any", purelib=True,
                        epoch=315532800)
    report = inspect_wheel(wheel)
    assert not report.shared_objects and {c.sm for c in report.cubins} == {"sm_80", "sm_90"}
    problems = check_wheel(report, Expectation("tile-thing", "1.0.0+cu130", "==2.11.*", 13,
                                               None, None, cubins=frozenset({"sm_80", "sm_90"})))
    assert problems == [
        "cubins: tile_thing.k:f f_b has no cubin for sm_80 (those GPUs would compile it at "
        "first launch, or fail without a toolkit)",
        "cubins: tile_thing/_kwf_cutile/sm_90/wrong.cubin is filed for sm_90 but holds sm_80 "
        "code"]


def test_a_cuda_major_asks_for_its_build_of_the_cute_dsl(tmp_path: Path) -> None:
    from factory.config.buildtoml import read_build_toml

    write(tmp_path / "build.toml", """
        [general]
        name = "dsl-thing"
        version = 1
        license = "MIT"
        backends = ["cuda"]
        python-depends = ["einops", "tvm-ffi"]
        [general.cuda]
        python-depends = ["nvidia-cutlass-dsl"]
        [torch-noarch]
    """)
    write(tmp_path / "torch-ext" / "dsl_thing" / "__init__.py", "")
    spec = read_build_toml(tmp_path)
    assert spec.requirements("cuda", 13) == ("einops", "apache-tvm-ffi",
                                             "nvidia-cutlass-dsl[cu13]")
    assert spec.requirements("cuda", 12) == ("einops", "apache-tvm-ffi", "nvidia-cutlass-dsl")
    assert spec.runtime_compilers == ("nvidia-cutlass-dsl", "tvm-ffi")


def test_a_declaration_is_counted_before_it_is_expanded(tmp_path: Path) -> None:
    """Twelve parameters of ten constants each: 10^12 signatures in a kilobyte of TOML,
    refused from their count, in a blink (expanding them would take the machine's memory)."""
    parameters = ", ".join(["{constant = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}"] * 12)
    declaration = KERNEL.replace(
        'parameters = [{array = "dtype", ndim = 2}, {array = "dtype", ndim = 2}, '
        '{constant = [64, 128]}]', f"parameters = [{parameters}]").replace(
        'dtypes = ["float16", "float32"]\n', "")
    started = time.monotonic()
    error = refusal(tmp_path, declaration)
    assert time.monotonic() - started < 5
    assert "declares 1,000,000,000,000 signatures; at most 512" in error.message
    # a function declared again cannot add its way past the bound either: each declaration
    # below is 2 dtypes x 2 divisibilities x 64 constants = 256 signatures
    def constants(first: int) -> str:
        values = ", ".join(map(str, range(first, first + 64)))
        return KERNEL.replace("{constant = [64, 128]}", f"{{constant = [{values}]}}")

    spec = read_project(project(tmp_path, constants(0) + constants(0)), "pep517")
    assert len(spec.cutile[0].signatures) == 256
    error = refusal(tmp_path, constants(0) + constants(64) + constants(128))
    assert "signatures to 768; at most 512" in error.message
