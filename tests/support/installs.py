"""Real installs with uv: torch environments the tests keep in their cache, and what they hold."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import write


def uv(*args, cache: Path, **kwargs) -> subprocess.CompletedProcess:
    from uv import find_uv_bin

    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv")}
    return subprocess.run([find_uv_bin(), *[str(a) for a in args]], capture_output=True,
                          text=True, env=env, **kwargs)


def torch_venv_at(path: Path, cache: Path, seed: bool) -> Path:
    made = uv("venv", "--quiet", *(["--seed"] if seed else []), "--python", sys.executable, path,
              cache=cache)
    assert made.returncode == 0, made.stderr
    installed = uv("pip", "install", "--quiet", "--python", path / "bin" / "python",
                   "torch==2.11.*", cache=cache)
    assert installed.returncode == 0, installed.stderr
    return path


def freeze(venv: Path, cache: Path) -> set[str]:
    listed = uv("pip", "freeze", "--python", venv / "bin" / "python", cache=cache)
    assert listed.returncode == 0, listed.stderr
    return set(listed.stdout.split())


def torch_index(root: Path, releases: dict[str, str | None],
                tags: tuple[str, ...] = ("cp311-cp311",)) -> None:
    """simple/torch/: a wheel of each version for each of `tags` (the files themselves are
    never fetched), with a PEP 658 metadata file pinning `cuda-toolkit` to the given version
    (None: no metadata), and a macOS wheel beside each that pins nothing."""
    links = []
    for version, cuda in releases.items():
        for platform, tag in [(platform, tag) for tag in tags
                              for platform in ("manylinux_2_28_x86_64", "macosx_11_0_arm64")]:
            name = TORCH_WHEEL.format(version=version, tag=tag, platform=platform)
            attributes = ""
            if cuda is not None and "linux" in platform:
                metadata = (f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                            "Requires-Dist: filelock\nRequires-Dist: cuda-toolkit[cudart,nvrtc]"
                            f"=={cuda}; platform_system == \"Linux\"\n").encode()
                write(root / "simple" / "torch" / f"{name}.metadata", metadata.decode())
                digest = hashlib.sha256(metadata).hexdigest()
                attributes = f' data-core-metadata="sha256={digest}"'
            links.append(f'<a href="{name}#sha256={"0" * 64}"{attributes}>{name}</a>')
    write(root / "simple" / "torch" / "index.html",
          "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


TORCH_WHEEL = "torch-{version}-{tag}-{platform}.whl"
