"""Real installs with uv: torch environments the tests keep in their cache, and what they hold."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from .factory import write


def uv(*args: str | Path, cache: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
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


def new_torch_venv(venv: Path, factory_cache: Path) -> Path:
    from uv import find_uv_bin

    env = {**os.environ, "UV_CACHE_DIR": str(factory_cache / "uv")}
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--seed", "--python", sys.executable, venv],
                   check=True, env=env)
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", venv / "bin/python",
                    "torch==2.11.*", "pytest"], check=True, env=env)
    return venv


def venv_python(venv: Path, *args: str, cwd: Path | None = None) -> str:
    completed = subprocess.run([str(venv / "bin" / "python"), *args], capture_output=True,
                               text=True, cwd=cwd)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def pip_install(venv: Path, wheel: Path) -> None:
    venv_python(venv, "-m", "pip", "install", "--quiet", "--no-index", str(wheel))


def read_dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}")]
        return archive.read(member).decode()


def run_example(venv: Path, wheel: Path, tmp_path: Path) -> dict[str, Any]:
    """Install an img2gray wheel into a torch venv and run its op three ways on images of four
    shapes against a reference computed with torch; what the run reports."""
    pip_install(venv, wheel)
    script = write(tmp_path / "check.py", """
        import json
        import torch
        import img2gray

        name = img2gray.add_op_namespace_prefix("img2gray")
        namespace = name.split("::")[0]
        op = getattr(getattr(torch.ops, namespace), "img2gray")
        generator = torch.Generator().manual_seed(1)
        results = []
        for shape in [(1, 1), (3, 5), (480, 640), (1024, 768)]:
            rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=generator)
            weights = torch.tensor([210, 720, 70], dtype=torch.int32)
            expected = ((rgb.to(torch.int32) * weights).sum(-1) + 500).div(
                1000, rounding_mode="floor")
            expected = expected.to(torch.uint8)
            results.append(torch.equal(op(rgb), expected)
                           and torch.equal(img2gray.img2gray(rgb), expected)
                           and torch.equal(img2gray.ops.img2gray(rgb), expected))
        print(json.dumps({"namespace": namespace, "results": results, "torch": torch.__version__,
                          "location": img2gray.__file__}))
    """)
    found: dict[str, Any] = json.loads(venv_python(venv, str(script),
                                                   cwd=tmp_path).splitlines()[-1])
    return found
