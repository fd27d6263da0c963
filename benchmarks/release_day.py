"""Release day: the scheduled path (`torch: {latest: N}`, `--new`, `index --merge`) run once on
an index holding torch N, then again after torch N+1 appears on it; how long the second run
takes from its start to the merged index, its compile time apart from the rest.

    .venv/bin/python benchmarks/release_day.py [--old 2.14.1] [--new 2.15.0] [--sm 9.0]
        [--kernel examples/img2gray] [--work DIR] [-- FLAGS]

A stand-in torch index is served here (the torch versions with PEP 658 metadata that pins each
one's CUDA runtime, as PyPI's does; the wheels themselves are never fetched: torch is installed
from PyPI as always, so keep both releases' environments in the factory's cache to time the
factory rather than the download). The matrix follows it: `torch: {latest: 2}` with
both releases' CUDA versions (13.0 and 13.2), so each release has a cell PyPI cannot serve (its
build is the other CUDA version): skipped, each with its reason on the browse page. Each run is
what the scheduled workflow does: `factory build --new SITE --out JOB`, then `factory index
--out SITE --merge JOB`.
The second run must build only the new release's cells; the script checks that, and that every
cell of the matrix the site lacks has a reason on the browse page, and prints:

    run 2: N cell(s) built (only torch N+1's), T s from start to the merged index:
           C s compiling (the cells' own compile steps), O s everything else
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# PyPI's builds: the cuda-toolkit each release's Linux wheel pins
CUDA_OF = {"2.11": "13.0.2", "2.12": "13.0.2", "2.13": "13.0.2", "2.14": "13.0.2",
           "2.15": "13.2.1"}
_PROGRESS = re.compile(r"^\[\s*([\d.]+)s\] (\S+): (.*)$", re.M)


def torch_page(root: Path, versions: list[str]) -> None:
    """simple/torch/ listing a cp311 Linux wheel of each version, with its metadata file."""
    links = []
    for version in versions:
        name = f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl"
        cuda = CUDA_OF[".".join(version.split(".")[:2])]
        metadata = (f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                    f"Requires-Dist: cuda-toolkit[cudart]=={cuda}; platform_system == \"Linux\"\n")
        folder = root / "simple" / "torch"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.metadata").write_text(metadata)
        digest = hashlib.sha256(metadata.encode()).hexdigest()
        links.append(f'<a href="{name}#sha256={"0" * 64}" data-core-metadata="sha256={digest}">'
                     f"{name}</a>")
    (root / "simple" / "torch" / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(root: Path) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def factory(*args: str | Path, cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "factory", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=None)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"factory {' '.join(map(str, args[:2]))} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds, done.stdout


def compile_seconds(progress: str) -> float:
    """The wall time the build spent compiling: from each cell's `building (compiling ...)`
    line to its next progress line, cells compiling at once counted once."""
    spans: list[tuple[float, float]] = []
    started: dict[str, float] = {}
    for found in _PROGRESS.finditer(progress):
        seconds, cell, state = float(found[1]), found[2], found[3]
        if cell in started:
            spans.append((started.pop(cell), seconds))
        if state.startswith("building (compiling"):
            started[cell] = seconds
    total, reach = 0.0, 0.0
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def scheduled_run(work: Path, matrix: Path, site: Path, run: int,
                  flags: list[str]) -> tuple[float, float, list[str]]:
    """One scheduled run: the build of the cells SITE lacks, merged into SITE."""
    job = work / f"job{run}"
    start = time.perf_counter()
    # the first run: no site yet
    new: list[str | Path] = ["--new", site] if (site / "simple").is_dir() else []
    _, out = factory("build", matrix, *new, "--out", job, *flags, cwd=work)
    factory("index", "--out", site, "--merge", job, cwd=work)
    seconds = time.perf_counter() - start
    built = sorted({found[2] for found in _PROGRESS.finditer(out)
                    if found[3].startswith("built (")})
    return seconds, compile_seconds(out), built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="2.14.1")
    parser.add_argument("--new", default="2.15.0")
    parser.add_argument("--sm", default="9.0")
    parser.add_argument("--kernel", type=Path, default=REPO / "examples" / "img2gray")
    parser.add_argument("--work", type=Path)
    parser.add_argument("flags", nargs="*")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="release-day-"))
    work.mkdir(parents=True, exist_ok=True)
    torches, site = work / "torches", work / "site"
    torch_page(torches, [args.old])
    url = serve(torches)
    matrix = work / "matrix.yaml"
    matrix.write_text(f"""kernels:
  - {{path: {args.kernel.resolve()}, version: 1.0.0}}
torch: {{latest: 2, index: "{url}simple/"}}
cuda:
  "13.0": {{sms: ["{args.sm}"]}}
  "13.2": {{sms: ["{args.sm}"]}}
""")
    first, first_compile, first_built = scheduled_run(work, matrix, site, 1, args.flags)
    print(f"run 1 (torch {args.old} on the index): {len(first_built)} cell(s) built in "
          f"{first:.1f} s ({first_compile:.1f} s compiling): {', '.join(first_built)}")
    torch_page(torches, [args.old, args.new])
    second, second_compile, second_built = scheduled_run(work, matrix, site, 2, args.flags)
    new_label = "torch" + "".join(args.new.split(".")[:2])
    stray = [cell for cell in second_built if new_label not in cell]
    print(f"run 2 (torch {args.new} added): {len(second_built)} cell(s) built"
          f"{' (only torch ' + args.new + chr(39) + 's)' if not stray else ''}, {second:.1f} s "
          f"from start to the merged index: {second_compile:.1f} s compiling, "
          f"{second - second_compile:.1f} s everything else")
    if stray or not second_built:
        print(f"unexpected: run 2 built {second_built or 'nothing'}")
        return 1
    missing = []
    for page in (site / "browse").glob("*.json"):
        for version in json.loads(page.read_text())["versions"]:
            missing += [(cell["label"], cell["status"], cell.get("detail"))
                        for cell in version["cells"] if cell["status"] != "built"]
    unexplained = [label for label, _, detail in missing if not detail]
    print(f"the site: {len(list((site / 'files').glob('*.whl')))} wheel(s); "
          f"{len(missing)} cell(s) without a wheel, each with its reason on the browse page"
          if not unexplained else f"cells without a reason on the browse page: {unexplained}")
    for label, status, detail in missing:
        print(f"  {label}: {status}: {detail}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
