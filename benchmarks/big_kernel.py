"""A big kernel through the object cache: a cold build, a rebuild after one file changed, a build
killed half way and resumed, and three shard jobs plus a link, each against the cold build;
for a setup.py project, also the project's own `pip wheel` on the same cores.

    .venv/bin/python benchmarks/big_kernel.py KERNEL_DIR [--sm 9.0] [--torch 2.11]
        [--python 3.12] [--env NAME=VALUE ...] [--steps cold,touch,resume,shards,pip]
        [--pip-python PYTHON] [--work DIR] [-- FLAGS]

KERNEL_DIR is a kernel-builder repo, e.g. kernels-community's layer-norm (58 units), or a
setup.py / pyproject CUDA extension (examples/relu-scale, flash-attention: its compiles go
through the same cache; --python names the cell's CPython, --env its build's variables, as the
matrix's env: gives them). It is copied into the work folder first (the touch step changes the
copy). Every step runs
`factory build` as a user does (the local runner), FLAGS passed on (e.g. --offline,
--torch-python python3, --jobs 16), with the toolkit and torch environment already in the cache.
Each line gives the wall time, the units compiled and taken from the object cache, how busy the
CPUs were (the CPU time of the build and its compilers over wall time x CPUs), the peak memory
of all the build's processes together (sampled every 0.5 s from /proc) and the largest single
compiler's peak (from the log).

    cold    an empty object cache
    touch   one .cu file changed (a comment appended), against the bound "that unit's compile
            (from the cold log) + a relink of the unchanged cell (every unit from the cache)"
    resume  an empty object cache, the build killed (SIGKILL) once half the units are kept, then
            the same build again
    shards  three shard jobs (`--unit-shard I/3`, each with an empty object cache of its own,
            one after the other) and a link that imports their objects; its wheel's sha256
            against the cold build's
    pip     (a setup.py project, not among the default steps) the project's own
            `pip wheel --no-build-isolation .` run by PIP_PYTHON (an environment with torch,
            setuptools and ninja), MAX_JOBS the machine's CPUs, the cell's arch list and --env
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.outputs.files import file_sha256  # noqa: E402

GiB = 2**30
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Run:
    seconds: float
    peak: int  # bytes, all processes of the build together
    log: str
    exit: int
    cpu: float  # seconds of CPU time, the build's and its compilers'

    def count(self, how: str) -> int:
        return len(_units(self.log, how))

    def largest_compiler(self) -> float:
        peaks = [float(x) for x in re.findall(r"peak (\d+\.\d+) GiB", self.log)]
        return max(peaks, default=0.0)

    def line(self, name: str) -> str:
        busy = self.cpu / (self.seconds * (os.cpu_count() or 1))
        return (f"{name:<24} {self.seconds:8.1f} s  {self.count('compiled'):3d} compiled "
                f"{self.count('cached'):3d} cached  CPUs {busy:4.0%} busy  peak "
                f"{self.peak / GiB:5.1f} GiB all processes, {self.largest_compiler():4.2f} GiB "
                "largest compiler" + ("" if self.exit == 0 else f"  (exit {self.exit})"))


def _units(log: str, how: str) -> list[tuple[str, float]]:
    """The units a build log names as compiled (with their seconds) or cached, by their paths
    in the kernel (a setup.py project's units are named $WORK/src/PATH)."""
    if how == "compiled":
        found = [(name, float(seconds)) for name, seconds in
                 re.findall(r"^   (\S+): compiled in (\d+\.\d+) s .*kept", log, re.M)]
    else:
        found = [(name, 0.0) for name in
                 re.findall(r"^   (\S+): from the object cache$", log, re.M)]
    return [(name.removeprefix("$WORK/src/"), seconds) for name, seconds in found]


def _tree_rss(root: int) -> int:
    """The resident memory of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
        todo += children.get(pid, [])
    return total


def build(work: Path, out: str, objects: str, flags: list[str],
          kill_when_kept: int | None = None) -> Run:
    argv = [sys.executable, "-m", "factory", "build", str(work / "matrix.yaml"), "--out",
            str(work / out), "--object-cache", str(work / objects), *flags]
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    peak = 0
    logs = work / out / "logs"
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            break
        peak = max(peak, _tree_rss(process.pid))
        if kill_when_kept is not None and logs.is_dir():
            found = list(logs.glob("*.log"))
            if found and len(_units(found[0].read_text(), "compiled")) >= kill_when_kept:
                process.send_signal(signal.SIGKILL)
        time.sleep(0.5)
    seconds = time.monotonic() - started
    found = list(logs.glob("*.log")) if logs.is_dir() else []
    # the CPU time of the build and of every compiler it waited for
    cpu = usage.ru_utime + usage.ru_stime
    return Run(seconds, peak, found[0].read_text() if found else "", process.returncode, cpu)


def wheel(work: Path, out: str) -> Path | None:
    found = sorted((work / out / "files").glob("*.whl"))
    return found[0] if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--sm", default="9.0")
    parser.add_argument("--torch", default="2.11")
    parser.add_argument("--python", default=None)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--steps", default="cold,touch,resume,shards")
    parser.add_argument("--pip-python", default="python3")
    parser.add_argument("--work", type=Path, default=None)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.flags = argv[cut + 1:]  # passed to every factory build
    steps = args.steps.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="big-kernel-"))
    kernel = work / "kernel"
    if not kernel.exists():
        shutil.copytree(args.kernel, kernel, ignore=shutil.ignore_patterns(".git"))
    env = dict(item.split("=", 1) for item in args.env)
    (work / "matrix.yaml").write_text(
        "kernels:\n  - path: kernel\n    version: 1.0.0\n"
        + (f"    env: {json.dumps(env)}\n" if env else "")
        + f"torch: [\"{args.torch}\"]\n"
        f'cuda:\n  "13.0":\n    sms: ["{args.sm}"]\nrunner: local\n'
        + (f'python: ["{args.python}"]\n' if args.python else ""))
    flags = list(args.flags)
    print(f"{args.kernel.name} for sm_{args.sm.replace('.', '')}, {os.cpu_count()} CPUs, work "
          f"folder {work}, flags {' '.join(flags) or '-'}", flush=True)

    if "pip" in steps:
        print(pip_wheel(work, args.pip_python, args.sm, env), flush=True)
    cold = build(work, "cold", "objects-cold", flags)
    print(cold.line("cold"), flush=True)
    if cold.exit != 0:
        return 1
    cold_wheel = wheel(work, "cold")
    assert cold_wheel is not None
    units = cold.count("compiled")
    times = dict(_units(cold.log, "compiled"))

    if "touch" in steps:
        relink = build(work, "relink", "objects-cold", flags)
        print(relink.line("relink (nothing new)"), flush=True)
        target = sorted(name for name in times if name.endswith(".cu"))[0]
        path = kernel / target
        original, when = path.read_text(), path.stat()
        path.write_text(original + "\n// changed for the benchmark\n")
        try:
            touched = build(work, "touched", "objects-cold", flags)
        finally:  # the same bytes and time again: the source's time dates the wheel's files
            path.write_text(original)
            os.utime(path, ns=(when.st_atime_ns, when.st_mtime_ns))
        print(touched.line(f"touch {Path(target).name}"), flush=True)
        recompiled = dict(_units(touched.log, "compiled"))
        bound = times[target] + relink.seconds
        print(f"    recompiled {', '.join(sorted(recompiled))}; {target} took "
              f"{times[target]:.1f} s cold; bound (unit + relink) {bound:.1f} s; touched / bound "
              f"= {touched.seconds / bound:.2f}", flush=True)

    if "resume" in steps:
        half = units // 2
        killed = build(work, "killed", "objects-resume", flags, kill_when_kept=half)
        print(killed.line(f"killed at {half} kept"), flush=True)
        resumed = build(work, "resumed", "objects-resume", flags)
        print(resumed.line("resumed"), flush=True)
        expected = units - killed.count("compiled")
        print(f"    resumed compiled {resumed.count('compiled')} (expected {expected}), took "
              f"{resumed.count('cached')} from the cache; killed + resumed "
              f"{killed.seconds + resumed.seconds:.1f} s vs cold {cold.seconds:.1f} s; wheel "
              f"{'identical' if _same(wheel(work, 'resumed'), cold_wheel) else 'DIFFERS'}",
              flush=True)

    if "shards" in steps:
        shard_runs = []
        for index in (1, 2, 3):
            run = build(work, f"shard{index}", f"objects-shard{index}",
                        [*flags, "--unit-shard", f"{index}/3", "--export-objects",
                         str(work / f"artifact{index}")])
            shard_runs.append(run)
            print(run.line(f"shard {index}/3"), flush=True)
        imports = [arg for index in (1, 2, 3)
                   for arg in ("--import-objects", str(work / f"artifact{index}"))]
        link = build(work, "link", "objects-link", [*flags, *imports])
        print(link.line("link (3 shards' objects)"), flush=True)
        longest = max(run.seconds for run in shard_runs)
        print(f"    longest shard + link {longest + link.seconds:.1f} s vs cold "
              f"{cold.seconds:.1f} s ({(longest + link.seconds) / cold.seconds:.2f}); all "
              f"shards {sum(r.seconds for r in shard_runs):.1f} s; wheel "
              f"{'identical' if _same(wheel(work, 'link'), cold_wheel) else 'DIFFERS'}",
              flush=True)
    return 0


def pip_wheel(work: Path, python: str, sm: str, env: dict[str, str]) -> str:
    """The project's own build, as its README has users run it, on every CPU."""
    copy = work / "pip-source"
    if not copy.exists():
        shutil.copytree(work / "kernel", copy)
    cores = str(os.cpu_count() or 1)
    started = time.monotonic()
    done = subprocess.run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "-w", str(work / "pip-wheel"), str(copy)],
                          env={**os.environ, **env, "MAX_JOBS": cores,
                               "TORCH_CUDA_ARCH_LIST": f"{sm}+PTX"},
                          capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    state = "" if done.returncode == 0 else f"  (exit {done.returncode}: " \
        f"{done.stderr.strip().splitlines()[-1:]})"
    return f"{'pip wheel (MAX_JOBS=' + cores + ')':<24} {seconds:8.1f} s{state}"


def _same(one: Path | None, two: Path) -> bool:
    return one is not None and file_sha256(one) == file_sha256(two)


if __name__ == "__main__":
    sys.exit(main())
