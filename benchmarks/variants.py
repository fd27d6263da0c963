"""What publishing variant wheels costs: a compiled wheel re-issued as a PEP 825 variant wheel
(its members copied, .dist-info rewritten), for wheels the size of the shipped example up to a
big kernel's, and the index update that takes the variants in.

    .venv/bin/python benchmarks/variants.py [--sizes-mib 0.04 36 256] [--repeat 3]

For each size it prints the median time of `make_variant` (read the wheel, write the variant
beside it), the variant's size against the wheel's, and the time of the index update that adds
the variant (reading it once, writing the variants index and its variants.json). The shared
object is random bytes (incompressible, as SASS mostly is), so the copy's cost is all there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.index.update import update_index  # noqa: E402
from factory.wheel.assemble import CoreMetadata, write_wheel  # noqa: E402
from factory.wheel.read import read_wheel  # noqa: E402
from factory.wheel.variant import make_variant  # noqa: E402

PROPERTIES = {"nvidia": {"cuda_version_lower_bound": ["13.0"],
                         "sm_arch": ["80_real", "90_real", "90_virtual"]}}


def wheel_of(folder: Path, mib: float) -> Path:
    content = folder / "content"
    package = content / "kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import _kernel\n")
    (package / "_kernel.abi3.so").write_bytes(os.urandom(int(mib * 2**20)))
    metadata = CoreMetadata("kernel", "1.0.0+cu130torch211", "a kernel", ">=3.9",
                            ("torch==2.11.*",), "MIT", None)
    return write_wheel(content, folder / "out" / "files", metadata,
                       "cp39-abi3-manylinux_2_28_x86_64", False, 1767225600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[0.04, 36.0, 256.0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'wheel':>10}  {'make_variant':>12}  {'variant/wheel':>13}  {'index update':>12}")
    for mib in args.sizes_mib:
        with tempfile.TemporaryDirectory(prefix="kwf-bench-variants-") as scratch:
            wheel = wheel_of(Path(scratch), mib)
            out = wheel.parent.parent
            update_index(out)
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                variant = make_variant(wheel, Path(scratch), "cu130torch211", PROPERTIES)
                times.append(time.perf_counter() - start)
            target = make_variant(wheel, wheel.parent, "cu130torch211", PROPERTIES)
            start = time.perf_counter()
            update_index(out, published={target.name: read_wheel(target)})
            update = time.perf_counter() - start
            ratio = variant.stat().st_size / wheel.stat().st_size
            print(f"{wheel.stat().st_size / 2**20:>6.2f} MiB  {statistics.median(times):>10.3f} s"
                  f"  {ratio:>13.4f}  {update:>10.3f} s")


if __name__ == "__main__":
    main()
