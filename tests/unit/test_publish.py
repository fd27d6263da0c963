"""`factory publish`: to a real pypiserver (from PyPI) with authentication, then installed from
it with pip; and the static tree to a folder, to S3 (moto's server, through boto3) and to a Hub
repo (tests/support/hubserver.py, through huggingface_hub), in the order that keeps links valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory.publish.registry import index_url_for

from ..support.factory import factory_main, snapshot
from ..support.wheels import indexed_with_a_log


@pytest.fixture
def index_out(tmp_path: Path) -> Path:
    return indexed_with_a_log(tmp_path / "index")


@pytest.mark.parametrize("upload, index", [
    ("https://upload.pypi.org/legacy/", "https://pypi.org/simple/"),
    ("https://test.pypi.org/legacy/", "https://test.pypi.org/simple/"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/simple/"),  # pypiserver
    ("https://acme.jfrog.io/artifactory/api/pypi/kernels",
     "https://acme.jfrog.io/artifactory/api/pypi/kernels/simple/"),
    ("https://gitlab.com/api/v4/projects/7/packages/pypi",
     "https://gitlab.com/api/v4/projects/7/packages/pypi/simple/"),
    ("https://warehouse.example.org/legacy/", "https://warehouse.example.org/simple/"),
])
def test_the_index_beside_an_upload_url(upload: str, index: str) -> None:
    assert index_url_for(upload) == index


def test_publish_refuses_bad_input_and_writes_nothing(index_out: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.pypirc of the user's
    before = snapshot(tmp_path)
    cases = [
        (["publish", tmp_path / "missing"], "missing: no such folder"),
        (["publish", tmp_path / "index" / "files", "--to", tmp_path / "site"],
         "not a factory index"),
        (["publish", index_out, "--to", index_out / "site"], "is the output folder, or inside"),
        (["publish", index_out, "--to", "gs://bucket/x"], "'gs://bucket/x' is not a folder, s3://"),
        (["publish", index_out, "--to", "s3://B!/x"], "'B!' is not an S3 bucket name"),
        (["publish", index_out, "--to", "hf://just-a-name"], "does not name a repo"),
        (["publish", index_out, "--to", tmp_path / "site", "--index-url", "http://x/simple/"],
         "--index-url: only applies to a registry"),
        (["publish", index_out, "--to", tmp_path / "site", "--repository-url", "http://x/"],
         "not allowed with argument"),
        (["publish", index_out, "--repository-url", "https://upload.pypi.org/legacy/"],
         "refuses local version labels such as 1.0.0+cu130torch211"),
        (["publish", index_out, "--repository-url", "http://bob:hunter2@127.0.0.1:9/"],
         "holds a password"),
        (["publish", index_out, "--repository", "nosuchsection"],
         "Missing 'nosuchsection' section"),
    ]
    for args, message in cases:
        result = factory_main(*map(str, args), capsys=capsys)
        assert result.exit == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, \
            (args, result.stderr)
        assert "hunter2" not in result.stdout + result.stderr
    assert snapshot(tmp_path) == before
