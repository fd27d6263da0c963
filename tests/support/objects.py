"""The object cache's tests share: the op namespace of their objects and a log to a file."""

from __future__ import annotations

from pathlib import Path

from factory.system.process import Log

GiB = 2**30


NS = "_demo_abc1234"  # the op namespace of the cells these objects are for


def file_log(tmp_path: Path) -> tuple[Log, Path]:
    path = tmp_path / "log"
    return Log(open(path, "w")), path
