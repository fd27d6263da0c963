"""Real pip and real uv install the example from `factory serve`, each into a fresh virtual
environment that already holds torch 2.11, through the cell's own index URL."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..support.factory import Result
from ..support.installs import freeze, torch_venv_at, uv
from ..support.servers import serving

pytestmark = [pytest.mark.slow, pytest.mark.network]


@pytest.fixture(scope="module")
def served(example_build: tuple[Path, Result],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """`factory serve` on the example's output folder; its request log in a file."""
    out, _ = example_build
    log = tmp_path_factory.mktemp("serve") / "requests.log"
    with open(log, "w") as handle, serving(out, stderr=handle) as url:
        yield url, log








def metadata_requests(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines()
            if "GET /files/img2gray-1.0.0%2Bcu130torch211-" in line and ".whl.metadata " in line]


def test_pip_installs_the_cell_wheel_and_leaves_torch_alone(served: tuple[str, Any], tmp_path: Path,
                                                            factory_cache: Path) -> None:
    url, log = served
    venv = torch_venv_at(tmp_path / "pip-venv", factory_cache, seed=True)
    before = freeze(venv, factory_cache)
    done = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "img2gray",
                           "--extra-index-url", f"{url}cu130torch211/simple"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    after = freeze(venv, factory_cache)
    assert after - before == {"img2gray==1.0.0+cu130torch211"}
    assert before - after == set()  # torch and its CUDA libraries untouched
    assert metadata_requests(log), log.read_text()


def test_uv_installs_the_cell_wheel_and_leaves_torch_alone(served: tuple[str, Any], tmp_path: Path,
                                                           factory_cache: Path) -> None:
    url, log = served
    venv = torch_venv_at(tmp_path / "uv-venv", factory_cache, seed=False)
    before = freeze(venv, factory_cache)
    requests_before = len(metadata_requests(log))
    done = uv("pip", "install", "--no-cache", "--python", venv / "bin" / "python", "img2gray",
              "--extra-index-url", f"{url}cu130torch211/simple", cache=factory_cache)
    assert done.returncode == 0, done.stdout + done.stderr
    after = freeze(venv, factory_cache)
    assert after - before == {"img2gray==1.0.0+cu130torch211"}
    assert before - after == set()
    assert len(metadata_requests(log)) > requests_before, log.read_text()
    json_pages = [line for line in log.read_text().splitlines()
                  if "GET /cu130torch211/simple/img2gray/ " in line]
    assert json_pages
