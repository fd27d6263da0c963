"""matrix.yaml's name templates: the cells' labels (label:, stable-label:) and dist-name:."""

from __future__ import annotations

import re
import string

from ..model import distribution_name, is_project_name
from ..nodes import Node

__all__ = ["LABEL_FIELDS", "MAX_LABEL_TEMPLATE", "STABLE_LABEL_FIELDS", "check_label_template",
           "read_dist_name"]


LABEL_FIELDS = ("cuda", "torch", "cuda_major", "cuda_minor", "torch_major", "torch_minor")


# A stable-ABI wheel's label names the torch it was built against and its CUDA major only.
STABLE_LABEL_FIELDS = ("torch", "cuda_major", "torch_major", "torch_minor")

_LOCAL_LABEL = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")


def read_dist_name(node: Node) -> str:
    """dist-name: a distribution name, or a template of one with {name} standing for the
    kernel's (kwf-{name}); it names the wheel, never the package it imports."""
    template = node.nonempty_str()
    if any(name != "name" or spec or conversion
           for name, spec, conversion in _placeholders(node, template, "name")):
        raise node.error("the only placeholder is {name}, the kernel's own name "
                         "(e.g. kwf-{name})")
    if not is_project_name(distribution_name(template, "a")):
        raise node.error(f"'{template}' does not give a distribution name: letters, digits, "
                         "'.', '_' and '-', starting and ending with a letter or digit")
    return template


MAX_LABEL_TEMPLATE = 64


def _placeholders(node: Node, template: str, what: str) -> list[tuple[str, str, str | None]]:
    """A template's {placeholders}: (name, format spec, conversion) each."""
    try:
        return [(name, spec or "", conversion) for _, name, spec, conversion
                in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise node.error(f"invalid {what} template: {exc}") from None


def check_label_template(node: Node, known: tuple[str, ...] = LABEL_FIELDS) -> None:
    template = node.str()
    parsed = _placeholders(node, template, "label")
    if len(template) > MAX_LABEL_TEMPLATE:
        raise node.error(f"the label template is {len(template)} characters long; at most "
                         f"{MAX_LABEL_TEMPLATE}")
    if any(spec or conversion for _, spec, conversion in parsed):
        raise node.error("placeholders take no format spec or conversion: write {cuda}, not "
                         "{cuda:>5} or {cuda!r}")
    fields = [name for name, _, _ in parsed]
    for name in fields:
        if name in LABEL_FIELDS and name not in known:
            raise node.error(f"'{{{name}}}' has no single value for a stable-ABI wheel, which "
                             "serves every CUDA minor of its major: use {cuda_major}")
        if name not in known:
            raise node.error(f"unknown placeholder '{{{name}}}' in the label "
                             f"(known: {', '.join('{' + f + '}' for f in known)})")
