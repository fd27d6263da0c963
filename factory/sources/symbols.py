"""Which functions a kernel's sources define and which they call, read from the text alone.

Planning narrows a [kernel.*] section to the cell's SMs and leaves it out when none is left;
if the binding (or another kept source) calls a function only that section defines, the wheel
would link but fail to load with an undefined symbol. This module reads what finding such calls
takes (read_symbols) before planning starts; the planner walks the table it gives.

Written by hand: a C++ front end (libclang) would need the kernel's include folders, torch's and
CUDA's headers, and its flags at plan time, which planning must not need; what is wanted is only
the names of the functions a file defines at namespace scope and the names used inside bodies.
The reading errs towards "called": it cannot evaluate #if, so a call in a disabled branch still
counts, and the section is then built rather than the wheel broken.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FileSymbols", "SourceSymbols", "base_name", "file_symbols", "read_symbols"]

# Comments, string and character literals (a quote after a word character is a digit
# separator, 1'000), and preprocessor lines with their continuations.
_NOISE = re.compile(
    r"//[^\n]*|/\*.*?\*/"
    r"|R\"([^(\s\"\\]{0,16})\(.*?\)\1\""
    r"|\"(?:\\.|[^\"\\\n])*\"|(?<!\w)'(?:\\.|[^'\\\n]){1,8}'"
    r"|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
    re.DOTALL | re.MULTILINE)
_TOKEN = re.compile(r"[A-Za-z_]\w*|->|::|\S")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*(?:\"([^\"\n]+)\"|<([^>\n]+)>)", re.MULTILINE)
# Words that may stand before a parenthesis at namespace scope without naming a function.
_NOT_NAMES = frozenset({
    "alignas", "alignof", "decltype", "sizeof", "noexcept", "throw", "static_assert", "operator",
    "__attribute__", "__declspec", "__launch_bounds__", "__align__", "if", "for", "while",
    "switch", "return", "catch", "requires"})
# What may follow a function's parameter list before its body.
_QUALIFIERS = frozenset({"const", "volatile", "noexcept", "override", "final", "&", "&&",
                         "throw", "mutable", "constexpr", "__attribute__", "try"})
_Scope = Literal["namespace", "unnamed", "body"]  # what a brace opens
_MAX_BYTES = 8 * 2**20  # a larger file is not read (a hostile repo's filler)
_MAX_FILES = 4000  # headers followed from one set of sources, at most


@dataclass(frozen=True)
class FileSymbols:
    """What one source file defines at namespace scope with external linkage, what it uses
    inside bodies and macros, and the files it includes by quoted and by angled name."""

    defines: frozenset[str]
    uses: frozenset[str]
    includes: tuple[str, ...]
    angled: tuple[str, ...] = ()


def file_symbols(path: Path) -> FileSymbols:
    """The file's symbols; an unreadable or oversized file has none."""
    try:
        stat = path.stat()
    except OSError:
        return FileSymbols(frozenset(), frozenset(), ())
    return _read(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _read(path: Path, _mtime: int, size: int) -> FileSymbols:
    if size > _MAX_BYTES:
        return FileSymbols(frozenset(), frozenset(), ())
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return FileSymbols(frozenset(), frozenset(), ())
    found = _INCLUDE.findall(text)
    includes = tuple(quoted for quoted, _ in found if quoted)
    angled = tuple(name for _, name in found if name)
    macros: set[str] = set()

    def blank(match: re.Match[str]) -> str:
        found = match.group(0)
        if found.lstrip().startswith("#"):
            macros.update(_IDENTIFIER.findall(found))
            return "\n"
        return ' "" ' if found.endswith(("\"", "'")) else " "

    code = _NOISE.sub(blank, text)
    defines, uses = _scan(_TOKEN.findall(code))
    return FileSymbols(frozenset(defines), frozenset(uses | macros), includes, angled)


def _scan(tokens: list[str]) -> tuple[set[str], set[str]]:
    """Function definitions at namespace scope (namespace and extern "C" braces do not count
    as scope) and every identifier inside any other braces."""
    defines: set[str] = set()
    uses: set[str] = set()
    scopes: list[_Scope] = []  # per open brace
    statement: list[str] = []  # the tokens since the last ; { or } at namespace scope
    for token in tokens:
        inside = "body" in scopes
        if token == "{":
            scope = _opened(statement)
            # a function in an unnamed namespace is the file's own, like a static one
            if not inside and scope == "body" and "unnamed" not in scopes:
                name = _defined_name(statement)
                if name is not None:
                    defines.add(name)
            scopes.append(scope)
            statement = []
        elif token == "}":
            if scopes:
                scopes.pop()
            statement = []
        elif inside:
            if token[0].isalpha() or token[0] == "_":
                uses.add(token)
        elif token == ";":
            if statement[:1] == ["template"] and statement[1:2] != ["<"] \
                    and "unnamed" not in scopes:
                # an explicit instantiation: `template void f<80>(...);` defines f<80>
                name = _defined_name(statement[1:])
                if name is not None:
                    defines.add(name)
            statement = []
        else:
            statement.append(token)
    return defines, uses


def _opened(statement: list[str]) -> _Scope:
    """What a `{` ending the statement opens."""
    words = [token for token in statement if token not in ("inline", "export")]
    if words == ["namespace"]:
        return "unnamed"
    if words[:1] == ["namespace"] or words == ["extern", '"', '"']:
        return "namespace"
    return "body"


def _defined_name(statement: list[str]) -> str | None:
    """The function a statement ending in `{` at namespace scope defines, if it does: the
    name before the first parameter list that only qualifiers or a trailing return type
    follow. Internal functions (static) and classes are no one else's to call."""
    statement = _without_template_head(statement)
    if not statement or statement[0] in ("static", "class", "struct", "union", "enum", "typedef",
                                         "using") or _assigns(statement):
        return None
    for start, end in _groups(statement):
        name = _name_before(statement, start)
        if name is None:
            continue
        if start > 1 and statement[start - 2] == "operator":
            return None
        if _only_qualifiers(statement[end + 1:]):
            return name if "static" not in statement[:start] else None
    return None


def _name_before(statement: list[str], index: int) -> str | None:
    """The function name ending just before statement[index]: `f`, or `f<80,half>` for a
    template's specialization or instantiation (the kept code may hold others of f)."""
    before = statement[index - 1] if index else ""
    if before == ">":
        depth = 0
        for opening in range(index - 1, 0, -1):
            depth += (statement[opening] == ">") - (statement[opening] == "<")
            if depth == 0:
                name = _name_before(statement, opening)
                arguments = "".join(statement[opening + 1:index - 1])
                return f"{name}<{arguments}>" if name and "<" not in name else None
        return None
    if not _IDENTIFIER.fullmatch(before) or before in _NOT_NAMES:
        return None
    return before


def base_name(symbol: str) -> str:
    """The name a caller writes for a defined symbol: f for f<80,half>."""
    return symbol.split("<", 1)[0]


def _without_template_head(statement: list[str]) -> list[str]:
    """The statement after its `template <...>` heads."""
    while len(statement) > 1 and statement[0] == "template" and statement[1] == "<":
        depth = 0
        for index, token in enumerate(statement[1:], 1):
            depth += (token == "<") - (token == ">")
            if depth == 0:
                statement = statement[index + 1:]
                break
        else:
            return []
    return statement


def _assigns(statement: list[str]) -> bool:
    """Whether an `=` stands outside parentheses: a variable (a lambda's, say), no function."""
    depth = 0
    for token in statement:
        depth += (token == "(") - (token == ")")
        if token == "=" and depth == 0:
            return True
    return False


def _groups(tokens: list[str]) -> Iterator[tuple[int, int]]:
    """The outermost parenthesised groups: (index of '(', index of its ')')."""
    depth = 0
    start = 0
    for index, token in enumerate(tokens):
        if token == "(":
            if depth == 0:
                start = index
            depth += 1
        elif token == ")" and depth:
            depth -= 1
            if depth == 0:
                yield start, index


def _only_qualifiers(tokens: list[str]) -> bool:
    depth = 0
    for token in tokens:
        if token == "->" and depth == 0:
            return True  # a trailing return type: whatever follows is a type
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0 and token not in _QUALIFIERS and not token.startswith("__"):
            return False
    return True


@dataclass(frozen=True)
class SourceSymbols:
    """What a kernel's sources define and use, read before planning: every file they may
    reach by #include inside the kernel's folder, with its symbols, and where each include
    name is found from each folder it may be looked up in. Paths are resolved once here, so
    that walking the includes of any set of kept sections (`reach`) touches no file."""

    root: Path  # resolved
    sources: Mapping[str, Path]  # a source named by build.toml -> its file
    folders: Mapping[str, Path]  # an include folder named by build.toml -> the folder
    files: Mapping[Path, FileSymbols]
    found: Mapping[tuple[Path, str], Path]  # (folder, include name) -> the file it names

    def reach(self, sources: Iterable[str], folders: Iterable[str]) -> list[Path]:
        """The sources and every file inside the kernel's folder they include, each once: by
        quoted name found beside the including file or in `folders`, by angled name found in
        `folders` (the system's and its dependencies' headers are outside the folder)."""
        places = [self.folders[folder] for folder in folders if folder in self.folders]
        seen: dict[Path, None] = {}
        pending = [self.sources[name] for name in sources if name in self.sources]
        while pending and len(seen) < _MAX_FILES:
            path = pending.pop()
            if path in seen or path not in self.files:
                continue
            seen[path] = None
            for name, where in _lookups(self.files[path], path, places):
                hit = next((self.found[folder, name] for folder in where
                            if (folder, name) in self.found), None)
                if hit is not None:
                    pending.append(hit)
        return list(seen)

    def defines(self, source: str) -> frozenset[str]:
        path = self.sources.get(source)
        symbols = self.files.get(path) if path is not None else None
        return symbols.defines if symbols is not None else frozenset()

    def symbols(self, path: Path) -> FileSymbols:
        return self.files[path]


def _lookups(symbols: FileSymbols, path: Path,
             places: list[Path]) -> list[tuple[str, tuple[Path, ...]]]:
    """Each include of a file with the folders it is looked for in, in order."""
    return [*[(name, (path.parent, *places)) for name in symbols.includes],
            *[(name, tuple(places)) for name in symbols.angled]]


def read_symbols(root: Path, sources: Iterable[str], folders: Iterable[str]) -> SourceSymbols:
    """The symbols of the named sources and of every file inside `root` that they may include
    from any of the named folders: a superset of what any choice of them reaches."""
    real = root.resolve()
    places = {folder: path for folder in folders
              if (path := (root / folder).resolve()).is_relative_to(real)}
    named = {name: path for name in sources
             if (path := (root / name).resolve()).is_relative_to(real) and path.is_file()}
    files: dict[Path, FileSymbols] = {}
    found: dict[tuple[Path, str], Path] = {}
    pending = list(named.values())
    while pending and len(files) < _MAX_FILES:
        path = pending.pop()
        if path in files:
            continue
        files[path] = file_symbols(path)
        for name, where in _lookups(files[path], path, list(places.values())):
            for folder in where:
                if (folder, name) in found:
                    continue
                candidate = (folder / name).resolve()
                if candidate.is_relative_to(real) and candidate.is_file():
                    found[folder, name] = candidate
                    pending.append(candidate)
    return SourceSymbols(real, named, places, files, found)
