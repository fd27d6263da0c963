"""C++ dependencies (build.toml `depends = ["cutlass_X_Y"]`): matrix.yaml's origins, fetching
from git repositories and folders, the lock, and real builds against CUTLASS from PyPI and from
a git repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from factory.config.matrix import load_matrix
from factory.config.model import DependencyEntry
from factory.errors import ConfigError
from factory.pipeline.load import plan_matrix
from factory.policy import dependency_release
from factory.sources.depends import DependencyFetcher

from ..support.checks import present
from ..support.factory import cache_env, factory_main, run_factory, write
from ..support.installs import new_torch_venv, pip_install, venv_python
from ..support.plans import FIXTURE, matrix_with

GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **GIT}, check=True)
    return done.stdout.strip()


def header_repo(root: Path, major: int, minor: int, tag: str) -> str:
    """A git repository with CUTLASS's layout (version.h in include/, a header in
    tools/util/include/), tagged; its commit."""
    write(root / "include" / "cutlass" / "version.h",
          f"#pragma once\n#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n")
    write(root / "tools" / "util" / "include" / "cutlass" / "util" / "debug.h", "#pragma once\n")
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", f"headers {major}.{minor}")
    git(root, "tag", "-f", tag)
    return git(root, "rev-parse", "HEAD")


def test_matrix_origins(tmp_path: Path) -> None:
    repo = tmp_path / "mirror"
    header_repo(repo, 4, 0, "v4.0.0")
    (tmp_path / "headers").mkdir()
    write(tmp_path / "cutlass.whl", "")
    path = matrix_with(tmp_path, """
        depends:
          cutlass_4_0: {git: mirror, rev: v4.0.0}
          cutlass_3_9: {path: headers}
          cutlass_3_5: {wheel: cutlass.whl}
          cutlass_3_8: {pypi: true}
          cutlass_4_5: {git: "https://example.org/cutlass.git"}
    """)
    depends = {entry.name: entry for entry in load_matrix(path).depends}
    assert depends["cutlass_4_0"] == DependencyEntry("cutlass_4_0", "git", "mirror", "v4.0.0",
                                                     repo.resolve(), 6)
    assert depends["cutlass_3_9"].folder == (tmp_path / "headers").resolve()
    assert depends["cutlass_3_5"].kind == "wheel"
    assert depends["cutlass_3_8"].location == "nvidia-cutlass"
    assert depends["cutlass_4_5"].folder is None and depends["cutlass_4_5"].rev is None


# ---- fetching -----------------------------------------------------------------------------------

def test_a_git_origin_gives_the_commit_and_both_header_folders(tmp_path: Path) -> None:
    commit = header_repo(tmp_path / "mirror", 4, 0, "v4.0.0")
    fetcher = DependencyFetcher(tmp_path / "cache")
    entry = DependencyEntry("cutlass_4_0", "git", "mirror", None, tmp_path / "mirror")
    found = fetcher.fetch("cutlass_4_0", entry)
    assert (found.kind, found.revision, found.requested) == ("git", commit, "v4.0.0")
    assert [sorted(p.name for p in folder.rglob("*.h")) for folder in found.folders] == [
        ["version.h"], ["debug.h"]]
    assert all(folder.is_relative_to(tmp_path / "cache") for folder in found.folders)
    again = fetcher.again(found.record(), tmp_path)
    assert again.folders == found.folders


def test_a_folder_origin_is_named_by_its_content(tmp_path: Path) -> None:
    header_repo(tmp_path / "headers", 3, 9, "v3.9.2")
    entry = DependencyEntry("cutlass_3_9", "path", "headers", None, tmp_path / "headers")
    fetcher = DependencyFetcher(tmp_path / "cache")
    first = fetcher.fetch("cutlass_3_9", entry)
    assert first.folders == (tmp_path / "headers/include", tmp_path / "headers/tools/util/include")
    write(tmp_path / "headers" / "include" / "cutlass" / "extra.h", "")
    assert fetcher.fetch("cutlass_3_9", entry).revision != first.revision
    with pytest.raises(ConfigError, match="no tools/util/include/ folder"):
        shutil.rmtree(tmp_path / "headers" / "tools")
        fetcher.fetch("cutlass_3_9", entry)


def test_a_link_out_of_a_dependency_folder_is_refused(tmp_path: Path) -> None:
    header_repo(tmp_path / "headers", 3, 9, "v3.9.2")
    (tmp_path / "headers" / "include" / "secret.h").symlink_to("/etc/passwd")
    entry = DependencyEntry("cutlass_3_9", "path", "headers", None, tmp_path / "headers")
    with pytest.raises(ConfigError, match="leads outside"):
        DependencyFetcher(tmp_path / "cache").fetch("cutlass_3_9", entry)


def test_the_lock_pins_a_git_dependency_and_locked_plans_keep_its_commit(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    commit = header_repo(tmp_path / "mirror", 4, 0, "v4.0.0")
    shutil.copytree(FIXTURE, tmp_path / "cutlass-kernel")
    build_toml = tmp_path / "cutlass-kernel" / "build.toml"
    build_toml.write_text(build_toml.read_text().replace("cutlass_3_8", "cutlass_4_0"))
    path = write(tmp_path / "matrix.yaml", """
        kernels: [{path: cutlass-kernel, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
        depends:
          cutlass_4_0: {git: mirror}
    """)
    cache = tmp_path / "cache"
    assert factory_main("lock", path, "--cache-dir", cache, capsys=capsys).exit == 0
    lock = (tmp_path / "matrix.lock").read_text()
    assert f'[[dependency]]\nname = "cutlass_4_0"\nkind = "git"\nlocation = "mirror"\n' \
           f'requested = "v4.0.0"\nrevision = "{commit}"\n' in lock
    plan = factory_main("plan", path, "--locked", "--cache-dir", cache, capsys=capsys)
    assert plan.exit == 0, plan.stderr
    write(tmp_path / "mirror" / "include" / "cutlass" / "version.h", "#define CUTLASS_MAJOR 9\n")
    git(tmp_path / "mirror", "commit", "--quiet", "-am", "moved")
    git(tmp_path / "mirror", "tag", "-f", "v4.0.0")
    # --locked takes the pinned commit, whatever the tag names now.
    (cell,) = plan_matrix(load_matrix(path), cache, lambda text: None, locked=True).cells
    assert [d.revision for d in cell.depends] == [commit]
    (cell,) = plan_matrix(load_matrix(path), cache, lambda text: None).cells
    assert [d.revision for d in cell.depends] == [git(tmp_path / "mirror", "rev-parse", "HEAD")]
    unlocked = factory_main("plan", path, "--cache-dir", cache, capsys=capsys)
    assert unlocked.exit == 0 and "matrix.lock pins cutlass_4_0 at" in unlocked.stderr + \
        unlocked.stdout


# ---- real builds --------------------------------------------------------------------------------

@pytest.mark.slow
def test_cutlass_from_pypi_and_from_a_git_repository(tmp_path: Path, factory_cache: Path) -> None:
    """Two kernels that compile CUTLASS and CuTe: one against cutlass_3_8 from PyPI's wheel,
    one against cutlass_4_0 taken from a git repository made here (the headers of PyPI's
    nvidia-cutlass 4.2.0.0, tagged v4.0.0)."""
    unpacked = tmp_path / "cutlass-4.2"
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--no-deps", "--target",
                    str(unpacked), "nvidia-cutlass==4.2.0.0"],
                   env={**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")}, check=True)
    mirror = tmp_path / "mirror"
    for folder in ("include", "tools/util/include"):
        shutil.copytree(unpacked / "cutlass_library" / "source" / folder, mirror / folder)
    git(mirror, "init", "--quiet")
    git(mirror, "add", "-A")
    git(mirror, "commit", "--quiet", "-m", "CUTLASS headers")
    git(mirror, "tag", "v4.0.0")
    shutil.copytree(FIXTURE, tmp_path / "three")
    four = shutil.copytree(FIXTURE, tmp_path / "four")
    (four / "torch-ext" / "cutlass_kernel").rename(four / "torch-ext" / "cutlass_kernel_four")
    build_toml = four / "build.toml"
    build_toml.write_text(build_toml.read_text().replace("cutlass_3_8", "cutlass_4_0")
                          .replace('"cutlass-kernel"', '"cutlass-kernel-four"'))
    write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: three, version: 1.0.0}}
          - {{path: four, version: 1.0.0}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        depends:
          cutlass_4_0: {{git: "file://{mirror}", rev: v4.0.0}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    wheels = {w.name.split("-")[0]: w for w in (tmp_path / "index" / "files").glob("*.whl")}
    assert sorted(wheels) == ["cutlass_kernel", "cutlass_kernel_four"]
    venv = new_torch_venv(tmp_path / "venv", factory_cache)
    for name, expected in (("cutlass_kernel", 308), ("cutlass_kernel_four", 402)):
        pip_install(venv, wheels[name])
        output = venv_python(venv, "-c", f"import torch, {name}; print({name}.host_version())",
                             cwd=tmp_path)
        assert output.strip().splitlines()[-1] == str(expected)
    with zipfile.ZipFile(wheels["cutlass_kernel_four"]) as archive:
        provenance = json.loads(next(archive.read(n) for n in archive.namelist()
                                     if n.endswith("provenance.json")))
    (recorded,) = provenance["cell"]["depends"]
    assert recorded["name"] == "cutlass_4_0" and recorded["kind"] == "git"
    assert recorded["revision"] == git(mirror, "rev-parse", "HEAD")
    assert str(factory_cache) not in json.dumps(provenance)  # where a machine keeps it: never
    log = (tmp_path / "index" / "logs" / "cutlass-kernel-cu130torch211-x86_64.log").read_text()
    release = dependency_release("cutlass_3_8")
    assert f"C++ dependency: cutlass_3_8 (3.8.0) from PyPI nvidia-cutlass==3.8.0.0 " \
           f"[{present(present(release).wheel_sha256)[:12]}]" in log


def test_a_plain_plan_only_notes_a_lock_it_cannot_read(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    header_repo(tmp_path / "mirror", 4, 0, "v4.0.0")
    path = matrix_with(tmp_path, "depends:\n          cutlass_3_8: {git: mirror, rev: v4.0.0}")
    write(tmp_path / "matrix.lock", "lock-version = 99\n")
    plan = factory_main("plan", path, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert plan.exit == 0, plan.stderr
    assert "this factory reads lock-version 1" in plan.stdout + plan.stderr
    locked = factory_main("plan", path, "--locked", "--cache-dir", tmp_path / "cache",
                          capsys=capsys)
    assert locked.exit == 2 and "this factory reads lock-version 1" in locked.stderr


def test_a_kernel_that_compiles_at_run_time_ships_its_dependencies_headers(tmp_path: Path,
        factory_cache: Path) -> None:
    """A package with headers under include/ for its own run-time compiler (as deep-gemm's):
    its wheel carries CUTLASS's headers there, and a header including one that no folder has
    stops the cell at the run-time compiler gate."""
    kernel = shutil.copytree(FIXTURE, tmp_path / "jit")
    include = kernel / "torch-ext" / "cutlass_kernel" / "include" / "cutlass_kernel"
    include.mkdir(parents=True)
    (include / "gemm.cuh").write_text("#pragma once\n#include <cutlass/cutlass.h>\n"
                                      "#include <cute/tensor.hpp>\n")
    build_toml = kernel / "build.toml"
    build_toml.write_text(build_toml.read_text().replace(
        'src = ["torch-ext/torch_binding.cpp"]',
        'src = ["torch-ext/torch_binding.cpp"]\npyext = ["py", "cuh"]'))
    write(tmp_path / "matrix.yaml", """
        kernels: [{path: jit, version: 1.0.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path, env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "index" / "files").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"cutlass_kernel/include/cutlass_kernel/gemm.cuh",
            "cutlass_kernel/include/cutlass/cutlass.h",
            "cutlass_kernel/include/cute/tensor.hpp"} <= names
    log = (tmp_path / "index" / "logs" / "cutlass-kernel-cu130torch211-x86_64.log").read_text()
    assert "run-time compiler headers: cutlass_3_8 (3.8.0)" in log
    assert "run-time compiler gate: 1 of 1 of the package's headers preprocess" in log

    (include / "gemm.cuh").write_text("#pragma once\n#include <cutlass/cutlass.h>\n"
                                      "#include <cutlass_extras/epilogue.hpp>\n")
    result = run_factory("build", "matrix.yaml", "--out", "again", cwd=tmp_path,
                         env=cache_env(factory_cache))
    assert result.exit == 1
    assert "cutlass_kernel/gemm.cuh includes cutlass_extras/epilogue.hpp, which the wheel does " \
           "not carry" in " ".join(result.stdout.split())
    assert not list((tmp_path / "again" / "files").glob("*.whl"))
