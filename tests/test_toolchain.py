"""Finding CUDA toolkits: PyPI has nvcc only from CUDA 13 on; CUDA 12 must be on the machine."""

from __future__ import annotations

import io

import pytest
from packaging.version import Version

from factory.errors import BuildError
from factory.process import Log
from factory.toolchain.cuda import provide_cuda


def fake_toolkit(root, release: str):
    """A folder laid out like a toolkit whose nvcc reports `release` (e.g. "12.4.131")."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    major_minor = ".".join(release.split(".")[:2])
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {major_minor}, "
                    f"V{release}'\n")
    nvcc.chmod(0o755)
    (root / "include").mkdir()
    (root / "lib64").mkdir()
    return root


@pytest.fixture
def no_installed_cuda(monkeypatch, tmp_path):
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def test_cuda_12_without_a_toolkit_says_what_to_do(no_installed_cuda, tmp_path):
    with pytest.raises(BuildError) as caught:
        provide_cuda(Version("12.8"), None, tmp_path / "cache", Log(io.StringIO()))
    message = str(caught.value)
    assert "no CUDA 12.8 toolkit on this machine: nvcc for CUDA 12 is not on PyPI" in message
    assert "cuda-minimal-build-12-8" in message and 'cuda."12.8".home' in message
    assert not (tmp_path / "cache").exists()


def test_cuda_12_from_cuda_home(no_installed_cuda, monkeypatch, tmp_path):
    home = fake_toolkit(tmp_path / "cuda-12.8", "12.8.93")
    monkeypatch.setenv("CUDA_HOME", str(home))
    toolkit = provide_cuda(Version("12.8"), None, tmp_path / "cache", Log(io.StringIO()))
    assert (toolkit.version, toolkit.home, toolkit.origin) == (Version("12.8.93"), home,
                                                               "installed")
    assert toolkit.lib == home / "lib64"


def test_a_home_of_another_version_is_refused(tmp_path):
    home = fake_toolkit(tmp_path / "cuda", "12.4.131")
    with pytest.raises(BuildError, match=r"bin/nvcc is CUDA 12\.4\.131, the matrix asks for "
                                         r"CUDA 12\.8"):
        provide_cuda(Version("12.8"), home, tmp_path / "cache", Log(io.StringIO()))
