"""`factory init`: the matrix it proposes follows what the kernel declares and what the factory
knows of torch and CUDA releases; bad input gets one line and writes nothing
(tests/integration/test_init.py: what it writes is a matrix `factory plan` takes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from factory.config.matrix import load_matrix
from factory.pipeline.init import read_kernel
from factory.plan.starter import propose
from factory.policy import cuda_policy, torch_releases
from factory.values.versions import Version

from ..support.checks import present
from ..support.factory import REPO, factory_main, snapshot
from ..support.plans import starter_kernel as kernel


def newest(count: int,
           accepts: Callable[[Version], bool] = lambda version: True) -> list[Version]:
    return sorted((version for version in torch_releases() if accepts(version)),
                  reverse=True)[:count]


def test_the_newest_torches_their_pypi_cuda_and_its_default_sms(tmp_path: Path) -> None:
    proposal = propose(read_kernel(kernel(tmp_path)), 3)
    assert list(proposal.torches) == newest(3)
    releases = torch_releases()
    assert {cuda for cuda, _, _ in proposal.cudas} == {releases[t].pypi_cuda for t in newest(3)}
    for cuda, sms, torches in proposal.cudas:
        assert sms == present(cuda_policy(cuda)).default
        assert all(releases[torch].pypi_cuda == cuda for torch in torches)
    pairs = {(torch, cuda) for torch in proposal.torches for cuda, _, _ in proposal.cudas}
    assert set(proposal.excluded) == {(torch, cuda) for torch, cuda in pairs
                                      if releases[torch].pypi_cuda != cuda}


@pytest.mark.parametrize(("declared", "major"), [('["9.0a"]', {9}), ('["8.0"]', {8}),
                                                  ('["8.0", "10.0"]', {8, 10})])
def test_sms_are_those_the_declared_capabilities_serve(tmp_path: Path, declared: str,
                                                       major: Any) -> None:
    spec = read_kernel(kernel(tmp_path, capabilities=f"cuda-capabilities = {declared}"))
    for cuda, sms, _ in propose(spec, 2).cudas:
        assert {sm.major for sm in sms} == major
        assert set(sms) == {sm for sm in present(cuda_policy(cuda)).default if sm.major in major}


def test_torch_bounds_and_a_stable_abi_narrow_the_torches(tmp_path: Path) -> None:
    oldest, *_ = sorted(torch_releases())
    bounded = kernel(tmp_path, "bounded", torch=f'maxver = "{oldest}"')
    assert propose(read_kernel(bounded), 2).torches == (oldest,)
    third = newest(3)[-1]
    stable = kernel(tmp_path, "stable", torch=f'minver = "{third}"')
    assert propose(read_kernel(stable), 5).torches == tuple(newest(3))


def test_named_torches_and_sms(tmp_path: Path) -> None:
    proposal = propose(read_kernel(REPO / "examples" / "img2gray"), 2, (Version("2.11"),),
                       (Version("9.0"), Version("10.0"), Version("7.0")))
    assert proposal.torches == (Version("2.11"),)
    assert [(cuda, sms) for cuda, sms, _ in proposal.cudas] == [
        (Version("13.0"), (Version("9.0"), Version("10.0")))]  # CUDA 13 cannot compile 7.0


def test_a_matrix_elsewhere_names_the_kernel_relative_to_itself(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = kernel(tmp_path)
    target = tmp_path / "matrices" / "blend.yaml"
    result = factory_main("init", repo, "--out", target, "--newest", "1", capsys=capsys)
    assert result.exit == 0, result.stderr
    assert yaml.safe_load(target.read_text())["kernels"] == [
        {"path": "../blend", "version": "0.1.0"}]


@pytest.mark.parametrize(("setup", "arguments", "message"), [
    (lambda root: None, ["missing"], "missing: is not a folder"),
    (lambda root: (root / "empty").mkdir(), ["empty"],
     "empty: is not a kernel repo: it has no build.toml, setup.py or pyproject.toml"),
    (lambda root: kernel(root, "cpuonly", backends='["cpu"]'), ["cpuonly"],
     "cpuonly/build.toml: declares no CUDA backend (backends: cpu); the factory builds CUDA "
     "kernels"),
    (lambda root: kernel(root), ["blend", "--torch", "2.99"],
     "--torch 2.99: not a torch release the factory knows"),
    (lambda root: kernel(root, torch='maxver = "2.5"'), ["blend", "--torch", "2.11"],
     "blend/build.toml: blend does not accept torch 2.11"),
    (lambda root: kernel(root, capabilities='cuda-capabilities = ["9.0"]'),
     ["blend", "--torch", "2.11", "--sms", "7.0"], "blend/build.toml: blend: no CUDA version "
     "fits (CUDA 13.0: none of the SMs named is one it can compile for)"),
    (lambda root: (kernel(root), (root / "blend" / "matrix.yaml").write_text("mine\n")),
     ["blend"], "blend/matrix.yaml: is already there; pass --force to replace it"),
])
def test_bad_input_gets_one_line_and_nothing_is_written(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, setup: Any,
                                                        arguments: list[str], message: str) -> None:
    setup(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = factory_main("init", *arguments, capsys=capsys)
    assert result.exit == 2
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert snapshot(tmp_path) == before


def test_a_kernel_that_fits_none_of_the_sms_named_gets_a_matrix_that_skips_it(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = kernel(tmp_path, capabilities='cuda-capabilities = ["10.0a"]')
    result = factory_main("init", repo, "--torch", "2.11", "--sms", "9.0", capsys=capsys)
    assert result.exit == 0, result.stderr
    assert "blend fits no cell of CUDA 13.0: the kernel's cuda-capabilities (10.0a) serve none " \
           "of the SMs named (9.0); its cells are planned as skipped, with that reason" \
           in result.stdout
    matrix = load_matrix(repo / "matrix.yaml")
    assert [[str(sm) for sm in cuda.sms] for cuda in matrix.cuda] == [["9.0"]]
    assert "# the kernel fits no cell of CUDA 13.0" in (repo / "matrix.yaml").read_text()


def test_follow_writes_latest_and_follow_that_the_matrix_reader_takes(tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    repo = kernel(tmp_path, capabilities='cuda-capabilities = ["8.0", "9.0"]')
    result = factory_main("init", repo, "--follow", "--newest", "3", capsys=capsys)
    assert result.exit == 0, result.stderr
    matrix = load_matrix(repo / "matrix.yaml")
    assert matrix.torch_latest is not None and matrix.torch_latest.count == 3
    assert matrix.torch_latest.index == "https://pypi.org/simple/"
    assert matrix.cuda_follow is not None and matrix.torch == () and matrix.cuda == ()
    served = {sm for cuda, sms, _ in propose(read_kernel(repo), 3).cudas for sm in sms}
    assert set(matrix.cuda_follow.sms or ()) == served
    assert {sm.major for sm in served} == {8, 9}
