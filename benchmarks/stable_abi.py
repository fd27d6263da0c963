"""What a stable-ABI kernel costs to build for a matrix of three torches (2.11, 2.12, 2.13 with
CUDA 13.0): once per torch, as every kernel was built before the factory planned stable-ABI
cells (the kernel's stable-ABI declaration taken out of a copy of it), against once for all
three (the kernel as it is).

    .venv/bin/python benchmarks/stable_abi.py [KERNEL_DIR] [--sms 9.0] [--repeat N] [-- FLAGS]

KERNEL_DIR defaults to the tests' stable-ABI fixture; kernels-community's activation is the
real-world case. FLAGS go to every `factory build`. A first per-torch build makes the toolkit
and the three torch environments in the factory's cache, untimed; every timed build is cold,
with an object cache of its own. Prints each build (wall time, cells, units compiled) and the
ratio of the medians.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "stable-kernel"
# build.toml's stable-ABI declaration: a [torch.stable-abi] table, or a stable-abi key
STABLE_TABLE = re.compile(r"^\[torch\.stable-abi\]\n(?:[^\[\n][^\n]*\n|\n)*", re.MULTILINE)
STABLE_KEY = re.compile(r"^stable-abi\s*=.*\n", re.MULTILINE)


def per_torch_copy(kernel: Path, scratch: Path) -> Path:
    """The kernel without its stable-ABI declaration: planned per torch."""
    copy = shutil.copytree(kernel, scratch / "per-torch" / kernel.name)
    build_toml = copy / "build.toml"
    text = STABLE_KEY.sub("", STABLE_TABLE.sub("", build_toml.read_text()))
    build_toml.write_text(text)
    return copy


def matrix(folder: Path, kernel: Path, sms: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "matrix.yaml"
    path.write_text(f"kernels:\n  - path: {kernel}\n    version: 1.0.0\n"
                    f'torch: ["2.11", "2.12", "2.13"]\n'
                    f"cuda:\n  \"13.0\":\n    sms: [{', '.join(repr(s) for s in sms)}]\n"
                    "runner: local\n")
    return path


def build(matrix_path: Path, out: Path, objects: Path, flags: list[str]) -> tuple[float, str]:
    argv = [sys.executable, "-m", "factory", "build", str(matrix_path), "--out", str(out),
            "--object-cache", str(objects), *flags]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    built = re.search(r"^(\d+) built, .*$", done.stdout, re.MULTILINE)
    units = re.search(r"^units: (\d+) compiled", done.stdout, re.MULTILINE)
    return seconds, (f"{built[1] if built else '?'} cell(s) built, "
                     f"{units[1] if units else '?'} unit(s) compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?", type=Path, default=FIXTURE)
    parser.add_argument("--sms", nargs="+", default=["9.0"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("flags", nargs="*", help="after --: flags for every factory build")
    args = parser.parse_args()
    kernel = args.kernel.resolve()
    if not (kernel / "build.toml").is_file():
        sys.exit(f"{kernel}: no build.toml")
    with tempfile.TemporaryDirectory(prefix="kwf-bench-") as name:
        scratch = Path(name)
        modes = {"per torch": matrix(scratch / "a", per_torch_copy(kernel, scratch), args.sms),
                 "stable ABI": matrix(scratch / "b", kernel, args.sms)}
        warm = build(modes["per torch"], scratch / "warm", scratch / "warm-objects", args.flags)
        print(f"warm-up (toolkit and torch environments ready): {warm[0]:.1f} s, {warm[1]}")
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for number in range(args.repeat):
            for mode, path in modes.items():
                run = scratch / f"{mode.replace(' ', '-')}-{number}"
                seconds, said = build(path, run / "out", run / "objects", args.flags)
                times[mode].append(seconds)
                print(f"{mode:<10}  run {number + 1}: {seconds:7.1f} s  {said}")
    before, after = (statistics.median(times[mode]) for mode in modes)
    print(f"\n{kernel.name}, torch 2.11/2.12/2.13 x CUDA 13.0, SMs {' '.join(args.sms)}: "
          f"per torch {before:.1f} s, stable ABI {after:.1f} s ({before / after:.1f}x less)")


if __name__ == "__main__":
    main()
