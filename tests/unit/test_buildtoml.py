"""build.toml in all five dialects, and every kind of mistake reported at its file, line and key."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from factory.config.buildtoml import read_build_toml
from factory.errors import ConfigError
from factory.policy.capabilities import Capability

from ..support.checks import present

SOURCES = {"csrc/k.cu": "", "csrc/k.h": "", "torch-ext/torch_binding.cpp": ""}

V1 = """
[general]
name = "old-kernel"

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.activation]
cuda-capabilities = ["8.0", "9.0"]
depends = ["torch"]
src = ["csrc/k.cu", "csrc/k.h"]

[kernel.shaders]
language = "metal"
depends = ["torch"]
src = ["csrc/k.h"]
"""

V2 = """
[general]
name = "v2-kernel"
cuda-minver = "12.4"
python-depends = ["einops"]

[general.hub]
repo-id = "kernels-community/v2-kernel"

[torch]
src = ["torch-ext/torch_binding.cpp"]
minver = "2.5"
maxver = "2.12"

[kernel.k]
backend = "cuda"
depends = ["torch", "cutlass_3_8"]
src = ["csrc/k.cu"]
cuda-flags = ["-DFOO"]
cuda-minver = "12.8"
"""

V3 = """
[general]
name = "v3-kernel"
backends = ["cuda", "cpu"]

[general.cuda]
maxver = "13.0"
python-depends = ["nvidia-cutlass-dsl"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.k]
backend = "cuda"
depends = ["torch"]
src = ["csrc/k.cu"]

[kernel.k_cpu]
backend = "cpu"
depends = ["torch"]
src = ["csrc/k.h"]
cxx-flags = ["-O3"]
"""

V4 = """
[general]
name = "v4-kernel"
version = 2
license = "Apache-2.0"
backends = ["cuda", "rocm"]

[torch]
src = ["torch-ext/torch_binding.cpp"]
cxx-flags = ["-DBINDING"]
stable-abi = "2.10"

[kernel.k]
backend = "cuda"
depends = ["torch"]
include = ["csrc"]
src = ["csrc/k.cu"]
cuda-capabilities = ["8.0", "9.0a", "12.0+PTX"]

[kernel.k_rocm]
backend = "rocm"
depends = ["torch"]
rocm-archs = ["gfx942"]
src = ["csrc/k.cu"]
"""

V5 = """
[general]
name = "v5-kernel"
version = 1
edition = 5
license = "MIT"
backends = ["cuda", "metal"]
kernel-depends = [{ repo-id = "kernels-community/other", version = 1 }]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[torch.stable-abi]
cuda = "2.10"

[kernel.k]
backend = "cuda"
depends = ["torch"]
src = ["csrc/k.cu"]
"""


@pytest.mark.parametrize("text, dialect, name", [
    (V1, 1, "old-kernel"), (V2, 2, "v2-kernel"), (V3, 3, "v3-kernel"),
    (V4, 4, "v4-kernel"), (V5, 5, "v5-kernel"),
])
def test_each_dialect_is_recognised(kernel_factory: Callable[..., Path], text: Any, dialect: int,
                                    name: str) -> None:
    root = kernel_factory(text, SOURCES, package=name.replace("-", "_"))
    spec = read_build_toml(root)
    assert (spec.dialect, spec.name, spec.framework) == (dialect, name, "torch")
    assert present(spec.torch).src == ("torch-ext/torch_binding.cpp",)


def test_v1_languages_become_backends(kernel_factory: Callable[..., Path]) -> None:
    spec = read_build_toml(kernel_factory(V1, SOURCES, package="old_kernel"))
    assert [(k.name, k.backend) for k in spec.kernels] == [("activation", "cuda"),
                                                            ("shaders", "metal")]
    assert spec.backends == ("cuda", "metal")
    assert spec.kernels[0].cuda_capabilities == (Capability(8, 0), Capability(9, 0))


def test_v2_fields(kernel_factory: Callable[..., Path]) -> None:
    spec = read_build_toml(kernel_factory(V2, SOURCES, package="v2_kernel"))
    kernel = spec.kernels[0]
    assert spec.cuda_minver == Version("12.4") and spec.cuda_maxver is None
    assert spec.python_depends == ("einops",)
    torch = present(spec.torch)
    assert (torch.minver, torch.maxver) == (Version("2.5"), Version("2.12"))
    assert kernel.depends == ("torch", "cutlass_3_8")
    assert kernel.cuda_flags == ("-DFOO",) and kernel.cuda_minver == Version("12.8")
    assert kernel.cuda_capabilities is None


def test_v3_general_cuda_table(kernel_factory: Callable[..., Path]) -> None:
    spec = read_build_toml(kernel_factory(V3, SOURCES, package="v3_kernel"))
    assert spec.cuda_maxver == Version("13.0")
    assert spec.cuda_python_depends == ("nvidia-cutlass-dsl",)
    assert [k.name for k in spec.kernels_for("cuda")] == ["k"]
    assert spec.kernels_for("cpu")[0].cxx_flags == ("-O3",)


def test_v4_capabilities_and_stable_abi(kernel_factory: Callable[..., Path]) -> None:
    spec = read_build_toml(kernel_factory(V4, SOURCES, package="v4_kernel"))
    assert spec.major_version == 2 and spec.license == "Apache-2.0"
    assert [str(c) for c in present(spec.kernels_for("cuda")[0].cuda_capabilities)] == [
        "8.0", "9.0a", "12.0+PTX"]
    assert present(spec.torch).stable_abi_for("cuda") == Version("2.10")
    assert present(spec.torch).cxx_flags == ("-DBINDING",)
    assert spec.kernels_for("cuda")[0].include == ("csrc",)


def test_v5_per_backend_stable_abi(kernel_factory: Callable[..., Path]) -> None:
    spec = read_build_toml(kernel_factory(V5, SOURCES, package="v5_kernel"))
    assert present(spec.torch).stable_abi_for("cuda") == Version("2.10")
    assert present(spec.torch).stable_abi_for("metal") is None


def test_forms_older_real_repos_use(kernel_factory: Callable[..., Path]) -> None:
    # Underscores in the name (causal_conv1d, layer_norm) and the old name of sycl_tla.
    text = V3.replace('name = "v3-kernel"', 'name = "layer_norm"').replace(
        '[kernel.k_cpu]', '[kernel.k_xpu]\nbackend = "xpu"\ndepends = ["torch", "cutlass_sycl"]\n'
        'src = ["csrc/k.h"]\n\n[kernel.k_cpu]')
    spec = read_build_toml(kernel_factory(text, SOURCES, package="layer_norm"))
    assert (spec.name, spec.python_name, spec.dialect) == ("layer_norm", "layer_norm", 3)
    assert spec.kernels_for("xpu")[0].depends == ("torch", "cutlass_sycl")


def test_v2_torch_table_is_required_unless_universal(kernel_factory: Callable[..., Path]) -> None:
    message = error_of(kernel_factory('[general]\nname = "kk"\n\n[kernel.k]\nbackend = "cuda"\n'
                                      'depends = ["torch"]\nsrc = ["csrc/k.cu"]\n', SOURCES,
                                      package="kk"))
    assert "build.toml: missing required key 'torch' (only a universal kernel may leave it out)" \
        in message


@pytest.mark.parametrize("text", [
    # v1: [torch] universal
    '[general]\nname = "pure"\n\n[torch]\nuniversal = true\n',
    # v2: [general] universal, with or without a [torch] table
    '[general]\nname = "pure"\nuniversal = true\n\n[torch]\n',
    '[general]\nname = "pure"\nuniversal = true\n',
    # v3: no framework section at all
    '[general]\nname = "pure"\nbackends = ["cuda"]\n',
    # v4: [torch-noarch]
    '[general]\nname = "pure"\nversion = 1\nlicense = "MIT"\nbackends = ["cuda"]\n\n'
    '[torch-noarch]\npyext = ["py", "json"]\n\n[kernel]\n',
])
def test_pure_python_kernels_in_every_dialect(kernel_factory: Callable[..., Path],
                                              text: str) -> None:
    spec = read_build_toml(kernel_factory(text, package="pure"))
    assert spec.kind == "noarch" and spec.kernels == ()


def test_unknown_capability_is_a_located_warning(kernel_factory: Callable[..., Path]) -> None:
    text = V4.replace('"12.0+PTX"', '"12.0+PTX",\n    "11.8",')
    spec = read_build_toml(kernel_factory(text, SOURCES, package="v4_kernel"))
    assert len(spec.warnings) == 1
    assert "build.toml:18: kernel.k.cuda-capabilities[3]: '11.8' is not a known" in spec.warnings[0]


def error_of(root: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        read_build_toml(root)
    message = caught.value.render()
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text, files, expected", [
    (V4.replace('license = "Apache-2.0"', 'licence = "Apache-2.0"'), SOURCES,
     "build.toml:4: general.licence: unknown key (did you mean 'license'?)"),
    (V4.replace('cuda-capabilities', 'cuda-capabilites'), SOURCES,
     "build.toml:17: kernel.k.cuda-capabilites: unknown key (did you mean 'cuda-capabilities'?)"),
    (V4.replace('src = ["csrc/k.cu"]\ncuda', 'src = "csrc/k.cu"\ncuda'), SOURCES,
     "build.toml:16: kernel.k.src: expected a list, got a string 'csrc/k.cu'"),
    (V4.replace('version = 2', 'version = "2"'), SOURCES,
     "build.toml:3: general.version: expected an integer, got a string '2'"),
    (V4.replace('depends = ["torch"]\ninclude', 'include'), SOURCES,
     "build.toml:12: kernel.k: missing required key 'depends'"),
    (V4, {"csrc/k.h": "", "torch-ext/torch_binding.cpp": ""},
     "build.toml:16: kernel.k.src[0]: file 'csrc/k.cu' does not exist"),
    (V4.replace('src = ["csrc/k.cu"]\ncuda', 'src = ["../outside.cu"]\ncuda'), SOURCES,
     "build.toml:16: kernel.k.src[0]: '../outside.cu' must be a path inside the kernel repo"),
    (V4.replace('"9.0a"', '"9.x"'), SOURCES,
     "build.toml:17: kernel.k.cuda-capabilities[1]: '9.x' is not a compute capability"),
    (V4.replace('stable-abi = "2.10"', 'stable-abi = "two"'), SOURCES,
     "build.toml:10: torch.stable-abi: 'two' is not a version"),
    (V5.replace("edition = 5", "edition = 6"), SOURCES,
     "build.toml:4: general.edition: unsupported edition 6"),
    (V4.replace('name = "v4-kernel"', 'name = "V4_Kernel"'), SOURCES,
     "build.toml:2: general.name: invalid kernel name 'V4_Kernel'"),
    (V4.replace('backends = ["cuda", "rocm"]', 'backends = ["cuda", "opencl"]'), SOURCES,
     "build.toml:5: general.backends[1]: unknown backend 'opencl'"),
    (V4.replace('depends = ["torch"]\ninclude', 'depends = ["torch", "boost"]\ninclude'),
     SOURCES, "build.toml:14: kernel.k.depends[1]: unknown dependency 'boost'"),
    (V2.replace('python-depends = ["einops"]', 'python-depends = ["numpy"]'), SOURCES,
     "build.toml:4: general.python-depends[0]: unknown Python dependency 'numpy'"),
    (V4 + '\n[torch-noarch]\n', SOURCES,
     "build.toml:25: torch-noarch: only one framework section may be given"),
    (V4.replace('[torch]\n', '[torch\n'), SOURCES, "build.toml:7: invalid TOML"),
    (V4.replace('include = ["csrc"]', 'include = ["missing"]'), SOURCES,
     "build.toml:15: kernel.k.include[0]: folder 'missing' does not exist"),
])
def test_errors_name_file_line_and_key(kernel_factory: Callable[..., Path], text: Any, files: Any,
                                       expected: str) -> None:
    assert expected in error_of(kernel_factory(text, files, package="v4_kernel"))


def test_missing_python_package(kernel_factory: Callable[..., Path]) -> None:
    message = error_of(kernel_factory(V4, SOURCES))
    assert "build.toml:2: general.name: the Python package is missing: expected " \
           "torch-ext/v4_kernel/__init__.py" in message


def test_missing_build_toml(tmp_path: Path) -> None:
    (tmp_path / "k").mkdir()
    assert "build.toml: file not found" in error_of(tmp_path / "k")


def test_src_through_a_symlink_out_of_the_repo(kernel_factory: Callable[..., Path],
                                               tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.cu").write_text("")
    root = kernel_factory(V4, {"torch-ext/torch_binding.cpp": ""}, package="v4_kernel")
    (root / "csrc").mkdir()
    (root / "csrc" / "k.cu").symlink_to(outside / "k.cu")
    assert "kernel.k.src[0]: 'csrc/k.cu' leads outside the kernel repo" in error_of(root)


def test_file_fitting_no_dialect_reports_the_likely_one(
        kernel_factory: Callable[..., Path]) -> None:
    # No backends, untagged kernels: meant as v1, where `cuda-flags` does not exist.
    text = V1.replace('cuda-capabilities = ["8.0", "9.0"]', 'cuda-flags = ["-O3"]')
    message = error_of(kernel_factory(text, SOURCES, package="old_kernel"))
    assert "kernel.activation.cuda-flags: unknown key" in message


@pytest.mark.parametrize("flake, expected", [
    ("pythonCheckInputs = pkgs: with pkgs; [ einops ];", ("einops",)),
    ("pythonCheckInputs =\n  ps: with ps; [\n    einops\n    huggingface-hub\n  ];",
     ("einops", "huggingface-hub")),
    ("pythonCheckInputs = ps: [ ps.einops ps.py-cpuinfo ];", ("einops", "py-cpuinfo")),
    ("# pythonCheckInputs = ps: [ ps.rich ];\npythonCheckInputs = ps: [ ps.numpy ];",
     ("numpy",)),
    ("/* pythonCheckInputs = ps: [ ps.rich ]; */ path = ./.;", ()),
    ("pythonCheckInputs = ps: [ ps.einops ps.einops (ps.callPackage ./x.nix {}) ];",
     ("einops",)),
    ("inherit self; path = ./.;", ()),
])
def test_what_flake_nix_gives_the_tests_is_read(kernel_factory: Callable[..., Path], flake: str,
                                                expected: tuple[()] | tuple[str, ...]) -> None:
    """kernel-builder repos name what their tests need besides torch in flake.nix
    (pythonCheckInputs: einops for flash-attention); the factory installs it beside pytest."""
    root = kernel_factory(V5, {"csrc/k.cu": "", "torch-ext/torch_binding.cpp": ""},
                          package="v5_kernel")
    (root / "flake.nix").write_text("{ outputs = { self }: {\n" + flake + "\n}; }\n")
    assert read_build_toml(root).test_requires == expected


def test_a_flake_nix_that_is_no_file_or_too_big_names_nothing(
        kernel_factory: Callable[..., Path]) -> None:
    root = kernel_factory(V5, {"csrc/k.cu": "", "torch-ext/torch_binding.cpp": ""},
                          package="v5_kernel")
    os.mkfifo(root / "flake.nix")  # a read would block forever
    assert read_build_toml(root).test_requires == ()
    (root / "flake.nix").unlink()
    (root / "flake.nix").write_text("pythonCheckInputs = ps: [ ps.einops ];" + " " * (1 << 20))
    assert read_build_toml(root).test_requires == ()
