"""Killed builds, indexes and merges, and builds side by side: SIGKILL at random moments of
`factory build`, `factory index` and `factory index --merge`, each run followed by the same
command, which must succeed and give the same bytes as an uninterrupted run; then pairs of
builds started at once into one output folder, both of which must succeed.

    .venv/bin/python benchmarks/kills.py [--kills 50] [--index-kills 50] [--merge-kills 50]
        [--pairs 30] [--wheels 400] [--torch 2.11,2.14,2.15] [--kernel examples/img2gray]
        [--work DIR]

The kernel is built for torch 2.11, 2.14 and 2.15 (each with its PyPI build's CUDA), sm_90, on
this machine (runner: local): three cells that finish at different moments, all indexed at the
end of the build. Its objects come from the factory's object cache after the first build, so a
build takes seconds and the kills fall over its whole course: planning, compiling or taking
objects, the gates, the move into files/ and the cell's record, the index update. Prints how
many kills landed before the build ended, how many left a wheel in files/ that no index
recorded yet (the case the publish journal resolves), and how many reruns failed or gave other
bytes; then the pairs' outcomes.

The index and merge kills work on the built output beside --wheels small synthetic wheels (put
in files/ by hand, so `factory index` reads and records every one of them: a few seconds of
work to kill at any moment of), compared with an uninterrupted run over every published byte:
files/, the pages and the browse page.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def factory(*args: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "factory", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def build(matrix: Path, out: Path) -> subprocess.Popen[bytes]:
    return factory("build", matrix, "--out", out)


def published(out: Path) -> dict[str, str]:
    """Every file of an output folder but its private records, with its sha256."""
    return {str(path.relative_to(out)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(out.rglob("*")) if path.is_file()
            and path.relative_to(out).parts[0] not in (".factory", "logs")}


def synthetic(files: Path, count: int, scratch: Path) -> None:
    """`count` small valid wheels of a few projects, as the factory writes wheels."""
    sys.path.insert(0, str(REPO))
    from factory.wheel.assemble import CoreMetadata, write_wheel

    files.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        project = f"synthetic-{number % 8}"
        package = scratch / "content" / project.replace("-", "_")
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f"N = {number}\n")
        metadata = CoreMetadata(project, f"1.0.{number}+cu130torch211", "synthetic kernel",
                                ">=3.9", ("torch",), "MIT", None)
        write_wheel(scratch / "content", files, metadata, "cp39-abi3-linux_x86_64", False,
                    1767225600)
        shutil.rmtree(package)


def killed_and_rerun(name: str, runs: int, prepare: Callable[[Path], Path],
                     command: Callable[[Path], subprocess.Popen[bytes]], rng: random.Random,
                     compare: Callable[[Path], object] | None = None,
                     left: Callable[[Path], object] | None = None) -> bool:
    """`runs` times: a fresh folder from `prepare(folder)`, `command(folder)` killed at a random
    moment of its uninterrupted time, then run again; it must end rc 0 with what `compare`
    (default: every published byte) reads of an uninterrupted run. `left(folder)` tells a kill
    that left something for the rerun to resolve."""
    compare = compare or published
    reference = prepare(Path(tempfile.mkdtemp(prefix=f"{name}-reference-")) / "out")
    start = time.perf_counter()
    done = command(reference)
    if done.wait() != 0:
        said = done.stderr.read().decode() if done.stderr else ""
        sys.exit(f"the uninterrupted {name} failed: {said[-2000:]}")
    seconds = time.perf_counter() - start
    expected = compare(reference)
    landed = resolved = failed = differ = 0
    for run in range(runs):
        folder = prepare(Path(tempfile.mkdtemp(prefix=f"{name}-kill{run}-")) / "out")
        process = command(folder)
        try:
            process.wait(timeout=rng.uniform(0.2, seconds))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            landed += 1
            resolved += bool(left and left(folder))
        again = command(folder)
        if again.wait() != 0:
            failed += 1
            said = again.stderr.read().decode().strip() if again.stderr else ""
            print(f"  {name} run {run}: the rerun failed: {said[-400:]}")
        elif compare(folder) != expected:
            differ += 1
            print(f"  {name} run {run}: other bytes than the uninterrupted {name}'s")
        shutil.rmtree(folder.parent, ignore_errors=True)
    shutil.rmtree(reference.parent, ignore_errors=True)
    what = f" ({resolved} of them with a wheel in files/ that no index recorded)" if left else ""
    print(f"{name} kills: {runs} runs of {seconds:.1f} s, {landed} killed before the end{what}; "
          f"after each, the rerun: {runs - failed} rc 0, {failed} failed, {differ} with other "
          "bytes")
    return failed == differ == 0


def wheels(out: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted((out / "files").glob("*.whl"))}


def unindexed(out: Path) -> bool:
    """A wheel in files/ that the manifest does not record."""
    manifest = out / ".factory" / "manifest.json"
    try:
        known = {row[0] for row in json.loads(manifest.read_text())["files"]}
    except (OSError, ValueError, KeyError, IndexError):
        known = set()
    return any(name not in known for name in wheels(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--index-kills", type=int, default=50)
    parser.add_argument("--merge-kills", type=int, default=50)
    parser.add_argument("--wheels", type=int, default=400,
                        help="synthetic wheels beside the built ones for the index and merge")
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--kernel", type=Path, default=REPO / "examples" / "img2gray")
    parser.add_argument("--torch", default="2.11,2.14,2.15",
                        help="the torch releases: a cell each, finishing at other moments")
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kills-"))
    work.mkdir(parents=True, exist_ok=True)
    matrix = work / "matrix.yaml"
    torches = ", ".join(f'"{release}"' for release in args.torch.split(","))
    matrix.write_text(f"kernels:\n  - {{path: {args.kernel.resolve()}, version: 1.0.0}}\n"
                      f'torch: [{torches}]\ncuda: {{follow: torch, sms: ["9.0"]}}\n'
                      "runner: local\n")
    reference = work / "warm"  # fills the object cache; the pairs and the index start from it
    if build(matrix, reference).wait() != 0:
        sys.exit("the uninterrupted build failed")
    expected = wheels(reference)
    print(f"built: {', '.join(expected)}")
    rng = random.Random(1)
    built = killed_and_rerun("build", args.kills, lambda folder: folder,
                             lambda folder: build(matrix, folder), rng, compare=wheels,
                             left=unindexed)

    both = 0
    for pair in range(args.pairs):
        out = work / f"pair{pair}"
        first, second = build(matrix, out), build(matrix, out)
        codes = (first.wait(), second.wait())
        if codes == (0, 0) and wheels(out) == expected and not unindexed(out):
            both += 1
        else:
            message = b"".join(process.stderr.read() for process in (first, second)
                               if process.stderr is not None).decode().strip()
            print(f"  pair {pair}: exit {codes}: {message[-400:]}")
        shutil.rmtree(out, ignore_errors=True)
    print(f"two builds into one folder at once: {both} of {args.pairs} pairs both rc 0, "
          "every wheel indexed")

    hand = work / "hand-placed"  # synthetic wheels, no index yet
    synthetic(hand / "files", args.wheels, work / "scratch")
    job = work / "job2"  # a second job: the synthetic wheels, indexed
    shutil.copytree(hand, job)
    if factory("index", "--out", job).wait() != 0:
        sys.exit("indexing the synthetic job failed")

    def with_hand_placed(folder: Path) -> Path:
        shutil.copytree(reference, folder, dirs_exist_ok=True)
        for wheel in (hand / "files").iterdir():
            shutil.copy2(wheel, folder / "files" / wheel.name)
        return folder

    indexed = killed_and_rerun("index", args.index_kills, with_hand_placed,
                               lambda folder: factory("index", "--out", folder), rng)
    merged = killed_and_rerun("merge", args.merge_kills, lambda folder: folder,
                              lambda folder: factory("index", "--merge", reference, job,
                                                     "--out", folder), rng)
    return 0 if built and both == args.pairs and indexed and merged else 1


if __name__ == "__main__":
    sys.exit(main())
