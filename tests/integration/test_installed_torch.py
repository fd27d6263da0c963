"""A torch already installed: an interpreter the matrix (or --torch-python) names is read, not
changed, and decides the cell's label, torch pin, import guard and fingerprint. The fast tests
use a stand-in interpreter: this Python with a torch folder of its own on its path (version.py
and a libc10.so, which is all the probe reads); the slow one builds the example against a real
venv of torch 2.11, offline, in a network namespace with no network at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from factory.cells.kinds import kind_of
from factory.cells.run import cell_fingerprint
from factory.config.buildtoml import read_build_toml
from factory.config.matrix import load_matrix
from factory.errors import ConfigError
from factory.plan.cells import make_plan
from factory.plan.model import Kernel, Plan
from factory.sources.facts import read_facts
from factory.sources.installed import read_torches
from factory.sources.tree import resolve_path_source

from ..support.checks import present
from ..support.factory import (
    EXAMPLE,
    EXAMPLE_WHEEL,
    REPO,
    Result,
    cache_env,
    one_cell_matrix,
    run_factory,
    snapshot,
    write,
)
from ..support.installs import new_torch_venv, read_dist_info, run_example
from ..support.plans import NGC, kernel, setup_py_project


def stand_in_python(folder: Path, version: str, cuda: str | None = "12.6",
                    cxx11: bool = True) -> Path:
    """An interpreter whose torch is `version`: this Python, with a torch folder of its own."""
    torch = folder / "site" / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "version.py").write_text(
        f"__version__ = '{version}'\ncuda: Optional[str] = {cuda!r}\ngit_version = 'abc'\n")
    (torch / "__init__.py").write_text("")
    (torch / "lib" / "libc10.so").write_bytes(b"\x7fELF" + (b"St7__cxx11" if cxx11 else b""))
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nPYTHONPATH={folder / 'site'} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return python


def matrix_with(tmp_path: Path, torch: str, cuda: str = '"12.6": {sms: ["9.0"]}') -> Path:
    kernel(tmp_path)
    return write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: demo, version: 1.0}}]
        torch: {torch}
        cuda: {{{cuda}}}
    """)


def planned(path: Path, torch_pythons: list[Path] | None = None) -> Plan:
    matrix = read_torches(load_matrix(path, torch_pythons))
    kernels = []
    for entry in matrix.kernels:
        spec = read_build_toml(present(entry.source.folder))
        kernels.append(Kernel(entry, resolve_path_source(spec.root), spec, present(entry.version),
                              read_facts(spec), kind_of(spec)))
    return make_plan(matrix, kernels, None)


def test_an_ngc_build_is_labelled_pinned_and_guarded_as_exactly_that_build(tmp_path: Path) -> None:
    python = stand_in_python(tmp_path / "ngc", NGC)
    (cell,) = planned(matrix_with(tmp_path, f"[{{python: {python}}}]")).cells
    assert cell.label == "cu126torch25.nv2410"
    assert cell.wheel_version == "1.0+cu126torch25.nv2410"
    assert cell.torch_pin == f"=={NGC}" and cell.torch_shown == NGC
    assert cell.installed is not None and cell.installed.cuda == "12.6"
    assert cell.installed.site_packages == str(tmp_path / "ngc" / "site")


def test_a_release_build_in_an_interpreter_is_labelled_like_the_index_build(tmp_path: Path) -> None:
    python = stand_in_python(tmp_path / "venv", "2.11.0+cu130", cuda="13.0")
    (cell,) = planned(matrix_with(tmp_path, f"[{{python: {python}}}]",
                                  '"13.0": {sms: ["9.0"]}')).cells
    assert (cell.label, cell.torch_pin, cell.torch_shown) == ("cu130torch211", "==2.11.*",
                                                             "2.11")


def test_the_command_line_names_the_interpreter_instead_of_the_matrix_list(tmp_path: Path) -> None:
    python = stand_in_python(tmp_path / "ngc", NGC)
    path = matrix_with(tmp_path, '["2.11"]', '"12.6": {sms: ["9.0"]}, "13.0": {sms: ["9.0"]}')
    plan = planned(path, [python])
    assert [cell.label for cell in plan.cells] == ["cu126torch25.nv2410"]
    result = run_factory("plan", path, "--torch-python", python, "--cache-dir", tmp_path / "c")
    assert result.exit == 0, result.stderr
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["cells"] == ["demo/cu126torch25.nv2410/x86_64"]


def test_a_wheel_for_every_cpython_has_one_cell_whichever_interpreter_has_the_torch(
        tmp_path: Path) -> None:
    """A cuTile or abi3 project's cell is named alike when planned from the matrix's torch
    (on a build machine) and from an interpreter's (`factory test --torch-python` on a GPU
    machine): the wheel built on one is found and tested on the other. A wheel for one CPython
    names the interpreter's."""
    python = stand_in_python(tmp_path / "venv", "2.11.0+cu130", cuda="13.0")
    setup_py_project(tmp_path / "abi3", ", py_limited_api=True")
    setup_py_project(tmp_path / "cp", "", '[project]\nname = "fused-op-cp"\nversion = "1.0"\n')
    path = write(tmp_path / "matrix.yaml", f"""
        kernels:
          - {{path: {REPO / "examples" / "tile-add"}}}
          - {{path: abi3, version: "1.0"}}
          - {{path: cp, version: "1.0"}}
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
    """)
    ids = {}
    for asked in ((), ("--torch-python", python)):
        result = run_factory("plan", path, *asked, "--cache-dir", tmp_path / "c")
        assert result.exit == 0, result.stderr
        ids[asked] = sorted(cell for job in json.loads(result.stdout)["jobs"]
                            for cell in job["cells"])
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert ids[()][1:] == ids[("--torch-python", python)][1:] == \
        ["fused_op/cu130torch211/x86_64", "tile-add/cu130torch211/x86_64"]
    assert ids[("--torch-python", python)][0] == f"fused-op-cp/cu130torch211/x86_64/{here}"


def test_an_installed_torch_pairs_only_with_its_own_cuda(tmp_path: Path) -> None:
    python = stand_in_python(tmp_path / "ngc", NGC)
    path = matrix_with(tmp_path, f'["2.11", {{python: {python}}}]',
                       '"12.6": {sms: ["9.0"]}, "13.0": {sms: ["9.0"]}')
    plan = planned(path)
    assert sorted(str(cell.label) for cell in plan.cells) == ["cu126torch25.nv2410",
                                                              "cu130torch211"]
    assert [s.id for s in plan.skipped] == ["demo/cu126torch211/x86_64"]


def test_changing_the_interpreters_torch_changes_the_fingerprint(tmp_path: Path) -> None:
    python = stand_in_python(tmp_path / "ngc", NGC)
    path = matrix_with(tmp_path, f"[{{python: {python}}}]")
    before = cell_fingerprint(planned(path).cells[0], {}, "local")
    assert cell_fingerprint(planned(path).cells[0], {}, "local") == before
    version_py = tmp_path / "ngc" / "site" / "torch" / "version.py"
    version_py.write_text(version_py.read_text().replace("e000cf0ad9", "e000cf0ad8"))
    assert cell_fingerprint(planned(path).cells[0], {}, "local") != before
    version_py.write_text(version_py.read_text().replace("e000cf0ad8", "e000cf0ad9"))
    (tmp_path / "ngc" / "site" / "torch" / "lib" / "libc10.so").write_bytes(b"\x7fELF")
    assert cell_fingerprint(planned(path).cells[0], {}, "local") != before  # the C++ ABI


@pytest.mark.parametrize(("torch", "cuda", "message"), [
    ("[{python: PY}]", '"13.0": {sms: ["9.0"]}',
     r"matrix\.yaml:2: torch\[0\]: torch 2\.5\.0a0\+e000cf0ad9\.nv24\.10 \(CUDA 12\.6\) from "
     r".*python is a CUDA 12\.6 build; add cuda: \{\"12\.6\": \{sms: \[\.\.\.\]\}\} to the "
     r"matrix \(it lists 13\.0\)"),
    ("[{python: PY}, {python: PY}]", '"12.6": {}',
     r"torch\[1\]: .* would make the same wheels as .* \(torch\[0\]\): list torch 2\.5 once"),
    ("[{python: no-such-python-here}]", '"12.6": {}',
     r"matrix\.yaml:2: torch\[0\]\.python: 'no-such-python-here' is not a command on PATH"),
    ("[{python: ./missing/python}]", '"12.6": {}',
     r"torch\[0\]\.python: '\./missing/python' is not an interpreter"),
    ("[{}]", '"12.6": {}', r"torch\[0\]: give the torch's interpreter"),
    ("[{python: PY, version: 2}]", '"12.6": {}', r"torch\[0\]"),
    ("[{image: 'Bad Image'}]", '"12.6": {}', r"torch\[0\]\.image: 'Bad Image' is not an image"),
    ("[{image: 'img:{arch}'}]", '"12.6": {}', r"torch\[0\]\.image: 'img:\{arch\}' is not an"),
])
def test_bad_installed_torch_entries_name_file_line_and_key(tmp_path: Path, torch: str, cuda: str,
                                                            message: str) -> None:
    python = stand_in_python(tmp_path / "ngc", NGC)
    path = matrix_with(tmp_path, torch.replace("PY", str(python)), cuda)
    with pytest.raises(ConfigError, match=message):
        planned(path)


@pytest.mark.parametrize(("setup", "message"), [
    (lambda folder: stand_in_python(folder, "2.11.0+cpu", cuda=None),
     r"has torch 2\.11\.0\+cpu, a build without CUDA"),
    (lambda folder: stand_in_python(folder, "not a version"),
     r"has torch 'not a version', which is not a version the factory can label"),
    (lambda folder: Path(shutil.which("true") or "/bin/true"), r"gave no answer"),
    (lambda folder: Path(sys.executable), r"has no torch installed"),
])
def test_an_interpreter_that_cannot_serve_is_refused_with_the_reason(tmp_path: Path, setup: Any,
        message: str) -> None:
    python = setup(tmp_path / "py")
    result = run_factory("plan", matrix_with(tmp_path, '["2.11"]'), "--torch-python", python,
                         "--cache-dir", tmp_path / "c")
    assert result.exit == 2 and result.stdout == ""
    assert result.stderr.startswith("error: --torch-python: ")
    assert len(result.stderr.splitlines()) == 1
    assert __import__("re").search(message, result.stderr), result.stderr


@pytest.mark.slow
def test_the_example_builds_offline_against_an_existing_venv(tmp_path: Path, torch_venv: Path,
                                                            factory_cache: Path) -> None:
    """No network at all (a network namespace of its own): the venv's torch and the machine's
    toolkit, or the cached one, are all the build has."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--net", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare --net (root, or user namespaces)")
    python = torch_venv / "bin" / "python"
    before_freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True,
                                   text=True, check=True).stdout
    torch_dir = Path(json.loads(subprocess.run(
        [str(python), "-c", "import json, torch, os; print(json.dumps(os.path.dirname("
                            "torch.__file__)))"],
        capture_output=True, text=True, check=True).stdout))
    torch_files = snapshot(torch_dir / "include" / "ATen" / "core")
    out = tmp_path / "index"
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-m", "factory", "build",
         str(one_cell_matrix(tmp_path, EXAMPLE)),
         "--torch-python", str(python), "--offline", "--runner", "auto", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **cache_env(factory_cache)})
    result = Result(done.returncode, done.stdout, done.stderr)
    assert result.exit == 0, result.stdout + result.stderr
    assert "runner: local (every cell's torch is installed on this machine)" in result.stdout
    (wheel,) = (out / "files").glob("*.whl")
    assert EXAMPLE_WHEEL.fullmatch(wheel.name), wheel.name
    log = (out / "logs" / "img2gray-cu130torch211-x86_64.log").read_text()
    installed = json.loads(subprocess.run(
        [str(python), "-c", "import torch; print(repr(torch.__version__))"],
        capture_output=True, text=True, check=True).stdout.replace("'", '"'))
    assert f"torch {installed} ({torch_venv})" in log
    assert "Requires-Dist: torch==2.11.*" in read_dist_info(wheel, "METADATA")
    provenance = json.loads(read_dist_info(wheel, "provenance.json"))
    assert provenance["cell"]["installed_torch"]["python"] == str(python)
    assert provenance["cell"]["installed_torch"]["version"] == installed
    assert subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True,
                          check=True).stdout == before_freeze
    assert snapshot(torch_dir / "include" / "ATen" / "core") == torch_files
    ran = run_example(new_torch_venv(tmp_path / "venv", factory_cache), wheel, tmp_path)
    assert all(ran["results"]) and ran["torch"] == installed


def stand_in_docker(folder: Path, image_id: str | None, run: str) -> tuple[Path, Path]:
    """A docker command line whose daemon has `image_id` (None: no image) and whose `run`
    does what the shell line `run` says; it writes each command it was given to a log, a line
    each."""
    log = folder / "docker.log"
    docker = folder / "docker"
    inspect = f"echo {image_id}" if image_id else "exit 1"
    docker.write_text(f"""#!/bin/sh
line=$(printf '%s' "$*" | tr '\\n' ' ')
printf '%s\\n' "$line" >> {log}
case "$1" in
  image) {inspect} ;;
  run) {run} ;;
  pull) exit 1 ;;
esac
""")
    docker.chmod(0o755)
    return docker, log


def test_an_images_probe_runs_in_a_labelled_container_with_no_network_and_a_time_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from factory.sources import installed as probe
    from factory.system.engine import OWNER_LABEL, RUN_LABEL, Engine

    docker, log = stand_in_docker(tmp_path, "sha256:ab12", "sleep 30")
    monkeypatch.setattr(probe, "PROBE_TIMEOUT", 1)
    with Engine(str(docker)) as engine, pytest.raises(probe.ProbeError) as failed:
        probe.probe_image("example/torch:1", "python3", engine=engine)
    assert str(failed.value) == ("python3 in example/torch:1: python3 in a container of "
                                 "example/torch:1 did not end within 1 s")
    run, removed = log.read_text().splitlines()[1:]
    container = f"kwf-{engine.run_id}-probe-"
    assert run.startswith(f"run --rm --name {container}")
    assert f"--label {OWNER_LABEL}=" in run and f"--label {RUN_LABEL}={engine.run_id}" in run
    assert "--network none --entrypoint  example/torch:1 python3 -c" in run
    assert removed.startswith(f"rm --force --volumes {container}")  # the hung probe's container


def test_an_image_that_is_not_here_is_not_pulled_offline(tmp_path: Path) -> None:
    from factory.sources import installed as probe
    from factory.system.engine import Engine

    docker, log = stand_in_docker(tmp_path, None, "exit 0")
    with Engine(str(docker)) as engine, pytest.raises(probe.ProbeError) as failed:
        probe.probe_image("example/torch:1", "python3", offline=True, engine=engine)
    assert "the image is not here, and --offline does not pull it" in str(failed.value)
    assert log.read_text().splitlines() == ["image inspect --format {{.Id}} example/torch:1"]
    with Engine(str(docker)) as engine, pytest.raises(probe.ProbeError) as failed:
        probe.probe_image("example/torch:1", "python3", engine=engine)
    assert "the image is not here and cannot be pulled (docker pull failed (exit 1)" in \
        str(failed.value)
