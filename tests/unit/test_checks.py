"""The gates on reports made by hand: each rule fires on exactly what it is about, and a sound
report passes. Pure: no wheel, no compiler."""

from __future__ import annotations

from dataclasses import replace

from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import Abi3Verdict

from ..support.wheels import SO, report

EXPECT = Expectation("img2gray", "1.0.0+cu130torch211", "==2.11.*", 13,
                     frozenset({"sm_80", "sm_90", "compute_90"}), "x86_64")




def test_a_sound_report_passes() -> None:
    assert check_wheel(report(), EXPECT) == []


def test_gpu_code_must_be_what_the_cell_promised() -> None:
    missing = report(shared_objects=(replace(SO, sass=("sm_90",)),))
    assert check_wheel(missing, EXPECT) == [
        "GPU code: no SASS for sm_80, which the cell promises (those GPUs would fail with 'no "
        "kernel image is available')"]
    extra = report(shared_objects=(replace(SO, ptx=("compute_80", "compute_90")),))
    assert check_wheel(extra, EXPECT) == [
        "GPU code: compute_80 not planned for this cell (PTX belongs only to the newest SM)"]


def test_the_torch_pin_and_the_cuda_runtime_must_be_the_cells() -> None:
    problems = check_wheel(report(torch_requirement="==2.12.*",
                                  shared_objects=(replace(SO, needed=("libcudart.so.12",)),)),
                           EXPECT)
    assert problems == [
        "the torch requirement is ==2.12.*, the cell's torch is torch==2.11.*",
        f"libraries: {SO.path} needs libcudart.so.12, but the cell is CUDA 13"]


def test_a_manylinux_tag_the_symbols_do_not_allow_is_caught() -> None:
    newer = replace(SO, manylinux="manylinux_2_34", manylinux_glibc=(2, 34),
                    symbol_versions={"GLIBC": "2.34"})
    assert check_wheel(report(shared_objects=(newer,)), EXPECT) == [
        f"manylinux: the wheel is tagged manylinux_2_28_x86_64, but {SO.path} needs "
        "manylinux_2_34 (GLIBC_2.34)"]
    barred = replace(SO, manylinux="linux", manylinux_glibc=None,
                     blacklisted={"libz.so.1": ("_tr_flush_block",)})
    assert check_wheel(report(shared_objects=(barred,)), EXPECT) == [
        f"manylinux: the wheel is tagged manylinux_2_28_x86_64, but {SO.path} needs linux "
        "(GLIBC_2.17; libz.so.1's _tr_flush_block, which no manylinux policy allows)"]


def test_abi3_is_judged_only_for_abi3_tags() -> None:
    leak = replace(SO, abi3=Abi3Verdict(False, "3.9", "3.12", ("PyUnicode_AsUTF8",), ()))
    assert check_wheel(report(shared_objects=(leak,)), EXPECT) == [
        f"abi3: {SO.path} outside the limited API: PyUnicode_AsUTF8"]
    cpython = "img2gray-1.0.0+cu130torch211-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert check_wheel(report(cpython, shared_objects=(leak,),
                              wheel_tags=("cp312-cp312-manylinux_2_28_x86_64",)), EXPECT) == []


def test_files_torch_provides_must_not_ride_along() -> None:
    bundled = report(files=(SO.path, "img2gray.libs/libc10-1234abcd.so"))
    assert check_wheel(bundled, EXPECT) == [
        "libraries: the wheel bundles img2gray.libs/libc10-1234abcd.so, a copy of a library "
        "torch provides; the user's own torch must supply it"]
    unknown = report(shared_objects=(replace(SO, needed=("libfoo.so.3",)),))
    assert check_wheel(unknown, EXPECT) == [
        f"libraries: {SO.path} needs libfoo.so.3, which neither the system, nor torch, nor the "
        "wheel provides"]


def test_metadata_must_agree_with_the_filename() -> None:
    problems = check_wheel(report(metadata_version="1.0.0", wheel_tags=("py3-none-any",),
                                  record_problems=("RECORD is missing",)), EXPECT)
    assert problems == [
        "METADATA's version 1.0.0 differs from the filename's 1.0.0+cu130torch211",
        "WHEEL's tags (py3-none-any) differ from the filename's "
        "(cp39-abi3-manylinux_2_28_x86_64)",
        "RECORD is missing"]
