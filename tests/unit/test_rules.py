"""Toolchain rules: the rewriting of compiler commands and the shipped table. (The rules each
cell is planned with and the wrappers a build runs are tests/integration/test_rules.py's.)"""

from __future__ import annotations

from packaging.version import Version

from factory.config.rules import shipped_rules
from factory.data.compilers.rewrite import rewrite

STD = {"name": "cxx20", "flag": "-std", "value": "c++20"}
GENCODE = {"name": "narrow", "flag": "-gencode"}


def test_a_standard_below_the_rules_is_raised_in_every_spelling() -> None:
    args = ["-O3", "-std=c++17", "--std=gnu++14", "-std", "c++1z", "-Xcompiler",
            "-fPIC,-std=c++11", "-Xcompiler=-std=gnu++17", "--compiler-options", "-std=c++14"]
    rewritten, changes = rewrite(args, [STD], [], nvcc=True)
    assert rewritten == ["-O3", "-std=c++20", "--std=gnu++20", "-std", "c++20", "-Xcompiler",
                         "-fPIC,-std=c++20", "-Xcompiler=-std=gnu++20", "--compiler-options",
                         "-std=c++20"]
    assert [(c.before, c.after) for c in changes] == [
        ("-std=c++17", "-std=c++20"), ("--std=gnu++14", "--std=gnu++20"),
        ("-std c++1z", "-std c++20"), ("-std=c++11", "-std=c++20"),
        ("-std=gnu++17", "-std=gnu++20"), ("-std=c++14", "-std=c++20")]
    assert {c.rule for c in changes} == {"cxx20"}


def test_c_standards_and_newer_cxx_standards_are_left_alone() -> None:
    args = ["-std=c11", "-std=gnu99", "-std=c++20", "-std=c++23", "-std=gnu++2b", "-O2"]
    assert rewrite(args, [STD], [], nvcc=False) == (args, [])
    # gcc reads `-std c++17` as a file named c++17 after a bad flag: only nvcc's two words
    assert rewrite(["-std", "c++17"], [STD], [], nvcc=False) == (["-std", "c++17"], [])


def test_gencode_entries_are_narrowed_to_the_cells_targets() -> None:
    args = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=sm_90",
            "--generate-code=arch=compute_90,code=[sm_90,compute_90]",
            "-gencode=arch=compute_100,code=[sm_100,compute_100]", "-O3"]
    rewritten, changes = rewrite(args, [GENCODE], ["sm_90"], nvcc=True)
    assert rewritten == ["-gencode", "arch=compute_90,code=sm_90",
                         "--generate-code=arch=compute_90,code=sm_90", "-O3"]
    assert [c.after for c in changes] == ["(dropped)", "--generate-code arch=compute_90,code=sm_90",
                                          "(dropped)"]
    # PTX is kept where the cell ships it
    kept, _ = rewrite(args[4:5], [GENCODE], ["sm_90", "compute_90"], nvcc=True)
    assert kept == args[4:5]
    # the host compiler takes no -gencode: nothing to narrow
    assert rewrite(args, [GENCODE], ["sm_90"], nvcc=False) == (args, [])


def test_a_command_naming_none_of_the_cells_sms_keeps_its_gencode() -> None:
    """Narrowing it to nothing would hand the choice to nvcc's default architecture."""
    args = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80"]
    assert rewrite(args, [GENCODE], ["sm_90"], nvcc=True) == (args, [])


def test_the_shipped_table_raises_cxx_from_torch_2_14_and_narrows_gencode_always() -> None:
    rules = {rule.name: rule for rule in shipped_rules()}
    cxx = rules["cxx20-for-torch-2.14"]
    assert (cxx.flag, cxx.value, cxx.torch) == ("-std", "c++20", ">=2.14")
    assert "C++20" in cxx.reason and cxx.reason == " ".join(cxx.reason.split())
    assert [cxx.applies(Version(v)) for v in ("2.13", "2.14", "2.15", "2.16.0rc1")] == [
        False, True, True, True]
    assert not cxx.applies(None)
    assert rules["gencode-to-cell"].applies(Version("2.4"))


