"""provenance.json's codec: every record it writes reads back as the same value and the same
bytes, and a record that is not one names what is wrong with it."""

from __future__ import annotations

import json
import string
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factory.wheel.provenance import (
    SCHEMA,
    BuildFacts,
    GitFacts,
    KernelFacts,
    Provenance,
    ProvenanceError,
    SourceFacts,
)

from ..support.factory import factory_main, snapshot

WRITTEN = {  # a record as a git-sourced kernel-builder build wrote it
    "schema": SCHEMA,
    "factory": "0.1.0",
    "kernel": {"name": "img2gray", "version": "1.0.0", "ops_namespace": "_img2gray_1a2b3c4",
               "build_toml_sha256": "ab" * 32},
    "source": {"kind": "git", "location": "https://github.com/org/img2gray",
               "tree_sha256": "cd" * 32, "git": {"commit": "ef" * 20, "dirty": False},
               "revision": "v1.0.0", "subdir": None},
    "cell": {"id": "cu130torch211", "torch": "2.11", "cuda": "13.0", "sms": ["9.0"],
             "gpu_code": ["sm_90"], "platform": "x86_64"},
    "toolchain": {"cxx": "g++ 12.2.0", "nvcc": "13.0.88", "python": "3.11.7"},
    "build": {"root": "/tmp/kernel-wheel-factory/build", "source_date_epoch": 1764115200,
              "time": "2025-11-26T00:00:00Z", "builder": "kernel-wheel-factory/builder:1"},
    "gpu_code_sizes": {"sm_90": [1024, 4096]},
}


def test_a_written_record_reads_back_as_the_same_bytes() -> None:
    record = Provenance.from_json(WRITTEN)
    assert record.source.git == GitFacts("ef" * 20, False)
    assert record.build.builder == "kernel-wheel-factory/builder:1"
    assert record.build.index_url is None and record.kernel.project_file is None
    assert json.dumps(record.to_json(), sort_keys=True) == json.dumps(WRITTEN, sort_keys=True)


def test_a_path_source_names_no_revision_and_a_pep517_record_its_project_file() -> None:
    record = Provenance("0.1.0", KernelFacts("ext", "2.0", "_ext_0", "00" * 32, "setup.py"),
                        SourceFacts("path", "/src/ext", "11" * 32), {"id": "c", "project":
                                                                        "pep517"},
                        {}, BuildFacts("/b", 0, "1970-01-01T00:00:00Z"),
                        gpu_code_found={"ext/_C.so": ["sm_80", "sm_90"]})
    data = record.to_json()
    assert "revision" not in data["source"] and "subdir" not in data["source"]
    assert data["kernel"]["project_file"] == "setup.py"
    assert "builder" not in data["build"] and "gpu_code_sizes" not in data
    assert Provenance.from_json(json.loads(json.dumps(data))) == record


@pytest.mark.parametrize("change, message", [
    (lambda r: r.pop("kernel"), "kernel is missing or not an object"),
    (lambda r: r["kernel"].pop("version"), "kernel.version is missing or not text"),
    (lambda r: r["source"].update(kind="ftp"), "source.kind is 'ftp', not one of path, git, hub"),
    (lambda r: r["source"]["git"].update(dirty="no"), "source.git.dirty is not true or false"),
    (lambda r: r["build"].update(source_date_epoch="1764115200"),
     "build.source_date_epoch is not a whole number"),
    (lambda r: r.update(schema="kernel-wheel-factory/provenance/0"),
     "its schema is 'kernel-wheel-factory/provenance/0'"),
    (lambda r: r["toolchain"].update(cxx=12), "toolchain has a value that is not text"),
    (lambda r: r["gpu_code_sizes"].update(sm_90=[1]), "gpu_code_sizes.sm_90 is not [stored, "),
    (lambda r: r.update(cell=["cu130"]), "cell is missing or not an object"),
])
def test_a_damaged_record_is_refused_with_the_field_named(change: Any, message: str) -> None:
    damaged = json.loads(json.dumps(WRITTEN))
    change(damaged)
    with pytest.raises(ProvenanceError) as refused:
        Provenance.from_json(damaged)
    assert str(refused.value).startswith(message)
    assert Provenance.read(damaged) is None


def test_no_record_reads_as_none() -> None:
    assert Provenance.read(None) is None and Provenance.read([]) is None


text = st.text(string.ascii_letters + string.digits + "._-/:+ ", max_size=20)
optional = st.none() | text
records = st.builds(
    Provenance,
    factory=text,
    kernel=st.builds(KernelFacts, text, text, text, text, optional),
    source=st.one_of(
        st.builds(SourceFacts, st.just("path"), text, text,
                  st.none() | st.builds(GitFacts, text, st.booleans())),
        st.builds(SourceFacts, st.sampled_from(["git", "hub"]), text, text,
                  st.builds(GitFacts, text, st.booleans()), optional, optional)),
    cell=st.dictionaries(text, text | st.lists(text, max_size=3), max_size=4),
    toolchain=st.dictionaries(text, text, max_size=4),
    build=st.builds(BuildFacts, text, st.integers(0, 2**40), text, optional, optional),
    gpu_code_sizes=st.none() | st.dictionaries(
        text, st.lists(st.integers(0, 2**40), min_size=2, max_size=2), max_size=3),
    gpu_code_found=st.none() | st.dictionaries(text, st.lists(text, max_size=3), max_size=3),
)


@given(records)
def test_every_record_survives_its_json(record: Provenance) -> None:
    data = json.loads(json.dumps(record.to_json(), sort_keys=True))
    assert Provenance.from_json(data) == record
    assert Provenance.from_json(data).to_json() == data


def test_verify_refuses_a_damaged_record_in_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    damaged = json.loads(json.dumps(WRITTEN))
    damaged["build"]["source_date_epoch"] = "yesterday"
    wheel = tmp_path / "img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("img2gray/__init__.py", "")
        info = "img2gray-1.0.0+cu130torch211.dist-info"
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: img2gray\n"
                                             "Version: 1.0.0+cu130torch211\n")
        archive.writestr(f"{info}/provenance.json", json.dumps(damaged))
    before = snapshot(tmp_path)
    refused = factory_main("verify", wheel, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert refused.exit == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"error: {wheel}: has a provenance record that cannot be rebuilt from: "
        "build.source_date_epoch is not a whole number"]
    assert snapshot(tmp_path) == before
