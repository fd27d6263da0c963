"""Kernels and matrices written on the fly, and their plans."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import cast

from factory.cells.kinds import kind_of
from factory.config.buildtoml import read_build_toml
from factory.config.matrix import load_matrix
from factory.defaults import host_platform
from factory.plan.cells import make_plan
from factory.plan.model import Kernel, Plan
from factory.sources.facts import read_facts
from factory.sources.tree import SourceTree, resolve_path_source, scan_tree
from factory.toolchain import Toolchain
from factory.toolchain.cuda import CudaToolkit
from factory.toolchain.torch import TorchEnv
from factory.values.versions import Version

from .factory import EXAMPLE, FIXTURES, REPO, make_kernel, one_cell_matrix, write

KERNEL = """
[general]
name = "{name}"
version = 1
license = "MIT"
backends = {backends}

[torch]
src = ["b.cpp"]
{torch_bounds}

[kernel.main]
backend = "cuda"
depends = ["torch"]
src = ["k.cu"]
{caps}

[general.cuda]
{cuda_bounds}
"""


def kernel(tmp_path: Path, name: str = "demo", backends: str = '["cuda"]',
           torch_bounds: str = "", caps: str = "", cuda_bounds: str = "") -> Path:
    text = KERNEL.format(name=name, backends=backends, torch_bounds=torch_bounds, caps=caps,
                         cuda_bounds=cuda_bounds)
    return make_kernel(tmp_path / name, text, {"b.cpp": "", "k.cu": ""},
                       package=name.replace("-", "_"))


def plan_for(tmp_path: Path, matrix_text: str, host: str | None = "this machine") -> Plan:
    """The plan of the matrix `matrix_text` on a machine of platform `host` (default: this
    one's; None: a CI plan)."""
    path = write(tmp_path / "matrix.yaml", matrix_text)
    matrix = load_matrix(path)
    kernels = []
    for entry in matrix.kernels:  # path: kernels, each read as the loader reads it
        folder = cast(Path, entry.source.folder)
        spec = read_build_toml(folder)
        kernels.append(Kernel(entry, resolve_path_source(folder), spec, cast(str, entry.version),
                              read_facts(spec), kind_of(spec)))
    return make_plan(matrix, kernels, host_platform() if host == "this machine" else host)


def plan_of(tmp_path: Path, matrix_text: str, host: str | None = "this machine") -> Plan:
    """plan_for's plan, its path kernels read as folders outside any git work tree (no program
    starts: what the pure tests plan with)."""
    path = write(tmp_path / "matrix.yaml", matrix_text)
    matrix = load_matrix(path)
    kernels = []
    for entry in matrix.kernels:
        folder = cast(Path, entry.source.folder)
        spec = read_build_toml(folder)
        kernels.append(Kernel(entry, folder_tree(folder), spec, cast(str, entry.version),
                              read_facts(spec), kind_of(spec)))
    return make_plan(matrix, kernels, host_platform() if host == "this machine" else host)


def folder_tree(folder: Path) -> SourceTree:
    """A kernel folder as a path source outside any git work tree: named by its folder."""
    digest, newest = scan_tree(folder)
    return SourceTree(folder, digest, "path", folder.name, newest)


def demo_plan(tmp_path: Path) -> Plan:
    """The plan of one cell (torch 2.11, CUDA 13.0, sm_90) of a demo kernel made in tmp_path."""
    kernel(tmp_path)
    return plan_for(tmp_path, """
        kernels: [{path: demo, version: 1.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)


def twelve_cells(folder: Path) -> Path:
    """Two kernels x three torch releases x two platforms."""
    shutil.copytree(EXAMPLE, folder / "img2gray")
    shutil.copytree(FIXTURES / "multikernel", folder / "multikernel")
    return write(folder / "matrix.yaml", """
        kernels:
          - path: img2gray
            version: 1.0.0
          - path: multikernel
            version: 2.0.0
        torch: ["2.11", "2.12", "2.13"]
        cuda:
          "13.0":
            sms: ["8.0", "9.0"]
        platforms: [x86_64, aarch64]
        """)


TOOLCHAIN = Toolchain(
    CudaToolkit(Version("13.0.88"), Path("/cache/cuda/13.0/nvidia/cu13"), "pypi",
                Path("/cache/cuda/13.0/nvidia/cu13/lib")),
    TorchEnv(Path("/cache/envs/t"), Path("/cache/envs/t/bin/python"),
             Path("/cache/envs/t/lib/python3.11/site-packages"), "2.11.0+cu130",
             Version("13.0"), True, Path("/usr/include/python3.11"), (),
             ("USE_C10D_NCCL", "USE_DISTRIBUTED")),
    "g++", "17")


FIXTURE = REPO / "tests" / "fixtures" / "cutlass-kernel"


def matrix_with(tmp_path: Path, depends: str) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "cutlass-kernel", dirs_exist_ok=True)
    return write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: cutlass-kernel, version: 1.0.0}}]
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        {depends}
    """)


NGC = "2.5.0a0+e000cf0ad9.nv24.10"


MATRIX = f"""
kernels:
  - {{path: {FIXTURES / "multikernel"}, version: 1.2.0}}
  - {{path: {FIXTURES / "noarch-kernel"}, version: 2.0.0}}
torch: ["2.11", "2.12"]
cuda:
  "13.0": {{sms: ["8.0", "8.6", "9.0", "10.0"], ptx: false}}
label: "cu{{cuda}}pt{{torch}}"
"""


def starter_kernel(tmp_path: Path, name: str = "blend", torch: str = "", capabilities: str = "",
                   backends: str = '["cuda"]') -> Path:
    text = CUDA_KERNEL.format(name=name, torch=torch, capabilities=capabilities)
    return make_kernel(tmp_path / name, text.replace('backends = ["cuda"]',
                                                     f"backends = {backends}"),
                       {"torch-ext/torch_binding.cpp": "", f"csrc/{name}.cu": ""}, name)


def setup_py_project(root: Path, limited: str = "", pyproject: str | None = None) -> Path:
    write(root / "setup.py", SETUP.format(limited=limited))
    if pyproject is not None:
        write(root / "pyproject.toml", pyproject)
    return root


def many_units_project(folder: Path) -> Path:
    """A copy of the fixture and a matrix that builds it for one cell."""
    shutil.copytree(FIXTURES / "many-units", folder / "many-units")
    return one_cell_matrix(folder, "many-units")


CUDA_KERNEL = """
    [general]
    name = "{name}"
    backends = ["cuda"]

    [torch]
    src = ["torch-ext/torch_binding.cpp"]
    {torch}

    [kernel.{name}]
    backend = "cuda"
    depends = ["torch"]
    src = ["csrc/{name}.cu"]
    {capabilities}
"""


SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

PACKAGE_NAME = "fused_op"

setup(name=PACKAGE_NAME, version=get_version(), ext_modules=[CUDAExtension("fused_op._C",
      ["csrc/op.cu"]{limited})], cmdclass={{"build_ext": BuildExtension}})
"""
