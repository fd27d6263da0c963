"""Kernel sources from git, the Hub and local folders, the lock file, and untrusted repos.

git sources come from bare repositories made here (file:// URLs, the same git protocol a
server speaks); Hub sources go through the real huggingface_hub client to
tests/support/hubserver.py on 127.0.0.1. Builds that compile are marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from factory.sources.tree import tree_digest

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES
from ..support.factory import EXAMPLE, FIXTURES, Result, make_kernel, run_factory, snapshot, write
from ..support.hubserver import serve
from ..support.installs import run_example

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, check=True)
    return done.stdout.strip()


def commit_of(repo: Path, rev: str) -> str:
    return git(repo, "rev-parse", f"{rev}^{{commit}}")


def make_monorepo(root: Path) -> tuple[Path, str]:
    """A bare repository with the example kernel in kernels/img2gray at two tagged commits (a
    light tag v1.0.0 and an annotated v1.1.0); its working clone stays at root/work."""
    work = root / "work"
    work.mkdir(parents=True)
    git(work, "init", "--quiet", "--initial-branch=main")
    shutil.copytree(EXAMPLE, work / "kernels" / "img2gray")
    write(work / "README.md", "kernels\n")
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "img2gray 1.0.0")
    git(work, "tag", "v1.0.0")
    source = work / "kernels" / "img2gray" / "csrc" / "img2gray.cu"
    source.write_text(source.read_text() + "// 1.1.0\n")
    git(work, "commit", "--quiet", "-am", "img2gray 1.1.0")
    git(work, "tag", "-a", "v1.1.0", "-m", "release 1.1.0")
    bare = root / "kernels.git"
    git(root, "clone", "--quiet", "--bare", str(work), str(bare))
    return work, bare.as_uri()


def git_matrix(folder: Path, url: str, rev: str, extra: str = "",
               subdir: str = "kernels/img2gray") -> Path:
    return write(folder / "matrix.yaml", f"""
        kernels:
          - git: {url}
            rev: {rev}
            subdir: {subdir}
        {extra}
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
        """)


def lock_entries(path: Path) -> list[dict[str, Any]]:
    import tomllib

    entries: list[dict[str, Any]] = tomllib.loads(path.read_text())["kernel"]
    return entries


def one_error(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def monorepo(tmp_path: Path) -> Any:
    return make_monorepo(tmp_path / "repo")


# ---- git: resolving, fetching, locking ------------------------------------------------------

def test_lock_pins_a_git_subfolder_at_each_tag(tmp_path: Path, monorepo: Any) -> None:
    work, url = monorepo
    cache = tmp_path / "cache"
    matrix = git_matrix(tmp_path, url, "v1.0.0")

    result = run_factory("lock", matrix, "--cache-dir", cache)
    assert result.exit == 0, result.stderr
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    assert entry == {"name": "img2gray", "kind": "git", "location": url,
                     "subdir": "kernels/img2gray", "requested": "v1.0.0",
                     "commit": commit_of(work, "v1.0.0"), "tree": tree_digest(EXAMPLE),
                     "version": "1.0.0"}
    # Only that commit was fetched (shallow), and its tree is kept read-only.
    (repo,) = (cache / "sources" / "git").glob("*.git")
    assert git(repo, "rev-parse", "--is-shallow-repository") == "true"
    assert git(repo, "rev-list", "--all") == commit_of(work, "v1.0.0")
    (tree,) = [p for p in (cache / "sources" / "trees").iterdir() if p.is_dir()]
    assert snapshot(tree) == snapshot(EXAMPLE)
    assert not os.stat(tree / "build.toml").st_mode & 0o222

    # The matrix moves on to v1.1.0: the old lock is refused, a new one pins the annotated tag's
    # commit (not the tag object).
    git_matrix(tmp_path, url, "v1.1.0")
    refused = run_factory("build", matrix, "--locked", "--cache-dir", cache,
                          "--out", tmp_path / "index")
    assert refused.exit == 2
    assert "matrix.yaml:2: kernels[0]: asks for 'v1.1.0' but matrix.lock was written for " \
           "'v1.0.0'; run `factory lock matrix.yaml`" in one_error(refused)
    assert not (tmp_path / "index").exists()
    assert run_factory("lock", matrix, "--cache-dir", cache).exit == 0
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    assert (entry["commit"], entry["version"]) == (commit_of(work, "v1.1.0"), "1.1.0")
    assert entry["tree"] != tree_digest(EXAMPLE)

    # Someone moves the tag: --locked names the source, both commits and the way out.
    git(work, "commit", "--quiet", "--allow-empty", "-m", "later")
    git(work, "tag", "-f", "-a", "v1.1.0", "-m", "moved")
    git(work, "push", "--quiet", "--force", url, "main", "v1.1.0")
    moved = run_factory("build", matrix, "--locked", "--cache-dir", cache,
                        "--out", tmp_path / "index")
    assert moved.exit == 2
    assert (f"matrix.lock:6: kernel.commit: git:{url} (kernels/img2gray) @ v1.1.0 moved: it now "
            f"resolves to {commit_of(work, 'v1.1.0')[:12]}, but the lock pins "
            f"{entry['commit'][:12]}") in one_error(moved)
    assert not (tmp_path / "index").exists()


def test_git_source_errors(tmp_path: Path, monorepo: Any) -> None:
    work, url = monorepo
    cache = tmp_path / "cache"

    def lock(rev: str, subdir: str = "kernels/img2gray", extra: str = "",
             *options: str) -> Result:
        git_matrix(tmp_path, url, rev, extra, subdir)
        return run_factory("lock", tmp_path / "matrix.yaml", "--cache-dir", cache, *options)

    offline = lock("v1.0.0", "kernels/img2gray", "", "--offline")
    assert offline.exit == 1
    assert f"kernels[0]: {url} has never been fetched, so --offline cannot resolve it" \
        in one_error(offline)

    missing = lock("v9")
    assert missing.exit == 2
    assert (f"matrix.yaml:2: kernels[0].git: 'v9' is not a branch or tag of {url} "
            "(tags: v1.0.0, v1.1.0)") in one_error(missing)

    folder = lock("v1.0.0", "kernels/relu")
    assert folder.exit == 2
    assert "has no folder 'kernels/relu'" in one_error(folder)

    # `main` moves past the tags; the matrix gives no version.
    git(work, "commit", "--quiet", "--allow-empty", "-m", "work in progress")
    git(work, "push", "--quiet", url, "main")
    untagged = lock("main")
    assert untagged.exit == 2
    assert (f"matrix.yaml:2: kernels[0].version: no wheel version: add `version: X.Y.Z` to "
            f"this entry, or tag commit {commit_of(work, 'main')[:12]} of {url} as vX.Y.Z"
            ) in one_error(untagged)
    assert not (tmp_path / "matrix.lock").exists()

    # A version in the matrix wins over tags; a full commit id needs no ref lookup.
    explicit = write(tmp_path / "matrix.yaml", f"""
        kernels:
          - git: {url}
            rev: {commit_of(work, 'v1.0.0')}
            subdir: kernels/img2gray
            version: 0.9.0
        torch: ["2.11"]
        cuda: {{"13.0": {{sms: ["9.0"]}}}}
        """)
    assert run_factory("lock", explicit, "--cache-dir", cache).exit == 0
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    assert (entry["version"], entry["commit"]) == ("0.9.0", commit_of(work, "v1.0.0"))

    gone = git_matrix(tmp_path, (tmp_path / "nowhere.git").as_uri(), "v1.0.0")
    result = run_factory("lock", gone, "--cache-dir", cache)
    assert result.exit == 2
    assert "matrix.yaml:2: kernels[0].git: git ls-remote" in one_error(result)
    assert "does not appear to be a git repository" in one_error(result)


def test_offline_resolves_from_the_cache(tmp_path: Path, monorepo: Any) -> None:
    _, url = monorepo
    cache = tmp_path / "cache"
    matrix = git_matrix(tmp_path, url, "v1.1.0")
    assert run_factory("lock", matrix, "--cache-dir", cache).exit == 0
    first = (tmp_path / "matrix.lock").read_text()
    shutil.rmtree(tmp_path / "repo" / "kernels.git")  # the remote is gone

    again = run_factory("lock", matrix, "--cache-dir", cache, "--offline")
    assert again.exit == 0, again.stderr
    assert "unchanged:" in again.stdout
    assert (tmp_path / "matrix.lock").read_text() == first

    # Even with the fetched tree deleted, the commit is still in the cached repository.
    for tree in (cache / "sources" / "trees").iterdir():
        shutil.rmtree(tree) if tree.is_dir() else tree.unlink()
    assert run_factory("lock", matrix, "--cache-dir", cache, "--offline").exit == 0
    assert (tmp_path / "matrix.lock").read_text() == first

    online = run_factory("lock", matrix, "--cache-dir", cache)
    assert online.exit == 2
    assert "does not appear to be a git repository" in one_error(online)


def test_lock_of_a_folder_catches_edits(tmp_path: Path) -> None:
    kernel = make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    matrix = write(tmp_path / "matrix.yaml", GOOD_MATRIX)

    def build_locked() -> Result:
        return run_factory("build", matrix, "--locked", "--cache-dir", tmp_path / "cache",
                           "--out", tmp_path / "index")

    missing = build_locked()
    assert missing.exit == 2
    assert "matrix.lock: --locked: there is no lock file: run `factory lock matrix.yaml` first" \
        in one_error(missing)

    assert run_factory("lock", matrix, "--cache-dir", tmp_path / "cache").exit == 0
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    assert entry == {"name": "demo", "kind": "path", "location": "demo",
                     "commit": tree_digest(kernel), "tree": tree_digest(kernel),
                     "version": "1.0.0"}

    (kernel / "csrc" / "demo.cu").write_text("// edited\n")
    edited = build_locked()
    assert edited.exit == 2
    assert (f"matrix.lock:6: kernel.tree: the content of path:demo changed: its files now hash to "
            f"{tree_digest(kernel)[:12]}, the lock has {entry['tree'][:12]}") in one_error(edited)

    # A kernel taken out of the matrix but still locked.
    make_kernel(tmp_path / "other", GOOD_KERNEL.replace('"demo"', '"other"'), SOURCES,
                package="other")
    write(matrix, GOOD_MATRIX.replace("path: demo", "path: other"))
    stale = build_locked()
    assert stale.exit == 2
    assert "matrix.lock:6: kernel: path:demo is locked, but matrix.yaml no longer lists it" \
        in one_error(stale)
    assert not (tmp_path / "index").exists()


# ---- untrusted repos ------------------------------------------------------------------------



def outside_fifo(tmp_path: Path) -> Path:
    """A named pipe outside the kernel repo: opening it for reading blocks until someone
    writes, so a factory that read through a link to it would hang instead of failing."""
    fifo = tmp_path / "secret"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("link, target", [
    ("torch-ext/demo/evil.py", "FIFO"),  # a package file that is a link out of the repo
    ("csrc/root", "/"),  # a link to the root folder
    ("d", "."),  # harmless alone; with the next link it climbs out through d
])
def test_links_out_of_a_path_repo_are_refused(tmp_path: Path, link: str, target: str) -> None:
    kernel = make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    fifo = outside_fifo(tmp_path)
    os.symlink(os.path.relpath(fifo, (kernel / link).parent) if target == "FIFO" else target,
               kernel / link)
    if link == "d":  # "d/../secret" reads as inside the repo, but d is the repo itself
        os.symlink("d/../secret", kernel / "sneaky.py")
        link = "sneaky.py"
    write(tmp_path / "matrix.yaml", GOOD_MATRIX)
    result = subprocess.run(  # a hang (reading the pipe) fails the test through the timeout
        [sys.executable, "-m", "factory", "build", "matrix.yaml", "--cache-dir", "cache"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: demo: the symlink {link} -> " in result.stderr
    assert "leads outside the kernel repo; it is refused" in result.stderr
    assert not (tmp_path / "index").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("target", ["/", "../../.."])
def test_a_git_repo_with_a_link_out_is_refused_before_anything_is_written(tmp_path: Path,
        target: str) -> None:
    work = tmp_path / "work"
    make_kernel(work, GOOD_KERNEL, SOURCES, package="demo")
    os.symlink(target, work / "csrc" / "root")
    git(work, "init", "--quiet")
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "evil")
    git(work, "tag", "v1.0.0")
    cache = tmp_path / "cache"
    matrix = git_matrix(tmp_path, work.as_uri(), "v1.0.0", subdir=".")
    result = run_factory("build", matrix, "--cache-dir", cache, "--out", tmp_path / "index")
    assert result.exit == 2
    assert (f"matrix.yaml:2: kernels[0].git: the symlink csrc/root -> {target} leads outside "
            "the kernel repo; it is refused") in one_error(result)
    trees = cache / "sources" / "trees"
    assert not trees.exists() or not any(trees.iterdir())
    assert not (tmp_path / "index").exists()


def test_a_git_repo_naming_files_outside_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    make_kernel(work, GOOD_KERNEL.replace('"csrc/demo.cu"', '"../../etc/passwd"'), SOURCES,
                package="demo")
    git(work, "init", "--quiet")
    git(work, "add", "-A")
    git(work, "commit", "--quiet", "-m", "evil")
    matrix = git_matrix(tmp_path, work.as_uri(), "HEAD", "", ".").read_text()
    write(tmp_path / "matrix.yaml", matrix.replace("    subdir: .", "    version: 1.0.0"))
    result = run_factory("build", tmp_path / "matrix.yaml", "--cache-dir", tmp_path / "cache",
                         "--out", tmp_path / "index")
    assert result.exit == 2
    assert "build.toml:13: kernel.demo.src[0]: '../../etc/passwd' must be a path inside the " \
           "kernel repo" in one_error(result)
    assert not (tmp_path / "index").exists()


# ---- the Hub ----------------------------------------------------------------------------------

@pytest.fixture
def hub(tmp_path: Path) -> Iterator[tuple[Any, dict[str, str], Any]]:
    """A Hub on 127.0.0.1 with kwf-test/noarch-kernel: the pure-Python fixture at the repo's
    top, tagged v2.0.0, beside a build/ folder of made-up binaries that must not be fetched."""
    repo = tmp_path / "hubrepo"
    shutil.copytree(FIXTURES / "noarch-kernel", repo)
    write(repo / "build" / "torch211-cxx11-cu130-x86_64-linux" / "noarch_kernel" / "big.so",
          "binary\n")
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "noarch-kernel")
    git(repo, "tag", "v2.0.0")
    server, requests = serve({"kwf-test/noarch-kernel": repo})
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    yield repo, env, requests
    server.shutdown()
    server.server_close()


def hub_matrix(folder: Path, revision: str = "v2.0.0",
               repo: str = "kwf-test/noarch-kernel") -> Path:
    return write(folder / "matrix.yaml", f"""
        kernels:
          - hub: {repo}
            revision: {revision}
        torch: ["2.11"]
        cuda:
          "13.0":
            sms: ["9.0"]
        """)


def test_hub_source_builds_and_then_works_offline(tmp_path: Path,
                                                  hub: tuple[Any, dict[str, str], Any]) -> None:
    repo, env, requests = hub
    cache = tmp_path / "cache"
    matrix = hub_matrix(tmp_path)
    out = tmp_path / "index"
    built = run_factory("build", matrix, "--cache-dir", cache, "--out", out, "--runner",
                        "local", env=env)
    assert built.exit == 0, built.stdout + built.stderr
    (wheel,) = (out / "files").glob("*.whl")
    assert wheel.name == "noarch_kernel-2.0.0-py3-none-any.whl"  # the version from the tag
    with zipfile.ZipFile(wheel) as archive:
        record = json.loads(archive.read("noarch_kernel-2.0.0.dist-info/provenance.json"))
    commit = commit_of(repo, "v2.0.0")
    assert record["source"]["kind"] == "hub"
    assert record["source"]["location"] == "kwf-test/noarch-kernel"
    assert record["source"]["revision"] == "v2.0.0"
    assert record["source"]["git"]["commit"] == commit
    assert record["source"]["tree_sha256"] == tree_digest(FIXTURES / "noarch-kernel")
    # The files came through the Hub's endpoints, and the build/ folder stayed on the server.
    assert "GET /api/models/kwf-test/noarch-kernel/revision/v2.0.0" in requests
    assert f"GET /kwf-test/noarch-kernel/resolve/{commit}/build.toml" in requests
    assert not [line for line in requests if "/build/" in line]
    assert (tmp_path / "hf" / "hub" / "models--kwf-test--noarch-kernel" / "refs" / "v2.0.0") \
        .read_text() == commit

    # Offline (HF_HUB_OFFLINE=1, the server unreachable, the factory's own tree deleted): the
    # Hugging Face cache alone gives the same commit and tree, so nothing is rebuilt.
    shutil.rmtree(cache / "sources" / "trees")
    requests.clear()
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    again = run_factory("build", matrix, "--cache-dir", cache, "--out", out, "--runner", "local",
                        env=offline)
    assert again.exit == 0, again.stdout + again.stderr
    assert "0 built, 1 unchanged" in again.stdout
    assert requests == []

    assert run_factory("lock", matrix, "--cache-dir", cache, env=offline).exit == 0
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    assert (entry["kind"], entry["commit"], entry["version"]) == ("hub", commit, "2.0.0")


def test_hub_subfolder_and_commit_revision(tmp_path: Path, monorepo: Any) -> None:
    work, _ = monorepo
    server, requests = serve({"kwf-test/kernels": work})
    try:
        env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
               "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
        commit = commit_of(work, "v1.0.0")
        matrix = write(tmp_path / "matrix.yaml", f"""
            kernels:
              - hub: kwf-test/kernels
                revision: {commit}
                subdir: kernels/img2gray
            torch: ["2.11"]
            cuda: {{"13.0": {{sms: ["9.0"]}}}}
            """)
        result = run_factory("lock", matrix, "--cache-dir", tmp_path / "cache", env=env)
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit == 0, result.stderr
    (entry,) = lock_entries(tmp_path / "matrix.lock")
    # The version comes from the tag the Hub lists on that commit; only the folder is fetched.
    assert (entry["commit"], entry["subdir"], entry["tree"], entry["version"]) == (
        commit, "kernels/img2gray", tree_digest(EXAMPLE), "1.0.0")
    assert "GET /api/models/kwf-test/kernels/refs" in requests
    fetched = [line for line in requests if line.startswith("GET /kwf-test/kernels/resolve/")]
    assert fetched and all("/kernels/img2gray/" in line for line in fetched)


@pytest.mark.parametrize("revision, repo, expected", [
    ("v9", "kwf-test/noarch-kernel", "kernels[0].hub: kwf-test/noarch-kernel on "
     "http://127.0.0.1:{port} has no revision 'v9'"),
    ("main", "kwf-test/missing", "kernels[0].hub: kwf-test/missing is not a repo on "
     "http://127.0.0.1:{port} (or it is private and HF_TOKEN does not grant access)"),
])
def test_hub_errors(tmp_path: Path, hub: tuple[Any, dict[str, str], Any], revision: str, repo: str,
                    expected: str) -> None:
    _, env, _ = hub
    matrix = hub_matrix(tmp_path, revision, repo)
    result = run_factory("lock", matrix, "--cache-dir", tmp_path / "cache", env=env)
    assert result.exit == 2
    port = env["HF_ENDPOINT"].rsplit(":", 1)[1]
    assert f"matrix.yaml:2: {expected.format(port=port)}" in one_error(result)
    assert not (tmp_path / "matrix.lock").exists()


def test_hub_offline_without_a_cache(tmp_path: Path, hub: tuple[Any, dict[str, str], Any]) -> None:
    _, env, _ = hub
    result = run_factory("lock", hub_matrix(tmp_path), "--cache-dir", tmp_path / "cache",
                         env={**env, "HF_HUB_OFFLINE": "1"})
    assert result.exit == 1
    assert ("kernels[0]: kwf-test/noarch-kernel @ v2.0.0 is not in the Hugging Face cache and "
            "the Hub cannot be used (offline, or unreachable)") in one_error(result)


# ---- compiled builds from git ---------------------------------------------------------------

@pytest.fixture
def source_cache(tmp_path: Path, factory_cache: Path) -> Path:
    """A cache of its own for fetched sources, sharing the toolkits and torch environments."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("cuda", "envs", "uv"):
        (factory_cache / name).mkdir(exist_ok=True)
        (cache / name).symlink_to(factory_cache / name)
    return cache


@pytest.mark.slow
@pytest.mark.network
def test_git_source_builds_each_tag_and_verifies(tmp_path: Path, monorepo: Any, source_cache: Path,
                                                 torch_venv: Path) -> None:
    work, url = monorepo
    out = tmp_path / "index"
    wheels = {}
    for tag in ("v1.0.0", "v1.1.0"):
        matrix = git_matrix(tmp_path, url, tag)
        assert run_factory("lock", matrix, "--cache-dir", source_cache).exit == 0
        result = run_factory("build", matrix, "--locked", "--cache-dir", source_cache,
                             "--out", out, "--runner", "local")
        assert result.exit == 0, result.stdout + result.stderr
        version = tag[1:]
        (wheels[tag],) = (out / "files").glob(f"img2gray-{version}+cu130torch211-*.whl")
        with zipfile.ZipFile(wheels[tag]) as archive:
            ops = archive.read("img2gray/_ops.py").decode()
            record = json.loads(archive.read(f"img2gray-{version}+cu130torch211.dist-info/"
                                             "provenance.json"))
        commit = commit_of(work, tag)
        assert f"ops = torch.ops._img2gray_{commit[:7]}" in ops  # namespace from the commit
        assert record["source"]["git"] == {"commit": commit, "dirty": False}
        assert (record["source"]["location"], record["source"]["subdir"]) == (
            url, "kernels/img2gray")
        assert record["build"]["source_date_epoch"] == int(git(work, "show", "-s", "--format=%ct",
                                                               commit))

    report = run_example(torch_venv, wheels["v1.1.0"], tmp_path)
    assert report["namespace"] == f"_img2gray_{commit_of(work, 'v1.1.0')[:7]}"
    assert all(report["results"])

    # verify fetches the recorded commit again (from the cache) and gets the same bytes.
    verified = run_factory("verify", wheels["v1.0.0"], "--cache-dir", source_cache)
    assert verified.exit == 0, verified.stdout + verified.stderr
    assert "verified: the rebuilt wheel is byte-identical" in verified.stdout

    # A plain build after the lock fell behind says so, builds what the rev names now, and
    # leaves the lock alone.
    pinned = commit_of(work, "v1.1.0")
    git(work, "commit", "--quiet", "--allow-empty", "-m", "later")
    git(work, "tag", "-f", "-a", "v1.1.0", "-m", "moved")
    git(work, "push", "--quiet", "--force", url, "main", "v1.1.0")
    before = (tmp_path / "matrix.lock").read_text()
    plain = run_factory("build", matrix, "--cache-dir", source_cache, "--out", tmp_path / "new",
                        "--runner", "local")
    assert plain.exit == 0, plain.stdout + plain.stderr
    assert (f"note: matrix.lock pins git:{url} (kernels/img2gray) @ v1.1.0 at {pinned[:12]}; "
            f"building {commit_of(work, 'v1.1.0')[:12]}") in plain.stdout
    assert (tmp_path / "matrix.lock").read_text() == before
