"""The positioned-node loader: parsed configuration that knows where every value came from.

build.toml and matrix.yaml are both read into a tree of `Node`s. Each node carries its file,
line and dotted key, so every validation error can say exactly where the problem is.
"""

from __future__ import annotations

import builtins
import difflib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["Node", "describe", "load_toml", "load_yaml"]

# Bounds that keep a hostile file from stalling the parser or the tree walk: real matrix.yaml
# and build.toml files are a few kilobytes, a few levels deep, with a few hundred values.
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000

# A key path: names, and list indexes where a value sits in an array.
KeyPath = tuple[str | int, ...]

_TYPE_NAMES = {
    str: "a string", int: "an integer", float: "a number", bool: "a boolean",
    list: "a list", dict: "a table", type(None): "nothing",
}


@dataclass(frozen=True)
class Node:
    """A configuration value with its origin."""

    value: Any
    file: Path
    line: int | None
    key: str
    raw: str | None = None  # the scalar's source text, where the format keeps it

    def error(self, message: builtins.str) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line, key=self.key or None)

    def _expect(self, kind: type, what: builtins.str | None = None) -> Any:
        value = self.value
        if kind is int and isinstance(value, bool):
            value_ok = False
        else:
            value_ok = isinstance(value, kind)
        if not value_ok:
            raise self.error(f"expected {what or _TYPE_NAMES[kind]}, got {describe(self.value)}")
        return value

    def table(self, allowed: Iterable[builtins.str],
              required: Iterable[builtins.str] = ()) -> dict[builtins.str, Node]:
        """The node as a table, refusing unknown keys (with a suggestion) and missing ones."""
        entries: dict[builtins.str, Node] = self._expect(dict)
        allowed = list(allowed)
        for name, child in entries.items():
            if name not in allowed:
                hint = difflib.get_close_matches(name, allowed, n=1)
                suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
                known = ", ".join(sorted(allowed)) or "none"
                raise child.error(f"unknown key{suggestion}; allowed keys here: {known}")
        for name in required:
            if name not in entries:
                raise self.error(f"missing required key '{name}'")
        return entries

    def mapping(self) -> dict[builtins.str, Node]:
        """The node as a table whose keys are data (e.g. versions), not a fixed schema."""
        found: dict[builtins.str, Node] = self._expect(dict)
        return found

    def str(self) -> builtins.str:
        text: builtins.str = self._expect(builtins.str)
        return text

    def nonempty_str(self) -> builtins.str:
        text = self.str()
        if not text.strip():
            raise self.error("must not be empty")
        return text

    def int(self) -> builtins.int:
        number: builtins.int = self._expect(builtins.int)
        return number

    def bool(self) -> builtins.bool:
        flag: builtins.bool = self._expect(builtins.bool)
        return flag

    def list(self) -> builtins.list[Node]:
        items: builtins.list[Node] = self._expect(builtins.list)
        return items

    def str_list(self) -> tuple[builtins.str, ...]:
        return tuple(item.str() for item in self.list())

    def scalar_text(self) -> builtins.str:
        """A scalar as the user wrote it: `13.0` stays "13.0" even where YAML reads a float."""
        if isinstance(self.value, (dict, list)) or self.value is None:
            raise self.error(f"expected a value, got {describe(self.value)}")
        if self.raw is not None:
            return self.raw
        if isinstance(self.value, str):
            return self.value
        raise self.error(f"expected a string, got {describe(self.value)}")


def describe(value: Any) -> str:
    if isinstance(value, (dict, list)) or value is None:
        return _TYPE_NAMES[type(value)]
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} {value!r}"


def child_key(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


# ----------------------------------------------------------------------------------------------
# TOML

def load_toml(path: Path) -> Node:
    """Parse a TOML file into Nodes, with the line of every key."""
    import tomllib

    text = _read_text(path)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=path) from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(match.group(1)) if match else None
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise ConfigError(f"invalid TOML: {message}", file=path, line=line) from None
    lines = _toml_key_lines(text)
    return _toml_node(data, path, (), lines)


def _toml_node(value: Any, path: Path, keys: KeyPath, lines: dict[KeyPath, int]) -> Node:
    line = _nearest_line(keys, lines)
    if len(keys) > MAX_DEPTH:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=path, line=line)
    dotted = ""
    for key in keys:
        dotted = f"{dotted}[{key}]" if isinstance(key, int) else child_key(dotted, key)
    if isinstance(value, dict):
        value = {k: _toml_node(v, path, (*keys, k), lines) for k, v in value.items()}
    elif isinstance(value, list):
        value = [_toml_node(item, path, (*keys, i), lines) for i, item in enumerate(value)]
    return Node(value, path, line, dotted)


def _nearest_line(keys: KeyPath, lines: dict[KeyPath, int]) -> int | None:
    for end in range(len(keys), 0, -1):
        if keys[:end] in lines:
            return lines[keys[:end]]
    return 1 if keys else None


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key_lines(text: str) -> dict[KeyPath, int]:
    """Map each key path to the line it is defined on; the tables of an array of tables
    (`[[kernel]]`) are told apart by their index, as the parsed data holds them.

    tomllib (and tomlkit) keep no positions, so this scanner finds table headers and `key =`
    lines itself, skipping the inside of strings, multi-line arrays and inline tables.
    """
    lines: dict[KeyPath, int] = {}
    arrays: dict[KeyPath, int] = {}  # an array of tables' path -> the index of its last table
    table: KeyPath = ()
    scanner = _ValueScanner(lines)

    def resolved(keys: tuple[str, ...]) -> KeyPath:
        """A header's path with the index of each array of tables it passes through."""
        path: KeyPath = ()
        for part in keys:
            path += (part,)
            if path in arrays:
                path += (arrays[path],)
        return path

    for number, line in enumerate(text.splitlines(), 1):
        if scanner.busy:
            scanner.feed(line, number)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("[["):
            parsed = _parse_key(stripped[2:])
            if parsed is not None:
                array = (*resolved(parsed[0][:-1]), parsed[0][-1])
                arrays[array] = arrays.get(array, -1) + 1
                lines.setdefault(array, number)
                table = (*array, arrays[array])
                lines[table] = number
            continue
        if stripped.startswith("["):
            parsed = _parse_key(stripped[1:])
            if parsed is not None:
                table = resolved(parsed[0])
                lines.setdefault(table, number)
            continue
        parsed = _parse_key(stripped)
        if parsed is None:
            continue
        key, rest = parsed
        if not rest.startswith("="):
            continue
        for depth in range(1, len(key) + 1):
            lines.setdefault(table + key[:depth], number)
        scanner.start(table + key, rest[1:], number)
    return lines


def _parse_key(text: str) -> tuple[tuple[str, ...], str] | None:
    """Parse a (possibly dotted, possibly quoted) key at the start of text."""
    parts: list[str] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos >= len(text):
            return None
        char = text[pos]
        if char in "\"'":
            end = text.find(char, pos + 1)
            if end < 0:
                return None
            parts.append(text[pos + 1:end])
            pos = end + 1
        else:
            match = _BARE_KEY.match(text, pos)
            if not match:
                return None
            parts.append(match.group(0))
            pos = match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        return tuple(parts), text[pos:]


class _ValueScanner:
    """Follows a TOML value across lines: open brackets and strings, and where array items start.

    Items of an array value (at the first bracket level) are recorded as path + (index,), so an
    error about one entry of a multi-line list points at that entry's own line.
    """

    def __init__(self, lines: dict[KeyPath, int]) -> None:
        self.lines = lines
        self.depth = 0
        self.open_string: str | None = None
        self.path: KeyPath = ()
        self.index = 0
        self.expect_item = False

    @property
    def busy(self) -> bool:
        return self.depth > 0 or self.open_string is not None

    def start(self, path: KeyPath, text: str, number: int) -> None:
        self.path, self.index, self.expect_item = path, 0, False
        self.feed(text, number)

    def _item(self, number: int) -> None:
        if self.depth == 1 and self.expect_item:
            self.lines.setdefault((*self.path, self.index), number)
            self.expect_item = False

    def feed(self, text: str, number: int) -> None:
        pos = 0
        while pos < len(text):
            if self.open_string:
                end = text.find(self.open_string, pos)
                if end < 0:
                    return
                pos = end + len(self.open_string)
                self.open_string = None
                continue
            char = text[pos]
            if char == "#":
                return
            if char in " \t":
                pos += 1
                continue
            if char == "," and self.depth == 1:
                self.index += 1
                self.expect_item = True
                pos += 1
                continue
            if char in "]}":
                self.depth = max(0, self.depth - 1)
                pos += 1
                continue
            self._item(number)
            if text.startswith('"""', pos) or text.startswith("'''", pos):
                self.open_string = text[pos:pos + 3]
                pos += 3
            elif char in "\"'":
                pos = _skip_string(text, pos)
            elif char in "[{":
                self.depth += 1
                if self.depth == 1 and char == "[":
                    self.expect_item = True
                pos += 1
            else:
                pos += 1


def _skip_string(text: str, pos: int) -> int:
    quote = text[pos]
    pos += 1
    while pos < len(text):
        if quote == '"' and text[pos] == "\\":
            pos += 2
            continue
        if text[pos] == quote:
            return pos + 1
        pos += 1
    return pos


# ----------------------------------------------------------------------------------------------
# YAML

# The tags a matrix may use: plain data. Explicit tags (!!python/object, !!binary, !custom)
# are refused rather than ignored.
_YAML_TAGS = {f"tag:yaml.org,2002:{name}"
              for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}


def load_yaml(path: Path) -> Node:
    """Parse a YAML file into Nodes, refusing duplicate keys and keeping scalars' source text.

    Anchors and aliases are allowed, but an alias that contains itself, nesting deeper than
    MAX_DEPTH, or an expansion of more than MAX_VALUES values (a "billion laughs" file) is
    refused: the tree is walked with those bounds, never expanded blindly.
    """
    import yaml

    text = _read_text(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML: {problem}", file=path, line=line) from None
    except RecursionError:
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=path) from None
    if root is None:
        return Node({}, path, 1, "")
    return _YamlWalk(path).node(root, "", ())


class _YamlWalk:
    def __init__(self, path: Path) -> None:
        import yaml

        self.path = path
        self.constructor = yaml.SafeLoader("")
        self.values = 0

    def node(self, node: Any, key: str, enclosing: tuple[int, ...]) -> Node:
        import yaml

        line = node.start_mark.line + 1
        self.values += 1
        if self.values > MAX_VALUES:
            raise ConfigError(f"expands to more than {MAX_VALUES} values (aliases repeated "
                              "inside aliases?)", file=self.path, line=line, key=key or None)
        if len(enclosing) >= MAX_DEPTH:
            raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=self.path,
                              line=line, key=key or None)
        if node.tag not in _YAML_TAGS:
            raise ConfigError(f"the tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not "
                              "allowed: a matrix holds plain values, lists and tables",
                              file=self.path, line=line, key=key or None)
        if id(node) in enclosing:
            raise ConfigError("an alias refers to a value that contains it", file=self.path,
                              line=line, key=key or None)
        inside = (*enclosing, id(node))
        if isinstance(node, yaml.MappingNode):
            entries: dict[str, Node] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError("keys must be plain values", file=self.path,
                                      line=key_line, key=key or None)
                name = key_node.value
                full = child_key(key, name)
                if name in entries:
                    raise ConfigError("duplicate key", file=self.path, line=key_line, key=full)
                child = self.node(value_node, full, inside)
                entries[name] = Node(child.value, self.path, key_line, full, child.raw)
            return Node(entries, self.path, line, key)
        if isinstance(node, yaml.SequenceNode):
            items = [self.node(item, f"{key}[{i}]", inside) for i, item in enumerate(node.value)]
            return Node(items, self.path, line, key)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise ConfigError(f"cannot read this value: {exc}", file=self.path, line=line,
                              key=key or None) from None
        raw = node.value if node.tag != "tag:yaml.org,2002:null" else None
        return Node(value, self.path, line, key, raw)


def _read_text(path: Path) -> str:
    """A configuration file's text: a regular file of at most MAX_CONFIG_BYTES of UTF-8 (a FIFO,
    a device or a huge file would block or exhaust memory before any parser sees it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except ValueError:  # a NUL byte in the name
        raise ConfigError("not a valid file name", file=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=path) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError("is a directory, expected a file", file=path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("is not a regular file (a pipe or a device?); give a file",
                              file=path)
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"is {info.st_size} bytes; a configuration file may have at most "
                              f"{MAX_CONFIG_BYTES}", file=path)
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"holds more than {MAX_CONFIG_BYTES} bytes", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid UTF-8 ({exc.reason})", file=path) from None
