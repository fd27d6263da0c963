"""What a release must survive: links out of the output folder, stray and damaged files, files
tampered with behind the index's back, a moved matrix, an empty yank reason, and runs killed
half-way. Each test names the promise of docs/promises.md it holds."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, cast

import pytest
from pypi_simple import ProjectPage

from factory.cells import run as build_run
from factory.cells.job import Compiling
from factory.cells.options import BuildOptions
from factory.cells.runners import Runner
from factory.compile.pool import Budget, CompilePool
from factory.config.matrix import load_matrix
from factory.errors import BuildError
from factory.index.update import update_index
from factory.outputs.layout import Layout
from factory.sources.tree import resolve_path_source

from ..support.checks import present
from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES
from ..support.factory import make_kernel, run_factory, snapshot, write
from ..support.wheels import index_problems, make_wheel, small_index_files

KEY = bytes(range(32))  # the object cache's key publish notes are signed under


def test_nothing_outside_out_is_removed_through_a_linked_cell_folder(tmp_path: Path) -> None:
    """`ln -s ../old-site/cu124torch26 index/cu124torch26; factory index` once deleted the old
    site's pages; now the link is refused and nothing is written or removed anywhere."""
    old = small_index_files(tmp_path / "old-site")
    update_index(old)
    out = small_index_files(tmp_path / "index")
    update_index(out)
    old_cell = old / "cu130torch212"
    assert (old_cell / "simple" / "img2gray" / "index.html").is_file()
    (out / "cu124torch26").symlink_to(old_cell)
    before_old, before_out = snapshot(old), snapshot(out)
    result = run_factory("index", "--out", out)
    assert result.exit == 2, result.stderr
    assert result.stderr.strip() == (
        f"error: {out / 'cu124torch26'}: is a link to {old_cell}; the factory writes only "
        "inside its output folder: put the folder itself there, or remove the link")
    assert snapshot(old) == before_old
    assert snapshot(out) == before_out


def test_a_build_toml_cannot_make_the_compiler_write_outside(tmp_path: Path) -> None:
    """cuda-flags = ["-o", "/tmp/x.o"] is refused at its line, before any compiler runs."""
    make_kernel(tmp_path / "demo", GOOD_KERNEL.replace(
        'src = ["csrc/demo.cu"]', 'src = ["csrc/demo.cu"]\ncuda-flags = ["-O3", "-o", '
        f'"{tmp_path / "outside.o"}"]'), SOURCES, package="demo")
    write(tmp_path / "matrix.yaml", GOOD_MATRIX)
    result = run_factory("build", "matrix.yaml", cwd=tmp_path,
                         env={"KERNEL_WHEEL_FACTORY_CACHE": str(tmp_path / "cache")})
    assert result.exit == 2
    assert result.stderr.strip() == (
        "error: demo/build.toml:14: kernel.demo.cuda-flags[1]: '-o' names an output file; the "
        "factory names every output of a build and chooses its tools: remove it")
    assert not (tmp_path / "outside.o").exists() and not (tmp_path / "index").exists()


def test_credentials_are_refused_and_never_printed(tmp_path: Path) -> None:
    """Promise: credentials are never printed. A URL that carries one is refused (exit 2) and
    shown masked, in every place a URL is taken."""
    out = small_index_files(tmp_path / "index")
    update_index(out)
    secret = "pw-s3cret-7f3a"
    attempts = [
        ["index", "--out", out, "--merge", f"https://ci:{secret}@example.invalid/site"],
        ["index", "--out", out, "--merge", f"https://example.invalid/site?token={secret}"],
        ["publish", out, "--to", f"s3://AKIAEXAMPLE:{secret}@bucket/prefix"],
        ["publish", out, "--to", f"hf://user:{secret}@datasets/org/site"],
        ["publish", out, "--repository-url", f"https://ci:{secret}@example.invalid/legacy/"],
    ]
    before = snapshot(out)
    for args in attempts:
        result = run_factory(*map(str, args))
        assert result.exit == 2, result.stderr
        assert secret not in result.stdout + result.stderr
        assert "***" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert snapshot(out) == before


def _two_dist_infos(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for folder in ("a-1.0.dist-info", "b-1.0.dist-info"):
            archive.writestr(f"{folder}/METADATA", "Metadata-Version: 2.1\nName: a\n")


def _corrupt_member(source: Path, target: Path) -> None:
    """A copy whose first member's compressed bytes are scrambled: the zip opens, inflating
    fails (zlib.error) or the CRC does not match."""
    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.infolist()[0]
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for offset in range(start, start + min(info.compress_size, 40)):
        data[offset] ^= 0x5A
    target.write_bytes(bytes(data))


def test_stray_files_are_reported_and_the_other_wheels_indexed(tmp_path: Path) -> None:
    """A zero-byte, cut, non-wheel or damaged .whl, a folder named like a wheel, or a wheel with
    two .dist-info folders: one line each, naming it; every other wheel is still indexed."""
    out = small_index_files(tmp_path / "index")
    files = out / "files"
    good = sorted(p.name for p in files.glob("*.whl"))
    (files / "empty-1.0-py3-none-any.whl").write_bytes(b"")
    (files / "cut-1.0-py3-none-any.whl").write_bytes((files / good[0]).read_bytes()[:200])
    (files / "text-1.0-py3-none-any.whl").write_text("not a wheel")
    (files / "folder-1.0-py3-none-any.whl").mkdir()
    _two_dist_infos(files / "twice-1.0-py3-none-any.whl")
    _corrupt_member(files / good[0], files / "damaged-1.0-py3-none-any.whl")
    (files / "badname.whl").write_bytes((files / good[0]).read_bytes())
    for command in (["index", "--out", out], ["index", "--out", out]):  # and again: stable
        result = run_factory(*map(str, command))
        assert result.exit == 1, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 7, result.stderr
        for name, why in [("empty", "not a zip file"), ("cut", "cannot read the wheel"),
                          ("text", "cannot read the wheel"), ("folder", "is not a wheel file"),
                          ("twice", "expected one .dist-info folder, found 2"),
                          ("damaged", "cannot read the wheel"), ("badname", "not a wheel file "
                                                                  "name")]:
            line = next(line for line in lines if f"/{name}" in line)
            assert line.startswith("error: ") and why in line, line
            assert "move it out of files/" in line, line
        assert "index: 4 wheel(s) of 3 project(s)" in result.stdout
    assert index_problems(out) == []
    page = (out / "simple" / "img2gray" / "index.json").read_text()
    assert all(name in page or name.replace("+", "%2B") in page for name in good[:2])


def test_tampering_is_seen(tmp_path: Path) -> None:
    """Promise: published files are immutable. A wheel changed in place with its size and mtime
    kept passes a plain `factory index` unread, but `factory index --verify` hashes every file
    and reports it; an edited .metadata is reported and written again from the wheel; a
    damaged published wheel keeps its published record and is named."""
    out = small_index_files(tmp_path / "index")
    update_index(out)
    files = out / "files"
    wheel = next(files.glob("img2gray-1.0.0+cu130torch211-*.whl"))
    metadata = wheel.with_name(wheel.name + ".metadata")
    assert run_factory("index", "--out", out, "--verify").stdout.strip().endswith(
        "every byte matches")

    metadata.write_text(metadata.read_text().replace("test wheel", "TAMPERED!!"))
    edited = run_factory("index", "--out", out)
    assert edited.exit == 1 and f"{metadata}: was edited" in edited.stderr
    assert "TAMPERED" not in metadata.read_text()  # written again from the wheel

    info = wheel.stat()
    data = bytearray(wheel.read_bytes())
    data[-30] ^= 1  # one bit of the central directory: same size
    wheel.write_bytes(bytes(data))
    os.utime(wheel, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert run_factory("index", "--out", out).exit == 0  # size and mtime kept: not read
    metadata.write_text(metadata.read_text().replace("test wheel", "TAMPERED!!"))

    verified = run_factory("index", "--out", out, "--verify")
    assert verified.exit == 1
    mismatches = [line for line in verified.stdout.splitlines() if line.startswith("mismatch:")]
    assert len(mismatches) == 2, verified.stdout
    assert f"{wheel}: bytes changed after it was published" in mismatches[1] + mismatches[0]
    assert any(f"{metadata}: edited" in line for line in mismatches)
    assert "2 mismatch(es)" in verified.stdout

    forced = run_factory("index", "--out", out, "--force")  # unread: size and mtime kept
    assert forced.exit == 1 and "was edited" in forced.stderr
    _corrupt_member(wheel, wheel)
    os.utime(wheel, ns=(info.st_atime_ns, info.st_mtime_ns + 1))
    damaged = run_factory("index", "--out", out)
    assert damaged.exit == 1 and "Traceback" not in damaged.stderr
    assert f"{wheel.relative_to(Path.cwd()) if wheel.is_relative_to(Path.cwd()) else wheel}" \
        in damaged.stderr
    assert "restore the published file" in damaged.stderr
    assert index_problems(out) != []  # the page still names the published hash: pip refuses


def test_the_recorded_source_does_not_depend_on_where_the_matrix_lives(tmp_path: Path) -> None:
    """A path source is recorded by its path inside its git work tree (or its own name), not
    relative to the matrix: moving matrix.yaml changes no wheel."""
    kernel = make_kernel(tmp_path / "repo" / "kernels" / "demo", GOOD_KERNEL, SOURCES,
                         package="demo")
    outside_git = resolve_path_source(kernel)
    assert outside_git.location == "demo"
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    locations = set()
    for folder in ("repo", "repo/ci", "elsewhere/deep/down"):
        matrix = write(tmp_path / folder / "matrix.yaml", GOOD_MATRIX.replace(
            "path: demo", f"path: {os.path.relpath(kernel, tmp_path / folder)}"))
        entry = load_matrix(matrix).kernels[0]
        tree = resolve_path_source(present(entry.source.folder))
        locations.add((tree.location, tree.digest))
    assert locations == {("kernels/demo", outside_git.digest)}


def test_an_empty_yank_reason_is_still_a_yank(tmp_path: Path) -> None:
    out = small_index_files(tmp_path / "index")
    update_index(out)
    result = run_factory("yank", "noarch-kernel", "2.0.0", "--reason", "", "--out", out)
    assert result.exit == 0, result.stderr
    for index in ("simple", "cu130torch211/simple"):
        page = out / index / "noarch-kernel"
        data = json.loads((page / "index.json").read_text())
        assert [entry["yanked"] for entry in data["files"]] == [True]
        parsed = ProjectPage.from_json_data(data, base_url="https://example.invalid/")
        assert [package.is_yanked for package in parsed.packages] == [True]
        html = ProjectPage.from_html("noarch-kernel", (page / "index.html").read_text(),
                                     base_url="https://example.invalid/")
        assert [package.is_yanked for package in html.packages] == [True]


def test_a_refused_yank_leaves_no_update_marker(tmp_path: Path) -> None:
    out = small_index_files(tmp_path / "index")
    update_index(out)
    result = run_factory("yank", "img2gray", "9.9", "--reason", "x", "--out", out)
    assert result.exit == 2
    assert not Layout(out).index_in_progress.exists()


@pytest.mark.slow
def test_killing_publish_to_a_folder_leaves_no_temporaries(tmp_path: Path) -> None:
    """SIGKILL at random moments of `factory publish --to DIR`; the next publish clears what
    the killed ones left (hidden .tmp files) and completes the site."""
    out = tmp_path / "index"
    files = out / "files"
    files.mkdir(parents=True)
    for number in range(120):
        make_wheel(files, f"kernel-{number % 12}", f"1.{number // 12}.0+cu130torch21{number % 3}",
                   payload="x = 1\n" * 2000)
    assert run_factory("index", "--out", out).exit == 0
    site = tmp_path / "site"
    command = [sys.executable, "-m", "factory", "publish", str(out), "--to", str(site)]
    started = time.monotonic()
    assert subprocess.run(command, capture_output=True).returncode == 0
    duration = time.monotonic() - started
    subprocess.run(["rm", "-rf", str(site)], check=True)
    for trial in range(8):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(duration * (0.3 + 0.6 * trial / 8))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
    # and one a killed run is sure to have left, as if killed inside a write
    (site / "simple").mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (site / "simple" / f".index.json.{dead.pid}.1.tmp").write_text("half a page")
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert [p for p in site.rglob("*") if p.name.endswith(".tmp")] == []
    assert snapshot(site) == {
        name: data for name, data in snapshot(out).items()
        if not name.startswith((".factory", "logs"))}


def test_killed_builds_leave_no_staging_folders(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "index")
    layout.staging.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    abandoned = layout.staging / f"{dead.pid}-abc123"
    (abandoned / "work").mkdir(parents=True)
    live = layout.staging / f"{os.getpid()}-def456"
    live.mkdir()
    build_run._remove_abandoned_staging(layout.staging)
    assert not abandoned.exists() and live.is_dir()


class _StoppedRunner:
    """A runner whose compiler is stopped under it, as Ctrl-C stops a build's compilers."""

    name = "local"
    options = BuildOptions(Path("/tmp/unused"), None)

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping

    def facts(self, cell: object) -> dict[str, Any]:
        return {}

    def build(self, cell: object, staging: object, log: object, compiling: object,
              progress: object) -> None:
        self.stopping.set()
        raise BuildError("compiling csrc/demo.cu failed (exit -2)")


class _Quiet:
    def update(self, *args: object) -> None:
        pass


def test_an_interrupt_is_logged_as_an_interrupt(tmp_path: Path) -> None:
    from ..support.plans import kernel, plan_for

    kernel(tmp_path)
    plan = plan_for(tmp_path, "kernels:\n  - path: demo\ntorch: ['2.11']\n"
                              "cuda: {'13.0': {sms: ['9.0']}}\n")
    layout = Layout(tmp_path / "index")
    for folder in (layout.files, layout.logs, layout.state, layout.staging):
        folder.mkdir(parents=True, exist_ok=True)
    stopping = threading.Event()
    compiling = Compiling(CompilePool(Budget(1, 2**30)), None, {}, lambda key, cost: None)
    result = build_run._run_cell(plan.cells[0], layout, cast(Runner, _StoppedRunner(stopping)),
                                 compiling, cast(build_run.Reporter, _Quiet()),
                                 build_run.RunSettings(key=bytes(32)), stopping)
    assert (result.status, result.detail) == ("failed", "interrupted")
    log = present(result.log).read_text()
    assert "INTERRUPTED: the build was stopped" in log and "FAILED" not in log


def test_a_killed_update_leaves_no_temporaries_of_dead_runs_only(tmp_path: Path) -> None:
    out = small_index_files(tmp_path / "index")
    update_index(out)
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = out / "simple" / f".index.html.{dead.pid}.7.tmp"
    mine = out / "simple" / f".index.html.{os.getpid()}.7.tmp"
    left.write_text("x")
    mine.write_text("y")
    Layout(out).index_in_progress.write_text("")  # as a killed update leaves it
    update_index(out)
    assert not left.exists() and mine.exists()  # a live run's work in progress is its own
    mine.unlink()


def test_a_wheel_a_killed_build_moved_into_files_is_indexed_by_the_next_update(
        tmp_path: Path) -> None:
    """A build notes each wheel in the publish journal before it moves it into files/; killed
    after the move, before its index update, it leaves a wheel no index records. The next
    build's update takes it (and drops the note); a wheel no build noted is still left out,
    and so is a noted one whose bytes are not the noted ones."""
    from factory.outputs.files import file_sha256
    from factory.outputs.journal import note_publishing, pending

    out = small_index_files(tmp_path / "index")
    update_index(out)
    layout = Layout(out)
    files = layout.files
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = make_wheel(files, "img2gray", "1.0.0+cu130torch213")
    stray = make_wheel(files, "stray", "9.9")
    changed = make_wheel(files, "other", "1.0.0")
    for wheel, digest in ((killed, file_sha256(killed)), (changed, "0" * 64)):
        note = note_publishing(layout.publishing, KEY, wheel.name, digest, "img2gray/x")
        note.rename(note.with_name(note.name.replace(f"{os.getpid()}-", f"{dead.pid}-", 1)))
    lost = note_publishing(layout.publishing, KEY, "gone-1.0-py3-none-any.whl", "1" * 64,
                           "gone/x")
    lost.rename(lost.with_name(lost.name.replace(f"{os.getpid()}-", f"{dead.pid}-", 1)))

    summary = update_index(out, published={}, journal_key=KEY)  # as a later build's runs
    manifest = json.loads(layout.manifest.read_text())
    indexed = {row[0] for row in manifest["files"]}
    assert killed.name in indexed and stray.name not in indexed and changed.name not in indexed
    assert sorted(problem.split(": ", 1)[1][:40] for problem in summary.problems) == [
        "no build published it, so it is left out", "not the bytes the build of img2gray/x pu"]
    assert list(pending(layout.publishing, KEY)) == [changed.name]  # others: indexed, lost
    assert index_problems(out) == []


def test_a_hostile_wheels_metadata_is_refused_in_a_line_not_read_whole(tmp_path: Path) -> None:
    """A small wheel whose provenance.json nests 200,000 deep, one whose variant.json does, and
    one whose provenance.json inflates to 64 MiB: `factory index` says what each is in one line
    and indexes the others; no internal error, nothing read whole."""
    out = small_index_files(tmp_path / "index")
    files = out / "files"
    deep = make_wheel(files, "deep", "1.0.0+cu130torch211")
    bomb = make_wheel(files, "bomb", "1.0.0+cu130torch211")
    for wheel, member, data in (
            (deep, "provenance.json", b"[" * 200_000 + b"]" * 200_000),
            (bomb, "provenance.json", b" " * (64 << 20))):
        with zipfile.ZipFile(wheel, "a", compression=zipfile.ZIP_DEFLATED) as archive:
            folder = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            archive.writestr(folder.replace("METADATA", member), data)
    assert bomb.stat().st_size < 1 << 20
    variant = files / "deepvariant-1.0.0-cp39-abi3-linux_x86_64-cu130torch211.whl"
    plain = make_wheel(tmp_path / "plain", "deepvariant", "1.0.0")
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(variant, "w") as archive:
        for name in source.namelist():
            archive.writestr(name, source.read(name))
        archive.writestr("deepvariant-1.0.0.dist-info/variant.json",
                         b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
    done = run_factory("index", "--out", out)
    lines = (done.stdout + done.stderr).splitlines()
    assert done.exit == 1 and "internal error" not in done.stdout + done.stderr, lines
    errors = [line for line in lines if line.startswith("error: ")]
    assert any("bomb-1.0.0+cu130torch211" in line and "provenance.json inflates to 67108864 "
               "bytes" in line for line in errors), errors
    assert any(variant.name in line and "variant.json nests deeper than variant metadata "
               "does" in line for line in errors), errors
    indexed = {row[0] for row in json.loads(Layout(out).manifest.read_text())["files"]}
    assert deep.name in indexed and bomb.name not in indexed and variant.name not in indexed
