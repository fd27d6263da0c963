"""The factory's output as the `kernels` loader (0.17.2, from PyPI) reads it: every build.toml
the suite keeps read by the loader's own parser as the factory reads it, and the metadata.json
of a wheel the factory built parsed and validated by the loader's own classes."""

from __future__ import annotations

import json
import logging
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from kernels._rust import Metadata
from kernels.validate import default_metadata_validators

from factory import __version__
from factory.config.buildtoml import read_build_toml
from factory.errors import ConfigError

from ..support.conformance import compare
from ..support.factory import FIXTURES, REPO, one_cell_matrix, run_factory

EDITION_5 = """
[general]
name = "loader-kernel"
version = 2
license = "Apache-2.0"
edition = 5
backends = ["cuda", "cpu"]
upstream = "https://github.com/example/loader-kernel-upstream"
source = "https://github.com/example/loader-kernel"
kernel-depends = [{ repo-id = "kernels-community/activation", version = 1 }]

[general.cuda]
kernel-depends = [{ repo-id = "kernels-community/rotary", revision = "v0.1.0" }]

[torch-noarch]
pyext = ["py"]
"""


def kernel(folder: Path, build_toml: str, name: str = "loader_kernel") -> Path:
    """A pure-Python kernel: its build.toml and its package."""
    (folder / "torch-ext" / name).mkdir(parents=True)
    (folder / "torch-ext" / name / "__init__.py").write_text("def scale(x):\n    return x\n")
    (folder / "build.toml").write_text(textwrap.dedent(build_toml))
    return folder


def test_every_kept_build_toml_reads_as_the_loader_reads_it(tmp_path: Path) -> None:
    """The suite's fixtures, the examples, and an edition-5 file with what only that edition
    has (kernel-depends for every backend and for one, upstream, source, [torch-noarch]'s arch
    keys in the spelling the loader's code reads): the same backends and kernel dependencies,
    or a format kernels 0.17 has dropped (the factory still builds it)."""
    folders = sorted({path.parent for path in (*FIXTURES.glob("*/build.toml"),
                                               *(REPO / "examples").glob("*/build.toml"))})
    folders.append(kernel(tmp_path / "edition5", EDITION_5))
    folders.append(kernel(tmp_path / "snake", EDITION_5.replace(
        'pyext = ["py"]', 'pyext = ["py"]\ncuda_capabilities = ["9.0", "10.0"]')))
    compared = [compare(folder) for folder in folders]
    assert [(each.folder, each.differences) for each in compared if each.differences] == []
    read = {each.folder.name: each for each in compared}
    assert read["edition5"].kernels.depends == read["edition5"].factory.depends == {
        "cuda": ("kernels-community/activation@1", "kernels-community/rotary#v0.1.0"),
        "cpu": ("kernels-community/activation@1",)}
    assert [each.folder.name for each in compared if each.legacy] == ["multikernel"]
    assert len(compared) >= 10


def test_both_spellings_of_the_noarch_arch_keys_are_taken_one_at_a_time(tmp_path: Path) -> None:
    """kernel-builder's documentation writes cuda-capabilities, its code reads cuda_capabilities:
    either gives the SMs; both at once is refused, naming the file, line and key."""
    for spelling in ("cuda-capabilities", "cuda_capabilities"):
        folder = kernel(tmp_path / spelling, EDITION_5.replace(
            'pyext = ["py"]', f'pyext = ["py"]\n{spelling} = ["9.0"]'))
        spec = read_build_toml(folder)
        assert spec.noarch is not None and [str(c) for c in spec.noarch.cuda_capabilities] == \
            ["9.0"]
    both = kernel(tmp_path / "both", EDITION_5.replace(
        'pyext = ["py"]', 'pyext = ["py"]\ncuda-capabilities = ["9.0"]\n'
                          'cuda_capabilities = ["9.0"]'))
    with pytest.raises(ConfigError) as refused:
        read_build_toml(both)
    line = (both / "build.toml").read_text().splitlines().index('cuda_capabilities = ["9.0"]')
    assert refused.value.line == line + 1
    assert refused.value.key == "torch-noarch.cuda_capabilities"
    assert "give one of the two spellings" in str(refused.value)


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c",
                           "user.email=t@example.invalid", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def built_metadata(tmp_path: Path, folder: Path, out: str) -> Path:
    """The metadata.json of the wheel the factory builds from `folder`, unpacked."""
    matrix = one_cell_matrix(tmp_path, folder)
    done = run_factory("build", matrix, "--out", tmp_path / out)
    assert done.exit == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / out / "files").glob("loader_kernel-*.whl")
    target = tmp_path / f"{out}.json"
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read("loader_kernel/metadata.json"))
    return target


def test_the_loader_reads_and_validates_the_metadata_the_factory_writes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A kernel in a git repository, built as a pure-Python wheel: the loader parses its
    metadata.json with everything the factory knows (upstream, source, kernel-depends, the
    commit it was built from, kernels-minver) and lets it load; built again from a tree with
    a change no commit holds, the loader warns that it is dirty."""
    folder = kernel(tmp_path / "loader-kernel", EDITION_5.replace(
        'pyext = ["py"]', 'pyext = ["py"]\ncuda_capabilities = ["9.0"]'))
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "the kernel")
    commit = git(folder, "rev-parse", "HEAD")
    metadata = Metadata.read_from_file(built_metadata(tmp_path, folder, "clean"))
    assert str(metadata.name) == "loader-kernel" and metadata.version == 2
    assert metadata.upstream == "https://github.com/example/loader-kernel-upstream"
    assert metadata.source == "https://github.com/example/loader-kernel"
    assert [depend.repo_id for depend in metadata.kernel_depends] == \
        ["kernels-community/activation", "kernels-community/rotary"]
    assert str(metadata.kernels_minver) == "0.17.0"
    assert metadata.backend.archs == ["9.0"]
    provenance = metadata.provenance
    assert provenance is not None and provenance.kernel is not None
    assert provenance.kernel.commit == commit and not provenance.dirty
    assert provenance.kernel_builder.version == f"kernel-wheel-factory {__version__}"
    with caplog.at_level(logging.WARNING):
        for validator in default_metadata_validators():
            if type(validator).__name__ != "DependencyValidator":  # needs the backend's torch
                validator.validate_metadata(metadata=metadata, variant="noarch")
    assert not caplog.records

    init = folder / "torch-ext" / "loader_kernel" / "__init__.py"
    init.write_text(init.read_text() + "# a change no commit holds\n")
    dirty = Metadata.read_from_file(built_metadata(tmp_path, folder, "dirty"))
    assert dirty.provenance is not None and dirty.provenance.dirty
    for validator in default_metadata_validators():
        if type(validator).__name__ == "DirtyValidator":
            validator.validate_metadata(metadata=dirty, variant="noarch")
    assert "was built from a dirty git tree (kernel source had uncommitted changes)" in \
        caplog.text
    assert json.loads((tmp_path / "dirty.json").read_text())["provenance"]["kernel"] == \
        {"commit": commit, "dirty": True}
