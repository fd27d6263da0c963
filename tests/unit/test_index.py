"""The package index: pages to the standards, incremental and atomic updates, immutability, yank
and `factory serve`, on small real wheels written by the factory's own wheel writer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest
from pypi_simple import ProjectPage

from factory.index.serve import negotiate
from factory.index.update import update_index
from factory.wheel.read import read_wheel

from ..support.wheels import (
    index_problems,
    make_wheel,
    parse,
    small_index_files,
)

JOURNAL_KEY = bytes(range(32))  # the object cache's key publish notes are signed under


@pytest.fixture
def index_out(tmp_path: Path) -> Path:
    return small_index_files(tmp_path / "index")


def test_layout_and_what_each_index_holds(index_out: Path) -> None:
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


def test_html_pages_follow_the_standards(index_out: Path) -> None:
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


def test_a_wheel_keeps_the_time_it_entered_the_index(index_out: Path) -> None:
    """PEP 700's upload-time is when the index took the wheel in (its file's time then), and
    stays so: a later touch of the file, or the index made again, does not move it."""
    wheel = next((index_out / "files").glob("img2gray-1.0.0+cu130torch211-*.whl"))
    os.utime(wheel, (1_790_000_000, 1_790_000_000))
    update_index(index_out)
    page = index_out / "cu130torch211" / "simple" / "img2gray" / "index.json"

    def upload_time() -> str:
        return str(json.loads(page.read_text())["files"][0]["upload-time"])

    assert upload_time() == "2026-09-21T14:13:20.000000Z"
    os.utime(wheel, (1_800_000_000, 1_800_000_000))
    update_index(index_out)
    update_index(index_out, full=True)
    assert upload_time() == "2026-09-21T14:13:20.000000Z"
    browse = json.loads((index_out / "browse" / "img2gray.json").read_text())
    times = {wheel["filename"]: wheel["upload_time"] for release in browse["versions"]
             for wheel in release["anywhere"]}
    assert times[wheel.name] == "2026-09-21T14:13:20.000000Z"


def test_json_pages_follow_pep_691_and_700(index_out: Path) -> None:
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


def test_adding_a_wheel_rewrites_only_the_pages_it_touches(index_out: Path) -> None:
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


def test_removed_wheels_leave_the_pages(index_out: Path) -> None:
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


def test_content_negotiation() -> None:
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


def test_a_builds_update_reads_only_what_it_published(index_out: Path) -> None:
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
def test_a_wheel_no_build_published_is_never_indexed_by_a_build(tmp_path: Path,
        first: bool) -> None:
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


def test_a_published_name_keeps_its_bytes_after_its_file_is_removed(index_out: Path) -> None:
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


def test_a_build_does_not_publish_other_bytes_under_a_removed_name(tmp_path: Path) -> None:
    from factory.cells.run import _publish
    from factory.errors import BuildError
    from factory.outputs.journal import pending
    from factory.outputs.layout import Layout

    staged = make_wheel(tmp_path / "build" / "staging", "img2gray", "1.0.0+cu130torch211")
    layout = Layout(tmp_path)
    files = layout.files
    files.mkdir()
    digest = hashlib.sha256(staged.read_bytes()).hexdigest()
    with pytest.raises(BuildError, match="was published with sha256 0123456789ab and its file "
                                         "removed since"):
        _publish(staged, digest, layout, JOURNAL_KEY, "img2gray/x", False, None,
                 once="0123456789ab" + "0" * 52)
    assert _publish(staged, digest, layout, JOURNAL_KEY, "img2gray/x", False, None,
                    once=digest) == files / staged.name
    # noted in the publish journal before it was moved there
    assert pending(layout.publishing, JOURNAL_KEY)[staged.name].sha256 == digest


def test_a_wheel_changed_after_its_gates_is_not_published(tmp_path: Path) -> None:
    """The digest the gates judged is taken before any kernel code runs; a staged wheel whose
    bytes differ when it is published (kernel code run unconfined rewrote it) stays out."""
    from factory.cells.run import _publish
    from factory.errors import BuildError
    from factory.outputs.layout import Layout

    staged = make_wheel(tmp_path / "build" / "staging", "img2gray", "1.0.0+cu130torch211")
    judged = hashlib.sha256(staged.read_bytes()).hexdigest()
    with open(staged, "ab") as handle:
        handle.write(b"hostile")
    layout = Layout(tmp_path)
    layout.files.mkdir()
    with pytest.raises(BuildError, match=rf"{re.escape(staged.name)} changed after its gates "
                                         rf"judged it \(sha256 {judged[:12]}, now"):
        _publish(staged, judged, layout, JOURNAL_KEY, "img2gray/x", False, None)
    assert not list(layout.files.iterdir()) and not layout.publishing.exists()


def test_only_the_journal_notes_the_factory_signed_count(tmp_path: Path) -> None:
    """A note anything else wrote into .factory/publishing/ (its sha256 right or not, a FIFO,
    a link, an oversized file) stands for nothing; where there is no key, no note counts."""
    from factory.outputs.journal import note_publishing, pending
    from factory.outputs.layout import Layout

    layout = Layout(tmp_path)
    wheel = make_wheel(tmp_path / "files", "img2gray", "1.0.0+cu130torch211")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    signed = note_publishing(layout.publishing, JOURNAL_KEY, wheel.name, digest, "img2gray/x")
    evil = make_wheel(tmp_path / "files", "evil", "6.6.6")
    forged = {"wheel": evil.name, "sha256": hashlib.sha256(evil.read_bytes()).hexdigest(),
              "cell": "evil/x"}
    (layout.publishing / f"999999-{evil.name}.json").write_text(json.dumps(forged))
    (layout.publishing / f"999998-{evil.name}.json").write_text(json.dumps(
        {**forged, "mac": json.loads(signed.read_text())["mac"]}))  # another note's mac
    os.mkfifo(layout.publishing / f"999997-{evil.name}.json")
    (layout.publishing / f"999996-{evil.name}.json").symlink_to(signed)
    (layout.publishing / f"999995-{evil.name}.json").write_text(" " * 100_000)
    assert list(pending(layout.publishing, JOURNAL_KEY)) == [wheel.name]  # the FIFO: no block
    summary = update_index(tmp_path, published={}, journal_key=JOURNAL_KEY)
    assert any(f"{evil}: no build published it" in problem for problem in summary.problems)
    manifest = json.loads((tmp_path / ".factory" / "manifest.json").read_text())
    assert [row[0] for row in manifest["files"]] == [wheel.name]


def test_without_a_key_no_journal_note_counts_and_none_is_made(tmp_path: Path) -> None:
    from factory.outputs.journal import note_publishing, pending
    from factory.pipeline.options import object_key
    from factory.trust.keys import existing_key

    note_publishing(tmp_path / "journal", JOURNAL_KEY, "img2gray-1.0-py3-none-any.whl",
                    "0" * 64, "x")
    key = existing_key(object_key({"XDG_CONFIG_HOME": str(tmp_path / "config")}))
    assert key is None and pending(tmp_path / "journal", key) == {}
    assert not (tmp_path / "config").exists()


def test_a_stale_page_a_killed_update_left_is_removed_and_never_published(
        tmp_path: Path) -> None:
    """A killed update left cu130torch212/simple/gone/index.json (its index.html gone), naming
    a wheel no longer in files/: --verify names it, publish --to refuses the folder, and the
    next full update removes it (and its folder), leaving --verify clean."""
    from factory.errors import PublishError
    from factory.index.update import verify_index
    from factory.pipeline.publish import PublishRequest, publish

    out = small_index_files(tmp_path / "index")
    update_index(out)
    stale = out / "cu130torch212" / "simple" / "gone" / "index.json"
    stale.parent.mkdir()
    stale.write_text('{"meta": {"api-version": "1.1"}, "name": "gone", "files": '
                     '[{"filename": "gone-1.0-py3-none-any.whl", "url": "../../../files/x"}]}')
    variants = out / "simple" / "img2gray" / "img2gray-0.9-variants.json"
    variants.write_text("{}")
    _, problems = verify_index(out)
    assert {problem.split(":", 1)[0] for problem in problems} == {str(stale), str(variants)}
    request = PublishRequest(folder=out, cache=tmp_path / "cache", to=str(tmp_path / "site"),
                             name_clash="ignore")
    with pytest.raises(PublishError, match=r"2 problem\(s\) in .*, so nothing was sent"):
        publish(request, lambda line: None)
    assert not (tmp_path / "site").exists()
    summary = update_index(out, full=True)
    assert summary.pages_removed == 2
    assert not stale.exists() and not stale.parent.exists() and not variants.exists()
    assert verify_index(out)[1] == []
    assert "sent" in publish(request, lambda line: None)
