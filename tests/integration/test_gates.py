"""The publishing gates on wheels doctored the way real wheels go wrong.

Every fixture is built for real: C and CUDA sources compiled with gcc and PyPI's nvcc, linked,
packed with the factory's wheel writer and, where a real wheel would be, repaired by auditwheel.
Nothing is mocked: the gates read the bytes these tools produced.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from factory.compile.commands import compression_flags
from factory.config.model import CompressMode
from factory.system.process import Log
from factory.toolchain.cuda import provide_cuda
from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.fatbin import fatbin_sizes
from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import inspect_wheel
from factory.wheel.provenance import BuildFacts, KernelFacts, Provenance, SourceFacts
from factory.wheel.repair import repair

from ..support.factory import listed_by_cuobjdump, run_factory

pytestmark = [pytest.mark.slow, pytest.mark.network]

EPOCH = 1767225600
VERSION = "1.0.0+cu130torch211"
GPU_CODE = frozenset({"sm_80", "sm_90", "compute_90"})
EXPECT = Expectation("gatecheck", VERSION, "==2.11.*", 13, GPU_CODE, "x86_64")

EXTENSION = """
#define Py_LIMITED_API 0x03090000
#include <Python.h>
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "_gatecheck", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__gatecheck(void) { return PyModule_Create(&definition); }
"""
KERNEL = """
__global__ void fill(float *out) { out[threadIdx.x] = 1.0f; }
extern "C" void launch_fill(float *out) { fill<<<1, 32>>>(out); }
"""
NOT_LIMITED = """
#include <Python.h>
const char *name_of(PyObject *text) { return PyUnicode_AsUTF8(text); }
"""
NEW_GLIBC = """
#include <pthread.h>
static void *work(void *arg) { return arg; }
int start(void) { pthread_t thread; return pthread_create(&thread, 0, work, 0); }
"""


class Builder:
    """Compiles the fixtures' pieces in one folder."""

    def __init__(self, root: Path, cuda_home: Path) -> None:
        self.root = root
        self.cuda = cuda_home
        self.python_include = sysconfig.get_paths()["include"]

    def run(self, *argv: str | Path, env: dict[str, Any] | None = None) -> None:
        done = subprocess.run([str(a) for a in argv], cwd=self.root, capture_output=True,
                              text=True, env={**os.environ, **(env or {})})
        assert done.returncode == 0, done.stdout + done.stderr

    def c_object(self, name: str, text: str) -> Path:
        (self.root / f"{name}.c").write_text(text)
        self.run("gcc", "-c", "-fPIC", "-O2", f"-I{self.python_include}", f"{name}.c",
                 "-o", f"{name}.o")
        return self.root / f"{name}.o"

    def cuda_object(self, name: str, sms: list[int], ptx: int, *flags: str) -> Path:
        (self.root / f"{name}.cu").write_text(KERNEL)
        gencode = [f"-gencode=arch=compute_{sm},code=sm_{sm}" for sm in sms]
        gencode.append(f"-gencode=arch=compute_{ptx},code=compute_{ptx}")
        self.run(self.cuda / "bin" / "nvcc", "-c", "-Xcompiler=-fPIC", *gencode, *flags,
                 f"{name}.cu", "-o", f"{name}.o")
        return self.root / f"{name}.o"

    def library(self, soname: str, text: str = "int marker(void) { return 1; }\n") -> Path:
        folder = self.root / "libs"
        folder.mkdir(exist_ok=True)
        (folder / "lib.c").write_text(text)
        self.run("gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", folder / "lib.c",
                 "-o", folder / soname)
        return folder

    def shared_object(self, objects: list[Path], *link: str) -> Path:
        output = self.root / "pkg" / "gatecheck" / "_gatecheck.abi3.so"
        output.parent.mkdir(parents=True, exist_ok=True)
        (output.parent / "__init__.py").write_text("")
        self.run("gcc", "-shared", "-o", output, *objects, "-Wl,--no-as-needed",
                 f"-L{self.cuda / 'lib'}",
                 "-L" + str(self.root / "libs"), *link)
        return output

    def wheel(self, tag: str, version: str = VERSION, torch: str = "torch==2.11.*") -> Path:
        metadata = CoreMetadata("gatecheck", version, "gate fixture", ">=3.9", (torch,),
                                "MIT", None)
        return write_wheel(self.root / "pkg", self.root / "dist", metadata, tag, False, EPOCH)

    def repaired(self, *excludes: str) -> Path:
        """The real auditwheel repair of the draft wheel, as the factory runs it or, with no
        excludes, as a careless build would."""
        draft = self.wheel("cp39-abi3-linux_x86_64")
        if excludes:
            with open(self.root / "repair.log", "w") as handle:
                return repair(draft, self.root / "wheelhouse", Log(handle))
        house = self.root / "careless"
        self.run(sys.executable, "-m", "auditwheel", "repair", "--plat", "auto", "-w", house,
                 draft, env={"LD_LIBRARY_PATH": f"{self.root / 'libs'}:{self.cuda / 'lib'}",
                             "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
        return next(house.glob("*.whl"))


@pytest.fixture(scope="session")
def cuda_home(factory_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_file = tmp_path_factory.mktemp("cuda-log") / "log"
    with open(log_file, "w") as handle:
        toolkit = provide_cuda(Version("13.0"), None, factory_cache, Log(handle))
    return toolkit.home


@pytest.fixture
def builder(tmp_path: Path, cuda_home: Path) -> Builder:
    return Builder(tmp_path, cuda_home)


def good_objects(builder: Builder) -> list[Path]:
    return [builder.c_object("ext", EXTENSION), builder.cuda_object("kernel", [80, 90], 90)]


def test_a_sound_wheel_passes_every_gate(builder: Builder) -> None:
    builder.shared_object(good_objects(builder), "-lcudart")
    wheel = builder.repaired("excludes")
    report = inspect_wheel(wheel)
    assert report.sass == ("sm_80", "sm_90") and report.ptx == ("compute_90",)
    assert report.shared_objects[0].needed[:1] == ("libcudart.so.13",)
    assert check_wheel(report, EXPECT) == []


def test_a_missing_sm_is_caught(builder: Builder) -> None:
    objects = [builder.c_object("ext", EXTENSION), builder.cuda_object("kernel", [90], 90)]
    builder.shared_object(objects, "-lcudart")
    problems = check_wheel(inspect_wheel(builder.repaired("excludes")), EXPECT)
    assert problems == ["GPU code: no SASS for sm_80, which the cell promises (those GPUs "
                        "would fail with 'no kernel image is available')"]


def test_ptx_for_an_older_sm_is_caught(builder: Builder) -> None:
    objects = [builder.c_object("ext", EXTENSION), builder.cuda_object("kernel", [80, 90], 80)]
    builder.shared_object(objects, "-lcudart")
    problems = check_wheel(inspect_wheel(builder.repaired("excludes")), EXPECT)
    assert problems == [
        "GPU code: no PTX for compute_90",
        "GPU code: compute_80 not planned for this cell (PTX belongs only to the newest SM)"]


def test_a_project_with_its_own_arch_list_must_cover_the_cells_sms(builder: Builder) -> None:
    """A PEP 517 project's wheel may hold more GPU code than the cell's (its setup.py's own
    -gencode list), but every shared object with GPU code needs SASS for each SM of the cell."""
    covers = replace(EXPECT, gpu_code=frozenset({"sm_90"}), gpu_covers=True)
    objects = [builder.c_object("ext", EXTENSION), builder.cuda_object("kernel", [80, 90], 80)]
    builder.shared_object(objects, "-lcudart")
    report = inspect_wheel(builder.repaired("excludes"))
    assert check_wheel(report, covers) == []
    problems = check_wheel(report, replace(covers, gpu_code=frozenset({"sm_90", "sm_100"})))
    assert problems == ["GPU code: gatecheck/_gatecheck.abi3.so has no SASS for sm_100 (it holds "
                        "sm_80 sm_90 compute_80); those GPUs would fail with 'no kernel image is "
                        "available'"]


def test_a_bundled_libc10_is_caught(builder: Builder) -> None:
    builder.library("libc10.so")
    builder.shared_object(good_objects(builder), "-lcudart", "-lc10")
    wheel = builder.repaired()  # no excludes: auditwheel grafts libc10.so (and libcudart)
    report = inspect_wheel(wheel)
    bundled = [name for name in report.files if "libc10" in name]
    assert bundled and bundled[0].startswith("gatecheck.libs/libc10-")
    problems = check_wheel(report, EXPECT)
    assert any(p.startswith(f"libraries: the wheel bundles {bundled[0]}, a copy of a library "
                            "torch provides") for p in problems), problems


def test_a_symbol_outside_the_limited_api_is_caught(builder: Builder) -> None:
    objects = [*good_objects(builder), builder.c_object("leak", NOT_LIMITED)]
    builder.shared_object(objects, "-lcudart")
    problems = check_wheel(inspect_wheel(builder.repaired("excludes")), EXPECT)
    assert len(problems) == 1 and problems[0].startswith(
        "abi3: gatecheck/_gatecheck.abi3.so "), problems
    assert "PyUnicode_AsUTF8" in problems[0]


def test_a_manylinux_tag_the_symbols_do_not_allow_is_caught(builder: Builder) -> None:
    objects = [*good_objects(builder), builder.c_object("threads", NEW_GLIBC)]
    builder.shared_object(objects, "-lcudart", "-lpthread")
    honest = inspect_wheel(builder.repaired("excludes"))
    assert honest.shared_objects[0].symbol_versions["GLIBC"] == "2.34"
    assert check_wheel(honest, EXPECT) == []
    lying = inspect_wheel(builder.wheel("cp39-abi3-manylinux_2_17_x86_64"))
    assert check_wheel(lying, EXPECT) == [
        "manylinux: the wheel is tagged manylinux_2_17_x86_64, but "
        f"gatecheck/_gatecheck.abi3.so needs manylinux_2_34 "
        f"({', '.join(f'{k}_{v}' for k, v in lying.shared_objects[0].symbol_versions.items())})"]


def test_libraries_nobody_provides_and_the_wrong_cuda_are_caught(builder: Builder) -> None:
    builder.library("libcudart.so.12")
    builder.library("libunknown.so.1")
    builder.shared_object(good_objects(builder), "-l:libcudart.so.12", "-l:libunknown.so.1")
    problems = check_wheel(inspect_wheel(builder.wheel("cp39-abi3-linux_x86_64")), EXPECT)
    assert problems == [
        "libraries: gatecheck/_gatecheck.abi3.so needs libcudart.so.12, but the cell is CUDA 13",
        "libraries: gatecheck/_gatecheck.abi3.so needs libunknown.so.1, which neither the "
        "system, nor torch, nor the wheel provides"]


def test_metadata_that_disagrees_is_caught(builder: Builder) -> None:
    builder.shared_object(good_objects(builder), "-lcudart")
    wheel = builder.wheel("cp39-abi3-linux_x86_64", torch="torch==2.12.*")
    renamed = wheel.with_name(wheel.name.replace("1.0.0", "1.0.1"))
    shutil.move(wheel, renamed)
    problems = check_wheel(inspect_wheel(renamed), EXPECT)
    assert problems == [
        f"the filename's version is 1.0.1+cu130torch211, the cell's is {VERSION}",
        f"METADATA's version {VERSION} differs from the filename's 1.0.1+cu130torch211",
        "the torch requirement is ==2.12.*, the cell's torch is torch==2.11.*"]


def test_a_tampered_file_is_caught_by_record(builder: Builder) -> None:
    builder.shared_object(good_objects(builder), "-lcudart")
    wheel = builder.wheel("cp39-abi3-linux_x86_64")
    tampered = wheel.with_name("tampered") / wheel.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(tampered, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info, b"# changed\n" if info.filename.endswith("__init__.py") else data)
    assert check_wheel(inspect_wheel(tampered), EXPECT) == [
        "RECORD's sha256 of gatecheck/__init__.py does not match its content"]


def test_inspect_exits_1_on_a_doctored_wheel_and_says_why(builder: Builder) -> None:
    objects = [builder.c_object("ext", EXTENSION), builder.cuda_object("kernel", [90], 90),
               builder.c_object("leak", NOT_LIMITED)]
    builder.shared_object(objects, "-lcudart")
    wheel = builder.repaired("excludes")
    result = run_factory("inspect", wheel)
    assert result.exit == 1, result.stdout + result.stderr
    assert "checks: 1 problem(s)" in result.stdout and "PyUnicode_AsUTF8" in result.stdout


def test_an_object_that_links_glibcs_loader_passes(builder: Builder) -> None:
    """gcc 13 on glibc 2.35 and newer links ld-linux-x86-64.so.2 itself (its unwinder calls
    _dl_find_object): the loader is glibc, there on every system, as auditwheel also holds."""
    loader = Path("/lib64/ld-linux-x86-64.so.2")
    builder.shared_object(good_objects(builder), "-lcudart", "-Wl,--no-as-needed", str(loader))
    report = inspect_wheel(builder.repaired("excludes"))
    assert "ld-linux-x86-64.so.2" in report.shared_objects[0].needed
    assert check_wheel(report, EXPECT) == []


def test_an_object_with_its_own_copy_of_libstdcxx_is_caught(builder: Builder) -> None:
    """A compiler wrapper that adds -static-libstdc++ (seen on a GPU machine) gives an object
    whose ops work until torch throws through it: then the process crashes."""
    (builder.root / "throws.cpp").write_text(
        '#include <stdexcept>\nextern "C" int check(int x) {\n'
        '  try { if (x < 0) throw std::runtime_error("negative"); } catch (...) { return 1; }\n'
        '  return 0;\n}\n')
    builder.run("g++", "-c", "-fPIC", "throws.cpp", "-o", "throws.o")
    objects = [*good_objects(builder), builder.root / "throws.o"]
    builder.shared_object(objects, "-lcudart", "-Wl,-Bstatic", "-lstdc++", "-Wl,-Bdynamic")
    report = inspect_wheel(builder.repaired("excludes"))
    assert report.shared_objects[0].own_cxx_runtime
    assert check_wheel(report, EXPECT) == [
        "libraries: gatecheck/_gatecheck.abi3.so carries its own copy of libstdc++ (linked "
        "statically, e.g. by a compiler wrapper's -static-libstdc++): a C++ exception torch "
        "throws through it crashes the process; link libstdc++.so.6 as torch does"]
    # with the provenance's toolchain, the gate names the compiler that linked it
    record = Provenance("0.1.0", KernelFacts("gatecheck", "1.0.0", "_gatecheck", "0" * 64),
                        SourceFacts("path", "/src/gatecheck", "0" * 64), {"id": "cu130"},
                        {"cxx": "/opt/wrap/c++ 13.2.0", "cxx_from": "$CXX"},
                        BuildFacts("/tmp/kernel-wheel-factory/build", 0, "1970-01-01T00:00:00Z"))
    named = replace(report, wheel=replace(report.wheel, provenance=record.to_json()))
    (problem,) = check_wheel(named, EXPECT)
    assert problem.endswith("link libstdc++.so.6 as torch does (it was linked by /opt/wrap/c++ "
                            "13.2.0 from $CXX; set CXX to a compiler that links "
                            "libstdc++.so.6, e.g. CXX=/usr/bin/g++)")


TORCH_CALLS = """
extern "C" int aoti_torch_get_numel(void *tensor, long *numel);
namespace c10 { namespace detail {
void torchCheckFail(const char *func, const char *file, unsigned line, const char *message);
} }
namespace torch { namespace stable { void kwf_entry(int value); } }
extern "C" void use_torch(void *tensor, long *numel) {
  aoti_torch_get_numel(tensor, numel);
  torch::stable::kwf_entry(1);
#ifdef UNSTABLE
  c10::detail::torchCheckFail("use_torch", "gate.cpp", 7, "numel");
#endif
}
"""


@pytest.mark.parametrize("unstable", [False, True])
def test_a_stable_abi_kernel_may_call_only_the_stable_abi(builder: Builder, unstable: bool) -> None:
    """The C shim and torch::stable pass; a call into c10:: fails a kernel that declares the
    stable ABI, with the symbol named (and is no concern of a kernel that does not)."""
    (builder.root / "calls.cpp").write_text(TORCH_CALLS)
    builder.run("g++", "-c", "-fPIC", *(["-DUNSTABLE"] if unstable else []), "calls.cpp",
                "-o", "calls.o")
    builder.shared_object([builder.c_object("ext", EXTENSION), builder.root / "calls.o"])
    report = inspect_wheel(builder.wheel("cp39-abi3-linux_x86_64"))
    (so,) = report.shared_objects
    found = ("c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",)
    assert so.torch_cxx == (found if unstable else ())
    problems = [p for p in check_wheel(report, replace(EXPECT, stable_abi="2.10"))
                if p.startswith("stable ABI:")]
    assert problems == ([f"stable ABI: the kernel declares torch's stable ABI 2.10, but "
                         f"gatecheck/_gatecheck.abi3.so calls 1 symbol(s) of torch's C++ "
                         f"outside it: {found[0]}; another torch may not have them (use the "
                         "C shim, torch::stable and torch::headeronly)"] if unstable else [])
    assert not [p for p in check_wheel(report, EXPECT) if p.startswith("stable ABI:")]


@pytest.mark.parametrize("mode", ["none", "size", "balance", "speed"])
def test_compressed_gpu_code_reads_as_cuobjdump_lists_it(builder: Builder, cuobjdump: Path,
                                                         mode: CompressMode) -> None:
    """In every compression mode the factory uses, the gates see exactly the SASS and PTX that
    cuobjdump lists, per SM, and the bytes each takes once inflated are the bytes cuobjdump
    extracts (PTX keeps its terminating zero in the fatbin, padded to 8 bytes when stored as
    it is)."""
    flags = compression_flags(mode, Version("13.0"))
    kernel = builder.cuda_object("kernel", [80, 90, 100], 100, *flags)
    builder.shared_object([builder.c_object("ext", EXTENSION), kernel], "-lcudart")
    shared = builder.root / "pkg" / "gatecheck" / "_gatecheck.abi3.so"
    sizes = {str(entry): size for entry, size in fatbin_sizes(shared).items()}
    extracted = listed_by_cuobjdump(cuobjdump, shared, builder.root / "extracted")
    assert sorted(sizes) == sorted(extracted) == ["compute_100", "sm_100", "sm_80", "sm_90"]
    for code, size in sizes.items():
        extra = size.inflated - extracted[code]
        assert (0 < extra <= 8) if code.startswith("compute") else extra == 0, (code, extra)
        assert size.compressed == (mode != "none"), (code, mode)
        assert (size.stored < size.inflated) == (mode != "none"), (code, mode)
    report = inspect_wheel(builder.wheel("cp39-abi3-linux_x86_64"))
    assert report.sass == ("sm_80", "sm_90", "sm_100") and report.ptx == ("compute_100",)
