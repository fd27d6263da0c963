"""Release day: the scheduled path (`torch: {latest: N}`, `factory build --new SITE`, `factory
index --merge`) on a stand-in torch index holding torch 2.11, then again after torch 2.15 appears
there. The second run builds only the new release's cell, and every cell the site has no wheel
for says why on its browse page. (benchmarks/release_day.py times the same path.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..support.factory import EXAMPLE, cache_env, run_factory, write
from ..support.installs import torch_index
from ..support.servers import static_server as served

pytestmark = [pytest.mark.slow, pytest.mark.network]


def scheduled_run(matrix: Path, site: Path, job: Path, cache: Path) -> str:
    """What the scheduled workflow does: the cells the site lacks, built, then merged into it."""
    new: list[str | Path] = ["--new", site] if (site / "simple").is_dir() else []
    built = run_factory("build", matrix, *new, "--out", job, env=cache_env(cache))
    assert built.exit == 0, built.stdout + built.stderr
    merged = run_factory("index", "--out", site, "--merge", job, env=cache_env(cache))
    assert merged.exit == 0, merged.stdout + merged.stderr
    return built.stdout


def test_a_new_torch_release_gets_only_its_own_cells_built(tmp_path: Path,
                                                           factory_cache: Path) -> None:
    torches, site = tmp_path / "torches", tmp_path / "site"
    torch_index(torches, {"2.11.0": "13.0.2"})
    with served(torches) as url:
        matrix = write(tmp_path / "matrix.yaml", f"""
            kernels: [{{path: {EXAMPLE}, version: 1.0.0}}]
            torch: {{latest: 2, index: "{url}simple/"}}
            cuda: {{"13.0": {{sms: ["9.0"]}}, "13.2": {{sms: ["9.0"]}}}}
            runner: local
        """)
        first = scheduled_run(matrix, site, tmp_path / "job1", factory_cache)
        assert "img2gray/cu130torch211/x86_64: built" in first
        assert "1 built, 0 unchanged, 0 failed, 1 skipped" in first, first

        torch_index(torches, {"2.11.0": "13.0.2", "2.15.0": "13.2.1"})  # release day
        second = scheduled_run(matrix, site, tmp_path / "job2", factory_cache)
    assert "img2gray/cu132torch215/x86_64: built" in second
    assert "1 built, 0 unchanged, 0 failed, 2 skipped" in second, second
    assert "cu130torch211" not in second.split("--new:", 1)[1].split("\n", 1)[1]
    assert sorted(path.name.split("+")[1].split("-")[0] for path in
                  (site / "files").glob("*.whl")) == ["cu130torch211", "cu132torch215"]
    (version,) = json.loads((site / "browse" / "img2gray.json").read_text())["versions"]
    cells = {(cell["torch"], cell["cuda"]): (cell["status"], cell.get("detail") or "")
             for cell in version["cells"]}
    assert cells[("2.11", "13.0")][0] == cells[("2.15", "13.2")][0] == "built"
    for missing in (("2.11", "13.2"), ("2.15", "13.0")):
        status, detail = cells[missing]
        assert status == "skipped" and detail, (missing, cells)
