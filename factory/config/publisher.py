"""The publisher whose CI identity signs an index's attestations, as a matrix pins it:

    publisher: {github: OWNER/REPO, workflow: release.yml}
    publisher: {gitlab: NAMESPACE/PROJECT, workflow: .gitlab-ci.yml}

`workflow` is the file of the workflow that runs `factory attest` (the caller's, where it
calls the reusable workflow)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .nodes import Node

__all__ = ["Publisher", "read_publisher"]

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+")
_WORKFLOW = re.compile(r"[A-Za-z0-9_./-]+\.ya?ml")


@dataclass(frozen=True)
class Publisher:
    kind: str  # "GitHub" or "GitLab", as PEP 740 names them
    repository: str
    workflow: str

    def describe(self) -> str:
        host = "github.com" if self.kind == "GitHub" else "gitlab.com"
        return f"{host}/{self.repository} ({self.workflow})"

    def to_json(self) -> dict[str, Any]:
        """As a PEP 740 attestation bundle names its publisher."""
        if self.kind == "GitHub":
            return {"kind": "GitHub", "repository": self.repository, "workflow": self.workflow,
                    "environment": None}
        return {"kind": "GitLab", "repository": self.repository,
                "workflow_filepath": self.workflow, "environment": None}

    @staticmethod
    def from_json(data: Any) -> Publisher | None:
        """A bundle's publisher, where it is one of these kinds."""
        if not isinstance(data, dict):
            return None
        kind, repository = data.get("kind"), data.get("repository")
        workflow = data.get("workflow") if kind == "GitHub" else data.get("workflow_filepath")
        if kind not in ("GitHub", "GitLab") or not isinstance(repository, str) or \
                not isinstance(workflow, str):
            return None
        return Publisher(kind, repository, workflow)


def read_publisher(node: Node) -> Publisher:
    fields = node.table(["github", "gitlab", "workflow"], required=["workflow"])
    hosts = [name for name in ("github", "gitlab") if name in fields]
    if len(hosts) != 1:
        raise node.error("name one of github: OWNER/REPO or gitlab: NAMESPACE/PROJECT")
    repository = fields[hosts[0]].nonempty_str()
    if not _REPOSITORY.fullmatch(repository):
        raise fields[hosts[0]].error(f"'{repository}' is not OWNER/REPO")
    workflow = fields["workflow"].nonempty_str()
    if not _WORKFLOW.fullmatch(workflow) or ".." in workflow:
        raise fields["workflow"].error(f"'{workflow}' is not a workflow file (release.yml)")
    return Publisher("GitHub" if hosts[0] == "github" else "GitLab", repository, workflow)
