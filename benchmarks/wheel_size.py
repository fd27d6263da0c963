"""What compressing GPU code does to a kernel's wheels: for each wheel given (the same cell
built with `compress: none` and with the default), its bytes, its installed bytes, its GPU code
as stored and once inflated, and, with a GPU and torch, the time `import` of the kernel takes
and its op's first and second call (the driver inflates compressed code when the module loads),
with the op's result checked against torch.

    .venv/bin/python benchmarks/wheel_size.py WHEEL... [--python PY] [--repeat N]

Sizes are read here; the timings need `--python` with a torch, and the op's calls a GPU (each
run is a fresh process that has imported torch and made its CUDA context before the clock
starts); `--timings-only` skips the sizes, on a machine without the factory's dependencies.
A kernel whose wheel this script knows how to call is timed (layer-norm: dropout_add_ln_fwd on
8192 x 1024 half-precision rows against torch's layer_norm); for any other only its import is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Per kernel (by its import name): the statements that make `call` (the op on ready inputs)
# and `check` (the largest difference from torch's own result).
CALLS = {
    "layer_norm": """
x = torch.randn(8192, 1024, device="cuda", dtype=torch.float16)
w = torch.randn(1024, device="cuda", dtype=torch.float16)
b = torch.randn(1024, device="cuda", dtype=torch.float16)
def call():
    return kernel.dropout_add_ln_fwd(x, w, b, None, None, None, None, 0.0, 1e-5, 1.0,
                                     x.shape[0], None, False, False)[0]
def check(out):
    ref = torch.nn.functional.layer_norm(x.float(), (1024,), w.float(), b.float(), 1e-5)
    return (out.float() - ref).abs().max().item()
""",
}

PROBE = """
import importlib, json, sys, time, torch
gpu = torch.cuda.is_available()
if gpu:
    torch.zeros(1, device="cuda"); torch.cuda.synchronize()
started = time.perf_counter()
kernel = importlib.import_module(sys.argv[1])
imported = time.perf_counter() - started
facts = {"import": imported}
if gpu and len(sys.argv) > 2:
    exec(sys.argv[2])
    torch.cuda.synchronize()
    for name in ("first", "second"):
        started = time.perf_counter()
        out = call()
        torch.cuda.synchronize()
        facts[name] = time.perf_counter() - started
    facts["max_error"] = check(out)
print(json.dumps(facts))
"""


def sizes(wheel: Path) -> None:
    from factory.values.units import human_size
    from factory.wheel.inspect import inspect_wheel

    report = inspect_wheel(wheel)
    codes = report.gpu_sizes.values()
    stored = sum(size.stored for size in codes)
    inflated = sum(size.inflated for size in codes)
    compressed = all(size.compressed for size in codes)
    mode = (report.provenance or {}).get("cell", {}).get("compress") or "nvcc's default"
    installed = report.wheel.installed_size
    print(f"{wheel.name}\n  compress: {mode}; wheel {human_size(report.size)} "
          f"({report.size:,} bytes), installed {human_size(installed)} ({installed:,} bytes)\n"
          f"  GPU code {human_size(stored)} stored, {human_size(inflated)} inflated"
          f"{' (compressed)' if compressed else ''}")


def install(wheel: Path, folder: Path, python: str) -> str:
    """The wheel installed into `folder` (by the factory's installer, or with no factory
    here by the interpreter's pip); the folder to put on PYTHONPATH."""
    try:
        from factory.prove.load import install_wheel
    except ImportError:
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        "--target", str(folder), str(wheel)], check=True)
        return str(folder)
    return str(install_wheel(wheel, folder, python))


def timings(wheel: Path, python: str, repeat: int) -> None:
    module = wheel.name.split("-")[0]  # the distribution's name as the file spells it
    setup = CALLS.get(module)
    with tempfile.TemporaryDirectory(prefix="kwf-size-") as folder:
        target = install(wheel, Path(folder), python)
        runs = []
        for _ in range(repeat):
            done = subprocess.run([python, "-c", PROBE, module, *([setup] if setup else [])],
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": target})
            if done.returncode != 0:
                sys.exit(f"{wheel.name}: {done.stderr.strip().splitlines()[-1]}")
            runs.append(json.loads(done.stdout.splitlines()[-1]))
    line = f"  import {statistics.median(r['import'] for r in runs) * 1000:.1f} ms"
    if "first" in runs[0]:
        line += (f", first call {statistics.median(r['first'] for r in runs) * 1000:.1f} ms, "
                 f"second {statistics.median(r['second'] for r in runs) * 1000:.2f} ms, max "
                 f"difference from torch {max(r['max_error'] for r in runs):.4f}")
    print(line + f" (medians of {repeat} fresh processes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--python", help="an interpreter with a CUDA torch, for the timings")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timings-only", action="store_true",
                        help="skip the sizes (on a machine without the factory's dependencies)")
    args = parser.parse_args()
    python = shutil.which(args.python) or args.python if args.python else None
    for wheel in args.wheels:
        if args.timings_only:
            print(wheel.name)
        else:
            sizes(wheel)
        if python:
            timings(wheel, python, args.repeat)


if __name__ == "__main__":
    main()
