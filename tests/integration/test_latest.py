"""Never fall behind torch: `torch: {latest: N}` resolves against a torch index (a stand-in served
here, with torch-like releases, one newer than the factory knows and a release candidate),
`cuda: {follow: torch}` takes each release's CUDA from its wheel's metadata, `factory lock` pins
both and --locked / --offline build what it pins, and `factory plan --new SITE` lists only the
cells the served site lacks."""

from __future__ import annotations

import json
from pathlib import Path

from ..support.factory import REPO, run_factory, write
from ..support.installs import torch_index
from ..support.servers import static_server as served


def cells(matrix: Path, *arguments: str | Path) -> tuple[list[str], str]:
    result = run_factory("plan", matrix, *arguments)
    assert result.exit == 0, result.stdout + result.stderr
    return sorted(json.loads(result.stdout)["cells"]), result.stderr


def test_latest_resolves_locks_and_plan_new_lists_the_missing_cells(tmp_path: Path) -> None:
    root = tmp_path / "served"
    torch_index(root, {"2.13.0": "13.0.2", "2.14.0": "13.0.1", "2.14.1": "13.0.2",
                       "2.16.0": "13.2.1", "2.17.0rc1": "13.3.0"})
    with served(root) as url:
        matrix = write(tmp_path / "matrix.yaml", f"""
            kernels: [{{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}]
            torch: {{latest: 2, index: "{url}simple/"}}
            cuda: {{follow: torch, sms: ["9.0"]}}
        """)
        both = ["img2gray/cu130torch214/x86_64", "img2gray/cu132torch216/x86_64"]
        found, said = cells(matrix)
        assert found == both  # 2.16 is newer than the factory knows; 13.2 from its metadata
        assert f"torch: latest 2 on {url}simple/: 2.16.0 (CUDA 13.2, CPython 3.11), 2.14.1 " \
            "(CUDA 13.0, CPython 3.11)" in said

        refused = run_factory("plan", matrix, "--locked")
        assert refused.exit == 2
        assert refused.stderr.startswith(f"error: {matrix}:2: torch.latest: the lock pins no 2 "
                                         f"torch release(s) of {url}simple/; run `factory lock "
                                         "matrix.yaml`"), refused.stderr
        locked = run_factory("lock", matrix)
        assert locked.exit == 0, locked.stderr
        assert f"torch 2.16: 2.16.0 (CUDA 13.2) on {url}simple/" in locked.stdout
        lock = (tmp_path / "matrix.lock").read_text()
        assert '[[torch]]\nrelease = "2.16"\nversion = "2.16.0"\ncuda = "13.2"' in lock
        assert 'pre = false\npythons = ["3.11"]\n' in lock

        # 2.17 is released: a plain plan takes it (and says the lock differs); the lock holds
        torch_index(root, {"2.14.1": "13.0.2", "2.16.0": "13.2.1", "2.17.0": "13.3.0"})
        found, said = cells(matrix)
        assert found == ["img2gray/cu132torch216/x86_64", "img2gray/cu133torch217/x86_64"]
        assert "note: matrix.lock pins torch 2.16.0, 2.14.1; `factory lock matrix.yaml " \
               "--upgrade` takes the index's newest" in said
        assert cells(matrix, "--locked")[0] == both
        assert cells(matrix, "--offline")[0] == both
        # locking again keeps the pinned releases; --upgrade moves them
        kept = run_factory("lock", matrix)
        assert kept.exit == 0 and "unchanged: " in kept.stdout, kept.stdout + kept.stderr
        assert "torch: matrix.lock pins 2.16.0, 2.14.1; `factory lock matrix.yaml --upgrade` " \
               "takes the index's newest" in kept.stderr + kept.stdout
        assert (tmp_path / "matrix.lock").read_text() == lock
        upgraded = run_factory("lock", matrix, "--upgrade")
        assert upgraded.exit == 0, upgraded.stderr
        assert 'release = "2.17"\nversion = "2.17.0"' in (tmp_path / "matrix.lock").read_text()
        assert cells(matrix, "--locked")[0] == found

        # release candidates only when asked for
        torch_index(root, {"2.16.0": "13.2.1", "2.17.0": "13.3.0", "2.18.0rc2": "13.3.0"})
        write(matrix, matrix.read_text().replace("latest: 2,", "latest: 2, pre: true,"))
        assert cells(matrix)[0] == ["img2gray/cu133torch217/x86_64",
                                    "img2gray/cu133torch218/x86_64"]

        # a site that has the 2.17 cell: --new leaves it out
        wheel = "img2gray-1.0.0+cu133torch217-cp39-abi3-manylinux_2_28_x86_64.whl"
        write(root / "site" / "simple" / "index.html", '<a href="img2gray/">img2gray</a>\n')
        write(root / "site" / "simple" / "img2gray" / "index.html",
              f'<a href="../../files/{wheel}#sha256={"1" * 64}">{wheel}</a>\n')
        found, said = cells(matrix, "--new", f"{url}site/")
        assert found == ["img2gray/cu133torch218/x86_64"]
        assert f"--new: 1 cell(s) already in {url}site/, 1 to build" in said


def test_follow_with_listed_releases_pairs_each_with_its_pypi_cuda(tmp_path: Path) -> None:
    matrix = write(tmp_path / "matrix.yaml", f"""
        kernels: [{{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}]
        torch: ["2.10", "2.11"]
        cuda: {{follow: torch, sms: ["9.0"]}}
    """)
    assert cells(matrix)[0] == ["img2gray/cu128torch210/x86_64", "img2gray/cu130torch211/x86_64"]


def test_latest_and_follow_refuse_bad_input(tmp_path: Path) -> None:
    for torch, cuda, message in [
            ("{latest: 0}", '{"13.0": {}}', "torch.latest: give how many of the newest torch "
                                             "releases to build, 1 to 20"),
            ('{latest: 2, index: "https://u:p@example.org/simple/"}', '{"13.0": {}}',
             "torch.index: 'https://***@example.org/simple/' holds a password"),
            ("{latest: 2, newest: 1}", '{"13.0": {}}', "torch.newest: unknown key"),
            ('["2.11"]', "{follow: cuda}", "cuda.follow: the only thing CUDA versions can follow"),
            ('["2.11"]', '{follow: torch, sms: ["9.0a"]}', "cuda.sms[0]: '9.0a' is not an SM"),
    ]:
        matrix = write(tmp_path / "matrix.yaml", f"""
            kernels: [{{path: {REPO / "examples" / "img2gray"}, version: 1.0.0}}]
            torch: {torch}
            cuda: {cuda}
        """)
        result = run_factory("plan", matrix)
        assert result.exit == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, \
            result.stderr
        assert "u:p" not in result.stderr


def test_a_release_newer_than_the_table_gets_the_cpythons_its_index_has(tmp_path: Path) -> None:
    """torch 2.16 (unknown to the factory) has wheels for 3.12 and free-threaded 3.13t only:
    a setup.py project's 3.11 cell is skipped with that reason, and the lock keeps the list."""
    root = tmp_path / "served"
    torch_index(root, {"2.16.0": "13.2.1"}, ("cp312-cp312", "cp313-cp313t"))
    with served(root) as url:
        matrix = write(tmp_path / "matrix.yaml", f"""
            kernels: [{{path: {REPO / "examples" / "relu-scale"}, version: 1.0.0}}]
            torch: {{latest: 1, index: "{url}simple/"}}
            cuda: {{follow: torch, sms: ["9.0"]}}
            python: ["3.11", "3.12"]
        """)
        result = run_factory("plan", matrix, "--format", "json")
        assert result.exit == 0, result.stdout + result.stderr
        plan = json.loads(result.stdout)
        assert sorted(plan["cells"]) == ["relu-scale/cu132torch216/x86_64/cp312"]
        assert plan["skipped"] == {"relu-scale/cu132torch216/x86_64/cp311": (
            "torch 2.16 has no wheels for CPython 3.11 (it has 3.12 and free-threaded 3.13t)")}
        assert run_factory("lock", matrix).exit == 0
        assert 'pythons = ["3.12", "3.13t"]' in (tmp_path / "matrix.lock").read_text()
        again = json.loads(run_factory("plan", matrix, "--locked", "--format", "json").stdout)
        assert again["skipped"] == plan["skipped"]
