"""A setup.py project's compiles served by the object cache in real builds on this machine (the
example relu-scale: a pybind11 C++ unit and a CUDA unit, built by torch's cpp_extension with
ninja, confined): a second build compiles nothing and gives the same wheel, a touched source
recompiles its unit alone, a build killed half way resumes with what it had compiled, `factory
plan` counts and costs its units, two unit shards and a link job give one job's wheel, and a
remote store (Debian's redis-server) serves one machine's objects to another."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..support.factory import REPO, cache_env, one_cell_matrix, run_factory
from ..support.stores import redis_server

pytestmark = [pytest.mark.slow, pytest.mark.network]

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
CUDA_UNIT = "csrc/relu_scale_cuda.cu"
CXX_UNIT = "csrc/relu_scale.cpp"


def build(folder: Path, out: str, cache: Path) -> tuple[Path, str]:
    """The project built into folder/out: its wheel and what the build said."""
    done = run_factory("build", folder / "matrix.yaml", "--out", folder / out,
                       env=cache_env(cache))
    assert done.exit == 0, done.stdout + done.stderr
    (wheel,) = (folder / out / "files").glob("cached_relu-*.whl")
    return wheel, done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> tuple[Path, Path]:
    """The example under a name of its own, built once: its folder and its first wheel."""
    folder = tmp_path_factory.mktemp("cached")
    project = folder / "cached-relu"
    shutil.copytree(REPO / "examples" / "relu-scale", project)
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('name="relu-scale"', 'name="cached-relu"'))
    one_cell_matrix(folder, project, top=f'python: ["{PYTHON}"]')
    wheel, said = build(folder, "first", factory_cache)
    assert "units: 2 compiled, 0 from the object cache" in said, said
    return folder, wheel


def test_a_second_build_compiles_nothing_and_gives_the_same_wheel(
        project: tuple[Path, Path], factory_cache: Path) -> None:
    folder, first = project
    wheel, said = build(folder, "second", factory_cache)
    assert "units: 0 compiled, 2 from the object cache" in said, said
    assert wheel.read_bytes() == first.read_bytes()
    (log,) = (folder / "second" / "logs").glob("*.log")
    text = log.read_text()
    assert f"$WORK/src/{CUDA_UNIT}: from the object cache" in text
    assert f"$WORK/src/{CXX_UNIT}: from the object cache" in text


def test_the_plan_counts_and_costs_the_units_its_builds_saw(project: tuple[Path, Path],
                                                            factory_cache: Path,
                                                            tmp_path: Path) -> None:
    """A setup.py project's units are known once a build has compiled them: `factory plan`
    counts them and costs them as measured; with their objects in the cache, nothing is left
    to compile, so nothing is split; with the cost book alone (a machine that has not the
    objects), the cell is split over jobs by them."""
    folder, _ = project
    plan = ("plan", folder / "matrix.yaml", "--split-after", "1s", "--cores", "2")
    done = run_factory(*plan, env=cache_env(factory_cache))
    assert done.exit == 0, done.stderr
    (cell,) = json.loads(done.stdout)["cells"].values()
    assert cell["units"] == 2 and cell["core_seconds"] > 2
    assert cell["held"] == [CXX_UNIT, CUDA_UNIT] and cell["left"]["units"] == 0
    assert cell["shards"] == 1
    shutil.copytree(factory_cache / "objects" / "costs", tmp_path / "objects" / "costs")
    booked = run_factory(*plan, "--object-cache", tmp_path / "objects",
                         env=cache_env(factory_cache))
    (cell,) = json.loads(booked.stdout)["cells"].values()
    assert cell["held"] == [] and cell["left"]["units"] == 2 and cell["shards"] == 2


def test_a_touched_source_recompiles_its_unit_alone(project: tuple[Path, Path],
                                                   factory_cache: Path) -> None:
    folder, _ = project
    with open(folder / "cached-relu" / CUDA_UNIT, "a") as source:
        source.write("// touched\n")
    _, said = build(folder, "touched", factory_cache)
    assert "units: 1 compiled, 1 from the object cache" in said, said
    (log,) = (folder / "touched" / "logs").glob("*.log")
    text = log.read_text()
    assert f"$WORK/src/{CUDA_UNIT}: compiled in" in text
    assert f"$WORK/src/{CXX_UNIT}: from the object cache" in text


def records(cache: Path) -> set[Path]:
    return set((cache / "objects" / "objects").glob("*/*.json"))


def test_a_build_killed_half_way_resumes_with_what_it_compiled(project: tuple[Path, Path],
                                                               factory_cache: Path) -> None:
    """Both sources changed; the factory and all it started killed (a lost machine) as soon as
    the first unit is in the cache; the next build compiles only the other."""
    folder, _ = project
    for unit in (CUDA_UNIT, CXX_UNIT):
        with open(folder / "cached-relu" / unit, "a") as source:
            source.write("// changed for the kill\n")
    before = records(factory_cache)
    argv = [sys.executable, "-m", "factory", "build", str(folder / "matrix.yaml"), "--out",
            str(folder / "killed")]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True,
                          env={**os.environ, **cache_env(factory_cache)}) as process:
        deadline = time.monotonic() + 900
        kept: set[Path] = set()
        while not kept and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            kept = records(factory_cache) - before
        os.killpg(process.pid, signal.SIGKILL)
    assert len(kept) == 1, "the build ended before one of its units was kept"
    (first,) = kept
    compiled = json.loads(first.read_text())["source"]
    _, said = build(folder, "resumed", factory_cache)
    assert "units: 1 compiled, 1 from the object cache" in said, said
    (log,) = (folder / "resumed" / "logs").glob("*.log")
    text = log.read_text()
    assert f"{compiled}: from the object cache" in text
    other = next(f"$WORK/src/{unit}" for unit in (CUDA_UNIT, CXX_UNIT)
                 if not compiled.endswith(unit))
    assert f"{other}: compiled in" in text


def test_two_shards_and_a_link_job_give_the_wheel_of_one_job(
        tmp_path: Path, factory_cache: Path) -> None:
    """As the reusable workflow splits a long cell: `--unit-shard 1/2` and `2/2`, each with an
    object cache of its own (other machines), export what they compiled; the link job takes
    both in and compiles nothing; one job building the cell alone gives the same bytes, and
    hands its objects to a Redis store shared by machines, from which another machine's build
    takes them all. (The project's CUDA source is named so that each shard gets one unit.)"""
    project = tmp_path / "sharded-relu"
    shutil.copytree(REPO / "examples" / "relu-scale", project)
    (project / CUDA_UNIT).rename(project / "csrc" / "relu_scale_kernel.cu")
    setup = project / "setup.py"
    setup.write_text(setup.read_text().replace('name="relu-scale"', 'name="sharded-relu"')
                     .replace(CUDA_UNIT, "csrc/relu_scale_kernel.cu"))
    matrix = one_cell_matrix(tmp_path, project, top=f'python: ["{PYTHON}"]')
    env = cache_env(factory_cache)
    said = {}
    for index in (1, 2):
        done = run_factory("build", matrix, "--out", tmp_path / f"shard{index}", "--unit-shard",
                           f"{index}/2", "--object-cache", tmp_path / f"objects{index}",
                           "--export-objects", tmp_path / f"export{index}", env=env)
        assert done.exit == 0, done.stdout + done.stderr
        said[index] = done.stdout
        assert not list((tmp_path / f"shard{index}").rglob("*.whl"))
    assert "units: 1 compiled, 0 from the object cache" in said[1], said[1]
    assert "units: 1 compiled, 0 from the object cache" in said[2], said[2]
    linked = run_factory("build", matrix, "--out", tmp_path / "linked", "--object-cache",
                         tmp_path / "objects3", "--import-objects", tmp_path / "export1",
                         "--import-objects", tmp_path / "export2", env=env)
    assert linked.exit == 0, linked.stdout + linked.stderr
    assert "units: 0 compiled, 2 from the object cache" in linked.stdout, linked.stdout
    with redis_server(tmp_path / "redis", "store-password") as url:
        stored = {**env, "KERNEL_WHEEL_FACTORY_OBJECT_STORE": url}
        alone = run_factory("build", matrix, "--out", tmp_path / "alone", "--object-cache",
                            tmp_path / "objects4", env=stored)
        assert alone.exit == 0, alone.stdout + alone.stderr
        assert "units: 2 compiled, 0 from the object cache" in alone.stdout, alone.stdout
        assert "object store redis://127.0.0.1:" in alone.stdout
        assert "0 object(s) taken, 2 given" in alone.stdout, alone.stdout
        # a plan on a machine with an empty cache finds both units held by the store
        plan = ("plan", matrix, "--object-cache")
        remote = run_factory(*plan, tmp_path / "objects6", env=stored)
        assert remote.exit == 0, remote.stderr
        (cell,) = json.loads(remote.stdout)["cells"].values()
        assert cell["held"] == sorted([CXX_UNIT, "csrc/relu_scale_kernel.cu"])
        assert cell["left"] == {"units": 0, "core_seconds": 0}
        assert "2 of 2 unit(s) held (the object store redis://127.0.0.1:" in remote.stderr
        assert "store-password" not in remote.stdout + remote.stderr
        # another machine: an object cache of its own, the same store behind it
        again = run_factory("build", matrix, "--out", tmp_path / "again", "--object-cache",
                            tmp_path / "objects5", env=stored)
        assert again.exit == 0, again.stdout + again.stderr
        assert "units: 0 compiled, 2 from the object cache" in again.stdout, again.stdout
        assert "2 object(s) taken, 0 given" in again.stdout, again.stdout
        assert "store-password" not in alone.stdout + alone.stderr + again.stdout + again.stderr
    wheels = [next((tmp_path / out / "files").glob("*.whl")).read_bytes()
              for out in ("alone", "linked", "again")]
    assert wheels[0] == wheels[1] == wheels[2]
    # the link job's cache holds what the shards compiled; a changed source is not held
    (project / CXX_UNIT).write_text((project / CXX_UNIT).read_text() + "// changed\n")
    merged = run_factory(*plan, tmp_path / "objects3", env=env)
    (cell,) = json.loads(merged.stdout)["cells"].values()
    assert cell["held"] == ["csrc/relu_scale_kernel.cu"], merged.stderr
    assert "1 of 2 unit(s) held (the object cache 1)" in merged.stderr


def test_the_longest_unit_as_measured_compiles_first_where_compilers_are_fewer(
        project: tuple[Path, Path], factory_cache: Path, tmp_path: Path) -> None:
    """One compiler (--jobs 1), two units the matrix's cost book measured, none in this
    machine's object cache: the build tool is let start both and the broker runs the longer
    first, the CUDA unit by this book, where ninja's own order starts the C++ one; the wheel
    is the one a build served by the cache makes of the same sources."""
    folder, _ = project
    cell = f"cached-relu-cu130torch211-x86_64-cp{PYTHON.replace('.', '')}"
    (folder / "costs").mkdir(exist_ok=True)
    (folder / "costs" / "cached-relu.json").write_text(json.dumps({
        f"{cell}/{CXX_UNIT}": {"seconds": 5.0, "peak": None, "archs": 1},
        f"{cell}/{CUDA_UNIT}": {"seconds": 500.0, "peak": None, "archs": 1}}))
    matrix = folder / "ordered.yaml"
    matrix.write_text((folder / "matrix.yaml").read_text() + "costs: costs\n")
    done = run_factory("build", matrix, "--out", tmp_path / "ordered", "--jobs", "1",
                       "--object-cache", tmp_path / "objects", env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    assert "units: 2 compiled, 0 from the object cache" in done.stdout, done.stdout
    (log,) = (tmp_path / "ordered" / "logs").glob("*.log")
    text = log.read_text()
    assert "MAX_JOBS=2 " in text and "1 at a time, the longest first" in text, text
    compiled = [line.split(": compiled in")[0].strip() for line in text.splitlines()
                if ": compiled in" in line]
    assert compiled == [f"$WORK/src/{CUDA_UNIT}", f"$WORK/src/{CXX_UNIT}"], text
    (wheel,) = (tmp_path / "ordered" / "files").glob("cached_relu-*.whl")
    served, _ = build(folder, "served", factory_cache)
    assert wheel.read_bytes() == served.read_bytes()
