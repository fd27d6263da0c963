"""Kernel sources from the Hugging Face Hub, through huggingface_hub.

huggingface_hub does the talking: HF_ENDPOINT, HF_TOKEN (or a stored login), its cache
(HF_HOME / HF_HUB_CACHE) and HF_HUB_OFFLINE all work as they do for any other tool. A kernel
repo's `build/` folder (the variants kernel-builder compiled) is never downloaded: the factory
builds from the source next to it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ..errors import SourceError, SourceRefused
from ..hub import hub_errors
from ..outputs.files import write_atomic
from ..trust.safety import is_inside, unsafe_name
from .store import TreeStore

__all__ = ["HubFetcher"]

IGNORED = ["build/*", ".gitattributes"]


@dataclass
class HubFetcher:
    cache: Path  # <cache>/sources
    offline: bool

    @property
    def is_offline(self) -> bool:
        from huggingface_hub import constants

        return self.offline or bool(constants.HF_HUB_OFFLINE)

    def fetch(self, repo: str, revision: str, subdir: str | None) -> tuple[str, Path, int | None]:
        """The commit `revision` names, the kernel's read-only tree and the commit's time (None
        when it is not known offline)."""
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]

        disable_progress_bars()
        offline = self.is_offline
        patterns = [f"{subdir}/*"] if subdir else None
        with _errors(repo, revision):
            snapshot = Path(snapshot_download(repo, revision=revision, local_files_only=offline,
                                              allow_patterns=patterns, ignore_patterns=IGNORED))
        commit = snapshot.name
        store = TreeStore(self.cache / "trees")
        found = store.get("hub", commit, subdir)
        if found is not None and (found[1].get("time") is not None or offline):
            return commit, found[0], found[1].get("time")
        when = None if offline else self._commit_time(repo, commit)
        if found is not None:  # made while the Hub could not be asked: its time is known now
            store.set_meta("hub", commit, subdir, {**found[1], "time": when})
            return commit, found[0], when
        origin = snapshot / subdir if subdir else snapshot
        if not origin.is_dir():
            raise SourceRefused(f"revision {revision} of {repo} has no folder '{subdir}'")
        files = _listing(origin, snapshot.parent.parent)
        folder = store.put("hub", commit, subdir, {"repo": repo, "time": when},
                           lambda target: _copy(origin, files, target))
        return commit, folder, when

    @staticmethod
    def _commit_time(repo: str, commit: str) -> int | None:
        """When the commit was made; None when the Hub cannot be asked."""
        from huggingface_hub import HfApi

        try:
            with _errors(repo, commit):
                info = HfApi().model_info(repo, revision=commit)
        except SourceError:
            return None
        return int(info.last_modified.timestamp()) if info.last_modified else None

    def tags_at(self, repo: str, commit: str) -> list[str]:
        """The repo's tags on `commit`; offline, the ones seen the last time it was online."""
        saved = self.cache / "hub" / f"{repo.replace('/', '--')}.refs.json"
        tags = json.loads(saved.read_text())["tags"] if saved.is_file() else {}
        if not self.is_offline:
            from huggingface_hub import HfApi

            try:
                with _errors(repo, commit):
                    refs = HfApi().list_repo_refs(repo)
            except SourceError:
                refs = None  # unreachable: the tags seen last time
            if refs is not None:
                tags = {tag.name: tag.target_commit for tag in refs.tags}
                saved.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(saved, json.dumps({"repo": repo, "time": int(time.time()),
                                                "tags": tags}, indent=1, sort_keys=True))
        return sorted(name for name, target in tags.items() if target == commit)


def _errors(repo: str, revision: str) -> AbstractContextManager[None]:
    """A repo or revision that is not there is bad input; the rest is a fetch failure."""
    return hub_errors(repo, revision, where=f"{repo} @ {revision}", refused=SourceRefused,
                      failed=SourceError)


def _listing(origin: Path, storage: Path) -> list[str]:
    """The snapshot's files under origin, each name checked, each link (the cache's own, into
    its blobs folder) checked to stay in the repo's storage folder, before anything is copied."""
    real_storage = os.path.realpath(storage)
    files = []
    for folder, dirs, names in os.walk(origin):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            relative = path.relative_to(origin).as_posix()
            problem = unsafe_name(relative)
            if problem:
                raise SourceRefused(problem)
            if not is_inside(os.path.realpath(path), real_storage):
                raise SourceRefused(f"{relative} in the Hugging Face cache leads outside it")
            files.append(relative)
    return files


def _copy(origin: Path, files: list[str], target: Path) -> None:
    for relative in files:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin / relative, destination)
