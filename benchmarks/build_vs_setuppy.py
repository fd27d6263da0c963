"""Time `factory build` of the shipped example cell against the plain baseline: one hand-written
setup.py CUDAExtension wheel build of the same sources, with the same flags, in the same torch
environment and with the same nvcc.

    .venv/bin/python benchmarks/build_vs_setuppy.py [--repeat N] [--cache-dir DIR]

Prints each run and the medians. setuptools adds the interpreter's build flags (`-g` among
them); the baseline cancels -g with CFLAGS=-g0 so that both sides use the same flags. The
toolkit and torch environment are provisioned first (not timed), so both sides start from the
same warm cache. The setup.py build can use ninja when it is
on PATH (torch's default) and setuptools' one-file-at-a-time build otherwise; both are timed
where ninja is available.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.compile.generated import REGISTRATION_HEADER  # noqa: E402
from factory.config.matrix import load_matrix  # noqa: E402
from factory.pipeline.load import plan_matrix  # noqa: E402
from factory.pipeline.options import cache_folder  # noqa: E402
from factory.system.process import Log  # noqa: E402
from factory.toolchain.cuda import provide_cuda  # noqa: E402
from factory.toolchain.torch import provide_torch  # noqa: E402

SETUP_PY = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="img2gray",
    version="1.0.0",
    packages=["img2gray"],
    package_dir={{"img2gray": "torch-ext/img2gray"}},
    ext_modules=[CUDAExtension(
        name="img2gray._img2gray_setuppy",
        sources=["torch-ext/torch_binding.cpp", "csrc/img2gray.cu", "csrc/img2gray_cpu.cpp"],
        include_dirs={includes!r},
        define_macros=[("Py_LIMITED_API", "0x03090000"), ("CUDA_KERNEL", None),
                       ("USE_CUDA", "1")],
        extra_compile_args={{"cxx": ["-O3", "-std=c++17", "-fno-gnu-unique"],
                            "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr",
                                     "-DENABLE_FP8"]}},
        py_limited_api=True,
    )],
    cmdclass={{"build_ext": BuildExtension.with_options(use_ninja={use_ninja})}},
    options={{"bdist_wheel": {{"py_limited_api": "cp39"}}}},
)
"""


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{completed.stdout[-3000:]}"
                 f"{completed.stderr[-3000:]}")
    return seconds


def report(title: str, runs: list[float]) -> float:
    median = statistics.median(runs)
    print(f"{title:<48} {'  '.join(f'{r:5.1f}' for r in runs)}   median {median:5.1f} s")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    cache = cache_folder(args.cache_dir)

    plan = plan_matrix(load_matrix(REPO / "matrix.yaml"), cache, print)
    cell = plan.cells[0]
    assert cell.cuda is not None and cell.torch is not None  # the example is compiled
    work = Path(tempfile.mkdtemp(prefix="factory-bench-"))
    with open(work / "provision.log", "w") as handle:
        log = Log(handle)
        toolkit = provide_cuda(cell.cuda.version, cell.cuda.home, cache, log)
        env = provide_torch(cell.torch, cell.cuda.version, cell.cuda.torch_index, cache, log)
    sms = " ".join(str(sm) for sm in cell.sms)
    print(f"cell {cell.id}: torch {env.torch_version}, nvcc {toolkit.version} "
          f"({toolkit.origin}), SMs {sms}; {os.cpu_count()} cores")

    factory_env = {**os.environ, "KERNEL_WHEEL_FACTORY_CACHE": str(cache)}
    factory = [sys.executable, "-m", "factory", "build", str(REPO / "matrix.yaml")]
    fresh = [timed([*factory, "--out", str(work / f"index{i}")], REPO, factory_env)
             for i in range(args.repeat)]
    unchanged = [timed([*factory, "--out", str(work / "index0")], REPO, factory_env)
                 for _ in range(args.repeat)]

    includes = [str(path) for path in env.cuda_library_includes]
    # setuptools adds the interpreter's own build flags (often `-g -Wall`); -g0 after them
    # cancels the debug info, so both sides compile with the same optimisation and no -g.
    baseline_env = {**os.environ, "CUDA_HOME": str(toolkit.home), "CFLAGS": "-g0",
                    "TORCH_CUDA_ARCH_LIST": " ".join(str(cap) for cap in cell.sms),
                    "PATH": f"{toolkit.home / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    variants = [("setup.py bdist_wheel, setuptools (no ninja)", False)]
    if shutil.which("ninja"):
        variants.append((f"setup.py bdist_wheel, ninja, MAX_JOBS={os.cpu_count()}", True))
    baselines: dict[str, list[float]] = {}
    for title, use_ninja in variants:
        runs = []
        variant_env = {**baseline_env, "MAX_JOBS": str(os.cpu_count())}
        for i in range(args.repeat):
            tree = shutil.copytree(cell.spec.root, work / f"setuppy-{len(baselines)}-{i}")
            (tree / "torch-ext" / "registration.h").write_text(REGISTRATION_HEADER)
            (tree / "setup.py").write_text(SETUP_PY.format(includes=includes,
                                                           use_ninja=use_ninja))
            runs.append(timed([str(env.python), "setup.py", "-q", "bdist_wheel", "-d", "dist"],
                              tree, variant_env))
        baselines[title] = runs

    print()
    factory_median = report("factory build (fresh output folder)", fresh)
    report("factory build again (nothing changed)", unchanged)
    for title, runs in baselines.items():
        median = report(title, runs)
        print(f"{'':<48} factory / this baseline = {factory_median / median:.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
