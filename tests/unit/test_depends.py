"""C++ dependencies (build.toml `depends = ["cutlass_X_Y"]`): matrix.yaml's origins, fetching
from git repositories and folders, the lock, and real builds against CUTLASS from PyPI and from
a git repository."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from factory.config.model import DependencyEntry
from factory.errors import ConfigError
from factory.policy import dependency_releases
from factory.sources.depends import DependencyFetcher

from ..support.factory import factory_main
from ..support.plans import matrix_with

# ---- the table and matrix.yaml ----------------------------------------------------------------

def test_every_cutlass_kernel_builder_knows_has_a_release() -> None:
    releases = dependency_releases()
    assert {name: r.version for name, r in releases.items()} == {
        "cutlass_2_10": "2.10.0", "cutlass_3_5": "3.5.1", "cutlass_3_6": "3.6.0",
        "cutlass_3_8": "3.8.0", "cutlass_3_9": "3.9.2", "cutlass_4_0": "4.0.0",
        "cutlass_4_4": "4.4.2", "cutlass_4_5": "4.5.2"}
    on_pypi = {name for name, r in releases.items() if r.default_origin == "pypi"}
    assert on_pypi == {"cutlass_3_5", "cutlass_3_6", "cutlass_3_8"}
    assert all(r.include == ("include", "tools/util/include") for r in releases.values())


@pytest.mark.parametrize("entry, message", [
    ("cutlass_3_7: {pypi: true}", "unknown dependency 'cutlass_3_7' (the factory provides: "
                                  "cutlass_2_10, cutlass_3_5"),
    ("cutlass_4_0: {pypi: true}", "PyPI publishes no wheel of cutlass 4.0.0; take it from git"),
    ("cutlass_4_0: {git: mirror, path: mirror}", "give exactly one of git:"),
    ("cutlass_4_0: {path: nowhere}", "folder 'nowhere' does not exist"),
    ("cutlass_4_0: {wheel: matrix.yaml}", "'matrix.yaml' is not a wheel file (.whl)"),
    ("cutlass_4_0: {git: mirror, rev: 'a..b'}", "'a..b' is not a branch, tag or commit name"),
    ("cutlass_4_0: {path: ., rev: v1}", "depends.cutlass_4_0.rev: unknown key; allowed keys "
                                        "here: path"),
])
def test_bad_depends_entries_name_the_line_and_write_nothing(tmp_path: Path,
        capsys: pytest.CaptureFixture[str], entry: str, message: str) -> None:
    (tmp_path / "mirror").mkdir()
    path = matrix_with(tmp_path, f"depends:\n          {entry}")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = factory_main("plan", path, "--cache-dir", tmp_path / "cache", capsys=capsys)
    assert result.exit == 2, result.stderr
    assert "matrix.yaml:5:" in result.stderr and message in result.stderr
    assert result.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def wheel_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(("members", "said"), [
    ({"cutlass_library/source/include/cutlass/zeros.h": bytes(64 << 20)}, "inflates"),
    ({f"cutlass_library/source/include/h{n}.h": b"" for n in range(50_001)},
     "unpacks into 50001 files"),
])
def test_a_dependency_wheel_that_would_unpack_too_much_is_refused_unread(tmp_path: Path,
        members: Any, said: str) -> None:
    """A 64 MiB header of zeros packs into a wheel of a few KiB: refused from the zip's
    directory, before uv unpacks anything into the cache."""
    bomb = wheel_of(tmp_path / "nvidia_cutlass-4.0.0-py3-none-any.whl", members)
    entry = DependencyEntry("cutlass_4_0", "wheel", bomb.name, None, bomb)
    with pytest.raises(ConfigError, match=said):
        DependencyFetcher(tmp_path / "cache").fetch("cutlass_4_0", entry)
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.h"))


def test_a_dependency_wheel_must_be_the_release_it_claims(tmp_path: Path) -> None:
    """cutlass_3_8 is nvidia-cutlass 3.8.0.0, whose sha256 the factory knows: another wheel
    of the right layout is not it."""
    other = wheel_of(tmp_path / "nvidia_cutlass-3.8.0.0-py3-none-any.whl", {
        "cutlass_library/source/include/cutlass/cutlass.h": b"#define EVIL 1\n",
        "cutlass_library/source/tools/util/include/cutlass/util/x.h": b""})
    entry = DependencyEntry("cutlass_3_8", "wheel", other.name, None, other)
    with pytest.raises(ConfigError, match=r"is not the nvidia-cutlass 3\.8\.0\.0 wheel PyPI "
                                          r"publishes for cutlass_3_8"):
        DependencyFetcher(tmp_path / "cache").fetch("cutlass_3_8", entry)
