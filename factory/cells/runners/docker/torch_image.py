"""The image runner: each cell whose torch and toolkit live in a container image (placed
`image` by plan/placement.py) is built by the factory on this machine, every compiler run in a
container of that image (no network, an unprivileged user, only the build root mounted, at the
same path), and its wheel loaded with the image's torch in a container of its own that sees the
cell's build folder alone."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ....plan.model import Cell
from ....prove.load import LoadReport, load_wheel
from ....prove.tests import TestReport
from ....system.cache import exclusive
from ....system.engine import Engine
from ....system.process import Log
from ....toolchain import CommandPrefix
from ...builders import build_cell
from ...job import Built, Compiling, Container
from ...options import BuildOptions
from .image import slug
from .runner import NOBODY_ID, build_user, confined_options

__all__ = ["ImageRunner"]


class ImageRunner:
    name = "docker"

    def __init__(self, cache: Path, options: BuildOptions, engine: Engine) -> None:
        self.cache = cache
        self.options = options
        self.engine = engine
        self._lock = threading.Lock()
        self._containers: dict[str, str] = {}

    def __enter__(self) -> ImageRunner:
        self.engine.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.engine.__exit__(kind, error, trace)

    def facts(self, cell: Cell) -> dict[str, Any]:
        installed = cell.installed
        assert installed is not None
        return {"image": installed.image, "image_id": installed.image_id}

    def build(self, cell: Cell, staging: Path, log: Log, compiling: Compiling,
              progress: Callable[[str], None]) -> Built:
        progress("starting the image")
        return build_cell(cell, self.cache, self.options, staging, log, compiling, progress,
                          container=self._container(cell, log))

    def load(self, cell: Cell, wheel: Path, modules: list[str], log: Log) -> LoadReport:
        """Loaded with the image's torch, in a container of its own (the kernel's code runs)
        that sees the cell's own build folder alone, removed with all it started when the
        import ends."""
        installed = cell.installed
        assert installed is not None and installed.image is not None
        folder = self.options.build_root / cell.key / "load"
        with exclusive(folder.parent):
            folder.parent.mkdir(parents=True, exist_ok=True)
            with self.engine.step_container(
                    installed.image, f"torch-{slug(installed.image)}"[:56] + "-load",
                    self._confined(folder.parent)) as container:
                log.write(f"   the kernel's code runs in a container of its own, {container}: "
                          f"no network, user {build_user()} without capabilities, only "
                          f"{folder.parent} mounted")
                return load_wheel(wheel, modules, installed.python, folder, log, CommandPrefix(
                    self.engine.exec_prefix(container, build_user())))

    def test(self, cell: Cell, wheel: Path, log: Log) -> TestReport:
        installed = cell.installed
        assert installed is not None
        reason = (f"tests do not run in a torch image yet ({installed.describe()}): test the "
                  "wheel where that torch is installed")
        log.write(f"   not tested: {reason}")
        return TestReport.untested(reason)

    @staticmethod
    def _confined(folder: Path) -> list[str]:
        """The options of a container of a torch image: no network, an unprivileged user
        without capabilities, `folder` alone mounted (at its own path)."""
        return [*confined_options(), "--entrypoint", "",
                "--mount", f"type=bind,source={folder},target={folder}"]

    def _container(self, cell: Cell, log: Log) -> Container:
        """The container of the cell's torch image that the cells of that image compile and
        load in (started once)."""
        assert cell.installed is not None and cell.installed.image is not None
        image, root = cell.installed.image, self.options.build_root
        with self._lock:
            name = self._containers.get(image)
            if name is None:
                log.step(f"starting a container of {image} (no network, user "
                         f"{build_user()}) for its torch and nvcc")
                name = self.engine.launch(image, f"torch-{slug(image)}"[:60],
                                          self._confined(root))
                self._containers[image] = name
        owner = (NOBODY_ID, NOBODY_ID) if os.getuid() == 0 else None
        return Container(self.engine.exec_prefix(name, build_user()), owner)
