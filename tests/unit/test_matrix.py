"""matrix.yaml: defaults, labels, and the plan of cells (what is built, skipped and why)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from packaging.version import Version

from factory.config.matrix import load_matrix
from factory.defaults import host_platform

from ..support.factory import write
from ..support.plans import kernel


def test_defaults(tmp_path: Path) -> None:
    kernel(tmp_path)
    matrix = load_matrix(write(tmp_path / "matrix.yaml", """
        kernels: [{path: demo, version: 1.0}]
        torch: [2.11]
        cuda: {13.0: }
    """))
    (cuda,) = matrix.cuda
    assert [str(s) for s in cuda.sms] == ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0",
                                          "11.0", "12.0", "12.1"]
    assert cuda.ptx and cuda.home is None and cuda.torch_index is None
    assert matrix.platforms == (host_platform(),)
    assert matrix.kernels[0].version == "1.0"
    assert [entry.version for entry in matrix.torch] == [Version("2.11")]


def test_the_matrix_tests_table_sets_every_kernels_and_a_kernel_its_own(tmp_path: Path) -> None:
    kernel(tmp_path)
    kernel(tmp_path, name="other")
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    with zipfile.ZipFile(wheelhouse / "einops-0.8.2-py3-none-any.whl", "w") as archive:
        archive.writestr("einops-0.8.2.dist-info/METADATA",
                         "Metadata-Version: 2.1\nName: einops\nVersion: 0.8.2\n")
    matrix = load_matrix(write(tmp_path / "matrix.yaml", """
        kernels:
          - {path: demo, version: 1.0, tests: {budget: 90s, keyword: "not slow"}}
          - {path: other, version: 1.0}
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
        tests: {required: true, budget: 5m, without: [transformers], timeout: 20m}
        wheelhouse: wh
    """))
    demo, other = (entry.tests for entry in matrix.kernels)
    assert (demo.budget, demo.keyword, demo.required, demo.without, demo.timeout) == \
        (90.0, "not slow", True, ("transformers",), 1200.0)
    assert (other.budget, other.keyword, other.required, other.chosen) == \
        (300.0, None, True, False)
    assert matrix.wheelhouses == (wheelhouse.resolve(),)
    plain = load_matrix(write(tmp_path / "plain.yaml", """
        kernels: [{path: demo, version: 1.0}]
        torch: ["2.11"]
        cuda: {"13.0": {sms: ["9.0"]}}
    """))
    assert plain.kernels[0].tests.budget is None and plain.kernels[0].tests.required is None


def test_the_publisher_of_the_attestations_is_pinned_or_refused_where_it_is(
        tmp_path: Path) -> None:
    import pytest

    from factory.config.publisher import Publisher
    from factory.errors import ConfigError

    kernel(tmp_path)
    top = 'kernels: [{path: demo, version: 1.0}]\ntorch: [2.11]\ncuda: {13.0: }\n'
    matrix = load_matrix(write(tmp_path / "matrix.yaml", top + "publisher: {github: "
                                                                "owner/kernels, workflow: w.yml}"))
    assert matrix.publisher == Publisher("GitHub", "owner/kernels", "w.yml")
    for value, message in (
            ("{github: owner/kernels}", r"matrix\.yaml:4: publisher: missing required key "
                                        r"'workflow'"),
            ("{github: a/b, gitlab: a/b, workflow: w.yml}", "name one of github"),
            ("{github: owner, workflow: w.yml}", r"publisher\.github: 'owner' is not OWNER/REPO"),
            ("{gitlab: a/b, workflow: ../w.yml}", "is not a workflow file")):
        with pytest.raises(ConfigError, match=message):
            load_matrix(write(tmp_path / "matrix.yaml", top + f"publisher: {value}"))
