"""A matrix split over many machines: `factory plan`, `build --job/--shard`, `index --merge`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from factory.compile.costbook import CostBook
from factory.config.matrix import load_matrix
from factory.pipeline.load import plan_matrix
from factory.plan.costs import UnitCost, cost_key
from factory.plan.jobs import plan_jobs, select_shard

from ..support.checks import present
from ..support.factory import (
    EXAMPLE,
    FIXTURES,
    REPO,
    Result,
    cache_env,
    run_factory,
    snapshot,
    write,
)
from ..support.plans import twelve_cells


@pytest.mark.parametrize("which", ["root", "twelve"])
def test_plan_is_stable_and_covers_every_cell_once(tmp_path: Path, which: str) -> None:
    matrix = REPO / "matrix.yaml" if which == "root" else twelve_cells(tmp_path)
    first = run_factory("plan", matrix, "--max-cells", "2", "--cache-dir", tmp_path / "cache")
    again = run_factory("plan", matrix, "--max-cells", "2", "--cache-dir", tmp_path / "cache")
    assert first.exit == 0, first.stderr
    assert first.stdout == again.stdout
    jobs = json.loads(first.stdout)["jobs"]

    plan = plan_matrix(load_matrix(matrix), tmp_path / "cache", lambda text: None,
                       every_platform=True)
    every = sorted([c.id for c in plan.cells] + [s.id for s in plan.skipped])
    assert len(every) == (1 if which == "root" else 12)
    listed = sorted(i for job in jobs for i in job["cells"] + job["skipped"])
    assert listed == every  # each cell in exactly one job
    for job in jobs:
        cells = [c for c in plan.cells if c.id in job["cells"]]
        assert 1 <= len(cells) <= 2
        assert {(c.platform, str(present(c.cuda).version)) for c in cells} == {(job["platform"],
                                                                        job["cuda"])}
        assert job["runs-on"] == {"x86_64": "ubuntu-24.04",
                                  "aarch64": "ubuntu-24.04-arm"}[job["platform"]]

    github = run_factory("plan", matrix, "--max-cells", "2", "--format", "github",
                         "--cache-dir", tmp_path / "cache")
    assert len(github.stdout.strip().splitlines()) == 1  # one line for $GITHUB_OUTPUT
    assert [entry["job"] for entry in json.loads(github.stdout)["include"]] == \
        [job["job"] for job in jobs]

    for count in range(1, 6):
        shards = [select_shard(plan, index, count) for index in range(1, count + 1)]
        ids = sorted(i for shard in shards
                     for i in [c.id for c in shard.cells] + [s.id for s in shard.skipped])
        assert ids == every
        sizes = [len(shard.cells) for shard in shards]
        assert max(sizes) - min(sizes) <= 1
    assert [job.id for job in plan_jobs(plan, 2)] == [job["job"] for job in jobs]


def test_job_and_shard_arguments_are_checked(tmp_path: Path) -> None:
    matrix = twelve_cells(tmp_path)
    for args, expected in [
        (["--job", "cu999-x86_64-1"], "--job: no job 'cu999-x86_64-1' in this plan (jobs: "
                                      "cu130-aarch64-1, cu130-x86_64-1)"),
        (["--shard", "3/2"], "argument --shard: '3/2' is not a shard I/N with 1 <= I <= N"),
        (["--shard", "1/2", "--job", "x"], "argument --job: not allowed with argument --shard"),
    ]:
        result = run_factory("build", matrix, "--cache-dir", tmp_path / "cache",
                             "--out", tmp_path / "index", *args)
        assert result.exit == 2
        assert expected in result.stderr
        assert not (tmp_path / "index").exists()


@pytest.mark.slow
@pytest.mark.network
def test_two_shards_merge_into_the_index_of_one_run(tmp_path: Path, factory_cache: Path) -> None:
    """img2gray (compiled), a pure-Python kernel and a skipped CUDA 12.8 cell."""
    shutil.copytree(EXAMPLE, tmp_path / "img2gray")
    shutil.copytree(FIXTURES / "noarch-kernel", tmp_path / "noarch-kernel")
    matrix = write(tmp_path / "matrix.yaml", """
        kernels:
          - path: img2gray
            version: 1.0.0
          - path: noarch-kernel
            version: 0.3.0
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
          "12.8": {}
        """)
    env = cache_env(factory_cache)

    def build(out: str, *args: str) -> Result:
        result = run_factory("build", matrix, "--out", tmp_path / out, "--runner", "local",
                             *args, env=env)
        assert result.exit == 0, result.stdout + result.stderr
        return result

    build("shard1", "--shard", "1/2")
    build("shard2", "--shard", "2/2")
    assert [p.name for p in (tmp_path / "shard1" / "files").glob("*.whl")] == [
        "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_34_x86_64.whl"]
    assert [p.name for p in (tmp_path / "shard2" / "files").glob("*.whl")] == [
        "noarch_kernel-0.3.0-py3-none-any.whl"]
    merged = run_factory("index", "--merge", tmp_path / "shard1", tmp_path / "shard2",
                         "--out", tmp_path / "merged")
    assert merged.exit == 0, merged.stderr
    build("single")

    def published(folder: str) -> dict[str, Any]:
        """The published tree, each wheel's upload time (when it entered an index) left out."""
        return {name: re.sub(rb'"upload(-|_)time": ?"[^"]*"', b"", data) if data else data
                for name, data in snapshot(tmp_path / folder).items()
                if not name.startswith((".factory", "logs"))}

    def uploaded(folder: str) -> dict[str, str]:
        return {entry["filename"]: entry["upload-time"]
                for page in (tmp_path / folder).glob("simple/*/index.json")
                for entry in json.loads(page.read_text())["files"]}

    single = published("single")
    assert published("merged") == single
    # each wheel keeps the time it entered its shard's index, not the merge's
    assert uploaded("merged") == {**uploaded("shard1"), **uploaded("shard2")}
    assert len(uploaded("merged")) == 2
    assert "cu128torch211" in (tmp_path / "single" / "browse" / "img2gray.json").read_text()
    assert sorted(p.name for p in (tmp_path / "merged" / "logs").iterdir()) == sorted(
        p.name for p in (tmp_path / "single" / "logs").iterdir())

    # A folder whose wheel has other bytes than its own index records (changed after its build)
    # stops the merge before it writes anything.
    shutil.copytree(tmp_path / "shard1", tmp_path / "tampered")
    (wheel,) = (tmp_path / "tampered" / "files").glob("*.whl")
    wheel.write_bytes(b"not the published wheel")
    before = snapshot(tmp_path / "merged")
    refused = run_factory("index", "--merge", tmp_path / "tampered", "--out", tmp_path / "merged")
    assert refused.exit == 1
    assert f"{wheel.name}: no build of " in refused.stderr and \
        "published it (its manifest records sha256 " in refused.stderr and \
        "nothing was merged" in refused.stderr, refused.stderr
    assert snapshot(tmp_path / "merged") == before


def test_the_json_plan_gives_each_cells_units_cost_and_shards_and_each_skip_its_reason(
        tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "many-units", tmp_path / "many-units")
    matrix = write(tmp_path / "matrix.yaml", """
        kernels:
          - path: many-units
            version: 1.0.0
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
          "12.8":
            sms: ["9.0"]
        """)
    args = ("plan", matrix, "--cache-dir", tmp_path / "cache")
    plain = json.loads(run_factory(*args).stdout)
    cell = "many-units/cu130torch211/x86_64"
    assert set(plain["cells"]) == {cell}
    assert plain["cells"][cell]["units"] == 9 and plain["cells"][cell]["shards"] == 1
    assert plain["cells"][cell]["core_seconds"] > 0
    (skipped,) = plain["skipped"]
    assert "cu128" in skipped and "torch-index" in plain["skipped"][skipped]
    split = json.loads(run_factory(*args, "--split-after", "60", "--cores", "4").stdout)
    assert split["cells"][cell]["shards"] == 3
    assert split["cells"][cell]["core_seconds"] == plain["cells"][cell]["core_seconds"]
    # a cost book committed beside the matrix decides the estimates of units never measured here
    (planned,) = plan_matrix(load_matrix(matrix), tmp_path / "cache", lambda text: None).cells
    CostBook(tmp_path / "measured").record("many-units", {
        cost_key(planned, unit): UnitCost(500.0, None, 1) for unit in planned.units
        if unit.compiled})
    matrix.write_text(matrix.read_text() + "costs: measured\n")
    booked = json.loads(run_factory(*args, "--split-after", "10m", "--cores", "4").stdout)
    assert booked["cells"][cell]["core_seconds"] == 9 * 500.0
    assert booked["cells"][cell]["shards"] == 2  # 4,500 core-s on 4 cores: 1,125 s, 2 jobs
