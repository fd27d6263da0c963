"""What a toolchain rule does to one compiler command: the rewriting itself, on an argument list.

The kernel-builder path applies it to the flags build.toml gives each unit; a PEP 517 build
(setup.py, pyproject) runs its compilers through a wrapper made from this very file (see
`main`), because there the project's build system writes the commands. So this module uses the
standard library only: the wrapper runs in the project's build environment, which does not hold
the factory.

Two flags are known:
- `-std`: a C++ standard below the rule's value is raised to it (`-std=c++17` -> `-std=c++20`,
  `gnu++14` -> `gnu++20`), in every spelling nvcc and gcc take, inside `-Xcompiler` too. C
  standards (`-std=c11`) are left alone.
- `-gencode`: the GPU code a command asks for with -gencode / --generate-code is narrowed to
  the cell's targets (`sm_90`, and `compute_90` where the cell ships PTX); an entry left with no
  code is dropped, and so is nothing else.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the wrapper runs once per compiler command: it imports only what it runs
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["DROPPED", "FLAGS", "Change", "cxx_standard_year", "rewrite"]

FLAGS = ("-std", "-gencode")
DROPPED = "(dropped)"  # what a change's `after` says of an argument taken out

# The year of each C++ standard name gcc and nvcc accept, the provisional names included.
_YEARS = {"98": 1998, "03": 2003, "0x": 2011, "11": 2011, "1y": 2014, "14": 2014, "1z": 2017,
          "17": 2017, "2a": 2020, "20": 2020, "2b": 2023, "23": 2023, "2c": 2026, "26": 2026}
_STANDARD = re.compile(r"(c|gnu)\+\+(\w\w)")
_STD_FLAG = re.compile(r"(--?std=)((?:c|gnu)\+\+\w\w)")
_XCOMPILER = ("-Xcompiler", "--compiler-options")
_GENCODE = ("-gencode", "--generate-code")
_ENTRY = re.compile(r"arch=([\w]+),code=(\[[^\]]*\]|[\w]+)")


def cxx_standard_year(name: str) -> int | None:
    """2017 for c++17 or gnu++1z; None for anything that is not a C++ standard's name."""
    found = _STANDARD.fullmatch(name)
    return _YEARS.get(found[2]) if found else None


class Change:
    """One thing a rule changed in one command. (A plain class: dataclasses imports inspect,
    which would double the wrapper's start.)"""

    __slots__ = ("after", "before", "rule")

    def __init__(self, rule: str, before: str, after: str) -> None:
        self.rule, self.before, self.after = rule, before, after

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Change) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def _fields(self) -> tuple[str, str, str]:
        return self.rule, self.before, self.after

    def __repr__(self) -> str:
        return f"Change({self.rule!r}, {self.before!r}, {self.after!r})"

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "before": self.before, "after": self.after}


def rewrite(args: Sequence[str], rules: Iterable[dict[str, Any]], targets: Iterable[str],
            nvcc: bool) -> tuple[list[str], list[Change]]:
    """`args` (a compiler's arguments, without the compiler) as `rules` have them; `targets`
    are the cell's GPU code names for a -gencode rule; `nvcc`: the arguments are nvcc's (which
    takes `-std c++17` as two words, and host flags through -Xcompiler)."""
    result = list(args)
    changes: list[Change] = []
    for rule in rules:
        if rule["flag"] == "-std":
            result = _raise_standard(result, rule, nvcc, changes)
        elif rule["flag"] == "-gencode" and nvcc:
            result = _narrow_gencode(result, rule, frozenset(targets), changes)
    return result, changes


def _raised(name: str, rule: dict[str, Any]) -> str:
    """A standard's name raised to the rule's, the dialect (c++ or gnu++) kept."""
    wanted = _STANDARD.fullmatch(rule["value"])
    year = cxx_standard_year(name)
    if wanted is None or year is None or year >= _YEARS[wanted[2]]:
        return name
    return f"{_STANDARD.fullmatch(name)[1]}++{wanted[2]}"  # type: ignore[index]


def _raise_standard(args: list[str], rule: dict[str, Any], nvcc: bool,
                    changes: list[Change]) -> list[str]:
    def flag(text: str) -> str:
        found = _STD_FLAG.fullmatch(text)
        if found is None:
            return text
        after = found[1] + _raised(found[2], rule)
        if after != text:
            changes.append(Change(rule["name"], text, after))
        return after

    out: list[str] = []
    for index, arg in enumerate(args):
        previous = args[index - 1] if index else ""
        if nvcc and previous in ("-std", "--std") and cxx_standard_year(arg):
            after = _raised(arg, rule)
            if after != arg:
                changes.append(Change(rule["name"], f"{previous} {arg}", f"{previous} {after}"))
            out.append(after)
        elif nvcc and previous in _XCOMPILER:
            out.append(",".join(flag(part) for part in arg.split(",")))
        elif nvcc and arg.startswith(tuple(f"{name}=" for name in _XCOMPILER)):
            name, _, value = arg.partition("=")
            out.append(f"{name}=" + ",".join(flag(part) for part in value.split(",")))
        else:
            out.append(flag(arg))
    return out


def _narrow_gencode(args: list[str], rule: dict[str, Any], targets: frozenset[str],
                    changes: list[Change]) -> list[str]:
    """`args` with each -gencode entry narrowed to `targets`; unchanged when that would leave
    the command no -gencode at all (the project names none of the cell's SMs: narrowing would
    only hand the choice to nvcc's default)."""
    found: list[Change] = []
    out = _narrowed(args, rule, targets, found)
    if not any(arg.partition("=")[0] in _GENCODE for arg in out):
        return args
    changes.extend(found)
    return out


def _narrowed(args: list[str], rule: dict[str, Any], targets: frozenset[str],
              changes: list[Change]) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        name, joined, value = arg.partition("=")
        if name in _GENCODE and (joined or index + 1 < len(args)):
            if not joined:
                index += 1
                value = args[index]
            kept = _kept_entry(value, targets)
            if kept != value:
                changes.append(Change(rule["name"], f"{name} {value}",
                                      f"{name} {kept}" if kept else DROPPED))
            if kept:
                out.extend([f"{name}={kept}"] if joined else [name, kept])
        else:
            out.append(arg)
        index += 1
    return out


def _kept_entry(value: str, targets: frozenset[str]) -> str:
    """A -gencode value with only the codes the cell asked for; "" when none is left, and the
    value itself when it is not one this rule reads."""
    found = _ENTRY.fullmatch(value.replace(" ", ""))
    if found is None or not targets:
        return value
    codes = found[2].strip("[]").split(",")
    kept = [code for code in codes if code in targets]
    if kept == codes:
        return value
    if not kept:
        return ""
    return f"arch={found[1]},code=" + (kept[0] if len(kept) == 1 else f"[{','.join(kept)}]")


# ----------------------------------------------------------------------------------------------
# The wrapper: this file, run as a compiler. Its settings lie beside it in <name>.json: the real
# compiler, whether it is nvcc, the rules, the cell's targets, the file each change is appended
# to (one JSON line per command that a rule changed) and, where the object cache serves the
# build, its broker's socket and the build folder (cached.py).

def main() -> None:
    here = sys.argv[0]
    with open(here + ".json", encoding="utf-8") as handle:
        settings = json.load(handle)
    args, changes = rewrite(sys.argv[1:], settings["rules"], settings["targets"],
                            settings["nvcc"])
    if changes:
        line = json.dumps({"compiler": os.path.basename(here),
                           "changes": [change.to_json() for change in changes]}) + "\n"
        descriptor = os.open(settings["record"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line.encode())  # one write: concurrent compilers do not mix
        finally:
            os.close(descriptor)
    if settings.get("broker"):  # the object cache serves the build's compiles
        try:
            from . import cached
        except ImportError:  # run as the wrapper: cached.py lies beside this file
            import cached  # type: ignore[import-not-found,no-redef]
        sys.exit(cached.compile_unit(settings, settings["real"], args))
    os.execvp(settings["real"], [settings["real"], *args])


if __name__ == "__main__":
    main()
