"""How the index scales: synthetic output folders of 1,000 and 10,000 small valid wheels (many
projects, versions and torch x CUDA labels, a few pure-Python), indexed by `update_index`.

    .venv/bin/python benchmarks/index_scale.py [--sizes 1000 10000] [--repeat 3]

For each size it prints:
- cold: the first index of a folder of wheels (no manifest: every wheel is read and hashed);
- full regeneration: `factory index`'s work, every page rendered from the manifest and
  compared with the page in place (what changed is written);
- full regeneration into an empty tree: the same with every page deleted first, so every page
  file and folder is created again (this is mostly the file system's time);
- add one wheel: one new wheel in files/, the index brought up to date as `factory build` does
  (it names the wheels it published; the others are taken from the manifest unread);
- no change: `factory build`'s update with nothing new;
- check every file: an update that checks each file's size and mtime against the manifest.
Times are medians of --repeat runs, in this process (as `factory build` calls it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from factory.index.update import update_index  # noqa: E402
from factory.wheel.assemble import CoreMetadata, write_wheel  # noqa: E402
from factory.wheel.read import read_wheel  # noqa: E402

LABELS = [f"cu{cuda}torch{torch}" for cuda in ("126", "128", "130", "132")
          for torch in ("29", "210", "211", "212", "213")]


def make_wheels(files: Path, count: int, scratch: Path) -> None:
    """`count` wheels: 1 in 20 pure Python, the rest spread over 20 labels and many versions."""
    files.mkdir(parents=True)
    content = scratch / "content"
    for number in range(count):
        project = f"kernel-{number % max(1, count // 100)}"
        package = content / project.replace("-", "_")
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f"N = {number}\n")
        release = f"1.{number // 2000}.{(number // 20) % 100}"
        if number % 21 == 0:
            version, tag = release, "py3-none-any"
        else:
            version, tag = f"{release}+{LABELS[number % len(LABELS)]}", "cp39-abi3-linux_x86_64"
        metadata = CoreMetadata(project, version, "synthetic kernel", ">=3.9",
                                ("torch",), "MIT", None)
        write_wheel(content, files, metadata, tag, tag == "py3-none-any", 1767225600)
        shutil.rmtree(package)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def remove_pages(out: Path) -> None:
    for child in out.iterdir():
        if child.name not in ("files", ".factory"):
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="kwf-index-bench-") as scratch:
            root = Path(scratch)
            out = root / "index"
            started = time.perf_counter()
            make_wheels(out / "files", size, root)
            print(f"{size} wheels made in {time.perf_counter() - started:.1f} s")

            cold = timed(partial(update_index, out))
            summary = update_index(out)
            full = [timed(partial(update_index, out, full=True)) for _ in range(args.repeat)]
            empty = []
            for _ in range(args.repeat):
                remove_pages(out)
                empty.append(timed(partial(update_index, out, full=True)))
            added = []
            for number in range(args.repeat):
                name = make_wheels_one(out / "files", root, number)
                # what a build hands on: its wheel as the gates read it (read before timing)
                built = {name: read_wheel(out / "files" / name)}
                added.append(timed(partial(update_index, out, published=built)))
            unchanged = [timed(partial(update_index, out, published={}))
                         for _ in range(args.repeat)]
            checked = [timed(partial(update_index, out)) for _ in range(args.repeat)]
            pages = sum(1 for _ in out.rglob("index.*") if ".factory" not in _.parts)
            print(f"  {summary.projects} projects, {len(summary.labels)} labels, {pages} pages")
            print(f"  cold (read every wheel):   {cold:.2f} s")
            print(f"  full regeneration:         {statistics.median(full):.2f} s")
            print(f"  ... into an empty tree:    {statistics.median(empty):.2f} s")
            print(f"  add one wheel:             {statistics.median(added):.3f} s")
            print(f"  no change:                 {statistics.median(unchanged):.3f} s")
            print(f"  check every file:          {statistics.median(checked):.3f} s")


def make_wheels_one(files: Path, scratch: Path, number: int) -> str:
    content = scratch / f"added-{number}"
    package = content / "kernel_0"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"ADDED = {number}\n")
    metadata = CoreMetadata("kernel-0", f"9.{number}.0+{LABELS[number % len(LABELS)]}",
                            "synthetic kernel", ">=3.9", ("torch",), "MIT", None)
    return write_wheel(content, files, metadata, "cp39-abi3-linux_x86_64", False,
                       1767225600).name


if __name__ == "__main__":
    main()
