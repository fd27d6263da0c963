"""The newest torch in a builder container: the shipped matrix (the release matrix.lock pins)
built with `--runner docker` on the offline base that can compile it (bookworm, g++ 12), and a
torch whose headers need C++20 turned away, before anything is made for it, on the base that
cannot (bullseye, g++ 10). The compiler probe itself, on this machine's g++."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from factory.toolchain import CommandPrefix
from factory.toolchain.standard import probe_standard

from ..support.docker import BASE
from ..support.factory import (
    EXAMPLE,
    REPO,
    Result,
    cache_env,
    root_label,
    run_factory,
    write,
)
from ..support.installs import read_dist_info


def test_the_probe_reads_the_standard_this_machines_compiler_gives() -> None:
    here = CommandPrefix()
    compiler = shutil.which("g++")
    assert compiler is not None
    for std, value in (("17", 201703), ("20", 202002)):  # Debian bookworm's g++ 12
        said = probe_standard(compiler, std, lambda argv: here.argv(argv, Path("/")))
        assert said.cplusplus == value and re.fullmatch(r"\d+\.\d+\.\d+", said.version), said
    refused = probe_standard(compiler, "47", lambda argv: here.argv(argv, Path("/")))
    assert refused.cplusplus is None and "-std=c++47" in refused.error, refused


def built_in(folder: Path, cell: str, env: dict[str, str]) -> tuple[Result, str]:
    """`factory build` of the matrix in `folder`, which must end well: what it said, and the
    log of the cell whose log is named `cell`."""
    out = folder / "index"
    result = run_factory("build", "matrix.yaml", "--out", out, cwd=folder, env=env)
    assert result.exit == 0, result.stdout + result.stderr
    return result, (out / "logs" / f"{cell}.log").read_text()


def test_a_host_compiler_short_of_the_standard_skips_the_cell_before_its_torch_is_made(
        tmp_path: Path, factory_cache: Path) -> None:
    """$CXX is this machine's g++ held to C++17 whatever standard it is asked for, as an older
    compiler would be: the torch 2.15 cell is skipped with what it gave, and no torch
    environment is made for it."""
    held = write(tmp_path / "bin" / "g++-cxx17", """
        #!/bin/sh
        for arg do
            shift
            case "$arg" in -std=c++*) arg=-std=c++17 ;; esac
            set -- "$@" "$arg"
        done
        exec g++ "$@"
    """)
    held.chmod(0o755)
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}, version: 1.0.0}}
        torch: ["2.15"]
        cuda:
          "13.2":
            sms: ["9.0"]
        runner: local
    """)
    result, log = built_in(tmp_path, "img2gray-cu132torch215-x86_64",
                           {**cache_env(factory_cache), "CXX": str(held)})
    assert "0 built, 0 unchanged, 0 failed, 1 skipped" in result.stdout, result.stdout
    assert re.search(
        r"SKIPPED: torch 2\.15's headers need C\+\+20 \(__cplusplus 202002L: g\+\+ 11 or "
        rf"newer\), and the host compiler {re.escape(str(held))} \d+\.\d+\.\d+ \(from \$CXX\) "
        r"sets __cplusplus to 201703L for -std=c\+\+20: set CXX to a compiler that does "
        r"\(g\+\+ 11 or newer\)", log), log[-3000:]
    assert "making the environment" not in log and "==> toolchain:" not in log


def root_matrix_on(folder: Path, base: str) -> Path:
    """README's matrix and its lock, the example named by its absolute path, built on `base`."""
    matrix = (REPO / "matrix.yaml").read_text().replace("path: examples/img2gray",
                                                        f"path: {EXAMPLE}")
    lock = (REPO / "matrix.lock").read_text().replace('location = "examples/img2gray"',
                                                      f'location = "{EXAMPLE}"')
    write(folder / "matrix.lock", lock)
    return write(folder / "matrix.yaml", f"{matrix}\ndocker:\n  base: {base}\n")


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.root
@pytest.mark.network
def test_the_shipped_matrix_builds_in_a_container_on_the_newest_offline_base(
        tmp_path: Path, factory_cache: Path, bookworm_base: str) -> None:
    (torch,) = tomllib.loads((REPO / "matrix.lock").read_text())["torch"]
    label = root_label()
    matrix = root_matrix_on(tmp_path, bookworm_base)
    out = tmp_path / "index"
    result = run_factory("build", matrix, "--locked", "--runner", "docker", "--out", out,
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    assert f"img2gray/{label}/x86_64: built" in result.stdout, result.stdout
    (wheel,) = (out / "files").glob("*.whl")
    tag = re.fullmatch(rf"img2gray-1\.0\.0\+{label}-cp39-abi3-manylinux_(\d+)_(\d+)_x86_64\.whl",
                       wheel.name)
    assert tag, wheel.name
    assert (int(tag[1]), int(tag[2])) <= (2, 36)  # bookworm's glibc at most
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["build"]["builder"].startswith(
        f"kernel-wheel-factory/builder-cu{torch['cuda']}-x86_64:")
    assert provenance["toolchain"]["cxx"].startswith("g++ 12.")  # bookworm's, not the host's
    assert provenance["toolchain"]["nvcc"].startswith(f"{torch['cuda']}.")
    log = (out / "logs" / f"img2gray-{label}-x86_64.log").read_text()
    assert f"imported img2gray with torch {torch['version']}+cu" in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.root
@pytest.mark.network
def test_a_torch_the_bases_compiler_cannot_build_is_skipped_before_anything_is_made(
        tmp_path: Path, factory_cache: Path, bullseye_base: str) -> None:
    """torch 2.14 (CUDA 13.0, whose builder image the other bullseye tests share) on bullseye:
    the image's g++ 10 is asked, the cell is skipped with what it gave and what torch needs,
    and no torch environment is made for it."""
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {EXAMPLE}, version: 1.0.0}}
        torch: ["2.11", "2.14"]
        cuda:
          "13.0":
            sms: ["9.0"]
        runner: docker
        docker:
          base: {bullseye_base}
    """)
    result, log = built_in(tmp_path, "img2gray-cu130torch214-x86_64", cache_env(factory_cache))
    assert "img2gray/cu130torch211/x86_64: built" in result.stdout, result.stdout
    assert "1 built, 0 unchanged, 0 failed, 1 skipped" in result.stdout, result.stdout
    assert re.search(
        r"SKIPPED: the builder image kernel-wheel-factory/builder-cu13\.0-x86_64:\S+ \(base "
        rf"{re.escape(BASE)}\) cannot build for torch 2\.14: torch 2\.14's headers need C\+\+20 "
        r"\(__cplusplus 202002L: g\+\+ 11 or newer\), and the host compiler g\+\+ 10\.2\.1 "
        r"\(from the PATH \(\$CXX unset\)\) sets __cplusplus to 201709L for -std=c\+\+20",
        log), log[-3000:]
    assert "preparing torch 2.14" not in log and "toolchain:" not in log
