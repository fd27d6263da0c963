"""The compiler flags a build.toml may pass (cxx-flags, cuda-flags, hip-flags, sycl-flags).

A kernel repo is untrusted input, and its flags reach nvcc, the host compiler and the linker.
The factory names every output of a build itself, inside the build folder, and chooses the
compilers; so a flag that names an output (-o, -MF, -odir), runs another program (-ccbin,
--run, -B, -fplugin) or reads more flags from a file (@file, --options-file) is refused, and
one that names a path to read (-I, -isystem, -include, -L, -rpath, a linker script) must name
a relative path inside the repo (compilers run in the repo's copy, so such a path is the
repo's). Options wrapped for another tool (-Xcompiler, -Xlinker, -Wl,...) are checked as that
tool's options.

No library parses nvcc's or GCC's command lines for this; the tables below are the options of
nvcc (CUDA 12-13), GCC/Clang and GNU ld that take a path.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from .nodes import Node

__all__ = ["compiler_flags"]

# Options the factory owns: each names an output, a program to run, or a file of more flags.
_REFUSED = {
    "-o": "names an output file", "--output-file": "names an output file",
    "-odir": "names the output folder", "--output-directory": "names the output folder",
    "-MF": "names a dependency file to write", "--dependency-output": "names a dependency "
    "file to write", "-MJ": "names a compilation database to write",
    "-ccbin": "chooses another host compiler", "--compiler-bindir": "chooses another host "
    "compiler", "-run": "runs a program", "--run": "runs a program", "--run-args": "runs a "
    "program", "-optf": "reads options from a file", "--options-file": "reads options from a "
    "file", "-B": "chooses where the compiler finds its programs", "-specs": "reads a specs "
    "file", "--specs": "reads a specs file", "-fplugin": "loads a compiler plugin",
    "-dumpdir": "names where dumps are written", "-dumpbase": "names where dumps are written",
    "-Map": "names a linker map file to write", "--Map": "names a linker map file to write",
}
# Options whose value is a path the tool reads (or, for --keep-dir, writes inside).
_PATHS = {
    "-I", "--include-path", "-isystem", "--system-include", "-idirafter", "-iquote",
    "-iprefix", "-iwithprefix", "-iwithprefixbefore", "-include", "--pre-include", "-imacros",
    "-L", "--library-path", "-keep-dir", "--keep-dir", "-rpath", "--rpath", "-rpath-link",
    "--rpath-link", "-T", "--script", "--version-script", "--dynamic-list", "--sysroot",
    "-isysroot", "-fprofile-generate", "-fprofile-use", "-fprofile-dir",
    "-fprofile-instr-generate", "-fprofile-instr-use", "-fsanitize-ignorelist",
    "-fsanitize-blacklist",
}
# Run-time search paths, which may start at the shared object's own folder.
_RUNTIME_PATHS = {"-rpath", "--rpath"}
_ORIGIN = ("$ORIGIN", "${ORIGIN}")
# Short options whose value may be joined to them (-I/usr/include, -ofile, -L../lib); -B is
# GCC's program prefix for a compiler, but -Bsymbolic and friends for a linker.
_JOINED = ("-I", "-L", "-o", "-T", "-MF", "-MJ")
_JOINED_COMPILER = ("-B",)
# Wrappers: their value is a comma-separated list of another tool's options; True where that
# tool is a linker.
_WRAPPERS = {
    "-Xcompiler": False, "--compiler-options": False, "-Xptxas": False,
    "--ptxas-options": False, "-Xfatbin": False, "--fatbin-options": False,
    "-Xarchive": False, "--archive-options": False, "-Xlinker": True, "--linker-options": True,
    "-Xnvlink": True, "--nvlink-options": True,
}
_COMMA_WRAPPERS = {"-Wl,": True, "-Wa,": False, "-Wp,": False}


def compiler_flags(node: Node) -> tuple[str, ...]:
    """A build.toml flags list, each flag checked; the first refused one is a ConfigError at
    its line."""
    items = node.list()
    flags = tuple(item.str() for item in items)
    for index, item in enumerate(items):
        problem = _check(flags[index], flags[index + 1] if index + 1 < len(flags) else None,
                         linker=False)
        if problem:
            raise item.error(problem)
    return flags


def _check(flag: str, following: str | None, linker: bool) -> str | None:
    """Why `flag` (followed by `following`) is refused, or None."""
    if "\0" in flag:
        return "a flag must not hold a NUL byte"
    if flag.startswith("@"):
        return f"'{flag}' reads options from a file, which the factory cannot check: write " \
               "the options themselves"
    name, joined, value = flag.partition("=")
    if name in _WRAPPERS:
        inner = value if joined else following
        return _check_list(inner.split(","), _WRAPPERS[name]) if inner else None
    for wrapper, is_linker in _COMMA_WRAPPERS.items():
        if flag.startswith(wrapper):
            return _check_list(flag[len(wrapper):].split(","), is_linker)
    option, given = _split(flag, linker)
    if option is None:
        return None
    if option in _REFUSED:
        return f"'{flag}' {_REFUSED[option]}; the factory names every output of a build and " \
               "chooses its tools: remove it"
    path = given if given is not None else following
    if option in _RUNTIME_PATHS and path is not None and path.startswith(_ORIGIN):
        return None  # a run-time search path beside the shared object itself
    if path is not None and not _inside(path):
        return f"'{option} {path}' names a path outside the kernel repo; give a relative path " \
               "inside it"
    return None


def _check_list(flags: list[str], linker: bool) -> str | None:
    for index, flag in enumerate(flags):
        problem = _check(flag, flags[index + 1] if index + 1 < len(flags) else None, linker)
        if problem:
            return problem
    return None


def _split(flag: str, linker: bool) -> tuple[str | None, str | None]:
    """The option a flag is, and its joined value (None when the value is the next argument);
    (None, None) for a flag that takes no path."""
    name, joined, value = flag.partition("=")
    if name in _REFUSED or name in _PATHS:
        return name, value if joined else None
    for prefix in _JOINED + (() if linker else _JOINED_COMPILER):
        if flag.startswith(prefix) and len(flag) > len(prefix):
            return prefix, flag[len(prefix):]
    return None, None


def _inside(path: str) -> bool:
    """A path that stays inside the repo: relative, with no '..' part, no home folder and no
    variable to expand."""
    if not path:
        return True
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts and not path.startswith("~") \
        and "$" not in path
