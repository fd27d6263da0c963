"""`factory wheelhouse MATRIX DIR`: download every test and runtime requirement of a matrix's
kernels into one folder, for test environments on a machine with no network."""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.console import Console

from ..errors import ConfigError
from ..outputs.files import read_regular
from ..outputs.layout import writable_folder
from ..pipeline.arguments import PLATFORMS
from ..values.pythons import CPython
from ..values.units import human_size
from .common import cache_dir, path_argument

__all__ = ["add", "run"]

_GLIBC = re.compile(r"2\.\d{1,2}")
_INSTALLED_LIMIT = 4 * 2**20  # bytes: a freeze of thousands of packages is a few hundred KiB


def _python(text: str) -> str:
    try:
        return str(CPython.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _glibc(text: str) -> str:
    if not _GLIBC.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a glibc version such as 2.28")
    return text.strip()


def add(commands: Any) -> None:
    wheelhouse = commands.add_parser(
        "wheelhouse", help="download what the kernels' tests need, for machines with no network",
        description="Resolve, for each torch release of MATRIX and each target CPython and "
                    "platform, what each kernel's test environment installs (pytest, what "
                    "flake.nix and the matrix's tests: requires name, the wheel's own "
                    "requirements) beside that torch, and download those wheels into DIR. What "
                    "torch brings with it is left out (the test environment sees the cell's "
                    "torch), and so is what --installed says the target has. On the machine "
                    "with no network: factory build MATRIX --test --offline --wheelhouse DIR.")
    wheelhouse.add_argument("matrix", type=path_argument, metavar="MATRIX",
                            help="the matrix.yaml whose kernels' tests will run")
    wheelhouse.add_argument("folder", type=path_argument, metavar="DIR",
                            help="the wheelhouse to fill (made when missing; wheels already "
                                 "there are kept)")
    wheelhouse.add_argument("--python", type=_python, action="append", default=[],
                            metavar="X.Y",
                            help="the target's CPython, 3.Nt for a free-threaded one "
                                 "(repeatable; default: the matrix's "
                                 "python list, else the Python the factory runs on)")
    wheelhouse.add_argument("--platform", choices=PLATFORMS, action="append",
                            default=[], help="the target's platform (repeatable; default: the "
                                             "matrix's platforms)")
    wheelhouse.add_argument("--glibc", type=_glibc, default="2.28", metavar="X.Y",
                            help="the oldest glibc the target has, which bounds the manylinux "
                                 "tags of its wheels (default 2.28)")
    wheelhouse.add_argument("--installed", type=path_argument, default=None, metavar="FILE",
                            help="what the target's Python already has, as `pip freeze` prints "
                                 "it there: those versions are kept and not downloaded")
    wheelhouse.add_argument("--cache-dir", type=path_argument, default=None, metavar="DIR",
                            help="fetched sources and uv's cache (default: "
                                 "~/.cache/kernel-wheel-factory)")
    wheelhouse.add_argument("--locked", action="store_true",
                            help="read the sources the lock file pins")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.arguments import installed_pins
    from ..pipeline.wheelhouse import WheelhouseRequest, make_wheelhouse
    from ..ui.console import say_to

    pins: dict[str, str] = {}
    if args.installed is not None:
        try:
            data = read_regular(args.installed, _INSTALLED_LIMIT, follow=True)
        except OSError as exc:
            raise ConfigError(f"cannot be read ({exc.strerror})", file=args.installed,
                              key="--installed") from None
        if data is None:
            raise ConfigError(f"is not a regular file of at most {human_size(_INSTALLED_LIMIT)} "
                              "(what `pip freeze` prints, written to a file)",
                              file=args.installed, key="--installed")
        pins = installed_pins(data.decode(errors="replace"), args.installed)
    folder = writable_folder(args.folder, "DIR")
    request = WheelhouseRequest(
        matrix=args.matrix, folder=folder, cache=cache_dir(args),
        pythons=tuple(dict.fromkeys(args.python)),
        platforms=tuple(dict.fromkeys(args.platform)), glibc=args.glibc,
        installed=tuple(sorted(pins.items())), locked=args.locked)
    made = make_wheelhouse(request, say_to(console))
    size = sum(wheel.stat().st_size for wheel in made.wheels)
    console.print(f"wheelhouse {folder}: {len(made.wheels)} wheel(s), {human_size(size)}",
                  markup=False, soft_wrap=True)
    if made.with_torch:
        console.print(f"left out, as they come with torch: {', '.join(made.with_torch)}",
                      markup=False, soft_wrap=True)
    if made.installed:
        console.print(f"left out, as the target has them (--installed): "
                      f"{', '.join(made.installed)}", markup=False, soft_wrap=True)
    console.print(f"next, where there is no network: factory build {args.matrix} --test "
                  f"--offline --wheelhouse {folder}", markup=False, soft_wrap=True)
    return 0
