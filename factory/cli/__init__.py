"""The `factory` command: it parses and dispatches, one module per subcommand (build, images,
plan, lock, index, yank, publish, serve, inspect, verify). Errors are caught here, once: bad
input exits 2 with one line, a failed step exits 1, and nothing is written before all input has
been validated."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from types import FrameType, ModuleType
from typing import NoReturn

from .. import __version__
from ..errors import FactoryError, describe_os_error
from ..trust.credentials import redact
from ..ui.console import make_console, say_error
from . import (
    attest,
    build,
    doctor,
    images,
    index,
    init,
    inspect,
    lock,
    plan,
    publish,
    serve,
    test,
    verify,
    wheelhouse,
    yank,
)
from .common import Parser

__all__ = ["DEBUG_VARIABLE", "entry_point", "main", "make_parser"]

DEBUG_VARIABLE = "KERNEL_WHEEL_FACTORY_DEBUG"

COMMANDS: dict[str, ModuleType] = {
    "build": build, "images": images, "plan": plan, "lock": lock, "index": index,
    "yank": yank, "publish": publish, "serve": serve, "inspect": inspect, "verify": verify,
    "test": test, "doctor": doctor, "init": init, "wheelhouse": wheelhouse, "attest": attest,
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


class _MaskedStderr(logging.Handler):
    """Libraries' warnings (the Hub client's retries quote the URL they asked) on stderr, as
    Python's last-resort handler prints them, but with credentials masked."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(redact(self.format(record)) + "\n")
        except Exception:  # logging's own rule: a handler never raises
            self.handleError(record)


_LIBRARY_LOGS = _MaskedStderr(logging.WARNING)


def _masked_records() -> None:
    """Every log record any library makes carries its message with credentials masked and no
    arguments: whichever handler prints it (huggingface_hub adds its own, to stderr), and
    logging's report of a handler that failed (it quotes a record's arguments), shows none."""
    make = logging.getLogRecordFactory()
    if getattr(make, "masks_credentials", False):
        return

    def masked(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            record.msg, record.args = redact(record.getMessage()), ()
        except Exception:  # arguments that do not fit the message: masked as they are
            record.msg, record.args = redact(str(record.msg)), ()
        return record

    masked.masks_credentials = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(masked)


def _stop(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a CI job cancelled) stops a build as Ctrl-C does: containers are removed."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if on_main_thread else None
    console = make_console(stderr=False)
    errors = make_console(stderr=True)
    _masked_records()
    if _LIBRARY_LOGS not in logging.getLogger().handlers:
        logging.getLogger().addHandler(_LIBRARY_LOGS)
    try:
        args = make_parser().parse_args(argv)
        status: int = COMMANDS[args.command].run(args, console)
        return status
    except FactoryError as exc:
        say_error(errors, str(exc))
        return exc.exit_status
    except KeyboardInterrupt:
        errors.print("interrupted")
        return 130
    except OSError as exc:  # a folder that cannot be written, a full disk: the work failed
        say_error(errors, describe_os_error(exc))
        return 1
    except Exception as exc:  # a bug: one line; the traceback only when asked for
        if os.environ.get(DEBUG_VARIABLE):
            errors.print(redact("".join(traceback.format_exception(exc))), markup=False,
                         soft_wrap=True, end="")
        say_error(errors, f"internal error ({type(exc).__name__}: {exc}); this is a bug in "
                   f"kernel-wheel-factory: please report it, with the traceback that "
                   f"{DEBUG_VARIABLE}=1 prints")
        return 1
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def entry_point() -> NoReturn:
    sys.exit(main())
