"""The `factory` command: it parses and dispatches, one module per subcommand (build, images,
plan, lock, index, yank, publish, serve, inspect, verify). Errors are caught here, once: bad
input exits 2 with one line, a failed step exits 1, and nothing is written before all input has
been validated."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import NoReturn

from .. import __version__
from ..errors import FactoryError
from . import build, images, index, inspect, lock, plan, publish, serve, verify, yank
from .common import Parser, make_console

__all__ = ["entry_point", "main", "make_parser"]

COMMANDS: dict[str, ModuleType] = {
    "build": build, "images": images, "plan": plan, "lock": lock, "index": index,
    "yank": yank, "publish": publish, "serve": serve, "inspect": inspect, "verify": verify,
}


def make_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="factory", description="Build kernel-builder kernel repos into "
                    "pip-installable wheels for every torch x CUDA x SM cell of a matrix.")
    parser.add_argument("--version", action="version",
                        version=f"kernel-wheel-factory {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS.values():
        module.add(commands)
    return parser


def _stop(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a CI job cancelled) stops a build as Ctrl-C does: containers are removed."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if on_main_thread else None
    console = make_console(stderr=False)
    errors = make_console(stderr=True)
    try:
        args = make_parser().parse_args(argv)
        status: int = COMMANDS[args.command].run(args, console)
        return status
    except FactoryError as exc:
        errors.print(f"error: {exc}", markup=False, soft_wrap=True)
        return exc.exit_status
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def entry_point() -> NoReturn:
    sys.exit(main())
