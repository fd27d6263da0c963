"""`factory doctor --python PYTHON`: doctor.py's report for another interpreter (the one with
the user's torch), run there as a file: it needs nothing of the factory."""

from __future__ import annotations

from pathlib import Path

from .. import defaults, doctor
from ..errors import ConfigError, FactoryError
from ..system.process import Completed, NotStarted, OutputOverflow, TimedOut, bounded_run

__all__ = ["doctor_here", "doctor_there"]


def doctor_here(arguments: list[str]) -> int:
    """doctor.py's report for the factory's own interpreter, printed; its exit status."""
    return doctor.main(arguments)


def doctor_there(python: Path, arguments: list[str]) -> Completed[str]:
    """doctor.py run by `python`, within DOCTOR_TIMEOUT: what it printed and its status."""
    try:
        return bounded_run([str(python), doctor.__file__, *arguments], defaults.DOCTOR_TIMEOUT)
    except NotStarted as exc:
        raise ConfigError(f"cannot be run ({exc.reason})", file=python,
                          key="--python") from None
    except TimedOut:
        raise FactoryError(f"{python} gave no report within {defaults.DOCTOR_TIMEOUT} s; "
                           "it was stopped") from None
    except OutputOverflow as exc:
        raise FactoryError(f"{python} {exc}; it was stopped") from None
