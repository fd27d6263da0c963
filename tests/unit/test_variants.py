"""Wheel variants (PEP 825): a labelled wheel re-issued as a variant wheel with the same
binaries, its properties, the index-level variants.json, and what the doctor says of them."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from factory import doctor
from factory.errors import IndexConflict, WheelReadError
from factory.index.records import FileRecord
from factory.index.variants import (
    consistent_variants,
    make_variants,
    variant_indexes,
    variant_url,
    variants_files,
)
from factory.wheel.read import read_wheel
from factory.wheel.variant import (
    SCHEMA,
    gpu_properties,
    make_variant,
    property_lines,
    split_variant,
    variant_filename,
    variants_document,
)

from ..support.checks import present
from ..support.wheels import make_wheel

SM90 = {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["90_real", "90_virtual"]}}


def test_gpu_code_becomes_the_nvidia_providers_properties() -> None:
    assert gpu_properties("13.0", ["sm_90", "compute_90"]) == SM90
    assert gpu_properties("12.8", ["sm_80", "sm_90a", "sm_100f", "sm_120"]) == {"nvidia": {
        "cuda_version_lower_bound": ["12.8"],
        "sm_arch": ["80_real", "90_real", "100_real", "120_real"]}}
    # arch-specific PTX runs on its own architecture only: never "virtual"
    assert present(gpu_properties("13.0", ["compute_90a"]))["nvidia"]["sm_arch"] == ["90_real"]
    assert gpu_properties("13.0", []) is None  # pure Python, CPU
    assert gpu_properties(None, ["sm_90"]) is None
    assert gpu_properties("not a version", ["sm_90"]) is None
    assert property_lines(SM90) == ["nvidia :: cuda_version_lower_bound :: 13.0",
                                    "nvidia :: sm_arch :: 90_real",
                                    "nvidia :: sm_arch :: 90_virtual"]


def _members(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: (archive.read(info), info.date_time, info.external_attr)
                for info in archive.infolist()}


def test_a_variant_wheel_holds_the_same_binaries_under_the_public_version(tmp_path: Path) -> None:
    files = tmp_path / "out" / "files"
    source = make_wheel(files, "img2gray", "1.0.0+cu130torch211",
                        payload="BINARY = " + repr(bytes(range(256))) + "\n")
    variant = make_variant(source, files, "cu130torch211", SM90)
    assert variant.name == "img2gray-1.0.0-cp39-abi3-linux_x86_64-cu130torch211.whl"
    assert variant.name == variant_filename(source.name, "cu130torch211")
    before, after = _members(source), _members(variant)
    old, new = "img2gray-1.0.0+cu130torch211.dist-info", "img2gray-1.0.0.dist-info"
    assert {name.replace(old, new) for name in before} | {f"{new}/variant.json"} == set(after)
    for name, (data, when, mode) in before.items():
        if name.startswith(old + "/") and name.rsplit("/", 1)[1] in ("METADATA", "RECORD"):
            continue
        assert after[name.replace(old, new)] == (data, when, mode), name
    metadata = after[f"{new}/METADATA"][0].decode()
    assert "\nVersion: 1.0.0\n" in metadata and "cu130torch211" not in metadata
    # RECORD names every member with its hash and size, and itself without
    rows = list(csv.reader(io.StringIO(after[f"{new}/RECORD"][0].decode())))
    assert {row[0] for row in rows} == set(after)
    for name, digest, size in rows:
        if name.endswith("/RECORD"):
            assert (digest, size) == ("", "")
            continue
        data = after[name][0]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), name
    document = after[f"{new}/variant.json"][0]
    assert json.loads(document)["$schema"] == SCHEMA
    VariantDistInfo(document, expected_label="cu130torch211")  # variantlib accepts it
    # the same wheel always gives the same variant, byte for byte
    again = make_variant(source, tmp_path, "cu130torch211", SM90)
    assert again.read_bytes() == variant.read_bytes()
    read = read_wheel(variant)
    assert (read.name, read.version, read.label, read.variant) == (
        "img2gray", "1.0.0", "cu130torch211", SM90)


def test_variant_file_names_and_documents_are_checked(tmp_path: Path) -> None:
    assert split_variant("a-1.0-cp39-abi3-manylinux_2_28_x86_64-cu130.whl") == (
        "a-1.0-cp39-abi3-manylinux_2_28_x86_64.whl", "cu130")
    assert split_variant("a-1.0+cu130-cp39-abi3-linux_x86_64.whl") == (
        "a-1.0+cu130-cp39-abi3-linux_x86_64.whl", None)
    assert split_variant("a-1.0-1build-cp39-abi3-linux_x86_64.whl")[1] is None
    with pytest.raises(WheelReadError, match="PEP 825"):
        variants_document({"Not-A-Label": SM90})
    with pytest.raises(WheelReadError, match="PEP 825"):
        variants_document({"cu130": {"nvidia": {"sm_arch": ["9.0 real"]}}})
    # a variant wheel whose variant.json names another label, or none, is no variant wheel
    files = tmp_path / "out" / "files"
    variant = make_variant(make_wheel(files, "k", "1.0+cu130torch211"), files,
                           "cu130torch211", SM90)
    renamed = variant.with_name(variant.name.replace("-cu130torch211.", "-other."))
    variant.rename(renamed)
    with pytest.raises(WheelReadError, match="not valid variant metadata for label other"):
        read_wheel(renamed)
    bare = tmp_path / "k-1.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr("k/__init__.py", "")
    with pytest.raises(WheelReadError, match=r"has no \.dist-info folder"):
        make_variant(bare, tmp_path, "cu130torch211", SM90)
    assert not list(tmp_path.glob("*-cu130torch211.whl"))  # nothing left behind
    plain = make_wheel(files, "k", "2.0")
    named = plain.with_name(plain.name.replace(".whl", "-cu130.whl"))
    plain.rename(named)
    with pytest.raises(WheelReadError, match=r"has no variant\.json"):
        read_wheel(named)


def _record(filename: str, label: str | None, version: str = "1.0.0", torch: str = "2.11",
            variant: Any = SM90, **summary: Any) -> FileRecord:
    return FileRecord(filename, "img2gray", "img2gray", version, label, "0" * 64, 1, 1,
                      "0" * 64, ">=3.9", "2026-11-26T00:00:00.000000Z", None, "==2.11.*",
                      {"torch": torch, "cuda": "13.0", "gpu_code": ["sm_90"],
                       **({"variant": variant} if variant else {}), **summary})


def test_the_variants_json_of_a_release_lists_every_label_once() -> None:
    sm80 = {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["80_real"]}}
    records = [_record("a-cu130torch211.whl", "cu130torch211"),
               _record("b-cu130torch211.whl", "cu130torch211"),  # another Python, same label
               _record("c-cu130torch211sm80.whl", "cu130torch211sm80", variant=sm80),
               _record("d-cu130torch211.whl", "cu130torch211", version="1.1.0"),
               _record("e+cu130torch211.whl", "cu130torch211", version="1.0.0+cu130torch211",
                       variant=None)]
    documents = variants_files("img2gray", records)
    assert sorted(documents) == ["img2gray-1.0.0-variants.json", "img2gray-1.1.0-variants.json"]
    first = json.loads(documents["img2gray-1.0.0-variants.json"])
    assert first["variants"] == {"cu130torch211": SM90, "cu130torch211sm80": sm80}
    assert first["default-priorities"] == {"namespace": ["nvidia"]}
    assert set(first["providers"]) == {"nvidia"}
    VariantsJson(first)  # variantlib reads it
    assert variant_url("2.11") == "variants/torch211/simple/"
    assert variant_url("2.5.0a0+nv24.10") == "variants/torch25/simple/"
    assert variant_url("not a version") is None
    assert variant_indexes(records[0], {}) == ["variants/torch211/simple"]
    # a stable-ABI wheel is in the variants index of every torch release it serves
    stable = _record("f-cu13abi.whl", "cu13abi", stable_abi="2.10")._replace(torch=">=2.10")
    catalogue = {"img2gray": [("cu130torch210", "2.10", "13.0"),
                              ("cu130torch211", "2.11", "13.0"),
                              ("cu128torch211", "2.11", "12.8")]}
    assert variant_indexes(stable, catalogue) == ["variants/torch210/simple",
                                                  "variants/torch211/simple"]


def test_a_label_means_one_set_of_properties_per_release() -> None:
    other = {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["80_real"]}}
    records = {"a.whl": _record("a.whl", "cu130torch211"),
               "b.whl": _record("b.whl", "cu130torch211", variant=other),
               "c.whl": _record("c.whl", "cu130torch211", version="1.1.0", variant=other)}
    problems = consistent_variants(records)
    assert sorted(records) == ["a.whl", "c.whl"]
    assert problems == ["b.whl: variant label cu130torch211 already means other properties "
                        "in a.whl (a label is one set of properties per release, PEP 825): "
                        "left out of the index; move it out of files/"]
    # a published wheel keeps its place: one added later is the one left out
    records = {"a.whl": _record("a.whl", "cu130torch211"),
               "b.whl": _record("b.whl", "cu130torch211", variant=other)}
    assert consistent_variants(records, published=["b.whl"])[0].startswith(
        "a.whl: variant label cu130torch211 already means other properties in b.whl")
    assert list(records) == ["b.whl"]


def test_variants_are_made_once_from_compiled_labelled_wheels(tmp_path: Path) -> None:
    files = tmp_path / "files"
    compiled = make_wheel(files, "img2gray", "1.0.0+cu130torch211")
    noarch = make_wheel(files, "noarch", "1.0.0", tag="py3-none-any")
    records = {compiled.name: _record(compiled.name, "cu130torch211", variant=None),
               noarch.name: _record(noarch.name, None, variant=None, gpu_code=[])}
    made = make_variants(files, records)
    assert list(made) == ["img2gray-1.0.0-cp39-abi3-linux_x86_64-cu130torch211.whl"]
    first = (files / next(iter(made))).stat().st_mtime_ns
    assert make_variants(files, records) == {}  # there already: kept as it is
    assert (files / next(iter(made))).stat().st_mtime_ns == first


def rewritten(wheel: Path, change: Callable[..., Any]) -> None:
    """The wheel's members, as `change` leaves the (name, bytes) list, written back."""
    with zipfile.ZipFile(wheel) as archive:
        members = [(name, archive.read(name)) for name in archive.namelist()]
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in change(members):
            archive.writestr(name, data)


@pytest.mark.parametrize("how", ["no RECORD", "a ../ member", "an absolute member"])
def test_a_wheel_that_cannot_be_reissued_as_it_is_is_refused_in_one_line(tmp_path: Path,
        how: str) -> None:
    files = tmp_path / "files"
    wheel = make_wheel(files, "img2gray", "1.0.0+cu130torch211")
    rewritten(wheel, {
        "no RECORD": lambda members: [m for m in members if not m[0].endswith("/RECORD")],
        "a ../ member": lambda members: [*members, ("img2gray/../../evil.py", b"")],
        "an absolute member": lambda members: [*members, ("/tmp/evil.py", b"")],
    }[how])
    records = {wheel.name: _record(wheel.name, "cu130torch211", variant=None)}
    with pytest.raises(IndexConflict) as raised:
        make_variants(files, records)
    said = {"no RECORD": "has no RECORD in its .dist-info",
            "a ../ member": "holds the member 'img2gray/../../evil.py', which leads outside",
            "an absolute member": "holds the member '/tmp/evil.py', which leads outside"}[how]
    assert said in str(raised.value) and "no variant wheel was made of it" in str(raised.value)
    assert sorted(path.name for path in files.iterdir()) == [wheel.name]


def test_a_refused_property_value_is_one_reason_not_a_logged_traceback(
        capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(WheelReadError, match="must match regex"):
        variants_document({"cu130torch211": {"nvidia": {"sm_arch": ["9 0"]}}})
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_the_doctor_names_the_variants_index_of_a_fitting_cell(tmp_path: Path) -> None:
    variant: dict[str, Any] = {
        "filename": "img2gray-1.0.0-cp39-abi3-manylinux_2_28_x86_64-cu130torch211.whl",
               "variant": {"label": "cu130torch211", "index": "variants/torch211/simple/",
                           "properties": property_lines(SM90)}}
    cell = doctor._clean_cell({"cuda": "13.0", "torch": "2.11", "label": "cu130torch211",
                               "wheels": [], "variants": [variant]})
    wheel = {"filename": "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_28_x86_64.whl"}
    fit = doctor._fit("https://example.org/k/", "img2gray", wheel, cell, None)
    assert fit["variants"] == {
        "index": "https://example.org/k/variants/torch211/simple/",
        "uv": "uv pip install img2gray --index https://example.org/k/variants/torch211/simple/"
              " --preview-features wheel-variants",
        "label": "cu130torch211", "properties": property_lines(SM90)}
    lines = doctor.describe_diagnosis([{"name": "img2gray", "fits": fit, "misses": []}])
    assert lines[-2:] == [
        f"  {fit['variants']['uv']}",
        "  (the variants index: uv chooses the CUDA build and GPU code for this machine; this "
        "wheel there is variant cu130torch211: nvidia :: cuda_version_lower_bound :: 13.0, "
        "nvidia :: sm_arch :: 90_real, nvidia :: sm_arch :: 90_virtual)"]
    # an index's word is checked before it reaches a command line
    for index in ("variants/torch211/simple/ ; rm -rf ~", "../../elsewhere/", "simple/"):
        hostile = {**variant, "variant": {**variant["variant"], "index": index}}
        with pytest.raises(doctor.DoctorError, match="a variants index"):
            doctor._clean_cell({"variants": [hostile]})
    hostile = {**variant, "variant": {**variant["variant"], "properties": ["\x1b[2J"]}}
    with pytest.raises(doctor.DoctorError, match="a variant property"):
        doctor._clean_cell({"variants": [hostile]})


def test_an_index_of_variant_wheels_from_elsewhere_is_checked_and_kept(tmp_path: Path) -> None:
    """Variant wheels put in files/ by hand (or merged from another index): any PEP 825 label,
    a label that means two property sets refused, one this index takes no path from refused."""
    from factory.index.records import load_manifest
    from factory.index.update import update_index, verify_index

    out = tmp_path / "out"
    files = out / "files"
    avx = {"x86_64": {"level": ["v3"]}}
    first = make_variant(make_wheel(files, "numeric", "2.0", tag="cp311-cp311-linux_x86_64"),
                         files, "x86_64_v3", avx)
    other = make_variant(make_wheel(files, "numeric", "2.0", tag="cp312-cp312-linux_x86_64"),
                         files, "x86_64_v3", {"x86_64": {"level": ["v4"]}})
    dots = make_variant(make_wheel(files, "numeric", "2.1"), files, "a..b", avx)
    for plain in files.glob("numeric-2.?-*_x86_64.whl"):
        plain.unlink()
    summary = update_index(out)
    assert sorted(summary.problems) == sorted([
        f"{other.name}: variant label x86_64_v3 already means other properties in "
        f"{first.name} (a label is one set of properties per release, PEP 825): left out of "
        "the index; move it out of files/",
        f"{dots}: its variant label 'a..b' starts, ends or has empty parts between dots; "
        "this factory indexes none such: move it out of files/"])
    assert list(load_manifest(out / ".factory" / "manifest.json").files) == [first.name]
    page = out / "simple" / "numeric"
    assert json.loads((page / "numeric-2.0-variants.json").read_text())["variants"] == {
        "x86_64_v3": avx}
    assert [entry["filename"] for entry in json.loads((page / "index.json").read_text())[
        "files"]] == [first.name, "numeric-2.0-variants.json"]
    assert not (out / "variants").exists()  # no torch release: no variants index
    other.unlink()
    dots.unlink()
    assert verify_index(out) == (1, [])
