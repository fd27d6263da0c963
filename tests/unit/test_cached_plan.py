"""Which compiler commands of a PEP 517 build are units the object cache can key, as the
wrapper reads them (data/compilers/cached.py), and the dependency files it reads."""

from __future__ import annotations

import pytest

from factory.data.compilers.cached import Unit, plan, read_depfile


def test_torch_ninja_commands_are_units_with_their_dependency_files() -> None:
    nvcc = plan(["--generate-dependencies-with-compile", "--dependency-output", "k.o.d",
                 "-I/t/include", "-DTORCH_EXTENSION_NAME=_C", "-gencode",
                 "arch=compute_90,code=sm_90", "-c", "/w/src/csrc/k.cu", "-o", "/w/b/k.o",
                 "-O3", "-std=c++17"])
    assert isinstance(nvcc, Unit)
    assert (nvcc.source, nvcc.output, nvcc.depfile, nvcc.own_depfile) == \
        ("/w/src/csrc/k.cu", "/w/b/k.o", "k.o.d", False)
    cxx = plan(["-MMD", "-MF", "b.o.d", "-fPIC", "-include", "pre.h", "-c", "b.cpp", "-o",
                "b.o"])
    assert isinstance(cxx, Unit)
    assert cxx.run[0] == "-MD"  # every header counts, the system's too
    assert (cxx.source, cxx.depfile) == ("b.cpp", "b.o.d")


def test_a_compile_without_a_dependency_file_gets_the_factorys_own() -> None:
    unit = plan(["-O2", "-c", "a.c", "-oa.o"])
    assert isinstance(unit, Unit)
    assert unit.output == "a.o" and unit.own_depfile
    assert unit.run == ["-O2", "-c", "a.c", "-oa.o", "-MD", "-MF", "a.o.factory.d"]


@pytest.mark.parametrize(("args", "why"), [
    (["@flags", "-c", "a.c", "-o", "a.o"], "it reads a response file"),
    (["-c", "a.c", "b.c"], "it compiles 2 sources in one command"),
    (["-c", "a.c"], "it names no single object file (-o)"),
    (["-MD", "-c", "a.c", "-o", "a.o"], "its dependency file is not named (-MF)"),
    (["-save-temps", "-c", "a.c", "-o", "a.o"], "it keeps intermediate files"),
    (["--options-file", "f", "-c", "a.cu", "-o", "a.o"], "it reads an options file"),
])
def test_a_compile_the_cache_cannot_key_says_why(args: list[str], why: str) -> None:
    assert plan(args) == why


@pytest.mark.parametrize("args", [["a.o", "b.o", "-shared", "-o", "x.so"], ["--version"],
                                  ["-E", "a.c"]])
def test_what_compiles_nothing_is_not_the_caches_business(args: list[str]) -> None:
    assert plan(args) is None


def test_dependency_files_in_every_spelling() -> None:
    text = ("out/a.o: a.c /usr/include/stdio.h \\\n  inc/with\\ space.h $$dollar.h\n"
            "inc/with\\ space.h:\n")
    assert read_depfile(text, "/w") == ["/w/a.c", "/usr/include/stdio.h",
                                        "/w/inc/with space.h", "/w/$dollar.h"]
