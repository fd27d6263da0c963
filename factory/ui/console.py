"""The consoles every command prints to (secrets masked, wide off a terminal), and one-line
notes and errors."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import TextIO, cast

from rich.console import Console

from ..trust.credentials import escape_controls, redact

__all__ = ["make_console", "say_error", "say_to"]


class _Redacting(io.TextIOBase):
    """A text stream that masks URL credentials and the environment's secrets in whatever is
    written to it (credentials.redact): the console's file, so that nothing the factory
    prints, tables included, shows a secret."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")


def make_console(stderr: bool) -> Console:
    """Rich output, secrets masked; off a terminal (CI logs, pipes) wide enough that paths
    stay on one line."""
    stream = cast(TextIO, _Redacting(sys.stderr if stderr else sys.stdout))
    console = Console(file=stream, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=stream, highlight=False, width=160)
    return console


def say_to(console: Console, style: str | None = None) -> Callable[[str], None]:
    """A function that prints one plain line (no markup) to `console`."""
    def say(text: str) -> None:
        console.print(text, style=style, markup=False, soft_wrap=True)
    return say


def say_error(console: Console, message: str) -> None:
    """An error as one line, whatever the message holds: credentials masked, line breaks
    folded, every other control character (an escape sequence a name of a build.toml or an
    argument carried) written as an escape, so none reaches the terminal."""
    line = escape_controls(" ".join(redact(message).split()))
    console.print(f"error: {line}", markup=False, soft_wrap=True)
