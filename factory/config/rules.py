"""Toolchain rules: the shipped table (factory/data/rules.toml) and matrix.yaml's changes to it.

A rule names one flag it rewrites (data/compilers/rewrite.py does the rewriting) and the torch
releases it applies to. The shipped table and a matrix's `toolchain-rules:` entries are read by
the same code, so an entry wrong in either gets one error naming its file, line and key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..data.compilers.rewrite import FLAGS, cxx_standard_year
from ..errors import ConfigError
from ..values.versions import Version
from .nodes import Node, load_toml

__all__ = ["ToolchainRule", "apply_rule_entries", "rules_for", "shipped_rules"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_KEYS = ("name", "flag", "value", "torch", "reason", "off")


@dataclass(frozen=True)
class ToolchainRule:
    name: str
    flag: str  # one of data/compilers/rewrite.py's FLAGS
    value: str | None  # -std: the standard raised to
    torch: str  # a version specifier; "" for every torch
    reason: str

    def applies(self, torch: Version | None) -> bool:
        """Whether the rule is in force for a cell built against `torch` (None: no torch, a
        pure-Python wheel, which compiles nothing)."""
        if torch is None:
            return False
        return not self.torch or SpecifierSet(self.torch).contains(str(torch), prereleases=True)

    @property
    def summary(self) -> str:
        """The rule as one log line names it: cxx20-for-torch-2.14 (-std c++20, torch >=2.14)."""
        what = " ".join(filter(None, (self.flag, self.value)))
        return f"{self.name} ({what}{f', torch {self.torch}' if self.torch else ''})"

    def to_json(self) -> dict[str, Any]:
        """The rule as a cell's record keeps it: what the rewriting needs, and its reason."""
        return {"name": self.name, "flag": self.flag, "reason": self.reason,
                **({"value": self.value} if self.value else {}),
                **({"torch": self.torch} if self.torch else {})}

    @classmethod
    def from_json(cls, data: Any, origin: Path) -> ToolchainRule:
        """A recorded rule, checked as a matrix entry would be."""
        if not isinstance(data, dict):
            raise ConfigError("a recorded toolchain rule is not a table", file=origin)
        return _rule(Node({key: Node(value, origin, None, f"rules.{key}")
                           for key, value in data.items()}, origin, None, "rules"))


def _rule(node: Node) -> ToolchainRule:
    fields = node.table(_KEYS[:-1], required=["name", "flag", "reason"])
    flag = fields["flag"].nonempty_str()
    if flag not in FLAGS:
        raise fields["flag"].error(f"unknown flag '{flag}': a toolchain rule rewrites "
                                   f"{' or '.join(FLAGS)}")
    value = fields["value"].nonempty_str() if "value" in fields else None
    if flag == "-std":
        if value is None:
            raise node.error("a -std rule needs value: the C++ standard to raise to "
                             "(e.g. value: c++20)")
        if cxx_standard_year(value) is None:
            raise fields["value"].error(f"'{value}' is not a C++ standard (c++17, c++20, "
                                        "gnu++20, ...)")
    elif value is not None:
        raise fields["value"].error(f"a {flag} rule takes no value: it narrows the GPU code "
                                    "to the cell's SMs")
    torch = fields["torch"].nonempty_str() if "torch" in fields else ""
    if torch:
        try:
            SpecifierSet(torch)
        except InvalidSpecifier:
            raise fields["torch"].error(f"'{torch}' is not a version specifier "
                                        "(e.g. \">=2.14\")") from None
    name = fields["name"].nonempty_str()
    if not _NAME.fullmatch(name):
        raise fields["name"].error(f"{name!r} is not a rule name: letters, digits, '.', '_', "
                                   "'+' and '-'")
    return ToolchainRule(name, flag, value, torch,
                         " ".join(fields["reason"].nonempty_str().split()))


@cache
def shipped_rules() -> tuple[ToolchainRule, ...]:
    """The rules of factory/data/rules.toml, in its order."""
    with resources.as_file(resources.files("factory.data").joinpath("rules.toml")) as path:
        top = load_toml(path).table(["rule"], required=["rule"])
        rules = tuple(_rule(item) for item in top["rule"].list())
    _check_names(rules, top["rule"])
    return rules


def _check_names(rules: Iterable[ToolchainRule], node: Node) -> None:
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise node.error(f"two rules are named '{rule.name}'")
        seen.add(rule.name)


def apply_rule_entries(rules: tuple[ToolchainRule, ...], node: Node) -> tuple[ToolchainRule, ...]:
    """`rules` changed by a `toolchain-rules:` list: an entry with `off: true` turns the rule of
    its name off, any other adds a rule or replaces the one of its name."""
    result = {rule.name: rule for rule in rules}
    for item in node.list():
        if isinstance(item.value, dict) and "off" in item.value:
            fields = item.table(["name", "off"], required=["name"])
            name = fields["name"].nonempty_str()
            if not fields["off"].bool():
                raise fields["off"].error("write off: true to turn a rule off, or leave off out "
                                          "and give the whole rule")
            if name not in result:
                raise fields["name"].error(f"no toolchain rule is named '{name}' (known: "
                                           f"{', '.join(result) or 'none'})")
            del result[name]
            continue
        if not isinstance(item.value, dict):
            raise item.error("expected a rule: a table with name, flag, reason and, as the flag "
                             "needs, value and torch")
        rule = _rule(item)
        result[rule.name] = rule
    return tuple(result.values())


def rules_for(rules: Iterable[ToolchainRule], torch: Version | None) -> tuple[ToolchainRule, ...]:
    """The rules in force for a cell built against `torch`."""
    return tuple(rule for rule in rules if rule.applies(torch))
