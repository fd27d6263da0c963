"""Kernel sources from git repositories, with plain git.

Each URL gets one bare repository in the cache. A rev is looked up with one `git ls-remote`
per URL and run (a monorepo with many kernels is asked once), then only that commit is fetched,
shallow where the server allows it. The refs last seen are saved, so `--offline` can resolve a
branch or tag from the cache.

A commit's tree is written out from git's objects directly (not `git archive`, whose
export-subst and export-ignore attributes would change the files), after every path and
symlink in it has been checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import defaults
from ..errors import OutputOverflow, ProcessError, SourceError, SourceRefused, TimedOut
from ..outputs.files import write_atomic
from ..system.cache import exclusive
from ..system.process import Child, Completed, bounded_run
from ..trust.safety import link_target_inside, unsafe_name
from .store import TreeStore

__all__ = ["COMMIT_ID", "GitFetcher"]

COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1"}
_NETWORK = ("could not resolve host", "unable to access", "connection refused", "timed out",
            "network is unreachable", "failed to connect")


@dataclass
class GitFetcher:
    cache: Path  # <cache>/sources
    offline: bool
    _refs: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def store(self) -> TreeStore:
        return TreeStore(self.cache / "trees")

    def repo(self, url: str) -> Path:
        """The bare repository that caches `url`."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40]
        digest = hashlib.sha256(url.encode()).hexdigest()[:12]
        return self.cache / "git" / f"{name.removesuffix('.git')}-{digest}.git"

    def resolve(self, url: str, rev: str) -> tuple[str, str | None]:
        """The commit `rev` names in `url`, and the full ref it came from (None for a commit id)."""
        if COMMIT_ID.fullmatch(rev):
            return rev, None
        refs = self.remote_refs(url)
        for name in (rev, f"refs/tags/{rev}", f"refs/heads/{rev}"):
            if name in refs:
                return refs[name], name
        hint = ""
        if re.fullmatch(r"[0-9a-f]{4,39}", rev):
            hint = "; give a commit as its full 40-hex id"
        tags = sorted(n.removeprefix("refs/tags/") for n in refs if n.startswith("refs/tags/"))
        known = f" (tags: {', '.join(tags[-8:])})" if tags else ""
        raise SourceRefused(f"'{rev}' is not a branch or tag of {url}{known}{hint}")

    def remote_refs(self, url: str) -> dict[str, str]:
        """Every ref of the remote, tags peeled to their commits."""
        if url in self._refs:
            return self._refs[url]
        repo = self.repo(url)
        saved = repo / "kwf-remote-refs.json"
        if self.offline:
            if not saved.is_file():
                raise SourceError(f"{url} has never been fetched, so --offline cannot resolve it")
            refs = {str(name): str(commit)
                    for name, commit in json.loads(saved.read_text())["refs"].items()}
        else:
            output = self._run(["ls-remote", url], None, network=url)
            refs = {}
            for line in output.splitlines():
                commit, _, name = line.partition("\t")
                if name.endswith("^{}"):
                    refs[name[:-3]] = commit  # an annotated tag: the commit it points at
                else:
                    refs.setdefault(name, commit)
            with exclusive(repo):
                self._init(repo)
                write_atomic(saved, json.dumps({"url": url, "time": int(time.time()),
                                                "refs": refs}, indent=1, sort_keys=True))
        self._refs[url] = refs
        return refs

    def tags_at(self, url: str, commit: str) -> list[str]:
        """The remote's tags that point at `commit` (best effort: none when it is unreachable)."""
        try:
            refs = self.remote_refs(url)
        except SourceError:
            return []
        return sorted(n.removeprefix("refs/tags/") for n, c in refs.items()
                      if c == commit and n.startswith("refs/tags/"))

    def tree(self, url: str, commit: str, ref: str | None, subdir: str | None) -> tuple[Path, int]:
        """The kernel's files at `commit` (read-only, in the cache) and the commit's time."""
        found = self.store.get("git", commit, subdir)
        if found is not None:
            return found[0], int(found[1]["time"])
        repo = self.repo(url)
        with exclusive(repo):
            self._init(repo)
            self._fetch(repo, url, commit, ref)
            when = int(self._run(["show", "-s", "--format=%ct", commit], repo).strip())
            entries = self._listing(repo, url, commit, subdir)
            folder = self.store.put("git", commit, subdir, {"url": url, "time": when},
                                    lambda target: self._write(repo, entries, target))
        return folder, when

    def _init(self, repo: Path) -> None:
        if not (repo / "HEAD").is_file():
            repo.parent.mkdir(parents=True, exist_ok=True)
            self._run(["init", "--quiet", "--bare", str(repo)], None)

    def _has(self, repo: Path, commit: str) -> bool:
        return _git(["cat-file", "-e", f"{commit}^{{commit}}"], repo).returncode == 0

    def _fetch(self, repo: Path, url: str, commit: str, ref: str | None) -> None:
        if not self._has(repo, commit):
            if self.offline:
                raise SourceError(f"commit {commit[:12]} of {url} is not in the cache, so "
                                  "--offline cannot build it")
            # One commit, shallow, where the server allows fetching by id (GitHub, GitLab, git
            # 2.x over file://); else the ref by name; else everything.
            attempts = [["fetch", "--quiet", "--depth", "1", "--no-tags", url, commit]]
            if ref:
                attempts.append(["fetch", "--quiet", "--depth", "1", "--no-tags", url, ref])
            attempts.append(["fetch", "--quiet", "--no-tags", url,
                             "+refs/heads/*:refs/kwf/heads/*", "+refs/tags/*:refs/kwf/tags/*"])
            if (repo / "shallow").is_file():
                attempts[-1].insert(2, "--unshallow")
            problem = None
            for argv in attempts:
                try:
                    self._run(argv, repo, network=url)
                except SourceError as error:
                    problem = error
                if self._has(repo, commit):
                    break
            else:
                raise problem or SourceError(f"{url} has no commit {commit}")
        # A ref of its own keeps the commit through git gc.
        self._run(["update-ref", f"refs/kwf/pins/{commit}", commit], repo)

    def _listing(self, repo: Path, url: str, commit: str,
                 subdir: str | None) -> list[tuple[str, str, str]]:
        """(mode, object id, path) of every file under subdir, each checked before any is
        written; submodules are left out."""
        treeish = f"{commit}:{subdir}" if subdir else f"{commit}^{{tree}}"
        kind = _git(["cat-file", "-t", treeish], repo)
        if kind.returncode != 0 or kind.stdout.strip() != "tree":
            raise SourceRefused(f"commit {commit[:12]} of {url} has no folder '{subdir}'")
        output = self._run(["ls-tree", "-r", "-z", "--full-tree", treeish], repo)
        entries = []
        for record in output.split("\0"):
            if not record:
                continue
            meta, path = record.split("\t", 1)
            mode, kind_name, oid = meta.split()
            if kind_name == "commit":
                continue  # a submodule: its files are not part of this repository
            problem = unsafe_name(path)
            if problem:
                raise SourceRefused(problem)
            if mode == "120000":
                target = self._run(["cat-file", "blob", oid], repo)
                if not link_target_inside(path, target):
                    raise SourceRefused(f"the symlink {path} -> {target} leads outside the kernel "
                                      "repo; it is refused")
            entries.append((mode, oid, path))
        return entries

    def _write(self, repo: Path, entries: list[tuple[str, str, str]], target: Path) -> None:
        """The listed blobs, read in one `git cat-file --batch`, written under target; git
        has the fetch's time limit for all of them, and no blob is read past its size."""
        reader = Child(_command(["cat-file", "--batch"], repo), env=_env(), stdin=True,
                       what="git cat-file")
        timer = reader.expire_after(defaults.GIT_FETCH_TIMEOUT)
        asked, answers = reader.popen.stdin, reader.popen.stdout
        assert asked is not None and answers is not None
        try:
            for mode, oid, path in entries:
                asked.write(f"{oid}\n".encode())
                asked.flush()
                header = answers.readline(200).split()
                if len(header) != 3 or not header[2].isdigit():
                    raise SourceError(f"git cat-file gave no object for {path} (it was stopped "
                                      f"after {defaults.GIT_FETCH_TIMEOUT} s, or the "
                                      "repository is damaged)")
                size = int(header[2])
                data = answers.read(size)
                answers.read(1)
                destination = target / path
                destination.parent.mkdir(parents=True, exist_ok=True)
                if mode == "120000":
                    os.symlink(data.decode(), destination)
                    continue
                fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o755 if mode == "100755" else 0o644)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
        finally:
            timer.cancel()
            reader.close()

    def _run(self, argv: list[str], repo: Path | None, network: str | None = None) -> str:
        done = _git(argv, repo)
        if done.returncode == 0:
            return str(done.stdout)
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        message = next((line for line in lines if line.startswith("fatal:")),
                       lines[-1] if lines else f"exit {done.returncode}")
        if network is not None:
            if any(sign in done.stderr.lower() for sign in _NETWORK):
                raise SourceError(f"cannot reach {network}: {message}")
            raise SourceRefused(f"git {argv[0]} {network} failed: {message}")
        raise SourceError(f"git {argv[0]} failed: {message}")


def _command(argv: list[str], repo: Path | None) -> list[str]:
    return ["git"] + (["-C", str(repo)] if repo else []) + argv


def _env() -> dict[str, str]:
    """No prompts (a missing credential fails instead of hanging), C messages, no system
    config; the user's own git config and credential helpers still apply."""
    return {**os.environ, **_ENV}


def _git(argv: list[str], repo: Path | None) -> Completed[str]:
    """Run git, its output captured as text; the caller judges the exit status. A clone or
    fetch has GIT_FETCH_TIMEOUT, any other command TOOL_TIMEOUT; git hanging past it, or
    printing more than LOG_OUTPUT_LIMIT, is a SourceError."""
    limit = defaults.GIT_FETCH_TIMEOUT if argv[0] in ("fetch", "clone", "ls-remote") \
        else defaults.TOOL_TIMEOUT
    try:
        return bounded_run(_command(argv, repo), limit, defaults.LOG_OUTPUT_LIMIT, env=_env(),
                           what=f"git {argv[0]}")
    except (TimedOut, OutputOverflow) as exc:
        raise SourceError(str(exc)) from None
    except ProcessError as exc:
        raise SourceError(f"{exc}; git is needed to fetch kernel sources") from None
