"""The settings a run takes from more than one place, settled once: the command line over
matrix.yaml over the environment over the factory's defaults. `settle` is the one place that
order is applied; every step reads the frozen `Options` it returns (the cells' builds read its
`build` view). The option reference of the documentation is written from `SETTINGS`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..cells.options import BuildOptions, source_date_epoch, usable_build_root
from ..config.model import Matrix, NameCheck, RunnerChoice, SizeLimit
from ..errors import ConfigError
from ..outputs.layout import writable_folder
from ..system.machine import (
    CUDA_HOME_VARIABLES,
    DEBIAN_KEYRING_VARIABLE,
    DEBIAN_MIRROR_VARIABLE,
    read_machine,
)
from ..trust.keys import KEY_FILE, OBJECT_KEY_VARIABLE, GivenKey, KeyFile, ObjectKey
from ..values.stores import object_store_problem

__all__ = ["SETTINGS", "Given", "Options", "Setting", "build_root", "cache_folder", "name_index",
           "object_folder", "object_key", "object_store", "option_reference", "settle",
           "verify_build_root", "wheelhouse_targets"]


@dataclass(frozen=True)
class Setting:
    """One setting, as the option reference lists it: where it can be given, in the order
    that decides (command line, matrix.yaml, environment), and what holds without any."""

    name: str
    flag: str | None
    key: str | None  # matrix.yaml's
    variable: str | None  # the environment's
    default: str
    text: str


SETTINGS: tuple[Setting, ...] = (
    Setting("cache", "--cache-dir", None, defaults.CACHE_VARIABLE,
            f"$XDG_CACHE_HOME/{defaults.CACHE_FOLDER} (~/.cache/...)",
            "the cache folder: sources, toolkits, torch environments, objects"),
    Setting("objects", "--object-cache", None, None,
            f"<cache>/{defaults.OBJECT_CACHE_FOLDER}",
            "the object cache, and the cost book beside it"),
    Setting("object_store", "--object-store", "object-store", defaults.OBJECT_STORE_VARIABLE,
            "none", "a remote object store shared by machines (s3:// or redis://; a password "
            "only in the environment's URL, which is a secret)"),
    Setting("runner", "--runner", "runner", None, defaults.RUNNER,
            "where cells are built: local, docker, or docker when a daemon answers (auto)"),
    Setting("max_wheel_size", "--max-wheel-size", "max-wheel-size", None, "none",
            "a cell whose wheel is bigger fails"),
    Setting("builder_base", None, "docker.base", None, defaults.BUILDER_BASE,
            "the builder images' base ({arch}: the platform)"),
    Setting("wheelhouses", "--wheelhouse", "wheelhouse", None, "none",
            "folders of wheels the test environments may be installed from: the command "
            "line's, then the matrix's"),
    Setting("build_root", "--build-root", None, defaults.BUILD_ROOT_VARIABLE,
            str(defaults.BUILD_ROOT),
            "where cells compile (a fixed path keeps builds reproducible; builds of one cell "
            "take turns in it); `factory verify` rebuilds in --build-root, else the folder the "
            "wheel's provenance records"),
    Setting("source_date_epoch", None, None, "SOURCE_DATE_EPOCH", "each source's own time",
            "the time every file of every wheel carries"),
    Setting("index_url", "--base-url", None, None, "none",
            "the index's public URL, which the import guard names"),
    Setting("wheelhouse_targets", "--python, --platform", "python, platforms", None,
            "the factory's Python; this machine's platform",
            "the CPythons and platforms `factory wheelhouse` fills a wheelhouse for"),
    Setting("name_index", None, "name-clash.index", defaults.NAME_INDEX_VARIABLE,
            defaults.NAME_INDEX,
            "the public index a distribution name must not clash with (off: no check)"),
    Setting("cxx", None, None, "CXX", "g++, else the newest g++-N the cell's nvcc accepts",
            "the host C++ compiler of compiled cells built on this machine"),
    Setting("cross_cxx", None, None, "CXX_<platform>", "the PATH's cross g++ (aarch64: "
            "aarch64-linux-gnu-g++)", "the C++ compiler of cross-compiled cells"),
    Setting("cuda_homes", None, "cuda.<version>.home", ", ".join(CUDA_HOME_VARIABLES),
            "nvcc on the PATH, /usr/local/cuda-X.Y, /usr/local/cuda, /usr/lib/cuda, else "
            "PyPI's", "the installed CUDA toolkits a cell's version is looked for in"),
    Setting("debian_mirror", None, None, DEBIAN_MIRROR_VARIABLE, "Debian's own archive",
            "where Debian packages (bubblewrap, emulated CPythons) are fetched from"),
    Setting("debian_keyring", None, None, DEBIAN_KEYRING_VARIABLE,
            "debian-archive-keyring's keys", "the keys the Debian mirror is signed with"),
    Setting("object_key", None, None, OBJECT_KEY_VARIABLE,
            f"random bytes made once in $XDG_CONFIG_HOME/{KEY_FILE.as_posix()} (~/.config/...)",
            "the key cached objects and publish notes are signed under (a CI secret the jobs "
            "of a run share); never printed"),
)


@dataclass(frozen=True)
class Given:
    """What the command line said of the settings (None, empty or false: nothing)."""

    objects: Path | None = None
    runner: RunnerChoice | None = None
    max_wheel_size: SizeLimit | None = None
    wheelhouses: tuple[Path, ...] = ()
    build_root: Path | None = None
    base_url: str | None = None
    unconfined: bool = False  # the code of others runs on this machine without the sandbox
    offline: bool = False  # nothing is downloaded
    object_store: str | None = None  # the remote object store's URL


@dataclass(frozen=True)
class Options:
    """Every setting of a run, settled."""

    cache: Path
    objects: Path
    runner: RunnerChoice
    runner_from: str  # where the runner was set: its flag, its key, or "the default"
    max_wheel_size: SizeLimit | None
    builder_base: str
    build: BuildOptions  # the view every cell's build reads
    offline: bool
    object_key: ObjectKey  # where the object cache's key comes from
    object_store: tuple[str, str] | None = None  # the remote object store's URL, and where
    # it was given (never printed: the environment's may hold a password)


def cache_folder(given: Path | None, environ: Mapping[str, str] = os.environ) -> Path:
    """The cache folder: --cache-dir, else $KERNEL_WHEEL_FACTORY_CACHE, else the user's cache
    folder ($XDG_CACHE_HOME, else ~/.cache); checked writable before anything is fetched into
    it."""
    named = environ.get(defaults.CACHE_VARIABLE)
    folder = given or (Path(named).expanduser() if named else Path(
        environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / defaults.CACHE_FOLDER)
    key = "--cache-dir" if given else "cache"
    try:
        return writable_folder(folder, key).resolve()
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"cannot be used ({exc})", file=folder, key=key) from None


def object_folder(given: Path | None, cache: Path) -> Path:
    """The object cache: --object-cache, else objects/ in the cache folder."""
    return given or cache / defaults.OBJECT_CACHE_FOLDER


def wheelhouse_targets(pythons: tuple[str, ...], platforms: tuple[str, ...],
                       matrix: Matrix) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The CPythons and platforms a wheelhouse is filled for: --python and --platform, else
    the matrix's python: and platforms:, else the factory's own Python."""
    own = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return (pythons or tuple(str(python) for python in matrix.python) or (own,),
            platforms or matrix.platforms)


def name_index(check: NameCheck, environ: Mapping[str, str] = os.environ) -> str | None:
    """The index names are checked against: the matrix's name-clash index, else
    $KERNEL_WHEEL_FACTORY_NAME_INDEX, else PyPI; None when the check is turned off."""
    if check.index is not None:
        return check.index
    given = environ.get(defaults.NAME_INDEX_VARIABLE, "").strip()
    if given.lower() == "off":
        return None
    return given or defaults.NAME_INDEX


def build_root(given: Path | None, environ: Mapping[str, str] = os.environ) -> Path:
    """--build-root, else KERNEL_WHEEL_FACTORY_BUILD_ROOT, else the default; checked."""
    if given is not None:
        return usable_build_root(given)
    variable = environ.get(defaults.BUILD_ROOT_VARIABLE, "").strip()
    if variable:
        return usable_build_root(Path(variable), key=defaults.BUILD_ROOT_VARIABLE)
    return usable_build_root(defaults.BUILD_ROOT)


def verify_build_root(given: Path | None, recorded: Path) -> Path:
    """Where `factory verify` rebuilds a wheel: --build-root (checked when it was given,
    before anything is read), else the folder its provenance records (the build compiled
    there: the same path gives the same bytes), checked."""
    return given if given is not None else usable_build_root(recorded)


def object_key(environ: Mapping[str, str] = os.environ) -> ObjectKey:
    """The object cache's key: $KERNEL_WHEEL_FACTORY_OBJECT_KEY, else the key file in the
    user's configuration folder ($XDG_CONFIG_HOME, else ~/.config)."""
    given = environ.get(OBJECT_KEY_VARIABLE, "")
    if given:
        return GivenKey(given)
    return KeyFile(Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / KEY_FILE)


def settle(given: Given, cache: Path, matrix: Matrix,
           environ: Mapping[str, str] = os.environ) -> Options:
    """The run's options: each setting from the first place that gives it (see SETTINGS),
    every value checked."""
    runner, runner_from = ((given.runner, "--runner") if given.runner is not None
                           else (matrix.runner, "runner: in matrix.yaml")
                           if matrix.runner is not None else (defaults.RUNNER, "the default"))
    build = BuildOptions(
        build_root(given.build_root, environ), source_date_epoch(environ),
        offline=given.offline, index_url=given.base_url, unconfined=given.unconfined,
        wheelhouses=tuple(dict.fromkeys((*given.wheelhouses, *matrix.wheelhouses))),
        machine=read_machine(environ))
    objects = writable_folder(object_folder(given.objects, cache), "--object-cache")
    return Options(cache=cache, objects=objects, runner=runner,
                   runner_from=runner_from,
                   max_wheel_size=given.max_wheel_size or matrix.max_wheel_size,
                   builder_base=matrix.docker_base or defaults.BUILDER_BASE, build=build,
                   offline=given.offline, object_key=object_key(environ),
                   object_store=object_store(given.object_store, matrix, environ))


def object_store(given: str | None, matrix: Matrix,
                 environ: Mapping[str, str] = os.environ) -> tuple[str, str] | None:
    """The remote object store: --object-store, else the matrix's object-store:, else
    $KERNEL_WHEEL_FACTORY_OBJECT_STORE (the one place its URL may hold a password); with
    where it was given. None: there is none."""
    if given:
        return given, "--object-store"
    if matrix.object_store:
        return matrix.object_store, "object-store"
    named = environ.get(defaults.OBJECT_STORE_VARIABLE, "").strip()
    if not named:
        return None
    problem = object_store_problem(named, password_allowed=True)
    if problem is not None:
        raise ConfigError(f"the object store's URL {problem}",
                          key=defaults.OBJECT_STORE_VARIABLE)
    return named, defaults.OBJECT_STORE_VARIABLE


def option_reference() -> str:
    """Markdown: a table of every setting and the places it is given, in the order that
    decides."""
    def cell(text: str | None, wrap: bool = True) -> str:
        return "" if text is None else f"`{text}`" if wrap else text

    lines = ["| setting | command line | matrix.yaml | environment | default | what it is |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {setting.name} | {cell(setting.flag)} | {cell(setting.key)} | "
              f"{cell(setting.variable)} | {cell(setting.default)} | {setting.text} |"
              for setting in SETTINGS]
    return "\n".join(lines) + "\n"
