"""The builder runner: each cell placed in a builder container (plan/placement.py) is built
inside the factory's builder image of its CUDA version.

Per builder image (a group of cells), two containers, each started once:

- the *prepare* container, with the network on, makes the torch environments the group's cells
  need, and the environments their tests run in, in the factory's cache (mounted read-write;
  uv's download cache is shared with the host); no kernel's code runs there;
- the *build* container, started with `--network none`, as a non-root user, without
  capabilities, with only its image's part of the cache mounted, read-only, and the object
  cache's part for its base, read-write. Each kernel's source is copied in once (owned by root,
  so the build cannot change it); nothing of the user's tree is mounted. Each cell is built
  there by `docker exec`, and its wheel copied out.

The kernel's own code (a setup.py or a cuTile export while it builds, the wheel's import, its
tests) runs in a container of its own per cell and step, removed when the step ends with all
it started: the build container's confinement, but nothing of the object cache, no other
kernel's files, and no process of the factory's that holds the object cache's key.

The wheel is copied out before any of the kernel's code runs, and judged by the gates outside
the container before it is published. The runner is a context manager: its engine removes
every container when the run ends, fails or is interrupted.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any

from .... import defaults
from ....compile.objects import DOCKER_PARTS, ObjectStore
from ....compile.pool import TimeLimitReached
from ....config.wheelhouse import wheelhouse_wheels
from ....errors import BuildError, Unavailable
from ....plan.codec import cell_record
from ....plan.costs import UnitCost
from ....plan.model import Cell
from ....prove.load import LoadReport
from ....prove.tests import TestReport
from ....sources.tree import source_files
from ....system.cache import exclusive
from ....system.engine import Engine, source_archive
from ....system.process import Log, first_error
from ....toolchain.python import manylinux_python
from ....values.versions import major_minor
from ...broker import ObjectBroker, cell_broker, compiler_threads, say_tally, stopped
from ...job import Built, Compiling, Container
from ...kinds import kind_of
from ...options import BuildOptions
from .image import BuilderImage, build_context, builder_image, slug
from .inside import CONTROL

__all__ = ["DockerRunner", "build_user", "confined_options", "missing_base"]

CACHE = PurePosixPath("/cache")  # the factory's cache, as containers see it
SOURCES = PurePosixPath("/work/src")
DEPENDS = PurePosixPath("/work/depends")  # C++ dependencies: <name>/<n>, the n-th header folder
OBJECTS = PurePosixPath("/objects")  # the object cache's part of the image's base
BROKER = PurePosixPath("/objects-broker")  # the folder of an object cache broker's socket
# in a container of the kernel's code: what is copied in (owned by root: read-only to it), and
# where it may write
KERNEL = PurePosixPath("/tmp/kernel-wheel-factory-kernel")
SCRATCH = PurePosixPath("/tmp/kernel-wheel-factory-scratch")
OUTPUT = PurePosixPath("/tmp/kernel-wheel-factory/out")
TESTS = PurePosixPath("/tmp/kernel-wheel-factory-tests")  # factory test: wheels, tests, envs
CUDA_HOME = "/usr/local/cuda"
NOBODY_ID = 10001
NOBODY = f"{NOBODY_ID}:{NOBODY_ID}"  # the build user when the factory itself runs as root
NETWORK_FAILURES = ("could not resolve host", "temporary failure in name resolution",
                    "name or service not known", "network is unreachable",
                    "failed to establish a new connection", "getaddrinfo failed")


def build_user() -> str:
    """Who builds in the container: the invoking user, or an unprivileged one for root."""
    return NOBODY if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"


def confined_options() -> list[str]:
    """What every container a build or a kernel's code runs in starts with: no network, the
    build user, no capabilities, no new privileges, HOME in its own /tmp."""
    return ["--network", "none", "--user", build_user(), "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--env", "HOME=/tmp"]


def _brokered(build: Callable[[], Built], broker: ObjectBroker | None, compiling: Compiling,
              log: Log) -> Built:
    """A build in a container that an object cache broker served from here: its counts are
    the broker's, and one the time limit stopped (its compilers, or units not started) ends
    saying what the cache kept."""
    if broker is None:
        return build()
    try:
        built = build()
    except BuildError as failure:
        if broker.tally.late or compiling.pool.expired or isinstance(failure,
                                                                     TimeLimitReached):
            raise stopped(log, broker.tally) from None
        raise
    if broker.tally.late:  # it linked stand-ins: never a wheel
        raise stopped(log, broker.tally)
    say_tally(log, broker.tally)
    return broker.tally.built(built.wheel)


def missing_base(engine: Engine, image: BuilderImage, offline: bool = False) -> str | None:
    """Why an image that is not here cannot be built (its base is not here and cannot be
    pulled, or --offline forbids the downloads making it takes), or None."""
    if offline:
        return (f"the builder image {image.name} is not here, and --offline does not make one "
                "(making it downloads its toolkit and the factory's dependencies)")
    if engine.has_image(image.base):
        return None
    failure = engine.pull(image.base)
    if failure is None:
        return None
    return f"the base image {image.base} is not here and cannot be pulled ({failure})"


@dataclass
class _Group:
    """The cells of one builder image, and the containers made for them."""

    image: BuilderImage
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: bool = False
    error: str | None = None
    prepare: str | None = None
    build: str | None = None
    # (torch, CUDA, torch index, CPython, build requirements) made in the cache
    prepared: set[tuple[str, str, str | None, str | None, tuple[str, ...]]] = \
        field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    # torch release -> why the image's host compiler cannot build for it (None: it can)
    standards: dict[str, str | None] = field(default_factory=dict)
    wheelhouses: list[str] | None = None  # where the run's wheelhouses were copied for tests


class DockerRunner:
    name = "docker"

    def __init__(self, cache: Path, options: BuildOptions, base: str,
                 engine: Engine | None = None) -> None:
        self.cache = cache
        self.options = options
        self.base = base
        self.engine = engine or Engine()
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> DockerRunner:
        self.engine.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.engine.__exit__(kind, error, trace)

    def image(self, cell: Cell) -> BuilderImage:
        assert cell.cuda is not None  # only compiled cells go into containers
        return builder_image(cell.cuda.version, cell.platform, self.base)

    def facts(self, cell: Cell) -> dict[str, Any]:
        return {"image": self.image(cell).name}

    def make_images(self, cells: Iterable[Cell], log: Log) -> list[BuilderImage]:
        """Make sure the builder image of every cell (each one the builder container takes)
        is there; the images."""
        images = list(dict.fromkeys(self.image(cell) for cell in cells))
        for image in images:
            self._ensure_image(self._group(image), log)
        return images

    # -- one cell -----------------------------------------------------------------------------

    def build(self, cell: Cell, staging: Path, log: Log, compiling: Compiling,
              progress: Callable[[str], None]) -> Built:
        group = self._group(self.image(cell))
        log.write(f"builder image {group.image.name} (base {group.image.base})")
        progress("builder image")
        self._ensure_image(group, log)
        self._check_standard(group, cell, log)
        progress("torch environment")
        self._prepare(group, cell, log)
        progress("copying the source in")
        if kind_of(cell.spec).runs_code_to_build:  # the kernel's code: a container of its own
            with self._objects_served(group, cell, compiling, log) as (broker, mounts), \
                    self._kernel_container(group, "build", log, mounts) as container:
                self._copy_sources(container, cell, set())
                served = replace(compiling, objects=None,
                                 broker=str(BROKER / "objects.sock") if broker else None)
                return _brokered(lambda: self._run_build(group, container, cell, staging, log,
                                                         served, progress),
                                 broker, compiling, log)
        compiling = replace(compiling, part=f"{DOCKER_PARTS}/{slug(group.image.base)}")
        container = self._build_container(group, cell, compiling.store)
        return self._run_build(group, container, cell, staging, log, compiling, progress)

    def load(self, cell: Cell, wheel: Path, modules: list[str], log: Log) -> LoadReport:
        """Loaded in its builder image, in a container of its own (the kernel's code runs),
        with the torch environment it was built against."""
        group = self._group(self.image(cell))
        assert cell.cuda is not None
        python = str(manylinux_python(cell.python)) if cell.python is not None else None
        kind = kind_of(cell.spec)
        requires = kind.gate_requirements(cell, wheel)
        if kind.requires_from_wheel and requires:
            # what the built wheel requires, installed while the network is on
            log.step(f"the wheel's requirements beside torch {cell.torch} for its import: "
                     f"{' '.join(requires)}")
            self._prepare(group, cell, log, requires)
        job = {"torch": str(cell.torch), "cuda": str(major_minor(cell.cuda.version)),
               "torch_index": cell.cuda.torch_index, "python": python,
               "cache": str(CACHE / self._base_cache(group.image)),
               "wheel": str(KERNEL / "wheel" / wheel.name), "modules": modules,
               "folder": str(SCRATCH / "load"), "requires": requires}
        with self._kernel_container(group, "load", log) as container:
            self.engine.copy_in(container, str(KERNEL.parent), source_archive(
                wheel.parent, [Path(wheel.name)], f"{KERNEL.name}/wheel"))
            outcome = self._exec(container, "load", job, log, lambda step: None)
        loaded = LoadReport.from_json(outcome["result"])
        if loaded is None:
            raise BuildError(f"the container's report of loading {wheel.name} is damaged")
        return loaded

    def test(self, cell: Cell, wheel: Path, log: Log) -> TestReport:
        """Tested in its builder image: the environment made by the prepare container (the
        network is on there, to install pytest and what the tests need) in the cache, the
        tests run in a container of their own, as the wheel's import is (no GPU is passed
        in)."""
        assert cell.cuda is not None
        tests = cell.spec.root / "tests"
        group = self._group(self.image(cell))
        self._ensure_image(group, log)
        self._prepare(group, cell, log)
        assert group.prepare is not None
        stage = TESTS / cell.key
        self.engine.copy_in(group.prepare, str(TESTS.parent),
                            source_archive(wheel.parent, [Path(wheel.name)],
                                           f"{TESTS.name}/{cell.key}/wheel"))
        self.engine.copy_in(group.prepare, str(TESTS.parent),
                            source_archive(tests, source_files(tests),
                                           f"{TESTS.name}/{cell.key}/tests"))
        python = str(manylinux_python(cell.python)) if cell.python is not None else None
        base = self._base_cache(group.image)
        # in the cache, which the tests' container has read-only; one factory at a time
        envs = f"{base}/tests/{slug(cell.key)}"
        job = {"torch": str(cell.torch), "cuda": str(major_minor(cell.cuda.version)),
               "torch_index": cell.cuda.torch_index, "python": python, "cache": str(CACHE / base),
               "wheel": str(stage / "wheel" / wheel.name), "tests": str(stage / "tests"),
               "env": str(CACHE / envs / "env"), "selection": cell.tests.to_json(),
               "needs": list(cell.spec.test_requires), "wheelhouses": self._wheelhouses(group)}
        with exclusive(self.cache / envs):
            made = self._exec(group.prepare, "test_env", job, log, lambda step: None)["result"]
            if not isinstance(made, dict) or not isinstance(made.get("python"), str):
                report = TestReport.from_json(made.get("report") if isinstance(made, dict)
                                              else None)
            else:
                with self._kernel_container(group, "test", log) as container:
                    self.engine.copy_in(container, str(KERNEL.parent), source_archive(
                        tests, source_files(tests), f"{KERNEL.name}/tests"))
                    outcome = self._exec(container, "test", {
                        "python": made["python"], "tests": str(KERNEL / "tests"),
                        "module": cell.spec.python_name, "folder": str(SCRATCH / "tests"),
                        "selection": cell.tests.to_json()}, log, lambda step: None)
                report = TestReport.from_json(outcome["result"])
        if report is None:
            raise BuildError("the container's report of the tests is damaged")
        return report

    def _wheelhouses(self, group: _Group) -> list[str]:
        """The run's wheelhouses, copied once into the container the group's tests run in;
        where they are there."""
        assert group.prepare is not None
        with group.lock:
            if group.wheelhouses is None:
                group.wheelhouses = []
                for number, folder in enumerate(self.options.wheelhouses):
                    where = f"{TESTS.name}/wheelhouse-{number}"
                    self.engine.copy_in(group.prepare, str(TESTS.parent), source_archive(
                        folder, [Path(wheel.name) for wheel in wheelhouse_wheels(folder)],
                        where))
                    group.wheelhouses.append(str(TESTS.parent / where))
            return group.wheelhouses

    def _group(self, image: BuilderImage) -> _Group:
        with self._lock:
            return self._groups.setdefault(image.name, _Group(image))

    def _ensure_image(self, group: _Group, log: Log) -> None:
        with group.lock:
            if not group.ready and group.error is None:
                try:
                    self._make_image(group.image, log)
                    group.ready = True
                except BuildError as exc:
                    group.error = str(exc)
            if group.error is not None:
                raise BuildError(group.error)

    def _make_image(self, image: BuilderImage, log: Log) -> None:
        if self.engine.has_image(image.name):
            return
        # one factory on this machine makes it; another that wants it waits, then finds it
        with exclusive(self.cache / "docker" / "images" / slug(image.name)):
            if not self.engine.has_image(image.name):
                self._build_image(image, log)

    def _build_image(self, image: BuilderImage, log: Log) -> None:
        failure = missing_base(self.engine, image, self.options.offline)
        if failure is not None:
            raise BuildError(f"{failure}; make an offline one with docker/make-debian-base.sh "
                             "and set docker.base in the matrix")
        log.step(f"building {image.name}")
        with build_context() as context:
            args = [arg for name, value in image.build_args
                    for arg in ("--build-arg", f"{name}={value}")]
            lines: list[str] = []

            def line(text: str) -> None:
                lines.append(text)
                log.write(text)

            status = self.engine.stream(
                ["build", "--tag", image.name, "--label",
                 f"kernel-wheel-factory.context={image.digest}", *args,
                 "--file", str(context / "builder.Dockerfile"), str(context)], line)
        if status != 0:
            raise BuildError(f"building the image {image.name} failed (exit {status}): "
                             f"{first_error(chr(10).join(lines[-40:]))}")

    def _check_standard(self, group: _Group, cell: Cell, log: Log) -> None:
        """Skip a cell whose torch's headers demand a C++ standard the image's host compiler
        does not give (bullseye's g++ 10 and torch 2.14), before its torch environment is
        made; asked once per torch release."""
        assert cell.torch is not None and cell.cuda is not None
        key = str(major_minor(cell.torch))
        with group.lock:
            if key not in group.standards:
                job = {"torch": key, "cuda": str(major_minor(cell.cuda.version))}
                outcome = self._exec(self._prepare_container(group), "standard", job, log,
                                     lambda step: None)
                group.standards[key] = outcome["result"]
            problem = group.standards[key]
        if problem is not None:
            raise Unavailable(f"the builder image {group.image.name} (base {group.image.base}) "
                              f"cannot build for torch {key}: {problem}; build it on a base "
                              "whose g++ does (docker/make-debian-base.sh makes bookworm's)")

    def _prepare_container(self, group: _Group) -> str:
        """The group's prepare container, started on first use (the group's lock held)."""
        if group.prepare is None:
            self.cache.mkdir(parents=True, exist_ok=True)
            # --offline: the environment comes from uv's cache, with no network at all.
            network = ["--network", "none", "--env", "UV_OFFLINE=1"] \
                if self.options.offline else ["--network", "bridge"]
            group.prepare = self.engine.launch(group.image.name, f"{group.image.tag}-prepare", [
                *network, "--user", f"{os.getuid()}:{os.getgid()}",
                "--env", "HOME=/tmp", "--env", f"UV_CACHE_DIR={CACHE}/uv",
                "--mount", f"type=bind,source={self.cache},target={CACHE}",
            ])
        return group.prepare

    def _prepare(self, group: _Group, cell: Cell, log: Log,
                 wheel_requires: list[str] | None = None) -> None:
        assert cell.cuda is not None
        python = str(manylinux_python(cell.python)) if cell.python is not None else None
        # a PEP 517 project's build environment; what a cuTile or run-time compiling wheel
        # needs beside torch to be imported, or what a built wheel requires (`wheel_requires`)
        # (network on here, off where it is imported)
        kind = kind_of(cell.spec)
        requires = wheel_requires or kind.gate_requirements(cell, None) or \
            kind.build_requirements(cell)
        key = (str(cell.torch), str(major_minor(cell.cuda.version)), cell.cuda.torch_index,
               python, tuple(requires))
        with group.lock:
            if key in group.prepared:
                return
            container = self._prepare_container(group)
            if cell.free_threaded and python is not None:
                self._check_interpreter(group, cell, python)
            job = {"torch": key[0], "cuda": key[1], "torch_index": key[2], "python": python,
                   "build_requires": requires, "assembler": cell.spec.cutile_requirement,
                   "cache": str(CACHE / self._base_cache(group.image))}
            what = f" and the build environment of {cell.spec.name}" if requires else ""
            log.step(f"preparing torch {cell.torch} for CUDA {key[1]}{what} in {container}")
            self._exec(container, "prepare", job, log, lambda step: None)
            group.prepared.add(key)

    def _check_interpreter(self, group: _Group, cell: Cell, python: str) -> None:
        """A free-threaded cell's interpreter is where manylinux images keep it (pypa's have
        3.13t and 3.14t; the factory's Debian base has none): else the cell is skipped."""
        assert group.prepare is not None and cell.python is not None
        if self.engine.stream(["exec", group.prepare, "test", "-x", python],
                              lambda line: None) != 0:
            raise Unavailable(f"the builder image {group.image.name} has no "
                              f"{cell.python.describe()} ({python}); pypa's manylinux images "
                              "have one, or build the cell on the host (runner: local)")

    @staticmethod
    def _base_cache(image: BuilderImage) -> str:
        """The part of the cache one base's containers use (their torch environments),
        relative to the cache: under self.cache on the host, under CACHE in a container."""
        return f"docker/{slug(image.base)}"

    def _confined(self, group: _Group) -> list[str]:
        """The options of a container where a build or the kernel's code runs: no network, a
        non-root user, no capabilities, the image's part of the cache mounted read-only."""
        host_side = self.cache / self._base_cache(group.image)
        host_side.mkdir(parents=True, exist_ok=True)
        return [*confined_options(), "--mount", f"type=bind,source={host_side},"
                f"target={CACHE / self._base_cache(group.image)},readonly"]

    @contextmanager
    def _objects_served(self, group: _Group, cell: Cell, compiling: Compiling,
                        log: Log) -> Iterator[tuple[ObjectBroker | None, list[str]]]:
        """For a build in a container that writes its own compile commands (a setup.py
        project's): the object cache's broker, served from here, and the mount that puts its
        socket's folder (and nothing else of the cache) into the container. Its identities
        name the builder image by id (its compilers are the image's) and the project; its
        objects go to a part of the cache of their own beside the image base's part, which
        the containers' user writes. Nothing without an object cache."""
        if compiling.objects is None or not kind_of(cell.spec).units_seen:
            yield None, []
            return
        store = compiling.objects.part(f"{DOCKER_PARTS}/{slug(group.image.base)}.projects",
                                       own=True)
        image = self.engine.image_id(group.image.name) or group.image.name
        at_once = compiling.pool.budget.share(compiling.cells).cores
        with cell_broker(cell, store, f"image {image}", log, compiling,
                         compiler_threads(at_once, cell.source.root), at_once) as broker:
            folder = Path(broker.address).parent
            if os.getuid() == 0:  # the container's user must reach the socket
                Container((), (NOBODY_ID, NOBODY_ID)).hand_over(folder)
            yield broker, ["--mount", f"type=bind,source={folder},target={BROKER}"]

    @contextmanager
    def _kernel_container(self, group: _Group, step: str, log: Log,
                          mounts: Iterable[str] = ()) -> Iterator[str]:
        """A container of its own for one step that runs the kernel's code, confined as the
        build container is but with nothing of the object cache (but `mounts`: a broker's
        socket); removed, with everything the step left running, when it ends."""
        with self.engine.step_container(group.image.name, f"{group.image.tag}-{step}",
                                        [*self._confined(group), *mounts]) as container:
            log.write(f"   the kernel's code runs in a container of its own, {container}: no "
                      f"network, user {build_user()} without capabilities, the torch "
                      "environments read-only")
            yield container

    def _copy_sources(self, container: str, cell: Cell, copied: set[str]) -> None:
        """The kernel's source and its C++ dependencies, into a container (those not in
        `copied` yet, which they are added to)."""
        name = cell.spec.name
        if name not in copied:
            root = cell.source.root
            self.engine.copy_in(container, str(SOURCES),
                                source_archive(root, source_files(root), name))
            copied.add(name)
        for dependency in cell.depends:
            key = f"{dependency.name}@{dependency.revision}"
            if key in copied:
                continue
            for index, folder in enumerate(dependency.folders):
                self.engine.copy_in(container, str(DEPENDS.parent),
                                    source_archive(folder, source_files(folder),
                                                   f"{DEPENDS.name}/{dependency.name}/{index}"))
            copied.add(key)

    def _build_container(self, group: _Group, cell: Cell, objects: ObjectStore | None) -> str:
        with group.lock:
            if group.build is None:
                mounts = self._confined(group)
                if objects is not None:
                    # The object cache's part of this base: written by the build user.
                    objects.root.mkdir(parents=True, exist_ok=True)
                    if os.getuid() == 0:
                        Container((), (NOBODY_ID, NOBODY_ID)).hand_over(objects.root)
                    mounts += ["--mount", f"type=bind,source={objects.root},target={OBJECTS}"]
                group.build = self.engine.launch(group.image.name, f"{group.image.tag}-build",
                                                 mounts)
            self._copy_sources(group.build, cell, group.sources)
            return group.build

    def _run_build(self, group: _Group, container: str, cell: Cell, staging: Path, log: Log,
                   compiling: Compiling, progress: Callable[[str], None]) -> Built:
        out = OUTPUT / cell.key
        deadline = compiling.pool.deadline
        budget = compiling.pool.budget.share(compiling.cells)
        job = {
            "kernel": str(SOURCES / cell.spec.name), "source": cell.source.to_json(),
            "cell": cell_record(cell), "version": cell.version, "cuda_home": CUDA_HOME,
            "depends": {str(DEPENDS / d.name): len(d.folders) for d in cell.depends},
            "build_root": str(defaults.BUILD_ROOT),
            "source_date_epoch": self.options.epoch(cell), "builder": group.image.name,
            "index_url": self.options.index_url,
            "cache": str(CACHE / self._base_cache(group.image)), "out": str(out),
            "budget": [budget.cores, budget.memory],
            "time_left": None if deadline is None else max(0.0, deadline - time.monotonic()),
            "grace": compiling.pool.grace,
            "objects": str(OBJECTS) if compiling.objects is not None else None,
            # on standard input, never on a command line: the container's factory signs the
            # objects it keeps as this one does
            "object_key": compiling.objects.key.hex() if compiling.objects is not None
            else None,
            "costs": {key: cost.to_json() for key, cost in compiling.costs.items()},
            "only": sorted(compiling.only) if compiling.only is not None else None,
            "verify": compiling.verify,
            "broker": compiling.broker,
            "shard": list(compiling.shard) if compiling.shard else None,
        }
        log.step(f"building in {container} (no network, user {build_user()})")
        outcome = self._exec(container, "build", job, log, progress, compiling)
        store = compiling.store
        if store is not None:
            store.mark_used(outcome.get("used") or {})
        units, compiled, cached = outcome.get("units") or (0, 0, 0)
        name = outcome["result"]
        if name is None:
            return Built(None, units, compiled, cached)
        archive = self.engine.copy_out(container, str(out / name))
        for member in archive.getmembers():
            if member.isreg() and PurePosixPath(member.name).name == name:
                staging.mkdir(parents=True, exist_ok=True)
                wheel = staging / name
                data = archive.extractfile(member)
                if data is None:
                    break
                wheel.write_bytes(data.read())
                return Built(wheel, units, compiled, cached)
        raise BuildError(f"the container reported {name}, but it is not in {out}")

    def _exec(self, container: str, command: str, job: dict[str, Any], log: Log,
              progress: Callable[[str], None],
              compiling: Compiling | None = None) -> dict[str, Any]:
        """Run the factory's container side; what it reported at the end (its result), or
        BuildError with its error. Costs it measured go to the cost book as they come."""
        outcome: dict[str, Any] = {}
        tail: list[str] = []

        def line(text: str) -> None:
            if text.startswith(CONTROL):
                message = json.loads(text[len(CONTROL):])
                if "progress" in message:
                    progress(message["progress"])
                elif "cost" in message and compiling is not None:
                    key, data = message["cost"]
                    cost = UnitCost.from_json(data)
                    if cost is not None:
                        compiling.measured(str(key), cost)
                else:
                    outcome.update(message)
                return
            tail.append(text)
            del tail[:-200]
            log.write(text)

        status = self.engine.stream(
            ["exec", "--interactive", container, "python", "-m",
             "factory.cells.runners.docker.inside",
             command], line, stdin=json.dumps(job).encode())
        if status == 0 and "result" in outcome:
            return outcome
        detail = outcome.get("error") or (f"the container's {command} step failed (exit "
                                          f"{status}): {first_error(chr(10).join(tail))}")
        if any(sign in text.lower() for text in tail for sign in NETWORK_FAILURES) \
                and command == "build":
            detail += (" (the docker runner builds with the network off: a kernel's build "
                       "cannot download anything)")
        raise BuildError(detail)
