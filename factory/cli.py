"""The `factory` command. Errors are caught here, once: bad input exits 2 with one line, a failed
build exits 1, and nothing is written before all input has been validated."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from rich.console import Console

from . import __version__
from .build import cell_outcomes, run_build
from .cache import default_cache_dir
from .container.engine import Engine
from .container.runner import DockerRunner
from .errors import ConfigError, FactoryError
from .index.merge import is_url, merge_outputs
from .index.serve import make_server
from .index.update import IndexSummary, update_index, yank
from .lockfile import Locked, lock_path
from .lockfile import render as render_lock
from .lockfile import write as write_lock
from .matrix.jobs import DEFAULT_MAX_CELLS, parse_shard, plan_jobs, select_job, select_shard
from .matrix.load import host_platform, load_matrix
from .matrix.model import RUNNERS, Matrix
from .matrix.plan import Kernel, Plan, check_unique_names, make_plan
from .process import Log
from .progress import make_reporter
from .provenance import DEFAULT_BUILD_ROOT, BuildOptions, usable_build_root
from .publish.registry import publish_to_registry
from .publish.static import publish_static
from .report import print_report, report_json
from .resolve import resolve_kernels
from .runner import choose_runner
from .spec.buildtoml import read_build_toml
from .verify import verify_wheel
from .wheel.inspect import REPORT_SCHEMA, inspect_wheel


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 2 (not a usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see '{self.prog} --help')")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _shard(text: str) -> tuple[int, int]:
    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port number (0 to 65535)")
    return int(text)


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="factory", description="Build kernel-builder kernel repos into "
                     "pip-installable wheels for every torch x CUDA x SM cell of a matrix.")
    parser.add_argument("--version", action="version", version=f"kernel-wheel-factory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    build = commands.add_parser("build", help="build the wheels of a matrix.yaml",
                                description="Build every cell of MATRIX into <out>/files.")
    build.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix.yaml to build")
    build.add_argument("--out", type=Path, default=Path("index"),
                       help="output folder (default: index)")
    build.add_argument("--only", action="append", metavar="PATTERN", default=[],
                       help="build only cells whose id matches this glob, e.g. "
                            "'img2gray/*torch211*' (repeatable)")
    build.add_argument("--jobs", type=_positive, default=1, metavar="N",
                       help="cells built at once (default 1; each uses the cores left)")
    build.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="toolkits, torch environments and build trees "
                            "(default: ~/.cache/kernel-wheel-factory)")
    build.add_argument("--force", action="store_true",
                       help="replace a published wheel whose bytes changed")
    build.add_argument("--build-root", type=Path, default=DEFAULT_BUILD_ROOT, metavar="DIR",
                       help="where cells are compiled; a fixed path keeps builds reproducible "
                            f"(default: {DEFAULT_BUILD_ROOT})")
    _source_options(build)
    slice_options = build.add_mutually_exclusive_group()
    slice_options.add_argument("--job", metavar="ID", default=None,
                               help="build one job of `factory plan` (e.g. cu130-x86_64-1)")
    slice_options.add_argument("--shard", type=_shard, metavar="I/N", default=None,
                               help="build shard I of N (1/4 ... 4/4): a deterministic slice")
    build.add_argument("--max-cells", type=_positive, default=DEFAULT_MAX_CELLS, metavar="N",
                       help="cells per job, as given to `factory plan` (default "
                            f"{DEFAULT_MAX_CELLS})")
    build.add_argument("--runner", choices=RUNNERS, default=None,
                       help="where cells are built: on this machine (local), in builder "
                            "containers (docker), or docker when a daemon answers and the "
                            "images can be had, else local (auto, the default; the matrix's "
                            "runner: key sets it too)")

    images = commands.add_parser(
        "images", help="build the builder images a matrix needs",
        description="Build (when missing) the docker builder image of every CUDA version and "
                    "platform of MATRIX, and print their names; the docker runner builds them "
                    "on first use too.")
    images.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix.yaml")
    _source_options(images)

    plan = commands.add_parser(
        "plan", help="split a matrix into jobs for a CI fan-out",
        description="Group the cells of MATRIX into jobs (one builder image each, at most "
                    "--max-cells cells) and print them: as JSON, or (--format github) as one "
                    "line a workflow's strategy.matrix takes. `factory build MATRIX --job ID` "
                    "builds one.")
    plan.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix.yaml")
    plan.add_argument("--format", choices=("json", "github"), default="json")
    plan.add_argument("--max-cells", type=_positive, default=DEFAULT_MAX_CELLS, metavar="N",
                      help=f"cells per job at most (default {DEFAULT_MAX_CELLS})")
    plan.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                      help="where fetched sources are kept (default: the factory's cache)")
    _source_options(plan)

    lock = commands.add_parser(
        "lock", help="pin every kernel source of a matrix in its lock file",
        description="Resolve every kernel source of MATRIX (git and Hub revs to commits, each "
                    "tree to its sha256, each wheel version) and write them to the lock file "
                    "beside it (matrix.lock for matrix.yaml); `factory build --locked` then "
                    "builds exactly those.")
    lock.add_argument("matrix", type=Path, metavar="MATRIX", help="the matrix.yaml")
    lock.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                      help="where fetched sources are kept (default: the factory's cache)")
    _source_options(lock, lockable=False)

    index = commands.add_parser(
        "index", help="regenerate the package index pages of an output folder",
        description="Regenerate the per-cell and combined PEP 503/691 indexes and the browse "
                    "page from the wheels in <out>/files (factory build does this at its end).")
    index.add_argument("--out", type=Path, default=Path("index"),
                       help="output folder (default: index)")
    index.add_argument("--merge", nargs="+", default=None, metavar="DIR|URL",
                       help="first copy in the wheels, logs and cell outcomes of these output "
                            "folders (build jobs' artifacts), and the wheels and yanks of "
                            "indexes the factory published at these http(s) URLs; --out is "
                            "made when missing")
    index.add_argument("--force", action="store_true",
                       help="accept a published wheel whose bytes changed")

    yank_command = commands.add_parser(
        "yank", help="mark a published release yanked",
        description="Mark the wheels of NAME VERSION yanked (PEP 592) in every index, or only "
                    "in one cell's with --label; pip and uv then skip them unless pinned.")
    yank_command.add_argument("name", metavar="NAME")
    yank_command.add_argument("version", metavar="VERSION",
                              help="1.0.0 (every label) or 1.0.0+cu130torch211")
    yank_command.add_argument("--label", default=None, help="only this cell's wheel")
    yank_command.add_argument("--reason", required=True, help="shown to users by pip and uv")
    yank_command.add_argument("--out", type=Path, default=Path("index"),
                              help="output folder (default: index)")

    publish = commands.add_parser(
        "publish", help="upload the wheels to a PyPI-compatible registry with twine, or copy "
        "the static index to a folder, s3:// or hf://",
        description="Without --to: upload the wheels of DIR/files that the registry lacks, "
        "with twine (credentials: TWINE_USERNAME/TWINE_PASSWORD, keyring or ~/.pypirc); a "
        "wheel already there with the same sha256 is skipped, one with other bytes stops the "
        "publish. With --to: copy the static index, wheels first and pages last.")
    publish.add_argument("folder", type=Path, nargs="?", default=Path("index"), metavar="DIR",
                         help="the output folder to publish (default: index)")
    destination = publish.add_mutually_exclusive_group()
    destination.add_argument("--repository-url", metavar="URL", default=None,
                             help="the registry's upload URL (default: TWINE_REPOSITORY_URL, "
                             "else the --repository section, else PyPI)")
    destination.add_argument("--repository", metavar="NAME", default=None,
                             help="a repository section of ~/.pypirc")
    destination.add_argument("--to", metavar="TARGET", default=None,
                             help="a folder, s3://BUCKET[/PREFIX] or "
                             "hf://[datasets/|spaces/]OWNER/NAME[@REVISION][/PATH]")
    publish.add_argument("--index-url", metavar="URL", default=None,
                         help="the registry's simple index, when it is not <upload URL>/simple/")
    publish.add_argument("--dry-run", action="store_true",
                         help="say what would be sent, send nothing")

    serve = commands.add_parser(
        "serve", help="serve an output folder to pip, uv and browsers",
        description="Serve DIR over HTTP with PEP 691 content negotiation (JSON or HTML pages).")
    serve.add_argument("folder", type=Path, nargs="?", default=Path("index"), metavar="DIR",
                       help="the output folder (default: index)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on "
                       "(default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000,
                       help="port (default: 8000; 0 picks a free one)")

    inspect = commands.add_parser(
        "inspect", help="show what a wheel holds and check it",
        description="Show each wheel's tags, torch pin, GPU code, libraries, manylinux and abi3 "
                    "verdicts and provenance, and run the publishing checks on it. Exit "
                    "status 1 when a check fails.")
    inspect.add_argument("wheels", type=Path, nargs="+", metavar="WHEEL")
    inspect.add_argument("--json", action="store_true",
                         help=f"print the stable JSON report ({REPORT_SCHEMA})")

    verify = commands.add_parser(
        "verify", help="rebuild a wheel from its provenance and compare sha256",
        description="Build WHEEL again from the source, cell and toolchain its provenance "
                    "records, and report whether the result is byte-identical.")
    verify.add_argument("wheel", type=Path, metavar="WHEEL")
    verify.add_argument("--source", type=Path, default=None, metavar="DIR",
                        help="the kernel's source (default: the recorded location, from here)")
    verify.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                        help="toolkits and torch environments (default: the factory's cache)")
    verify.add_argument("--build-root", type=Path, default=None, metavar="DIR",
                        help="build somewhere else than the recorded build folder (the result "
                             "then differs)")
    return parser


def _cache_dir(args: argparse.Namespace) -> Path:
    return (args.cache_dir or default_cache_dir()).resolve()


def _source_options(parser: argparse.ArgumentParser, lockable: bool = True) -> None:
    if lockable:
        parser.add_argument("--locked", action="store_true",
                            help="build the sources the lock file pins (see `factory lock`); "
                                 "fail when one has moved or changed")
    parser.add_argument("--offline", action="store_true",
                        help="fetch nothing: git and Hub sources come from the cache (refs as "
                             "last fetched; HF_HUB_OFFLINE=1 does this for Hub sources)")


def resolve_matrix(matrix_path: Path, console: Console, cache: Path, offline: bool = False,
                   locked: bool = False) -> tuple[Matrix, list[Kernel]]:
    """Validate the matrix, fetch every kernel it names and read their build.toml files."""
    matrix = load_matrix(matrix_path)

    def say(text: str) -> None:
        console.print(text, style="yellow", markup=False, soft_wrap=True)

    kernels = []
    for found in resolve_kernels(matrix, cache, offline=offline, locked=locked, say=say):
        spec = read_build_toml(found.tree.root)
        for warning in spec.warnings:
            say(f"warning: {warning}")
        kernels.append(Kernel(found.entry, found.tree, spec, found.version))
    return matrix, kernels


def plan_matrix(matrix_path: Path, console: Console, cache: Path, offline: bool = False,
                locked: bool = False, every_platform: bool = False) -> Plan:
    """The matrix's cells, every input validated and every source fetched; with
    `every_platform`, other platforms' cells too (a CI fan-out's plan)."""
    matrix, kernels = resolve_matrix(matrix_path, console, cache, offline, locked)
    return make_plan(matrix, kernels, None if every_platform else host_platform())


def _build(args: argparse.Namespace, console: Console) -> int:
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is not a folder", file=out, key="--out")
    cache = _cache_dir(args)
    sliced = bool(args.job or args.shard)
    plan = plan_matrix(args.matrix, console, cache, args.offline, args.locked, sliced)
    if args.job:
        plan = select_job(plan, args.job, args.max_cells).on_host(host_platform())
    elif args.shard:
        plan = select_shard(plan, *args.shard).on_host(host_platform())
    if args.only:
        everything = plan
        plan = plan.only(args.only)
        if not plan.cells and not plan.skipped:
            ids = ", ".join([c.id for c in everything.cells] + [s.id for s in everything.skipped])
            raise ConfigError(f"{' '.join(args.only)!r} matches no cell (cells: {ids})",
                              key="--only")
    options = BuildOptions(usable_build_root(args.build_root), source_date_epoch())
    requested = args.runner or plan.matrix.runner or "auto"
    runner, why = choose_runner(requested, plan, cache, options, plan.matrix.docker_base)
    console.print(f"runner: {runner.name} ({why})", markup=False, soft_wrap=True)
    results = run_build(plan, out, runner, args.jobs, make_reporter(console), force=args.force)
    summary = update_index(out, force=args.force, outcomes=cell_outcomes(plan, results),
                           published=[r.wheel for r in results if r.status == "built" and r.wheel])
    _print_index(console, out, summary)
    return 1 if any(result.status == "failed" for result in results) else 0


def _images(args: argparse.Namespace, console: Console) -> int:
    plan = plan_matrix(args.matrix, console, default_cache_dir(), args.offline, args.locked)
    engine = Engine()
    problem = engine.unavailable()
    if problem:
        raise ConfigError(f"cannot build images: {problem}", key="images")
    runner = DockerRunner(default_cache_dir(), BuildOptions(DEFAULT_BUILD_ROOT, None),
                          plan.matrix.docker_base, engine)
    try:
        images = runner.make_images(plan.cells, Log(sys.stdout))
        if not images:
            console.print(f"no cell of {args.matrix} is compiled: no builder image is needed",
                          markup=False, soft_wrap=True)
        for image in images:
            console.print(f"image {image.name} (CUDA {image.cuda}, {image.platform}, base "
                          f"{image.base})", markup=False, soft_wrap=True)
    finally:
        runner.close()
    return 0


def _plan(args: argparse.Namespace, console: Console) -> int:
    cache = _cache_dir(args)
    plan = plan_matrix(args.matrix, _console(stderr=True), cache, args.offline, args.locked,
                       every_platform=True)
    jobs = plan_jobs(plan, args.max_cells)
    if args.format == "github":
        text = json.dumps({"include": [job.summary() for job in jobs]}, separators=(",", ":"))
    else:
        text = json.dumps({"matrix": str(args.matrix), "max_cells": args.max_cells,
                           "jobs": [{**job.summary(), "cells": list(job.cells),
                                     "skipped": list(job.skipped)} for job in jobs]}, indent=1)
    print(text)
    return 0


def _lock(args: argparse.Namespace, console: Console) -> int:
    cache = _cache_dir(args)
    matrix, kernels = resolve_matrix(args.matrix, console, cache, args.offline)
    check_unique_names(matrix, kernels)
    entries = []
    for kernel in kernels:
        tree, source = kernel.source, kernel.entry.source
        entries.append(Locked(kernel.spec.name, source.kind, source.location, source.subdir,
                              source.revision, tree.revision, tree.digest, kernel.version))
        rev = f" {source.revision} ->" if source.revision else ""
        console.print(f"{kernel.spec.name} {kernel.version}: {source.kind}:{source.location}"
                      f"{' (' + source.subdir + ')' if source.subdir else ''}{rev} "
                      f"{tree.revision[:12]}", markup=False, soft_wrap=True)
    path = lock_path(matrix.path)
    changed = write_lock(path, render_lock(matrix.path, entries))
    console.print(f"{'wrote' if changed else 'unchanged:'} {path}", markup=False, soft_wrap=True)
    return 0


def _print_index(console: Console, out: Path, summary: IndexSummary) -> None:
    console.print(f"index: {summary.wheels} wheel(s) of {summary.projects} project(s) in "
                  f"{out}/simple/ and one index per cell "
                  f"({', '.join(summary.labels) or 'none yet'}); {summary.pages_written} "
                  f"page(s) written, {summary.pages_removed} removed", markup=False,
                  soft_wrap=True)


def _index(args: argparse.Namespace, console: Console) -> int:
    out: Path = args.out
    if args.merge:
        if out.exists() and not out.is_dir():
            raise ConfigError("exists and is not a folder", file=out, key="--out")
        sources = [source if is_url(source) else Path(source) for source in args.merge]
        _print_index(console, out, merge_outputs(out, sources, force=args.force))
        return 0
    if not out.is_dir():
        raise ConfigError("no such folder", file=out, key="--out")
    _print_index(console, out, update_index(out, force=args.force, full=True))
    return 0


def source_date_epoch() -> int | None:
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if text is None:
        return None
    if not text.strip().isdigit():
        raise ConfigError(f"'{text}' is not a whole number of seconds since 1970",
                          key="SOURCE_DATE_EPOCH")
    return int(text)


def _wheels(paths: list[Path]) -> list[Path]:
    for path in paths:
        if not path.is_file():
            raise ConfigError("no such wheel", file=path)
        if path.suffix != ".whl":
            raise ConfigError("not a .whl file", file=path)
    return paths


def _yank(args: argparse.Namespace, console: Console) -> int:
    if not (args.out / "files").is_dir():
        raise ConfigError("has no files/ folder: not an index", file=args.out, key="--out")
    for filename in yank(args.out, args.name, args.version, args.label, args.reason):
        console.print(f"yanked {filename}: {args.reason}", markup=False, soft_wrap=True)
    return 0


def _publish(args: argparse.Namespace, console: Console) -> int:
    def say(text: str) -> None:
        console.print(text, markup=False, soft_wrap=True)

    if not args.folder.is_dir():
        raise ConfigError("no such folder", file=args.folder)
    if args.to is not None:
        if args.index_url is not None:
            raise ConfigError("only applies to a registry, not with --to", key="--index-url")
        report = publish_static(args.folder, args.to, dry_run=args.dry_run, say=say)
        say(f"{'would send' if args.dry_run else 'sent'} {len(report.sent)} file(s) to "
            f"{report.target}, {report.unchanged} unchanged")
        return 0
    registry = publish_to_registry(args.folder, repository_url=args.repository_url,
                                   repository=args.repository, index_url=args.index_url,
                                   dry_run=args.dry_run, say=say)
    say(f"{'dry run: nothing uploaded' if args.dry_run else f'uploaded {len(registry.uploaded)}'}"
        f", {len(registry.skipped)} already there"
        + (f", {len(registry.yanked)} yanked left out" if registry.yanked else ""))
    return 0


def _serve(args: argparse.Namespace, console: Console) -> int:
    folder: Path = args.folder
    if not folder.is_dir():
        raise ConfigError("no such folder", file=folder)
    try:
        server = make_server(folder, args.host, args.port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.host}:{args.port} ({exc.strerror})",
                          key="--port") from None
    host, port = server.server_address[:2]
    console.print(f"Serving {folder.resolve()} at http://{host}:{port}/ (Ctrl-C to stop)",
                  markup=False, soft_wrap=True)
    labels = sorted(p.parent.name for p in folder.glob("*/simple") if p.is_dir())
    for label in labels:
        console.print(f"  pip install PACKAGE --extra-index-url http://{host}:{port}/{label}/simple",
                      markup=False, soft_wrap=True)
    sys.stdout.flush()
    with server:
        server.serve_forever()
    return 0


def _inspect(args: argparse.Namespace, console: Console) -> int:
    reports = [inspect_wheel(path) for path in _wheels(args.wheels)]
    if args.json:
        document = report_json(reports)
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
        return 1 if any(wheel["problems"] for wheel in document["wheels"]) else 0
    failed = False
    for number, report in enumerate(reports):
        if number:
            console.print()
        failed |= bool(print_report(report, console))
    return 1 if failed else 0


def _verify(args: argparse.Namespace, console: Console) -> int:
    wheel = _wheels([args.wheel])[0]
    build_root = usable_build_root(args.build_root) if args.build_root else None
    cache = _cache_dir(args)
    console.print(f"rebuilding {wheel.name} from its provenance ...")
    verdict = verify_wheel(wheel, args.source, cache, build_root)
    if verdict.problem:
        console.print(f"[red]cannot verify:[/red] {verdict.problem}")
        return 1
    console.print(f"recorded sha256 {verdict.expected_sha256}")
    console.print(f"rebuilt  sha256 {verdict.actual_sha256}  ({verdict.rebuilt})")
    if verdict.matches:
        console.print("[green]verified: the rebuilt wheel is byte-identical[/green]")
        return 0
    console.print("[red]differs:[/red] " + (", ".join(verdict.differing_files) or "zip layout"))
    if verdict.builder:
        console.print(f"  it was built in a {verdict.builder} container and rebuilt on this host",
                      markup=False, soft_wrap=True)
    for tool in verdict.differing_tools:
        console.print(f"  toolchain {tool}", markup=False)
    console.print(f"log: {verdict.log}")
    return 1


def _console(stderr: bool) -> Console:
    """Rich output; off a terminal (CI logs, pipes) wide enough that paths stay on one line."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


def _stop(signum: int, frame: object) -> None:
    """SIGTERM (a CI job cancelled) stops a build as Ctrl-C does: containers are removed."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
    console = _console(stderr=False)
    errors = _console(stderr=True)
    try:
        args = make_parser().parse_args(argv)
        command = {"build": _build, "images": _images, "plan": _plan, "lock": _lock,
                   "index": _index, "yank": _yank, "publish": _publish, "serve": _serve,
                   "inspect": _inspect, "verify": _verify}[args.command]
        return command(args, console)
    except FactoryError as exc:
        errors.print(f"error: {exc}", markup=False, soft_wrap=True)
        return exc.exit_status
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130


def entry_point() -> NoReturn:
    sys.exit(main())
