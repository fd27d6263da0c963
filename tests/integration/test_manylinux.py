"""The manylinux verdict is auditwheel's own: symbol versions from its policies, and the
symbols its policies bar (a policy's blacklist). Shared objects made here with gcc."""

from __future__ import annotations

import subprocess
from pathlib import Path

from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.elf import read_linkage
from factory.wheel.gates import Expectation, check_wheel
from factory.wheel.inspect import inspect_wheel
from factory.wheel.manylinux import judge_object

from ..support.factory import write

LIBZ = "/lib/x86_64-linux-gnu/libz.so.1"


def shared_object(folder: Path, source: str, *libraries: str) -> Path:
    """A shared object gcc builds from C `source`, linked against `libraries`."""
    c = write(folder / "obj.c", source)
    target = folder / "pkg" / "demo" / "_demo.so"
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", target, c, "-Wl,--no-as-needed",
                    *libraries], check=True)
    return target


def test_plain_libc_code_is_as_old_as_its_symbol_versions(tmp_path: Path) -> None:
    so = shared_object(tmp_path, "#include <string.h>\nint n(const char *s) { return strlen(s); }")
    linkage = read_linkage(so)
    verdict = judge_object(so, linkage.needed, linkage.version_needs, "x86_64")
    assert verdict.name == "manylinux_2_5" and verdict.glibc == (2, 5)
    assert verdict.blacklisted == {}


def test_a_symbol_a_policy_bars_rules_out_manylinux(tmp_path: Path) -> None:
    """zlib's _tr_flush_block is internal to zlib: every manylinux policy bars it, whatever its
    symbol versions say (the file-data reading of the policies never looked at the blacklist)."""
    so = shared_object(tmp_path, "extern void _tr_flush_block(void);\n"
                                 "void f(void) { _tr_flush_block(); }\n", LIBZ)
    linkage = read_linkage(so)
    assert "libz.so.1" in linkage.needed
    verdict = judge_object(so, linkage.needed, linkage.version_needs, "x86_64")
    assert (verdict.name, verdict.glibc) == ("linux", None)
    assert verdict.blacklisted == {"libz.so.1": ("_tr_flush_block",)}

    wheel = write_wheel(tmp_path / "pkg", tmp_path / "dist",
                        CoreMetadata("demo", "1.0", "demo", ">=3.9", (), None, None),
                        "py3-none-manylinux_2_17_x86_64", purelib=False, epoch=0)
    report = inspect_wheel(wheel)
    (found,) = report.shared_objects
    assert found.manylinux == "linux"
    assert report.to_json()["shared_objects"][0]["blacklisted_symbols"] == {
        "libz.so.1": ["_tr_flush_block"]}
    problems = check_wheel(report, Expectation("demo", "1.0", None, None, None, "x86_64"))
    assert problems == [
        "manylinux: the wheel is tagged manylinux_2_17_x86_64, but demo/_demo.so needs linux "
        "(GLIBC_2.2.5; libz.so.1's _tr_flush_block, which no manylinux policy allows)"]
