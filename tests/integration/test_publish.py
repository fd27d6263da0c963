"""`factory publish`: to a real pypiserver (from PyPI) with authentication, then installed from
it with pip; and the static tree to a folder, to S3 (moto's server, through boto3) and to a Hub
repo (tests/support/hubserver.py, through huggingface_hub), in the order that keeps links valid."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from factory.cli import main
from factory.index.update import update_index

from ..support.checks import present
from ..support.factory import Result, run_factory, snapshot
from ..support.hubserver import serve as serve_hub
from ..support.installs import new_torch_venv, venv_python
from ..support.stores import s3_server
from ..support.wheels import index_problems, indexed_with_a_log, make_wheel

PASSWORD = "s3cret-Registry-Pass"


@pytest.fixture
def index_out(tmp_path: Path) -> Path:
    return indexed_with_a_log(tmp_path / "index")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_pypiserver(tmp_path: Path, authenticate: str) -> tuple[Any, str, Path]:
    """pypiserver on 127.0.0.1 with one user, alice; `authenticate` names what needs her
    password (pypiserver's -a: update, download, list)."""
    from passlib.apache import HtpasswdFile  # type: ignore[import-untyped]

    packages = tmp_path / "registry-packages"
    packages.mkdir()
    users = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    users.set_password("alice", PASSWORD)
    users.save()
    port = free_port()
    log = tmp_path / "registry.log"
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "pypi-server"), "run", "-i", "127.0.0.1", "-p",
         str(port), "-P", str(tmp_path / "htpasswd"), "-a", authenticate, "--log-file",
         str(log), str(packages)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(150):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    else:
        server.kill()
        pytest.fail(f"pypiserver did not start: {log.read_text() if log.exists() else ''}")
    return server, url, packages


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """Uploads need alice's password, reading is open (as on registries that serve the
    public)."""
    server, url, packages = start_pypiserver(tmp_path, "update")
    yield url, packages
    server.terminate()
    server.wait()


@pytest.fixture
def private_registry(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """Everything needs alice's password, reading the index too."""
    server, url, packages = start_pypiserver(tmp_path, "update,download,list")
    yield url, packages
    server.terminate()
    server.wait()


def publish_env(tmp_path: Path, username: str | None, password: str | None) -> dict[str, str]:
    """Credentials from the environment only: no ~/.pypirc, no keyring."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}
    if username is not None:
        env.update(TWINE_USERNAME=username, TWINE_PASSWORD=present(password))
    return env


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tampered_copy(out: Path, destination: Path) -> Path:
    """A copy of an output folder whose wheels have other bytes under the same names, as its
    own index records them (a rebuild that gave other bytes)."""
    shutil.copytree(out, destination)
    for wheel in (destination / "files").glob("*.whl"):
        with zipfile.ZipFile(wheel, "a") as archive:
            archive.comment = b"changed after publishing"
    update_index(destination, force=True)
    return destination


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.filterwarnings("ignore:'crypt' is deprecated:DeprecationWarning")
def test_publish_to_pypiserver_then_pip_installs(example_build: tuple[Path, Result],
                                                 registry: tuple[str, Any], tmp_path: Path,
                                                 factory_cache: Path) -> None:
    out, _ = example_build
    url, packages = registry
    (wheel,) = (out / "files").glob("*.whl")

    refused = run_factory("publish", out, "--repository-url", url,
                          env=publish_env(tmp_path, "alice", "not-the-password"))
    assert refused.exit == 1, refused.stdout + refused.stderr
    assert f"{url} refused the credentials of user 'alice' (HTTP 403" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "not-the-password" not in refused.stdout + refused.stderr
    assert list(packages.iterdir()) == []

    anonymous = run_factory("publish", out, "--repository-url", url,
                            env=publish_env(tmp_path, None, None))
    assert anonymous.exit == 1 and "no credentials for" in anonymous.stderr, anonymous.stderr

    done = run_factory("publish", out, "--repository-url", url,
                       env=publish_env(tmp_path, "alice", PASSWORD))
    assert done.exit == 0, done.stdout + done.stderr
    assert f"uploaded {wheel.name}" in done.stdout and "uploaded 1, 0 already there" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    assert sha256(packages / wheel.name) == sha256(wheel)
    uploaded_at = (packages / wheel.name).stat().st_mtime_ns

    again = run_factory("publish", out, "--repository-url", url,
                        env=publish_env(tmp_path, "alice", PASSWORD))
    assert again.exit == 0, again.stdout + again.stderr
    assert f"already there, same sha256: {wheel.name}" in again.stdout
    assert "uploaded 0, 1 already there" in again.stdout

    changed = tampered_copy(out, tmp_path / "changed")
    conflict = run_factory("publish", changed, "--repository-url", url,
                           env=publish_env(tmp_path, "alice", PASSWORD))
    assert conflict.exit == 1, conflict.stdout + conflict.stderr
    assert "already holds other bytes under 1 name(s)" in conflict.stderr
    assert wheel.name in conflict.stderr and "nothing was uploaded" in conflict.stderr
    assert sha256(packages / wheel.name) == sha256(wheel)
    assert (packages / wheel.name).stat().st_mtime_ns == uploaded_at

    venv = new_torch_venv(tmp_path / "venv", factory_cache)
    # only the registry: no pip.conf, no find-links of this machine
    pip_env = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
               "PIP_CONFIG_FILE": os.devnull}
    report = tmp_path / "pip-report.json"
    installed = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--index-url",
                                f"{url}simple/", "--report", report, "img2gray"],
                               capture_output=True, text=True, env=pip_env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (item,) = json.loads(report.read_text())["install"]
    assert unquote(item["download_info"]["url"]) == f"{url}packages/{wheel.name}"
    assert item["download_info"]["archive_info"]["hashes"]["sha256"] == sha256(wheel)
    result = venv_python(venv, "-c", (
        "import torch, img2gray\n"
        "rgb = torch.randint(0, 256, (64, 48, 3), dtype=torch.uint8)\n"
        "w = torch.tensor([210, 720, 70], dtype=torch.int32)\n"
        "expected = ((rgb.to(torch.int32) * w).sum(-1) + 500).div(1000, rounding_mode='floor')\n"
        "print(torch.equal(img2gray.img2gray(rgb), expected.to(torch.uint8)))"))
    assert result.split()[-1] == "True", result
    frozen = venv_python(venv, "-m", "pip", "freeze")
    assert "img2gray==1.0.0+cu130torch211" in frozen.split()


@pytest.mark.filterwarnings("ignore:'crypt' is deprecated:DeprecationWarning")
def test_publish_to_a_private_registry(index_out: Path, private_registry: tuple[str, Any],
                                       tmp_path: Path) -> None:
    url, packages = private_registry
    assert main(["yank", "noarch-kernel", "2.0.0", "--reason", "broken", "--out",
                 str(index_out)]) == 0

    wrong = run_factory("publish", index_out, "--repository-url", url,
                        env=publish_env(tmp_path, "alice", "not-the-password"))
    assert wrong.exit == 1 and "(HTTP 403 Forbidden) at the index read" in wrong.stderr, \
        wrong.stderr
    assert "not-the-password" not in wrong.stdout + wrong.stderr

    dry = run_factory("publish", index_out, "--repository-url", url, "--dry-run",
                      env=publish_env(tmp_path, "alice", PASSWORD))
    assert dry.exit == 0 and dry.stdout.count("would upload") == 3, dry.stdout + dry.stderr
    assert list(packages.iterdir()) == []

    done = run_factory("publish", index_out, "--repository-url", url,
                       env=publish_env(tmp_path, "alice", PASSWORD))
    assert done.exit == 0, done.stdout + done.stderr
    assert "uploaded 3, 0 already there, 1 yanked left out" in done.stdout
    assert sorted(p.name for p in packages.iterdir()) == sorted(
        p.name for p in (index_out / "files").glob("*+*.whl"))

    again = run_factory("publish", index_out, "--repository-url", url,
                        env=publish_env(tmp_path, "alice", PASSWORD))
    assert again.exit == 0 and "uploaded 0, 3 already there" in again.stdout, again.stdout


def published_tree(out: Path) -> dict[str, bytes | None]:
    """What a static publish must copy: the tree without .factory/ and logs/."""
    return {name: data for name, data in snapshot(out).items()
            if not name.startswith((".factory", "logs"))}


def test_publish_to_a_folder_sends_files_then_pages(index_out: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from factory.outputs.files import copy_atomic as copy
    from factory.publish import static

    site = tmp_path / "site"
    sent: list[str] = []

    def recording_copy(source: Path, destination: Path) -> None:
        sent.append(destination.relative_to(site).as_posix())
        copy(source, destination)
        assert index_problems(site) == []  # after every step, every page's links resolve

    monkeypatch.setattr(static, "copy_atomic", recording_copy)
    assert main(["publish", str(index_out), "--to", str(site)]) == 0
    assert snapshot(site) == published_tree(index_out)
    assert index_problems(site) == []
    waves = [static._wave(name.split("/")) for name in sent]
    assert waves == sorted(waves) and waves[0] == 0 and waves[-1] == 3
    assert {name for name in sent if name.startswith("files/")} == \
        {name for name in published_tree(index_out) if name.startswith("files/")}

    sent.clear()
    capsys.readouterr()
    assert main(["publish", str(index_out), "--to", str(site)]) == 0
    assert sent == [] and "0 file(s) to send" in capsys.readouterr().out

    make_wheel(index_out / "files", "img2gray", "1.1.0+cu130torch211")
    update_index(index_out)
    assert main(["publish", str(index_out), "--to", str(site)]) == 0
    assert sent[0] == "files/img2gray-1.1.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    assert "files/img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl" not in sent
    assert "cu130torch212/simple/img2gray/index.html" not in sent  # that page did not change
    assert "cu130torch211/simple/img2gray/index.html" in sent
    assert snapshot(site) == published_tree(index_out)

    changed = tampered_copy(index_out, tmp_path / "changed")
    make_wheel(changed / "files", "img2gray", "1.2.0+cu130torch211")
    update_index(changed, force=True)
    before = snapshot(site)
    result = run_factory("publish", changed, "--to", site)
    assert result.exit == 1 and "holds other bytes under 5 published name(s)" in result.stderr
    assert snapshot(site) == before


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, dict[str, str]]]:
    with s3_server(monkeypatch) as server:
        yield server


def s3_objects(client: Any) -> dict[str, bytes]:
    listing = client.list_objects_v2(Bucket="kernel-wheels").get("Contents", [])
    return {item["Key"]: client.get_object(Bucket="kernel-wheels", Key=item["Key"])["Body"].read()
            for item in listing}


def test_publish_to_s3(index_out: Path, s3: tuple[Any, dict[str, str]]) -> None:
    client, env = s3
    done = run_factory("publish", index_out, "--to", "s3://kernel-wheels/kernels", env=env)
    assert done.exit == 0, done.stdout + done.stderr
    expected = {f"kernels/{name}": data for name, data in published_tree(index_out).items()
                if data is not None}
    assert s3_objects(client) == expected
    wheel = "kernels/files/img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl"
    head = client.head_object(Bucket="kernel-wheels", Key=wheel)
    assert head["Metadata"]["sha256"] == hashlib.sha256(expected[wheel]).hexdigest()
    assert head["ContentType"] == "application/zip"
    page = client.head_object(Bucket="kernel-wheels", Key="kernels/cu130torch211/simple/index.html")
    assert page["ContentType"] == "text/html; charset=utf-8"

    again = run_factory("publish", index_out, "--to", "s3://kernel-wheels/kernels", env=env)
    assert again.exit == 0 and "0 file(s) to send" in again.stdout, again.stdout + again.stderr

    client.put_object(Bucket="kernel-wheels", Key="other/" + wheel.split("/", 1)[1], Body=b"x")
    before = s3_objects(client)
    conflict = run_factory("publish", index_out, "--to", "s3://kernel-wheels/other", env=env)
    assert conflict.exit == 1 and "holds other bytes under 1 published name(s)" in conflict.stderr
    assert s3_objects(client) == before


def test_publish_to_a_hub_repo_in_one_commit(index_out: Path, tmp_path: Path) -> None:
    repo = tmp_path / "hub-dataset"
    repo.mkdir()
    for args in (["init", "--quiet", "--initial-branch=main"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet",
                  "--allow-empty", "-m", "empty"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    server, requests = serve_hub({"kwf-test/wheels": repo}, write_token="hf_write_token")
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}", "HF_HOME": str(tmp_path / "hf"),
           "HF_TOKEN": "hf_write_token", "HF_HUB_DISABLE_TELEMETRY": "1"}
    target = "hf://datasets/kwf-test/wheels/index"

    def commits() -> list[str]:
        return subprocess.run(["git", "-C", str(repo), "rev-list", "main"], capture_output=True,
                              text=True, check=True).stdout.split()

    def tree() -> dict[str, bytes]:
        names = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "main"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
        return {name.removeprefix("index/"): subprocess.run(
            ["git", "-C", str(repo), "show", f"main:{name}"], capture_output=True,
            check=True).stdout for name in names if name}

    try:
        wrong = run_factory("publish", index_out, "--to", target,
                            env={**env, "HF_TOKEN": "hf_not_it"})
        assert wrong.exit == 1 and "commit failed" in wrong.stderr, wrong.stderr
        assert "hf_not_it" not in wrong.stdout + wrong.stderr
        assert len(commits()) == 1

        done = run_factory("publish", index_out, "--to", target, env=env)
        assert done.exit == 0, done.stdout + done.stderr
        assert len(commits()) == 2  # everything in one commit
        # what a loader of kernels needs to take them from an organisation's repo
        assert "trusted-publisher flag" in done.stdout and "trust_remote_code=True" in \
            done.stdout, done.stdout
        assert tree() == {name: data for name, data in published_tree(index_out).items()
                          if data is not None}
        preupload, commit = (f"POST /api/datasets/kwf-test/wheels/{step}/main"
                             for step in ("preupload", "commit"))
        assert [r for r in requests if r.startswith("POST")] == [preupload, preupload, commit]

        again = run_factory("publish", index_out, "--to", target, env=env)
        assert again.exit == 0 and "0 file(s) to send" in again.stdout
        assert len(commits()) == 2

        changed = tampered_copy(index_out, tmp_path / "changed")
        conflict = run_factory("publish", changed, "--to", target, env=env)
        assert conflict.exit == 1 and "holds other bytes under 4" in conflict.stderr
        assert len(commits()) == 2
    finally:
        server.shutdown()
        server.server_close()


def test_publish_to_a_hub_pull_request_ref(index_out: Path, tmp_path: Path) -> None:
    """hf://datasets/OWNER/NAME@refs/pr/1/PATH: the revision is the whole special ref (as
    huggingface_hub's own parser reads it), the folder the rest."""
    repo = tmp_path / "hub-dataset"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "--quiet", "--initial-branch=main"], check=True)
    subprocess.run([*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet",
                    "--allow-empty", "-m", "empty"], check=True)
    subprocess.run([*git, "update-ref", "refs/pr/1", "main"], check=True)
    server, requests = serve_hub({"kwf-test/wheels": repo}, write_token="hf_write_token")
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{server.server_port}", "HF_HOME": str(tmp_path / "hf"),
           "HF_TOKEN": "hf_write_token", "HF_HUB_DISABLE_TELEMETRY": "1"}
    try:
        done = run_factory("publish", index_out, "--to",
                           "hf://datasets/kwf-test/wheels@refs/pr/1/site", env=env)
        assert done.exit == 0, done.stdout + done.stderr
    finally:
        server.shutdown()
        server.server_close()
    assert "POST /api/datasets/kwf-test/wheels/commit/refs/pr/1" in requests

    def names(ref: str) -> list[str]:
        return subprocess.run([*git, "ls-tree", "-r", "--name-only", ref], capture_output=True,
                              text=True, check=True).stdout.split()

    assert names("main") == []  # the branch is untouched
    assert sorted(names("refs/pr/1")) == sorted(
        f"site/{name}" for name, data in published_tree(index_out).items() if data is not None)


@pytest.fixture
def served_site(index_out: Path, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """index_out (one release yanked) published to a folder and served over http, as a
    GitHub Pages site is."""
    assert main(["yank", "noarch-kernel", "2.0.0", "--reason", "broken on torch 2.11", "--out",
                 str(index_out)]) == 0
    site = tmp_path / "site"
    assert main(["publish", str(index_out), "--to", str(site)]) == 0
    server = subprocess.Popen([sys.executable, "-m", "factory", "serve", str(site), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = present(server.stdout).readline()
    yield site, line.split(" at ", 1)[1].split()[0]
    server.terminate()
    server.wait()


def test_merge_keeps_what_a_published_site_holds(served_site: tuple[Path, str],
                                                 tmp_path: Path) -> None:
    site, url = served_site
    job = tmp_path / "job"
    make_wheel(job / "files", "img2gray", "1.1.0+cu130torch211")
    update_index(job)

    merged = run_factory("index", "--merge", url, job, "--out", tmp_path / "merged")
    assert merged.exit == 0, merged.stdout + merged.stderr
    files = sorted(p.name for p in (tmp_path / "merged" / "files").glob("*.whl"))
    assert files == sorted([p.name for p in (site / "files").glob("*.whl")] +
                           ["img2gray-1.1.0+cu130torch211-cp39-abi3-linux_x86_64.whl"])
    for name in files:
        origin = site / "files" / name if (site / "files" / name).exists() else \
            job / "files" / name
        assert sha256(tmp_path / "merged" / "files" / name) == sha256(origin)
    page = json.loads((tmp_path / "merged" / "simple" / "noarch-kernel" / "index.json")
                      .read_text())
    assert [f["yanked"] for f in page["files"]] == ["broken on torch 2.11"]
    assert index_problems(tmp_path / "merged") == []
    # the pages of what was there before are the same, byte for byte, upload times too: each
    # wheel keeps the time it entered the published index
    for name in ("cu130torch212/simple/img2gray/index.html", "simple/tiny-rms/index.html",
                 "cu130torch212/simple/img2gray/index.json", "simple/tiny-rms/index.json"):
        assert (tmp_path / "merged" / name).read_bytes() == (site / name).read_bytes()

    tampered = tampered_copy(job, tmp_path / "tampered")
    shutil.copy(site / "files" / "img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl",
                tampered / "files")
    with zipfile.ZipFile(next((tampered / "files").glob("img2gray-1.0.0*.whl")), "a") as wheel:
        wheel.comment = b"rebuilt with other bytes"
    # a wheel no build of the job published (its manifest does not record it): refused as such
    stray = run_factory("index", "--merge", url, tampered, "--out", tmp_path / "refused")
    assert stray.exit == 1 and stray.stderr.count("\n") == 1, stray.stderr
    assert "img2gray-1.0.0+cu130torch211-cp39-abi3-linux_x86_64.whl: no build of " in \
        stray.stderr and "published it (its manifest does not record it); nothing was " \
        "merged" in stray.stderr
    assert not (tmp_path / "refused").exists()
    # indexed in the job, its other bytes meet the published ones: immutable
    update_index(tampered, force=True)
    refused = run_factory("index", "--merge", url, tampered, "--out", tmp_path / "refused")
    assert refused.exit == 1 and "published files are immutable" in refused.stderr
    assert not (tmp_path / "refused").exists()

    (site / "files" / "img2gray-1.0.0+cu130torch212-cp39-abi3-linux_x86_64.whl").write_bytes(
        b"not the listed bytes")
    corrupt = run_factory("index", "--merge", url, "--out", tmp_path / "corrupt")
    assert corrupt.exit == 1 and "does not have the sha256 its index" in corrupt.stderr
    assert not (tmp_path / "corrupt" / "files").exists()

    missing = run_factory("index", "--merge", url + "nothing-here/", "--out", tmp_path / "x")
    assert missing.exit == 2 and f"--merge: {url}nothing-here/ has no simple index" in \
        missing.stderr
