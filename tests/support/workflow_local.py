"""Run a GitHub Actions workflow's jobs, or an action's steps, on this machine: its `run:`
scripts as the runner runs them (bash -eo pipefail, env: evaluated, $GITHUB_OUTPUT read back),
its expressions evaluated, jobs in `needs` order with their `if:` and strategy matrix, each
job in a fresh copy of the repository, and the artifact actions carrying folders between jobs.
The steps that set a machine up (checkout, setup-python, cache) do nothing here: the
repository copy and the factory on PATH stand for them. An action this does not know fails.

Written for the tests (no maintained library runs workflows without docker and a network:
nektos/act pulls runner images), and only as far as the factory's own workflows need."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Run", "evaluate", "substitute"]

_TOKEN = re.compile(r"""\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>\d+(?:\.\d+)?)
    |(?P<op>&&|\|\||==|!=|>=|<=|!|>|<|\(|\)|,)
    |(?P<name>[A-Za-z_][\w-]*(?:\.[\w*-]+|\[[^\]]*\])*))""", re.X)
_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.S)


def _lookup(contexts: Mapping[str, Any], path: str) -> Any:
    value: Any = contexts
    for part in re.findall(r"[\w*-]+|\['[^']*'\]", path):
        key = part[2:-2] if part.startswith("[") else part
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _format(template: str, *args: Any) -> str:
    return re.sub(r"\{(\d+)\}", lambda match: "" if args[int(match[1])] is None
                  else str(args[int(match[1])]), template)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "format": _format, "fromJSON": json.loads, "toJSON": json.dumps,
    "always": lambda: True, "cancelled": lambda: False, "success": lambda: True,
    "failure": lambda: False, "hashFiles": lambda *patterns: "0" * 64,
    "contains": lambda haystack, needle: needle in (haystack or ""),
    "startsWith": lambda text, prefix: str(text).startswith(prefix),
}


def evaluate(expression: str, contexts: Mapping[str, Any]) -> Any:
    """One expression (without `${{ }}`), evaluated as GitHub does for what these workflows
    use: && and || give an operand, ! negates, comparisons, the functions above."""
    python, position = [], 0
    while position < len(expression.rstrip()):
        match = _TOKEN.match(expression, position)
        assert match, f"cannot read the expression at: {expression[position:]!r}"
        position = match.end()
        if match["string"]:
            python.append(repr(match["string"][1:-1].replace("''", "'")))
        elif match["number"]:
            python.append(match["number"])
        elif match["op"]:
            python.append({"&&": " and ", "||": " or ", "!": " not "}.get(match["op"],
                                                                        match["op"]))
        elif expression[position:].lstrip().startswith("("):
            python.append(f"_f[{match['name']!r}]")
        elif match["name"] in ("true", "false", "null"):
            python.append({"true": "True", "false": "False", "null": "None"}[match["name"]])
        else:
            python.append(f"_get({match['name']!r})")
    return eval("".join(python), {"__builtins__": {}},  # the expression is the tests' own
                {"_f": FUNCTIONS, "_get": lambda path: _lookup(contexts, path)})


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def substitute(value: Any, contexts: Mapping[str, Any]) -> Any:
    """A workflow value with its `${{ }}` expressions evaluated: a value that is one
    expression keeps the expression's type, text around expressions makes a string."""
    if isinstance(value, dict):
        return {key: substitute(item, contexts) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, contexts) for item in value]
    if not isinstance(value, str):
        return value
    whole = _EXPRESSION.fullmatch(value.strip())
    if whole:
        return evaluate(whole[1], contexts)
    return _EXPRESSION.sub(lambda match: _text(evaluate(match[1], contexts)), value)


def _condition(step: Mapping[str, Any], contexts: Mapping[str, Any]) -> bool:
    if "if" not in step:
        return True
    text = str(step["if"]).strip()
    expression = _EXPRESSION.fullmatch(text)
    return bool(evaluate(expression[1] if expression else text, contexts))


@dataclass
class Run:
    """One workflow run: the repository every job starts from, the environment its scripts
    get, and what the artifact actions hold."""

    repository: Path
    scratch: Path
    env: dict[str, str]
    github: dict[str, Any]
    actions: dict[str, Path] = field(default_factory=dict)  # local `uses:` -> action.yml
    # local actions used only to install the factory, which is on PATH already
    installed: tuple[str, ...] = ("./.kernel-wheel-factory",)
    artifacts: dict[str, Path] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    _count: int = 0

    def _workspace(self) -> Path:
        self._count += 1
        workspace = self.scratch / f"job-{self._count}"
        shutil.copytree(self.repository, workspace, symlinks=True)
        return workspace

    def _script(self, script: str, env: dict[str, Any], workspace: Path) -> dict[str, str]:
        output = workspace.parent / f"{workspace.name}-output"
        output.write_text("")
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                              cwd=workspace, capture_output=True, text=True,
                              env={**self.env, **{key: _text(value) for key, value in
                                                  env.items()}, "GITHUB_OUTPUT": str(output)})
        self.logs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        outputs = {}
        for line in output.read_text().splitlines():
            key, _, value = line.partition("=")
            outputs[key] = value
        return outputs

    def _uses(self, uses: str, given: dict[str, Any], workspace: Path,
              contexts: dict[str, Any]) -> None:
        name = uses.split("@")[0]
        if name in ("actions/checkout", "actions/setup-python", "actions/cache",
                    "actions/cache/restore", "actions/cache/save", "actions/deploy-pages"):
            return
        if name in self.installed:
            assert given.get("install-only") == "true", given
        elif name in self.actions:
            self.action(self.actions[name], given, workspace, contexts["env"])
        elif name in ("actions/upload-artifact", "actions/upload-pages-artifact"):
            source = workspace / given["path"]
            if not source.exists():
                assert given.get("if-no-files-found") in ("ignore", "warn"), source
                return
            self.artifacts[given.get("name", "github-pages")] = self._keep(source)
        elif name == "actions/download-artifact":
            target = workspace / given.get("path", ".")
            if "name" in given:
                shutil.copytree(self.artifacts[given["name"]], target, dirs_exist_ok=True)
            for artifact, folder in self.artifacts.items():
                if "pattern" in given and fnmatch.fnmatchcase(artifact, given["pattern"]):
                    shutil.copytree(folder, target / artifact, dirs_exist_ok=True)
        else:
            raise AssertionError(f"no stand-in for the action {uses}")

    def _keep(self, source: Path) -> Path:
        self._count += 1
        kept = self.scratch / f"artifact-{self._count}"
        shutil.copytree(source, kept, symlinks=True)
        return kept

    def _steps(self, steps: list[dict[str, Any]], contexts: dict[str, Any],
               workspace: Path) -> None:
        for step in steps:
            if not _condition(step, contexts):
                continue
            env = substitute({**contexts["env"], **step.get("env", {})}, contexts)
            if "uses" in step:
                self._uses(step["uses"], substitute(step.get("with", {}), contexts), workspace,
                           {**contexts, "env": env})
                continue
            outputs = self._script(step["run"], env, workspace)
            if "id" in step:
                contexts["steps"][step["id"]] = {"outputs": outputs}

    def action(self, path: Path, given: dict[str, Any], workspace: Path,
               env: dict[str, Any] | None = None) -> None:
        """A composite action's steps, with `given` for its inputs."""
        action = yaml.safe_load(path.read_text())
        inputs = {name: _text(given.get(name, spec.get("default", "")))
                  for name, spec in action.get("inputs", {}).items()}
        contexts = {"inputs": inputs, "github": {**self.github, "action_path": str(path.parent)},
                    "env": dict(env or {}), "steps": {}}
        self._steps(action["runs"]["steps"], contexts, workspace)

    def workflow(self, path: Path, inputs: dict[str, Any],
                 secrets: dict[str, str] | None = None) -> dict[str, str]:
        """Every job of a workflow called with `inputs`; each job's result."""
        workflow = yaml.safe_load(path.read_text())
        trigger = workflow.get("on", workflow.get(True))
        declared = trigger["workflow_call"].get("inputs", {})
        unknown = set(inputs) - set(declared)
        assert not unknown, f"the workflow declares no input {unknown}"
        given = {name: inputs.get(name, spec.get("default")) for name, spec in declared.items()}
        # the object cache's key as a caller's secret: the suite's, whose objects it shares
        secrets = {"object-key": os.environ["KERNEL_WHEEL_FACTORY_OBJECT_KEY"], **(secrets or {})}
        base = {"inputs": given, "github": self.github, "secrets": secrets, "vars": {},
                "job": {"workflow_repository": "owner/kernel-wheel-factory",
                        "workflow_sha": "0" * 40}}
        base["env"] = substitute(workflow.get("env", {}), base)
        results: dict[str, str] = {}
        needs_of = {name: [job["needs"]] if isinstance(job.get("needs"), str)
                    else job.get("needs", []) for name, job in workflow["jobs"].items()}
        outputs: dict[str, dict[str, str]] = {}
        while len(results) < len(workflow["jobs"]):
            for name, job in workflow["jobs"].items():
                if name in results or any(need not in results for need in needs_of[name]):
                    continue
                needs = {need: {"result": results[need], "outputs": outputs.get(need, {})}
                         for need in needs_of[name]}
                contexts = {**base, "needs": needs}
                condition = _condition(job, contexts) if "if" in job else all(
                    need["result"] == "success" for need in needs.values())
                if not condition:
                    results[name] = "skipped"
                    continue
                matrix = substitute(job.get("strategy", {}).get("matrix"), contexts)
                entries = matrix["include"] if matrix else [{}]
                for entry in entries:
                    job_contexts = {**contexts, "matrix": entry, "steps": {}}
                    job_contexts["env"] = {**base["env"],
                                           **substitute(job.get("env", {}), job_contexts)}
                    self._steps(job["steps"], job_contexts, self._workspace())
                    outputs[name] = {key: _text(substitute(value, job_contexts))
                                     for key, value in job.get("outputs", {}).items()}
                results[name] = "success"
        return results


def runner_env(path: str, cache: Path, home: Path) -> dict[str, str]:
    """What a runner's scripts see: PATH (the factory first), a home, the factory's cache."""
    return {"PATH": path, "HOME": str(home), "KERNEL_WHEEL_FACTORY_CACHE": str(cache),
            "LANG": "C.UTF-8", **{key: value for key, value in os.environ.items()
                                   if key in ("SSL_CERT_FILE", "UV_CACHE_DIR")}}
