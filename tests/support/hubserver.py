"""A stand-in for the Hugging Face Hub on 127.0.0.1, serving git repositories as model repos.

It answers the endpoints huggingface_hub's snapshot_download, model_info and list_repo_refs
use (revision info, recursive tree listing, refs, resolve with HEAD and GET), with the Hub's
headers and error codes, so the real client code runs against it. Model and dataset repos are
both served, at branches, tags and special refs such as refs/pr/1 (which clients send
percent-encoded as one path segment). With a write token, create_commit works too: preupload
(every file "regular") and commit, which writes a real git commit onto the branch or ref.
Every request is recorded.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class HubRepos:
    def __init__(self, repos: dict[str, Path]) -> None:
        self.repos = repos  # repo id -> a git repository

    def git(self, repo: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", "-C", str(self.repos[repo]), *args], capture_output=True)

    def commit(self, repo: str, revision: str) -> str | None:
        for name in (revision, f"refs/heads/{revision}", f"refs/tags/{revision}"):
            done = self.git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
            if done.returncode == 0:
                return str(done.stdout.decode().strip())
        return None

    def files(self, repo: str, commit: str) -> list[tuple[str, str, int]]:
        """(path, blob id, size) of every file at the commit."""
        done = self.git(repo, "ls-tree", "-r", "-l", "-z", commit)
        entries = []
        for record in done.stdout.decode().split("\0"):
            if record:
                meta, path = record.split("\t", 1)
                _, kind, oid, size = meta.split()
                if kind == "blob":
                    entries.append((path, oid, int(size)))
        return entries

    def commit_files(self, repo: str, branch: str, files: dict[str, bytes],
                     message: str) -> str:
        """A commit on `branch` adding `files` to its tree, made with git's plumbing."""
        parent = self.commit(repo, branch)
        ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
        with tempfile.TemporaryDirectory() as scratch:
            env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index"),
                   "GIT_AUTHOR_NAME": "hub", "GIT_AUTHOR_EMAIL": "hub@127.0.0.1",
                   "GIT_COMMITTER_NAME": "hub", "GIT_COMMITTER_EMAIL": "hub@127.0.0.1"}

            def git(*args: str, data: bytes | None = None) -> str:
                return subprocess.run(["git", "-C", str(self.repos[repo]), *args], input=data,
                                      capture_output=True, check=True, env=env).stdout.decode()

            if parent:
                git("read-tree", parent)
            for path, data in sorted(files.items()):
                blob = git("hash-object", "-w", "--stdin", data=data).strip()
                git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
            tree = git("write-tree").strip()
            commit = git("commit-tree", tree, *(["-p", parent] if parent else []), "-m",
                         message).strip()
            git("update-ref", ref, commit)
        return commit

    def refs(self, repo: str, prefix: str) -> list[dict[str, str]]:
        done = self.git(repo, "for-each-ref", "--format=%(refname) %(*objectname) %(objectname)",
                        prefix)
        refs = []
        for line in done.stdout.decode().splitlines():
            name, *ids = line.split()
            refs.append({"name": name.removeprefix(prefix), "ref": name, "targetCommit": ids[0]})
        return refs


def _segments(raw: str) -> tuple[str, list[str]]:
    """A request's decoded path, and its segments each decoded on its own (a revision such as
    refs/pr/1 comes as one segment, refs%2Fpr%2F1)."""
    path = urlsplit(raw).path
    return unquote(path), [unquote(part) for part in path.strip("/").split("/")]


def serve(repos: dict[str, Path], write_token: str | None = None,
          ) -> tuple[ThreadingHTTPServer, list[str]]:
    """Start the server in a thread; the caller shuts it down. Returns it and its request log."""
    hub = HubRepos(repos)
    lock = threading.Lock()
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.answer(head=True)

        def do_GET(self) -> None:
            self.answer(head=False)

        def do_POST(self) -> None:
            path, parts = _segments(self.path)
            requests.append(f"POST {path}")
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            repo, rest = "/".join(parts[2:4]), parts[4:]
            if parts[:2] not in (["api", "models"], ["api", "datasets"]) or len(rest) != 2 \
                    or rest[0] not in ("preupload", "commit"):
                return self.fail("EntryNotFound", f"no such endpoint {path}", False)
            if repo not in hub.repos:
                return self.fail("RepoNotFound", f"Repository {repo} not found", False)
            if write_token is None or \
                    self.headers.get("Authorization") != f"Bearer {write_token}":
                return self.send(401, b'{"error": "Invalid credentials"}',
                                 {"Content-Type": "application/json",
                                  "X-Error-Message": "Invalid credentials in Authorization"},
                                 False)
            if rest[0] == "preupload":
                files = json.loads(body)["files"]
                answer: dict[str, object] = {"files": [{"path": f["path"], "uploadMode": "regular",
                                     "shouldIgnore": False} for f in files]}
                return self.send(200, json.dumps(answer).encode(),
                                 {"Content-Type": "application/json"}, False)
            items = [json.loads(line) for line in body.splitlines() if line.strip()]
            header = next(i["value"] for i in items if i["key"] == "header")
            files = {i["value"]["path"]: base64.b64decode(i["value"]["content"])
                     for i in items if i["key"] == "file"}
            if len(files) != len(items) - 1:
                return self.send(400, b'{"error": "only regular files are served here"}',
                                 {"Content-Type": "application/json"}, False)
            with lock:
                commit = hub.commit_files(repo, rest[1], files, header["summary"])
            answer = {"commitUrl": f"http://127.0.0.1/{repo}/commit/{commit}",
                      "commitOid": commit}
            return self.send(200, json.dumps(answer).encode(),
                             {"Content-Type": "application/json"}, False)

        def send(self, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def fail(self, code: str, message: str, head: bool) -> None:
            body = json.dumps({"error": message}).encode()
            self.send(404, body, {"Content-Type": "application/json", "X-Error-Code": code,
                                  "X-Error-Message": message}, head)

        def answer(self, head: bool) -> None:
            path, parts = _segments(self.path)
            requests.append(f"{self.command} {path}")
            api = parts[:2] in (["api", "models"], ["api", "datasets"])
            repo = "/".join(parts[2:4] if api else parts[0:2])
            rest = parts[4:] if api else parts[2:]
            if repo not in hub.repos:
                return self.fail("RepoNotFound", f"Repository {repo} not found", head)
            if api and rest == ["refs"]:
                body: object = {"branches": hub.refs(repo, "refs/heads/"),
                        "tags": hub.refs(repo, "refs/tags/"), "converts": []}
                return self.send(200, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, head)
            if len(rest) < 2 or rest[0] not in (("revision", "tree") if api else ("resolve",)):
                return self.fail("EntryNotFound", f"no such endpoint {path}", head)
            commit = hub.commit(repo, rest[1])
            if commit is None:
                return self.fail("RevisionNotFound", f"Invalid rev id: {rest[1]}", head)
            files = hub.files(repo, commit)
            if api and rest[0] == "revision":
                when = int(hub.git(repo, "show", "-s", "--format=%ct", commit).stdout)
                body = {"id": repo, "modelId": repo, "sha": commit, "private": False,
                        "lastModified": datetime.fromtimestamp(when, UTC).strftime(
                            "%Y-%m-%dT%H:%M:%S.000Z"),
                        "siblings": [{"rfilename": name} for name, _, _ in files], "tags": []}
                return self.send(200, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, head)
            if api:
                # the tree under a folder, as the Hub lists it; a folder that is not there
                # is the Hub's EntryNotFound
                folder = "/".join(rest[2:])
                if folder:
                    files = [f for f in files if f[0].startswith(folder + "/")]
                    if not files:
                        return self.fail("EntryNotFound", f"{folder} does not exist", head)
                folders = sorted(f for f in {str(Path(name).parent) for name, _, _ in files}
                                 if f != "." and (not folder or f.startswith(folder + "/")))
                listed: list[dict[str, object]] = [
                    {"type": "directory", "oid": "0" * 40, "size": 0, "path": folder}
                    for folder in folders]
                listed += [{"type": "file", "oid": oid, "size": size, "path": name}
                           for name, oid, size in files]
                body = listed
                return self.send(200, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"}, head)
            wanted = "/".join(rest[2:])
            for name, oid, _ in files:
                if name == wanted:
                    data = hub.git(repo, "cat-file", "blob", oid).stdout
                    return self.send(200, data, {"X-Repo-Commit": commit, "ETag": f'"{oid}"',
                                                 "Content-Type": "application/octet-stream"},
                                     head)
            return self.fail("EntryNotFound", f"{wanted} does not exist at {commit}", head)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, requests
