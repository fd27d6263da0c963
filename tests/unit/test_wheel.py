"""Wheel assembly (metadata, RECORD, deterministic bytes) and the fat binary reader."""

from __future__ import annotations

import base64
import hashlib
import struct
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from factory.errors import FatbinError
from factory.wheel.assemble import CoreMetadata, compressed_tag, wheel_filename, write_wheel
from factory.wheel.fatbin import FatbinEntry, parse_fatbin

from ..support.wheels import EPOCH, METADATA


def package(tmp_path: Path) -> Path:
    content = tmp_path / "content"
    (content / "tinygrad_rms").mkdir(parents=True, exist_ok=True)
    (content / "tinygrad_rms" / "__init__.py").write_text("x = 1\n")
    (content / "tinygrad_rms" / "_ops.abi3.so").write_bytes(b"\x7fELF fake")
    (content / "tinygrad_rms" / "_ops.abi3.so").chmod(0o755)
    return content


def test_filename_and_metadata_agree(tmp_path: Path) -> None:
    wheel = write_wheel(package(tmp_path), tmp_path / "dist", METADATA, "cp39-abi3-linux_x86_64",
                        purelib=False, epoch=EPOCH)
    assert wheel.name == "tinygrad_rms-1.2.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    _, version, _, tags = parse_wheel_filename(wheel.name)
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("tinygrad_rms-1.2.0+cu130torch211.dist-info/METADATA").decode()
        wheel_file = archive.read("tinygrad_rms-1.2.0+cu130torch211.dist-info/WHEEL").decode()
    assert f"Version: {version}\n" in metadata and f"Name: {METADATA.name}\n" in metadata
    assert "Requires-Dist: torch==2.11.*\nRequires-Dist: einops\n" in metadata
    assert "Requires-Python: >=3.9\n" in metadata and "License-Expression: MIT\n" in metadata
    assert "Root-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n" in wheel_file
    assert {str(t) for t in tags} == {"cp39-abi3-linux_x86_64"}


def test_record_lists_every_file_with_its_hash(tmp_path: Path) -> None:
    wheel = write_wheel(package(tmp_path), tmp_path / "dist", METADATA, "py3-none-any", True,
                        EPOCH, {"provenance.json": b"{}"})
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = archive.read(next(n for n in names if n.endswith("RECORD"))).decode()
        rows = [line.split(",") for line in record.splitlines()]
        assert sorted(row[0] for row in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)
        so = archive.getinfo("tinygrad_rms/_ops.abi3.so")
        assert so.external_attr >> 16 == 0o100755


def test_a_filenames_tags_are_read_past_a_build_tag() -> None:
    assert compressed_tag("demo-1.0-1-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl") \
        == "cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64"
    with pytest.raises(ValueError):
        compressed_tag("not-a-wheel.whl")


def test_same_content_same_bytes(tmp_path: Path) -> None:
    first = write_wheel(package(tmp_path), tmp_path / "a", METADATA, "py3-none-any", True, EPOCH)
    (tmp_path / "content" / "tinygrad_rms" / "__init__.py").touch()  # a new mtime changes nothing
    second = write_wheel(package(tmp_path), tmp_path / "b", METADATA, "py3-none-any", True, EPOCH)
    assert first.read_bytes() == second.read_bytes()
    third = write_wheel(package(tmp_path), tmp_path / "c", METADATA, "py3-none-any", True,
                        1700000000)
    assert third.read_bytes() != first.read_bytes()
    assert {info.date_time[:3] for info in zipfile.ZipFile(third).infolist()} == {(2023, 11, 14)}
    old = write_wheel(package(tmp_path), tmp_path / "d", METADATA, "py3-none-any", True, 0)
    assert zipfile.ZipFile(old).infolist()[0].date_time[:3] == (1980, 1, 1)


def test_wheel_lists_every_tag_of_a_compressed_tag_set(tmp_path: Path) -> None:
    tag = "cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64"
    wheel = write_wheel(package(tmp_path), tmp_path / "dist", METADATA, tag, False, EPOCH)
    with zipfile.ZipFile(wheel) as archive:
        wheel_file = archive.read("tinygrad_rms-1.2.0+cu130torch211.dist-info/WHEEL").decode()
    assert [line for line in wheel_file.splitlines() if line.startswith("Tag:")] == [
        "Tag: cp39-abi3-manylinux2014_x86_64", "Tag: cp39-abi3-manylinux_2_17_x86_64"]


def test_invalid_metadata_is_refused() -> None:
    broken = CoreMetadata(name="k", version="1.0", summary="s", requires_python=">=3.9",
                          requires=("torch=2.11",), license=None, readme=None)
    with pytest.raises(ExceptionGroup) as caught:
        broken.render()
    assert [str(e) for e in caught.value.exceptions] == [
        "'torch=2.11' is invalid for 'requires-dist'"]


def test_license_that_is_not_an_expression() -> None:
    data = CoreMetadata(name="k", version="1.0", summary="s", requires_python=">=3.9",
                        requires=(), license="BSD-3-Clause AND (MIT", readme=None).render()
    assert b"Metadata-Version: 2.1\n" in data and b"License: BSD-3-Clause AND (MIT\n" in data


def test_wheel_filename_normalises_the_name() -> None:
    assert wheel_filename("Flash.Attn-3", "1.0", "py3-none-any") == \
        "flash_attn_3-1.0-py3-none-any.whl"


def container(*entries: tuple[int, int, int]) -> bytes:
    """A fat binary container of (kind, sm, flags) entries with small payloads."""
    body = b""
    for kind, sm, flags in entries:
        payload = b"\xaa" * 8
        header = bytearray(64)
        struct.pack_into("<HHIQ", header, 0, kind, 0x0101, 64, len(payload))
        struct.pack_into("<I", header, 28, sm)
        struct.pack_into("<Q", header, 40, flags)
        body += bytes(header) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_entries_and_variants() -> None:
    data = container((2, 80, 0x11), (2, 90, 0x100011), (1, 90, 0x8011)) + b"\0" * 8 + \
        container((2, 100, 0x1200011))
    assert parse_fatbin(data) == [
        FatbinEntry("sass", 80), FatbinEntry("sass", 90, "a"), FatbinEntry("ptx", 90),
        FatbinEntry("sass", 100, "f")]
    assert [str(e) for e in parse_fatbin(data)] == ["sm_80", "sm_90a", "compute_90", "sm_100f"]


def test_fatbin_garbage_is_an_error() -> None:
    with pytest.raises(FatbinError):
        parse_fatbin(b"not a fat binary at all")
    with pytest.raises(FatbinError):
        parse_fatbin(container((2, 80, 0))[:-4])
