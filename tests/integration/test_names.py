"""The name-clash guard: a kernel named like a project of the public index (a stand-in PyPI
served here, whose img2gray 9.9.9 is a different project) is flagged by `factory plan` and
`factory publish` as their policy says; unpinned, pip really takes the other project's wheel,
and the commands doctor and the browse page give install the factory's with real pip and uv;
`dist-name:` publishes the example as kwf-img2gray, importing img2gray as before."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest

from ..support.factory import EXAMPLE, Result, cache_env, one_cell_matrix, run_factory, write
from ..support.servers import http_server, serving, static_server

OTHER = "img2gray-9.9.9-py3-none-any.whl"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def other_project(root: Path) -> None:
    """simple/img2gray/ of the stand-in PyPI: a pure wheel of another project of that name,
    whose package says so."""
    files = {"img2gray/__init__.py": b"HIJACKED = True\n",
             "img2gray-9.9.9.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: img2gray\nVersion: 9.9.9\n",
             "img2gray-9.9.9.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    def row(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
        return f"{name},sha256={digest},{len(data)}"

    rows = [row(name, data) for name, data in files.items()]
    files["img2gray-9.9.9.dist-info/RECORD"] = \
        ("\n".join(rows) + "\nimg2gray-9.9.9.dist-info/RECORD,,\n").encode()
    wheel = root / "simple" / "img2gray" / OTHER
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    write(root / "simple" / "img2gray" / "index.html",
          f'<!DOCTYPE html><html><body><a href="{OTHER}#sha256={digest}">{OTHER}</a>'
          "</body></html>\n")


@pytest.fixture(scope="module")
def pypi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """The stand-in PyPI's URL (its simple index) and the paths it was asked for."""
    root = tmp_path_factory.mktemp("pypi")
    other_project(root)
    log: list[str] = []
    with static_server(root, log) as url:
        yield f"{url}simple/", log


def plan(matrix: Path, cache: Path, index: str, *arguments: str) -> Result:
    return run_factory("plan", matrix, "--cache-dir", cache, *arguments,
                       env={"KERNEL_WHEEL_FACTORY_NAME_INDEX": index})


def example_matrix(folder: Path, top: str = "") -> Path:
    return one_cell_matrix(folder, EXAMPLE, top=top)


def test_plan_warns_of_a_name_the_index_has_once_a_day_and_not_offline(pypi: tuple[str, Any],
        tmp_path: Path) -> None:
    index, log = pypi
    matrix, cache = example_matrix(tmp_path), tmp_path / "cache"
    asked = len(log)
    result = plan(matrix, cache, index)
    assert result.exit == 0, result.stderr
    assert f"warning: img2gray: {index} has a project of this name too, newest 9.9.9; pip " \
           "given --extra-index-url takes the higher version from either index. Install " \
           "pinned (pip install img2gray==1.0.0+cu130torch211 --extra-index-url CELL-INDEX) " \
           "or with uv's --index, or give the wheels another name (dist-name: in " \
           "matrix.yaml)" in " ".join(result.stderr.split()), result.stderr
    assert log[asked:] == ["/simple/img2gray/"]
    assert json.loads(result.stdout)["cells"]  # the plan itself is as before
    # the answer is kept: a second plan asks nothing and says the same
    again = plan(matrix, cache, index)
    assert again.exit == 0 and "has a project of this name too" in again.stderr
    assert len(log) == asked + 1
    offline = plan(matrix, tmp_path / "cache2", index, "--offline")
    assert offline.exit == 0
    assert f"note: --offline: the wheels' names are not checked against {index}" in \
        " ".join(offline.stderr.split())
    assert len(log) == asked + 1


def test_refuse_stops_the_plan_and_ignore_asks_nothing(pypi: tuple[str, Any],
                                                       tmp_path: Path) -> None:
    index, log = pypi
    refused = plan(example_matrix(tmp_path, "name-clash: refuse"), tmp_path / "c", index)
    assert refused.exit == 2 and refused.stdout == ""
    (line,) = refused.stderr.strip().splitlines()
    assert "/matrix.yaml:9: name-clash: img2gray: " in line and \
        line.endswith("(name-clash: refuse)"), line
    asked = len(log)
    ignored = plan(example_matrix(tmp_path, "name-clash: ignore"), tmp_path / "c", index)
    assert ignored.exit == 0 and "name" not in ignored.stderr and len(log) == asked
    # the matrix's index is the one asked, whatever the environment says
    given = plan(example_matrix(tmp_path, f"name-clash: {{policy: refuse, index: '{index}'}}"),
                 tmp_path / "c2", "off")
    assert given.exit == 2 and "(name-clash: refuse)" in given.stderr


def test_an_index_that_cannot_be_read_warns_or_refuses(tmp_path: Path) -> None:
    gone = "http://127.0.0.1:9/simple/"  # the discard port: nothing answers
    warned = plan(example_matrix(tmp_path), tmp_path / "c", gone)
    assert warned.exit == 0
    assert f"warning: cannot read {gone} to check the wheels' names" in \
        " ".join(warned.stderr.split()) and "the names are not checked" in warned.stderr
    refused = plan(example_matrix(tmp_path, "name-clash: refuse"), tmp_path / "c", gone)
    assert refused.exit == 1 and len(refused.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def answering(content_type: str, body: bytes) -> Iterator[str]:
    """A server that answers every request with this (an index gone wrong): its URL."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as url:
        yield f"{url}simple/"


@pytest.mark.parametrize("content_type, body, said", [
    ("image/png", b"\x89PNG", "UnsupportedContentTypeError"),
    (JSON_TYPE, b'{"meta": {"api-version": "9.0"}, "name": "img2gray", "files": []}',
     "UnsupportedRepoVersionError"),
    (JSON_TYPE, b"{not json", "JSONDecodeError"),
])
def test_an_index_that_answers_nonsense_is_one_line(tmp_path: Path, content_type: Any, body: bytes,
                                                    said: str) -> None:
    """Whatever the name index sends, the plan warns (or, refusing, fails) in one line; the
    same for a torch index of torch: {latest: N}."""
    with answering(content_type, body) as url:
        warned = plan(example_matrix(tmp_path), tmp_path / "c", url)
        refused = plan(example_matrix(tmp_path, "name-clash: refuse"), tmp_path / "c", url)
        latest = write(tmp_path / "latest.yaml", f"""
            kernels:
              - path: {EXAMPLE}
                version: 1.0.0
            torch: {{latest: 1, index: "{url}"}}
            cuda: {{follow: torch}}
        """)
        torches = plan(latest, tmp_path / "c", "off")
    assert warned.exit == 0 and f"warning: cannot read {url} to check the wheels' names: " \
        f"{said}" in warned.stderr, warned.stderr
    for result, expected in ((refused, f"cannot read {url} to check the wheels' names: {said}"),
                             (torches, f"cannot read the torch releases of {url}: {said}")):
        assert result.exit == 1, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and expected in line, line


def test_dist_name_renames_the_distributions_and_two_may_not_share_one(pypi: tuple[str, Any],
        tmp_path: Path) -> None:
    index, log = pypi
    asked = len(log)
    renamed = plan(example_matrix(tmp_path, "dist-name: kwf-{name}"), tmp_path / "c", index)
    assert renamed.exit == 0 and "warning" not in renamed.stderr, renamed.stderr
    assert json.loads(renamed.stdout)["distributions"] == {"img2gray": "kwf-img2gray"}
    assert log[asked:] == ["/simple/kwf-img2gray/"]
    # the cell keeps the kernel's id: jobs, --only and the output's cells are unchanged
    assert list(json.loads(renamed.stdout)["cells"]) == ["img2gray/cu130torch211/x86_64"]
    clash = write(tmp_path / "two.yaml", f"""
        kernels:
          - path: {EXAMPLE}
            version: 1.0.0
            dist-name: shared
          - path: {EXAMPLE.parent / "relu-scale"}
            version: 1.0.0
            dist-name: Shared
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
    """)
    result = plan(clash, tmp_path / "c", "off")
    assert result.exit == 2, result.stderr
    assert "two.yaml:5: dist-name: kernels[1] and kernels[0] would both be published as " \
           "'Shared'" in result.stderr, result.stderr


# ---- the real thing: publish, install, rename --------------------------------------------

@pytest.mark.slow
def test_publish_refuses_or_warns_before_sending(pypi: tuple[str, Any],
                                                 example_build: tuple[Path, Result],
                                                 tmp_path: Path) -> None:
    index, _ = pypi
    out, _ = example_build
    env = {"KERNEL_WHEEL_FACTORY_NAME_INDEX": index}
    refused = run_factory("publish", out, "--to", tmp_path / "site", "--name-clash", "refuse",
                          env=env)
    assert refused.exit == 1 and "nothing was sent" in refused.stderr, refused.stderr
    assert not (tmp_path / "site").exists()
    sent = run_factory("publish", out, "--to", tmp_path / "site", env=env)
    assert sent.exit == 0, sent.stderr
    assert "img2gray==1.0.0+cu130torch211" in sent.stderr + sent.stdout
    assert (tmp_path / "site" / "cu130torch211" / "simple" / "img2gray").is_dir()


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> Path:
    from ..support.installs import torch_venv_at

    return torch_venv_at(tmp_path_factory.mktemp("names") / "venv", factory_cache, seed=True)


def installed(venv: Path, factory_cache: Path) -> set[str]:
    from ..support.installs import freeze

    return {line for line in freeze(venv, factory_cache) if line.lower().startswith(
        ("img2gray", "kwf-img2gray"))}


@pytest.mark.slow
def test_unpinned_pip_takes_the_other_project_and_the_given_commands_do_not(pypi: tuple[str, Any],
        example_build: tuple[Path, Result], venv: Path, factory_cache: Path) -> None:
    from uv import find_uv_bin

    index, _ = pypi
    python = venv / "bin" / "python"
    pip_env = {**os.environ, "PIP_INDEX_URL": index, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    with serving(example_build[0]) as url:
        cell = f"{url}cu130torch211/simple/"
        # the clash is real: pip takes 9.9.9 of the stand-in PyPI over the kernel's wheel
        hijacked = subprocess.run([python, "-m", "pip", "install", "img2gray",
                                   "--extra-index-url", cell], capture_output=True, text=True,
                                  env=pip_env)
        assert hijacked.returncode == 0, hijacked.stderr
        assert installed(venv, factory_cache) == {"img2gray==9.9.9"}
        # doctor's commands (as served, run by this Python) and the browse page's agree
        with urlopen(url + "doctor.py") as response:
            program = response.read().decode()
        report = subprocess.run([python, "-", url, "img2gray", "--json"], input=program,
                                capture_output=True, text=True)
        fits = json.loads(report.stdout)["packages"][0]["fits"]
        assert fits["pip"] == f"pip install img2gray==1.0.0+cu130torch211 --extra-index-url {cell}"
        assert fits["uv"] == f"uv pip install img2gray --index {cell}"
        pinned = subprocess.run([python, "-m", *fits["pip"].split()], capture_output=True,
                                text=True, env=pip_env)
        assert pinned.returncode == 0, pinned.stderr
        assert installed(venv, factory_cache) == {"img2gray==1.0.0+cu130torch211"}
        done = subprocess.run([python, "-m", "pip", "uninstall", "-y", "img2gray"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        uv_env = {**os.environ, "UV_DEFAULT_INDEX": index,
                  "UV_CACHE_DIR": str(factory_cache / "uv")}
        by_uv = subprocess.run([find_uv_bin(), *fits["uv"].split()[1:], "--python", python,
                                "--no-cache"], capture_output=True, text=True, env=uv_env)
        assert by_uv.returncode == 0, by_uv.stderr
        assert installed(venv, factory_cache) == {"img2gray==1.0.0+cu130torch211"}


@pytest.mark.slow
def test_dist_name_builds_kwf_img2gray_that_imports_img2gray(
        pypi: tuple[str, Any], tmp_path: Path, venv: Path, factory_cache: Path) -> None:
    index, _ = pypi
    out = tmp_path / "index"
    matrix = example_matrix(tmp_path, "dist-name: kwf-{name}")
    built = run_factory("build", matrix, "--out", out, env=cache_env(factory_cache))
    assert built.exit == 0, built.stdout + built.stderr
    (wheel,) = (out / "files").glob("*.whl")
    assert wheel.name.startswith("kwf_img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("kwf_img2gray-1.0.0+cu130torch211.dist-info/METADATA").decode()
        provenance = json.loads(archive.read(next(
            name for name in names if name.endswith(".dist-info/provenance.json"))))
    assert "Name: kwf-img2gray\n" in metadata
    assert "img2gray/__init__.py" in names and not any(n.startswith("kwf") and "/" in n and
                                                       ".dist-info/" not in n for n in names)
    assert provenance["cell"]["distribution"] == "kwf-img2gray"
    assert (out / "cu130torch211" / "simple" / "kwf-img2gray" / "index.html").is_file()
    browse = json.loads((out / "browse.json").read_text())
    assert [package["name"] for package in browse["packages"]] == ["kwf-img2gray"]
    assert run_factory("verify", wheel, env=cache_env(factory_cache)).exit == 0
    with serving(out) as url:
        cell = f"{url}cu130torch211/simple/"
        done = subprocess.run([venv / "bin/python", "-m", "pip", "install",
                               "kwf-img2gray==1.0.0+cu130torch211", "--extra-index-url", cell],
                              capture_output=True, text=True,
                              env={**os.environ, "PIP_INDEX_URL": index})
    assert done.returncode == 0, done.stderr
    assert "kwf-img2gray==1.0.0+cu130torch211" in installed(venv, factory_cache)
    imported = subprocess.run([venv / "bin/python", "-c",
                               "import img2gray, importlib.metadata as m; "
                               "print(m.version('kwf-img2gray'), img2gray.__name__)"],
                              capture_output=True, text=True)
    assert imported.stdout.split() == ["1.0.0+cu130torch211", "img2gray"], imported.stderr
