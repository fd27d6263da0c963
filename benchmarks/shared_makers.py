"""What the suite's workers (and two runs on one machine) share, made from several processes at
once where it is not there yet: prints, for each maker, how long each process took, how many
times the thing was made (once is right), and whether what is left is whole.

    .venv/bin/python benchmarks/shared_makers.py [--processes N] [--only NAME ...]

    script   docker/make-debian-base.sh, run N times at once for one image name, unlocked:
             each must end well and leave no intermediate image behind
    base     the tests' maker of an offline base (tests/support/docker.debian_base), from N
             processes at once: one makes it, the others wait and find it
    toolkit  the factory's CUDA 13.2 toolkit from PyPI, from N processes into one empty cache
    torch    the factory's torch 2.11 environment, the same way

Every round starts empty: its image has a name of its own (so docker has none of it, whatever
else the machine holds) and its cache is a new folder; what it made is removed at the end.
Needs root, docker and the network (Debian's mirror, PyPI); `base` and `script` take about 5
minutes each on 2 cores, `torch` downloads about 3 GB.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

Outcome = tuple[float, bool]  # seconds, and whether this process made the thing
SUITE = "bullseye"


def _timed(make: Callable[[], bool]) -> Outcome:
    started = time.monotonic()
    made = make()
    return time.monotonic() - started, made


def _script(image: str) -> Outcome:
    def make() -> bool:
        done = subprocess.run([str(REPO / "docker" / "make-debian-base.sh"), SUITE, image],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"make-debian-base.sh failed: {done.stdout}{done.stderr}")
        return True
    return _timed(make)


def _base(image: str) -> Outcome:
    from tests.support.docker import debian_base

    before = _image_id(image)
    return _timed(lambda: (debian_base(SUITE, image, ("3.11",)), _image_id(image) != before)[1])


def _toolkit(cache: str) -> Outcome:
    from factory.system.process import Log
    from factory.toolchain.cuda import provide_cuda
    from factory.values.versions import parse_release

    said = io.StringIO()
    return _timed(lambda: (provide_cuda(parse_release("13.2"), None, Path(cache), Log(said)),
                           "installing" in said.getvalue())[1])


def _torch(cache: str) -> Outcome:
    from factory.system.process import Log
    from factory.toolchain.torch import provide_torch
    from factory.values.versions import parse_release

    said = io.StringIO()
    return _timed(lambda: (provide_torch(parse_release("2.11"), parse_release("13.0"), None,
                                         Path(cache), Log(said)),
                           "making the environment" in said.getvalue())[1])


def _image_id(image: str) -> str:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image],
                          capture_output=True, text=True).stdout.strip()


def _leftover_roots() -> list[str]:
    listed = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"],
                            capture_output=True, text=True, check=True).stdout.split()
    return [name for name in listed if ":rootfs-" in name]


def _round(name: str, maker: Callable[[str], Outcome], target: str, processes: int,
           check: Callable[[], str]) -> bool:
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        outcomes = pool.map(maker, [target] * processes)
    wall = time.monotonic() - started
    made = sum(1 for _, did in outcomes if did)
    times = ", ".join(f"{seconds:.0f} s" for seconds, _ in outcomes)
    problem = check()
    expected = processes if name == "script" else 1
    print(f"{name:8} {processes} at once, {wall:.0f} s in all ({times}); made {made} time(s), "
          f"expected {expected}; {problem or 'what is left is whole'}")
    return made == expected and not problem


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=["script", "base", "toolkit", "torch"],
                        default=["script", "base", "toolkit", "torch"])
    args = parser.parse_args()
    stamp = f"{int(time.time())}"
    good = True
    for name in args.only:
        if name in ("script", "base"):
            image = f"kernel-wheel-factory/shared-makers-{name}:{stamp}"

            def whole(image: str = image) -> str:
                runs = subprocess.run(["docker", "run", "--rm", "--network", "none", image,
                                       "/opt/python/cp313-cp313/bin/python", "-c", "print(1)"],
                                      capture_output=True, text=True)
                left = _leftover_roots()
                return ("the image does not run" if runs.stdout.strip() != "1" else "") + \
                    (f"intermediate images left: {left}" if left else "")
            try:
                good &= _round(name, _script if name == "script" else _base, image,
                               args.processes, whole)
            finally:
                subprocess.run(["docker", "image", "rm", image], capture_output=True)
            continue
        cache = tempfile.mkdtemp(prefix=f"kwf-shared-{name}-")

        def works(cache: str = cache, name: str = name) -> str:
            found = sorted(Path(cache).glob("cuda/*/nvidia/cu13/bin/nvcc" if name == "toolkit"
                                            else "envs/*/bin/python"))
            if len(found) != 1:
                return f"found {len(found)} where one was to be made"
            argv = [str(found[0]), "--version"] if name == "toolkit" else \
                [str(found[0]), "-c", "import torch; print(torch.__version__)"]
            ran = subprocess.run(argv, capture_output=True, text=True)
            return "" if ran.returncode == 0 else f"it does not run: {ran.stderr[-300:]}"
        try:
            good &= _round(name, _toolkit if name == "toolkit" else _torch, cache,
                           args.processes, works)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
