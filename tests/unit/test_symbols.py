"""The source reading that tells planning when a section left out of a cell would leave a
kept source calling a function nothing defines."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from factory.sources.symbols import base_name, file_symbols, read_symbols

from ..support.factory import write


def symbols_of(tmp_path: Path, text: str, name: str = "a.cu") -> Any:
    return file_symbols(write(tmp_path / name, text))


def test_functions_defined_at_namespace_scope(tmp_path: Path) -> None:
    found = symbols_of(tmp_path, """
        #include <torch/all.h>
        namespace sage { namespace detail {
        torch::Tensor attn(torch::Tensor q,   // a comment with f(x) {
                           int layout = 3) {
          return helper(q);
        }
        } }
        extern "C" { void c_entry(void) { launch<<<1, 1>>>(); } }
        template <typename T, int N = 4>
        __global__ void __launch_bounds__(128) kernel_impl(T* out) { out[0] = T(N); }
        auto answer() -> int { return 42; }
        void Runner::run() const noexcept { step(); }
        static void private_helper() {}
        namespace { void file_own() { step(); } }
        torch::Tensor only_declared(torch::Tensor q);
        struct Traits { static int size() { return 1; } };
        auto lambda = [](int x) { return x; };
    """)
    assert found.defines == {"attn", "c_entry", "kernel_impl", "answer", "run"}
    assert {"helper", "launch", "step", "out"} <= found.uses
    assert "only_declared" not in found.uses  # a declaration is no call


def test_specializations_and_instantiations_are_told_apart_by_their_arguments(
        tmp_path: Path) -> None:
    found = symbols_of(tmp_path, """
        template<>
        void run_mha_fwd_<80, cutlass::half_t, 128>(Params &params, cudaStream_t stream) {
            run_mha_fwd_hdim128<80, cutlass::half_t>(params, stream);
        }
        template void run_mha_bwd_<86, float>(Params &, cudaStream_t);
        extern template void run_mha_bwd_<90, float>(Params &, cudaStream_t);
    """)
    assert found.defines == {"run_mha_fwd_<80,cutlass::half_t,128>", "run_mha_bwd_<86,float>"}
    assert base_name("run_mha_fwd_<80,cutlass::half_t,128>") == "run_mha_fwd_"


def test_comments_strings_and_macros(tmp_path: Path) -> None:
    found = symbols_of(tmp_path, r"""
        /* void commented_out() { } */
        const char* text = "void in_a_string() { }";
        char brace = '{';
        long big = 1'000'000;
        #define CALL_IT(x) macro_target(x)
        #if defined(SM90)
        void guarded() { CALL_IT(1); }
        #endif
    """)
    assert found.defines == {"guarded"}
    assert {"macro_target", "CALL_IT"} <= found.uses
    assert "commented_out" not in found.uses and "in_a_string" not in found.uses


def test_includes_are_followed_inside_the_root_only(tmp_path: Path) -> None:
    write(tmp_path / "k/torch-ext/binding.cpp",
          '#include "binding.h"\n#include <torch/all.h>\n#  include <gen/dispatch.h>\n'
          '#include <beside.h>\n')
    write(tmp_path / "k/torch-ext/binding.h", '#include "common/util.h"\n#include "../../x.h"\n')
    write(tmp_path / "k/torch-ext/beside.h", "")  # an angled name is not looked up beside
    write(tmp_path / "k/csrc/common/util.h", "")
    write(tmp_path / "k/csrc/gen/dispatch.h", '#include <gen/kernels.h>\n')
    write(tmp_path / "k/csrc/gen/kernels.h", "")
    write(tmp_path / "x.h", "")
    table = read_symbols(tmp_path / "k", ["torch-ext/binding.cpp"], ["csrc"])
    shutil.rmtree(tmp_path / "k")  # read once: walking the table reads no file

    def reached(folders: list[str]) -> list[str]:
        files = table.reach(["torch-ext/binding.cpp"], folders)
        return sorted(path.relative_to(table.root).as_posix() for path in files)

    assert reached(["csrc"]) == ["csrc/common/util.h", "csrc/gen/dispatch.h",
                                 "csrc/gen/kernels.h", "torch-ext/binding.cpp",
                                 "torch-ext/binding.h"]
    assert reached([]) == ["torch-ext/binding.cpp", "torch-ext/binding.h"]
    assert table.defines("torch-ext/binding.cpp") == frozenset()


def test_unreadable_and_oversized_files_have_no_symbols(tmp_path: Path) -> None:
    assert file_symbols(tmp_path / "missing.cu").defines == frozenset()
    big = tmp_path / "big.cu"
    big.write_bytes(b"void f() {}\n" + b" " * (8 * 2**20))
    assert file_symbols(big).defines == frozenset()
