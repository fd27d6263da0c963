"""matrix.yaml's tests: which of a kernel's own tests prove its wheel, and with what."""

from __future__ import annotations

from pathlib import PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement

from ...values.units import parse_duration
from ..model import TestSelection
from ..nodes import Node
from .fields import nonempty_list, read_project_name

__all__ = ["read_tests"]


_KEYWORD_LIMIT = 1000  # characters of a -k expression: a handful of names and operators

_TEST_KEYS = ("paths", "keyword", "timeout", "budget", "requires", "without", "required")


# What the matrix's own tests: table sets for every kernel; which tests, only a kernel's.
_EVERY_KERNEL_TEST_KEYS = ("timeout", "budget", "requires", "without", "required")


def read_tests(node: Node, inherited: TestSelection, every_kernel: bool = False) -> TestSelection:
    """tests: {paths: [...], keyword: EXPR, timeout: 30m, budget: 10m, requires: [...],
    without: [...], required: BOOL}: which of the kernel's own tests prove its wheels, for how
    long they may run, what they need and whether a wheel they could not prove is published.
    At the top of the matrix it sets what every kernel's tests get (`inherited` then); a
    kernel's own keys win."""
    if not isinstance(node.value, dict):
        raise node.error("expected a table, e.g.  tests: {paths: [test_ops.py], keyword: "
                         "\"not slow\", timeout: 30m}")
    keys = _EVERY_KERNEL_TEST_KEYS if every_kernel else _TEST_KEYS
    for name, child in node.mapping().items():
        if name in _TEST_KEYS and name not in keys:
            raise child.error(f"'{name}' chooses one kernel's tests: give it in that kernel's "
                              "tests: table")
    fields = node.table(keys)
    paths = tuple(_test_path(item) for item in nonempty_list(fields["paths"])) \
        if "paths" in fields else inherited.paths
    keyword = inherited.keyword
    if "keyword" in fields:
        keyword = fields["keyword"].nonempty_str()
        if not keyword.isprintable():
            raise fields["keyword"].error("the expression must be one line of printable text")
        if len(keyword) > _KEYWORD_LIMIT:
            raise fields["keyword"].error(f"is {len(keyword):,} characters long; a pytest -k "
                                          f"expression of at most {_KEYWORD_LIMIT:,} is taken")
    requires = tuple(_test_requirement(item) for item in nonempty_list(fields["requires"])) \
        if "requires" in fields else inherited.requires
    without = tuple(read_project_name(item) for item in nonempty_list(fields["without"])) \
        if "without" in fields else inherited.without
    return TestSelection(
        paths, keyword, _test_duration(fields, "timeout", inherited.timeout), requires,
        _test_duration(fields, "budget", inherited.budget) if "budget" in fields
        else inherited.budget, without,
        fields["required"].bool() if "required" in fields else inherited.required)


def _test_duration(fields: dict[str, Node], key: str, inherited: float | None) -> float:
    if key not in fields:
        assert inherited is not None
        return inherited
    try:
        return parse_duration(fields[key].scalar_text())
    except ValueError as exc:
        raise fields[key].error(str(exc)) from None


def _test_requirement(node: Node) -> str:
    """A project on the index the tests are installed from (einops, numpy>=2)."""
    text = node.nonempty_str()
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise node.error(f"'{text}' is not a requirement ({exc})") from None
    if requirement.url:
        raise node.error("name a project on the index, not a URL: the tests' environment is "
                         "installed from the index the torch comes from")
    return text


def _test_path(node: Node) -> str:
    """A file, folder or pytest node id inside the kernel's tests/ (test_a.py::test_b[x])."""
    text = node.nonempty_str()
    where = PurePosixPath(text.split("::", 1)[0])
    if not text.isprintable() or text.startswith("-") or "\\" in text:
        raise node.error(f"'{text}' is not a path or pytest node id inside tests/")
    if where.is_absolute() or ".." in where.parts:
        raise node.error(f"'{text}' must be a path inside the kernel's tests/ folder, "
                         "relative to it")
    return text
