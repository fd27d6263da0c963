"""The hostile-input table: matrix.yaml texts, build.toml texts, arguments of every
subcommand, and output, cache and lock folders in states they should never be in, each with
the one error line it must end in; and the project each case starts from."""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from factory.index.update import update_index

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES
from ..support.wheels import make_wheel, small_index_files
from .factory import make_kernel, write

SRC = 'src = ["csrc/demo.cu"]'


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    expected: str  # in the one error line
    exit: int = 2
    matrix: str | bytes | None = None  # matrix.yaml's text (GOOD_MATRIX when None)
    kernel: str | None = None  # demo/build.toml's text (GOOD_KERNEL when None)
    setup: Callable[[Path], object] | None = None  # changes to the project folder (what it
    # returns is not used)
    env: tuple[tuple[str, str], ...] = ()


def build(expected: str, exit: int = 2, **fields: Any) -> Case:
    return Case(("build", "matrix.yaml"), expected, exit, **fields)


def matrix(text: str | bytes, expected: str) -> Case:
    return build(expected, matrix=text)


def replaced(old: str, new: str, expected: str, extra: str = "") -> Case:
    assert old in GOOD_MATRIX
    return matrix(GOOD_MATRIX.replace(old, new) + extra, expected)


def kernel(old: str, new: str, expected: str) -> Case:
    assert old in GOOD_KERNEL
    return build(expected, kernel=GOOD_KERNEL.replace(old, new))


def flags(value: str, expected: str, key: str = "cuda-flags") -> Case:
    return kernel(SRC, f"{SRC}\n{key} = {value}", expected)


def command(*args: str, expected: str, exit: int = 2, **fields: Any) -> Case:
    return Case(tuple(args), expected, exit, **fields)


def in_turn(*changes: Callable[[Path], object]) -> Callable[[Path], None]:
    """A setup made of several changes to the project folder, made in this order."""
    def setup(folder: Path) -> None:
        for change in changes:
            change(folder)
    return setup


def alias_bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(9):
        previous = "*a" if level == 0 else f"*b{level - 1}"
        lines.append(f"b{level}: &b{level} [{', '.join([previous] * 9)}]")
    return "\n".join(lines) + "\n" + GOOD_MATRIX


# the object cache's key read from its file in the project's config/ (XDG_CONFIG_HOME)
_KEY_FILE_ENV = (("KERNEL_WHEEL_FACTORY_OBJECT_KEY", ""), ("XDG_CONFIG_HOME", "config"))


def key_file(project: Path, mode: int | None, link: bool = False) -> None:
    """config/kernel-wheel-factory/object-cache.key with `mode` (a FIFO for None), or a link
    to such a file elsewhere."""
    path = project / "config" / "kernel-wheel-factory" / "object-cache.key"
    path.parent.mkdir(parents=True)
    target = project / "elsewhere.key" if link else path
    if mode is None:
        os.mkfifo(target)
    else:
        target.write_text("ab" * 32 + "\n")
        target.chmod(mode)
    if link:
        path.symlink_to(target)


def damaged_wheelhouse(folder: Path) -> None:
    """A wheelhouse whose one wheel was cut short."""
    folder.mkdir()
    (folder / "einops-0.8.2-py3-none-any.whl").write_bytes(b"PK\x03\x04 cut short")


def renamed_wheelhouse(folder: Path) -> None:
    """A wheelhouse whose wheel's METADATA names another project than its file name."""
    folder.mkdir()
    with zipfile.ZipFile(folder / "einops-0.8.2-py3-none-any.whl", "w") as archive:
        archive.writestr("six-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: six\n"
                         "Version: 1.0\n")


def replace_with(name: str, make: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        path = project / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        make(path)
    return setup


def chmod(name: str, mode: int) -> Callable[[Path], None]:
    def setup(project: Path) -> None:
        (project / name).chmod(mode)
    return setup


def files_entry(name: str, data: bytes | None) -> Callable[[Path], None]:
    """A file (or, with None, a folder) in index/files/."""
    def setup(project: Path) -> None:
        path = project / "index" / "files" / name
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
    return setup


def manifest(data: bytes | None) -> Callable[[Path], None]:
    """index/.factory/manifest.json replaced by these bytes (a folder with None)."""
    return replace_with("index/.factory/manifest.json",
                        lambda path: path.mkdir() if data is None else path.write_bytes(data))


def link(name: str, target: str) -> Callable[[Path], None]:
    """`name` (a folder of the index, replaced when there) as a link to a folder outside."""
    def setup(project: Path) -> None:
        (project / "old-site" / "kept").mkdir(parents=True, exist_ok=True)
        (project / "old-site" / "kept" / "index.html").write_text("keep me")
        (project / "old-site" / "kept" / "index.json").write_text("{}")
        if (project / name).is_dir():
            shutil.rmtree(project / name)
        os.symlink(target, project / name)
    return setup


CASES: dict[str, Case] = {
    # ---- matrix.yaml: parsers -------------------------------------------------------------
    "alias bomb": matrix(alias_bomb(), "expands to more than 100000 values"),
    "alias inside itself": matrix("a: &a [*a]\n" + GOOD_MATRIX,
                                  "an alias refers to a value that contains it"),
    "python tag": matrix(GOOD_MATRIX + "x: !!python/object/apply:os.system ['true']\n",
                         "the tag !!python/object/apply:os.system is not allowed"),
    "custom tag": replaced('["2.11"]', '!torch ["2.11"]', "the tag !torch is not allowed"),
    "binary tag": matrix(GOOD_MATRIX + "x: !!binary aGk=\n", "the tag !!binary is not allowed"),
    "set tag": matrix(GOOD_MATRIX + "x: !!set {a, b}\n", "the tag !!set is not allowed"),
    "5000 nested lists": matrix(GOOD_MATRIX + "x: " + "[" * 5000 + "]" * 5000 + "\n",
                                "nested more than 32 levels deep"),
    "3000 nested tables": matrix(GOOD_MATRIX + "x: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
                                 "nested more than 32 levels deep"),
    "40 nested lists": matrix(GOOD_MATRIX + "x: " + "[" * 40 + "]" * 40 + "\n",
                              "nested more than 32 levels deep"),
    "NUL byte": matrix(GOOD_MATRIX.encode() + b"\x00\n", "invalid YAML: unacceptable character"),
    "not UTF-8": matrix(b"\xff\xfe\x00garbage", "not valid UTF-8"),
    "UTF-8 cut in a comment": matrix(GOOD_MATRIX.encode() + b"# \xc3\x28\n", "not valid UTF-8"),
    "two megabytes": matrix(GOOD_MATRIX + "# " + "x" * (2 << 20) + "\n",
                            "a configuration file may have at most 1048576"),
    "empty file": matrix("", "missing required key 'kernels'"),
    "only a comment": matrix("# nothing\n", "missing required key 'kernels'"),
    "a list at the top": matrix("- a\n- b\n", "expected a table of settings at the top"),
    "a string at the top": matrix("hello\n", "expected a table of settings at the top"),
    "tab indentation": replaced("  - path", "\t- path", "invalid YAML"),
    "unclosed quote": replaced('"13.0":', '"13.0:', "invalid YAML"),
    "a list as a key": matrix(GOOD_MATRIX + "[a]: x\n", "keys must be plain values"),
    "a number as a key": matrix(GOOD_MATRIX + "3: x\n", "3: unknown key"),
    "merge key": matrix(GOOD_MATRIX + "base: &b {x: 1}\nother:\n  <<: *b\n", "base: unknown key"),
    "document stream": matrix(GOOD_MATRIX + "---\n" + GOOD_MATRIX, "invalid YAML"),
    # ---- matrix.yaml: values --------------------------------------------------------------
    "kernels empty": replaced("kernels:\n  - path: demo\n    version: 1.0.0\n", "kernels: []\n",
                              "kernels: must not be empty"),
    "kernels a table": replaced("kernels:\n  - path: demo\n    version: 1.0.0\n",
                                "kernels: {path: demo}\n", "kernels: expected a list"),
    "kernels null": replaced("kernels:\n  - path: demo\n    version: 1.0.0\n", "kernels:\n",
                             "kernels: expected a list, got nothing"),
    "kernel a string": replaced("  - path: demo\n    version: 1.0.0\n", "  - demo\n",
                                "kernels[0]: expected a table with one of path:"),
    "dist-name with an escape sequence": replaced(
        "version: 1.0.0", 'version: 1.0.0\n    dist-name: "a\\e[2Jb-{name}"',
        "kernels[0].dist-name: 'a\\x1b[2Jb-{name}'"),
    "--select with an escape sequence": command(
        "build", "matrix.yaml", "--select", "nope\x1b[2J=1",
        expected="--select: 'nope\\x1b[2J=1' is not field=GLOB"),
    "a build.toml license with a NUL": kernel(
        'license = "MIT"', 'license = "MI\\u0000T"',
        "general.license: 'MI\\x00T' holds a control character or a line break; a METADATA "
        "field is one line of text"),
    "a build.toml name with an escape sequence": kernel(
        'name = "demo"', 'name = "de\\u001b[2Jmo"', "de\\x1b[2Jmo"),
    "dist-name another placeholder": matrix(GOOD_MATRIX + 'dist-name: "kwf-{torch}"\n',
                                            "dist-name: the only placeholder is {name}"),
    "dist-name a format spec": matrix(GOOD_MATRIX + 'dist-name: "{name:>9}"\n',
                                      "the only placeholder is {name}"),
    "dist-name with a slash": replaced("version: 1.0.0", "version: 1.0.0\n    dist-name: a/{name}",
                                       "kernels[0].dist-name: 'a/{name}' does not give a "
                                       "distribution name"),
    "dist-name unclosed": matrix(GOOD_MATRIX + 'dist-name: "kwf-{name"\n',
                                 "dist-name: invalid name template"),
    "dist-name empty": matrix(GOOD_MATRIX + 'dist-name: ""\n', "dist-name: must not be empty"),
    "variants a word": matrix(GOOD_MATRIX + "variants: sometimes\n",
                              "variants: expected a boolean, got a string 'sometimes'"),
    "variants a list": matrix(GOOD_MATRIX + "variants: [sm90]\n",
                              "variants: expected a boolean, got a list"),
    "cross a word": matrix(GOOD_MATRIX + "cross: aarch64\n",
                           "cross: expected a boolean, got a string 'aarch64'"),
    "cpu a word": matrix(GOOD_MATRIX + "cpu: sometimes\n",
                         "cpu: expected a boolean, got a string 'sometimes'"),
    "cpu an unknown key": matrix(GOOD_MATRIX + "cpu: {index: https://x.org/}\n",
                                 "cpu.index: unknown key"),
    "cpu index not a url": matrix(GOOD_MATRIX + "cpu: {torch-index: ftp://x.org/}\n",
                                  "cpu.torch-index: 'ftp://x.org/' is not an index URL"),
    "name-clash unknown": matrix(GOOD_MATRIX + "name-clash: shout\n",
                                 "unknown name-clash policy 'shout' (known: warn, refuse, "
                                 "ignore)"),
    "name-clash index ftp": matrix(GOOD_MATRIX + "name-clash: {index: 'ftp://x/simple'}\n",
                                   "name-clash.index: 'ftp://x/simple' is not an index URL"),
    "name-clash index secret": matrix(
        GOOD_MATRIX + "name-clash: {index: 'https://u:tok-s3cret@x/simple'}\n",
        "name-clash.index:"),
    "version true": replaced("version: 1.0.0", "version: true",
                             "'true' is not a valid Python package version"),
    "version .nan": replaced("version: 1.0.0", "version: .nan",
                             "'.nan' is not a valid Python package version"),
    "version 100 characters": replaced("version: 1.0.0", "version: 1." + "1" * 100,
                                       "kernels[0].version: the version is 102 characters long"),
    "version with spaces": replaced("version: 1.0.0", "version: 1 0",
                                    "'1 0' is not a valid Python package version"),
    "torch null": replaced('["2.11"]', "[null]", "torch[0]: expected a value, got nothing"),
    "torch a table": replaced('["2.11"]', "{a: 1}", "torch: expected a list"),
    "torch 2.x": replaced('["2.11"]', '["2.x"]', "'2.x' is not a version"),
    "torch 99.0": replaced('["2.11"]', '["99.0"]', "torch 99.0 is not a PyTorch release"),
    "torch negative": replaced('["2.11"]', '["-2.11"]', "is not a version"),
    "torch twice": replaced('["2.11"]', '["2.11", "2.11"]', "listed twice"),
    "CUDA 99.0": replaced('"13.0":', '"99.0":', "CUDA 99.0 is not a CUDA release the factory "
                          "knows"),
    "CUDA 13.9": replaced('"13.0":', '"13.9":', "CUDA 13.9 is not a CUDA release the factory "
                          "knows"),
    "CUDA 12.7": replaced('"13.0":', '"12.7":', "CUDA 12.7 is not a CUDA release the factory "
                          "knows"),
    "CUDA 12.99": replaced('"13.0":', '"12.99":', "CUDA 12.99 is not a CUDA release"),
    "CUDA 13": replaced('"13.0":', '"13":', "give CUDA as major.minor"),
    "CUDA as a list": replaced('"13.0":\n    sms: ["9.0"]', '- "13.0"',
                               "expected a table of CUDA versions"),
    "CUDA 10.2": replaced('"13.0":', '"10.2":', "CUDA 10.2 is too old"),
    "SM abc": replaced('["9.0"]', '["abc"]', "'abc' is not a compute capability"),
    "SM 9.0b": replaced('["9.0"]', '["9.0b"]', "is not a compute capability"),
    "SM twice": replaced('["9.0"]', '["9.0", "9.0"]', "listed twice"),
    "SM a table": replaced('["9.0"]', "{a: 1}", "sms: expected a list"),
    "ptx a string": replaced('sms: ["9.0"]', 'sms: ["9.0"]\n    ptx: "yes"',
                             "ptx: expected a boolean"),
    "CUDA home nowhere": replaced('sms: ["9.0"]', 'sms: ["9.0"]\n    home: /nonexistent/cuda',
                                  "no CUDA toolkit at '/nonexistent/cuda'"),
    "CUDA home with NUL": replaced('sms: ["9.0"]', 'sms: ["9.0"]\n    home: "/opt\\0cuda"',
                                   "the path holds a NUL byte"),
    "label 300 characters": matrix(GOOD_MATRIX + 'label: "' + "x" * 300 + '{cuda}"\n',
                                   "the label template is 306 characters long; at most 64"),
    "label 50 characters": matrix(GOOD_MATRIX + 'label: "' + "x" * 50 + '{cuda}"\n',
                                  "characters long; a label may have at most 40"),
    "label with a slash": matrix(GOOD_MATRIX + 'label: "cu/{cuda}"\n',
                                 "'cu/130', which is not a valid local version label"),
    "label with ..": matrix(GOOD_MATRIX + 'label: "../{cuda}"\n',
                            "which is not a valid local version label"),
    "label format spec": matrix(GOOD_MATRIX + 'label: "cu{cuda:>99999999}"\n',
                                "placeholders take no format spec or conversion"),
    "label conversion": matrix(GOOD_MATRIX + 'label: "cu{cuda!r}"\n',
                               "placeholders take no format spec or conversion"),
    "label attribute": matrix(GOOD_MATRIX + 'label: "cu{cuda.__class__}"\n',
                              "unknown placeholder"),
    "label empty": matrix(GOOD_MATRIX + 'label: ""\n', "label: must not be empty"),
    "path with NUL": replaced("path: demo", 'path: "de\\0mo"', "the path holds a NUL byte"),
    "path a file": replaced("path: demo", "path: matrix.yaml", "'matrix.yaml' is a file"),
    "path absolute nowhere": replaced("path: demo", "path: /nonexistent/x",
                                      "kernel folder '/nonexistent/x' does not exist"),
    "path a symlink loop": build("'loop' cannot be followed", matrix=GOOD_MATRIX.replace(
        "path: demo", "path: loop"), setup=lambda p: os.symlink("loop", p / "loop")),
    "path without build.toml": replaced(
        "path: demo", "path: demo/csrc",
        "'demo/csrc' has no build.toml (kernel-builder) or setup.py"),
    "kernel listed twice": replaced("kernels:\n", "kernels:\n  - path: demo\n    version: 1.0.0\n",
                                    "kernel 'demo' is listed twice"),
    "exclude a number": matrix(GOOD_MATRIX + "exclude: 3\n", "exclude: expected a list"),
    "exclude unknown key": matrix(GOOD_MATRIX + "exclude:\n  - {python: '3.12'}\n",
                                  "unknown key"),
    "platform sparc": matrix(GOOD_MATRIX + "platforms: [sparc]\n", "unknown platform 'sparc'"),
    "platforms empty": matrix(GOOD_MATRIX + "platforms: []\n", "platforms: must not be empty"),
    "runner a list": matrix(GOOD_MATRIX + "runner: [local]\n", "runner: expected a string"),
    "docker base with a space": matrix(GOOD_MATRIX + 'docker: {base: "a b"}\n',
                                       "is not an image reference"),
    "git and hub": replaced("path: demo", "git: https://example.com/k.git\n    hub: org/k",
                            "give exactly one of path:"),
    "git over ftp": replaced("path: demo", "git: ftp://example.com/k.git", "is not a git URL"),
    "git rev with spaces": replaced("path: demo", "git: https://example.com/k.git\n    rev: a b",
                                    "is not a branch, tag or commit name"),
    "hub id with ..": replaced("path: demo", "hub: org/../k", "is not a Hugging Face repo id"),
    # ---- matrix.yaml: credentials -------------------------------------------------------
    "git URL with a password": replaced("path: demo", "git: https://me:pw-s3cret@example.com/k",
                                        "'https://***@example.com/k' holds a password"),
    "git URL with a token user": replaced(
        "path: demo", "git: https://ghp_s3cret0123456789abcdef@example.com/k",
        "'https://***@example.com/k' holds a token in its user part"),
    "git URL with a token query": replaced(
        "path: demo", "git: https://example.com/k.git?token=tok-s3cret",
        "'https://example.com/k.git?token=***' holds a 'token' query parameter"),
    "torch index with a password": replaced(
        'sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: https://u:pw-s3cret@example.com/whl',
        "torch-index: 'https://***@example.com/whl' holds a password"),
    "git URL with a private_token query": replaced(
        "path: demo", "git: https://example.com/k.git?private_token=tok-s3cret",
        "'https://example.com/k.git?private_token=***' holds a 'private_token' query parameter, "
        "which may be a secret"),
    "git URL with a jwt query": replaced(
        "path: demo", "git: https://example.com/k.git?rev=1&jwt=tok-s3cret",
        "holds a 'jwt' query parameter, which may be a secret"),
    "git URL with a fragment": replaced(
        "path: demo", "git: https://example.com/k.git#tok-s3cret",
        "'https://example.com/k.git#***' holds a fragment, which may be a secret"),
    "git URL whose password holds @": replaced(
        "path: demo", "git: https://me:pw@s3cret@example.com/k",
        "'https://***@example.com/k' holds a password"),
    "torch index with an hf_token": replaced(
        'sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: https://example.com/whl?hf_token='
        'hf_s3cretTOKEN', "holds a 'hf_token' query parameter, which may be a secret"),
    "torch index with an auth_token fragment": replaced(
        'sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: https://example.com/whl#auth_token='
        'tok-s3cret', "'https://example.com/whl#auth_token=***' holds a fragment"),
    "torch index with a signature": replaced(
        'sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: https://example.com/whl?X-Amz-Signature'
        '=S3CRETKEY', "holds a 'X-Amz-Signature' query parameter"),
    # ---- build.toml ---------------------------------------------------------------------
    "build.toml 5000 nested arrays": build("demo/build.toml: nested more than 32 levels deep",
                                           kernel=GOOD_KERNEL + "x = " + "[" * 5000 + "]" * 5000),
    "build.toml 400 nested tables": build("demo/build.toml: nested more than 32 levels deep",
                                          kernel=GOOD_KERNEL + "x = " + "{a=" * 400 + "1" +
                                          "}" * 400 + "\n"),
    "build.toml NUL": build("demo/build.toml:15: invalid TOML", kernel=GOOD_KERNEL + "\x00\n"),
    "build.toml a folder": build("'demo' has no build.toml", setup=replace_with(
        "demo/build.toml", lambda path: path.mkdir())),
    "build.toml a FIFO": build("'demo' has no build.toml", setup=replace_with(
        "demo/build.toml", os.mkfifo)),
    "build.toml not UTF-8": build("demo/build.toml: not valid UTF-8", setup=lambda p: (
        p / "demo" / "build.toml").write_bytes(b"\xff\xfe")),
    "build.toml huge": build("a configuration file may have at most", kernel=GOOD_KERNEL +
                             "# " + "x" * (2 << 20) + "\n"),
    "kernel name 300 characters": kernel('name = "demo"', 'name = "' + "d" * 300 + '"',
                                         "general.name: the kernel name is 300 characters"),
    "kernel name with a slash": kernel('name = "demo"', 'name = "de/mo"', "invalid kernel name"),
    "kernel name empty": kernel('name = "demo"', 'name = ""', "invalid kernel name"),
    "kernel name a number": kernel('name = "demo"', "name = 3", "expected a string"),
    "src a folder": kernel('"csrc/demo.cu"', '"csrc"', "file 'csrc' does not exist"),
    "src a FIFO": build("csrc/demo.cu is not a regular file", setup=replace_with(
        "demo/csrc/demo.cu", os.mkfifo)),
    "src a link out": build("leads outside the kernel repo", setup=replace_with(
        "demo/csrc/demo.cu", lambda path: os.symlink("/etc/passwd", path))),
    "src absolute": kernel('"csrc/demo.cu"', '"/etc/passwd"', "must be a path inside"),
    "cuda-flags -o": flags('["-o", "/tmp/x.o"]', "'-o' names an output file"),
    "cuda-flags -o joined": flags('["-o/tmp/x.o"]', "'-o/tmp/x.o' names an output file"),
    "cuda-flags --output-file=": flags('["--output-file=/tmp/x"]', "names an output file"),
    "cuda-flags -odir": flags('["-odir", "/tmp"]', "'-odir' names the output folder"),
    "cuda-flags -MF": flags('["-MF", "/tmp/x.d"]', "names a dependency file to write"),
    "cuda-flags -ccbin": flags('["-ccbin", "/tmp/evil"]', "chooses another host compiler"),
    "cuda-flags --run": flags('["--run"]', "runs a program"),
    "cuda-flags @file": flags('["@/tmp/flags"]', "reads options from a file"),
    "cuda-flags --options-file": flags('["--options-file", "f"]', "reads options from a file"),
    "cuda-flags -I /etc": flags('["-I/etc"]', "'-I /etc' names a path outside the kernel repo"),
    "cuda-flags -I ../..": flags('["-I../.."]', "'-I ../..' names a path outside"),
    "cuda-flags -I then a path": flags('["-I", "/usr/include"]', "'-I /usr/include' names"),
    "cuda-flags --include-path=": flags('["--include-path=/x"]', "names a path outside"),
    "cuda-flags -include": flags('["-include", "/etc/passwd"]', "'-include /etc/passwd'"),
    "cuda-flags --keep-dir": flags('["--keep-dir", "/tmp"]', "'--keep-dir /tmp' names"),
    "cuda-flags -Xcompiler -o": flags('["-Xcompiler", "-o/tmp/x"]', "'-o/tmp/x' names an "
                                      "output file"),
    "cuda-flags -Xcompiler=-fplugin": flags('["-Xcompiler=-fplugin=/tmp/p.so"]',
                                            "loads a compiler plugin"),
    "cuda-flags -Xlinker -rpath": flags('["-Xlinker", "-rpath=/tmp"]', "'-rpath /tmp' names"),
    "cuda-flags -L home": flags('["-L~/lib"]', "'-L ~/lib' names a path outside"),
    "cuda-flags a variable": flags('["-I$HOME"]', "names a path outside"),
    "cxx-flags -o": flags('["-o/tmp/x"]', "'-o/tmp/x' names an output file", "cxx-flags"),
    "cxx-flags -isystem": flags('["-isystem", "/x"]', "'-isystem /x'", "cxx-flags"),
    "cxx-flags -Wl,-rpath": flags('["-Wl,-rpath,/x"]', "'-rpath /x' names", "cxx-flags"),
    "cxx-flags -Wl,-Map": flags('["-Wl,-Map=/tmp/m"]', "names a linker map file", "cxx-flags"),
    "cxx-flags -B": flags('["-B/tmp/bin"]', "chooses where the compiler finds its programs",
                          "cxx-flags"),
    "cxx-flags -specs": flags('["-specs=/tmp/s"]', "reads a specs file", "cxx-flags"),
    "cxx-flags -T script": flags('["-T", "/tmp/x.ld"]', "'-T /tmp/x.ld'", "cxx-flags"),
    "cxx-flags -Wp,-MF": flags('["-Wp,-MF,/tmp/d"]', "names a dependency file", "cxx-flags"),
    "cxx-flags not strings": flags("[1, 2]", "expected a string", "cxx-flags"),
    # ---- arguments ----------------------------------------------------------------------
    "--out empty": command("build", "matrix.yaml", "--out", "", expected="argument --out: must "
                           "not be empty"),
    "--out with NUL": command("build", "matrix.yaml", "--out", "a\0b",
                              expected="argument --out: holds a NUL byte"),
    "--out under a file": command("build", "matrix.yaml", "--out", "matrix.yaml/sub",
                                  expected="--out: cannot be made: matrix.yaml is not a folder"),
    "--out read-only": command("build", "matrix.yaml", expected="--out: cannot be written by "
                               "this user", setup=chmod("index", 0o555)),
    "--out a link to nowhere": command("build", "matrix.yaml", "--out", "dangling",
                                       expected="is a link to a missing folder",
                                       setup=lambda p: os.symlink("nowhere/x", p / "dangling")),
    "--cache-dir empty": command("build", "matrix.yaml", "--cache-dir", "",
                                 expected="argument --cache-dir: must not be empty"),
    "--cache-dir a file": command("build", "matrix.yaml", "--cache-dir", "matrix.yaml",
                                  expected="matrix.yaml: --cache-dir: exists and is not a folder"),
    "--cache-dir under a file": command("plan", "matrix.yaml", "--cache-dir", "matrix.yaml/c",
                                        expected="--cache-dir: cannot be made"),
    "cache variable a file": command("build", "matrix.yaml", expected="cache: exists and is not "
                                     "a folder", env=(("KERNEL_WHEEL_FACTORY_CACHE",
                                                       "matrix.yaml"),)),
    "--build-root a file": command("build", "matrix.yaml", "--build-root",
                                   str(Path(__file__)), expected="--build-root: cannot be made"),
    "--build-root empty": command("build", "matrix.yaml", "--build-root", "",
                                  expected="argument --build-root: must not be empty"),
    "--build-root a link": command("build", "matrix.yaml", "--build-root", "/proc/self/cwd",
                                   expected="/proc/self/cwd: --build-root: is a link"),
    "--build-root the root": command("build", "matrix.yaml", "--build-root", "/",
                                     expected="/: --build-root: is the file system's root"),
    "tests: a keyword of 300 KB": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {keyword: " + "a" * 300_000 + "}",
        "is 300,000 characters long; a pytest -k expression of at most 1,000 is taken"),
    "--jobs huge": command("build", "matrix.yaml", "--jobs", "9" * 30,
                           expected="argument --jobs"),
    "--jobs negative": command("build", "matrix.yaml", "--jobs", "-3",
                               expected="argument --jobs"),
    "--shard 0/0": command("build", "matrix.yaml", "--shard", "0/0",
                           expected="'0/0' is not a shard I/N"),
    "--shard 3/2": command("build", "matrix.yaml", "--shard", "3/2",
                           expected="'3/2' is not a shard I/N"),
    "--job and --shard": command("build", "matrix.yaml", "--job", "a", "--shard", "1/2",
                                 expected="not allowed with argument"),
    "--job unknown": command("build", "matrix.yaml", "--job", "nope", expected="no job 'nope'"),
    "matrix a folder": command("build", "index", expected="index: is a directory"),
    "matrix a FIFO": command("build", "fifo.yaml", expected="is not a regular file",
                             setup=lambda p: os.mkfifo(p / "fifo.yaml")),
    "matrix /dev/zero": command("plan", "/dev/zero", expected="is not a regular file"),
    "inspect a FIFO": command("inspect", "x-1.0-py3-none-any.whl",
                              expected="x-1.0-py3-none-any.whl: not a regular file",
                              setup=lambda p: os.mkfifo(p / "x-1.0-py3-none-any.whl")),
    "manifest a FIFO": command(
        "index", "--out", "index", exit=1,
        expected="manifest.json cannot be read (not a regular file of at most 1024 MiB)",
        setup=replace_with("index/.factory/manifest.json", os.mkfifo)),
    "matrix a symlink loop": command("plan", "loop.yaml", expected="Too many levels of symbolic",
                                     setup=lambda p: os.symlink("loop.yaml", p / "loop.yaml")),
    "matrix unreadable": command("plan", "matrix.yaml", expected="cannot read",
                                 setup=chmod("matrix.yaml", 0)),
    "matrix empty name": command("plan", "", expected="argument MATRIX: must not be empty"),
    "SOURCE_DATE_EPOCH huge": command("build", "matrix.yaml", expected="is after 2107-12-31",
                                      env=(("SOURCE_DATE_EPOCH", "99999999999999999"),)),
    "SOURCE_DATE_EPOCH 2200": command("build", "matrix.yaml", expected="is after 2107-12-31",
                                      env=(("SOURCE_DATE_EPOCH", "7258118400"),)),
    "SOURCE_DATE_EPOCH negative": command("build", "matrix.yaml", expected="is not a whole "
                                          "number", env=(("SOURCE_DATE_EPOCH", "-5"),)),
    "SOURCE_DATE_EPOCH a float": command("build", "matrix.yaml", expected="is not a whole "
                                         "number", env=(("SOURCE_DATE_EPOCH", "1.5"),)),
    "plan --max-cells 0": command("plan", "matrix.yaml", "--max-cells", "0",
                                  expected="must be at least 1"),
    "plan --format xml": command("plan", "matrix.yaml", "--format", "xml",
                                 expected="invalid choice: 'xml'"),
    "lock over a folder": command("lock", "matrix.yaml", expected="matrix.lock: is in the way "
                                  "of the lock file", setup=lambda p: (p / "matrix.lock").mkdir()),
    "lock in a read-only folder": command(
        "lock", "ro/matrix.yaml", expected="lock file: cannot be written by this user",
        setup=lambda p: (write(p / "ro" / "matrix.yaml", GOOD_MATRIX), (p / "ro").chmod(0o555))),
    "--locked without a lock": command("build", "matrix.yaml", "--locked",
                                       expected="there is no lock file"),
    "images of a missing matrix": command("images", "nothere.yaml", expected="file not found"),
    "index --out missing": command("index", "--out", "nothere", expected="no such folder"),
    "index --out a file": command("index", "--out", "matrix.yaml",
                                  expected="exists and is not a folder"),
    "index --out read-only": command("index", "--out", "index", expected="cannot be written",
                                     setup=chmod("index", 0o555)),
    "index --verify --force": command("index", "--verify", "--force",
                                      expected="--verify: checks an index as it is"),
    "index --merge missing": command("index", "--merge", "nothere",
                                     expected="is not a factory output folder"),
    "index --merge a password": command(
        "index", "--merge", "https://user:pw-s3cret@example.invalid/site",
        expected="--merge: 'https://***@example.invalid/site' holds a password"),
    "index --merge a token": command(
        "index", "--merge", "https://example.invalid/site?access_token=tok-s3cret",
        expected="holds a 'access_token' query parameter"),
    "yank without --reason": command("yank", "img2gray", "1.0.0",
                                     expected="required: --reason"),
    "yank unknown project": command("yank", "nope", "1.0", "--reason", "r",
                                    expected="no published file of nope 1.0"),
    "yank unknown version": command("yank", "img2gray", "9.9", "--reason", "",
                                    expected="no published file of img2gray 9.9"),
    "yank unknown label": command("yank", "img2gray", "1.0.0", "--label", "../x", "--reason",
                                  "r", expected="with label ../x"),
    "yank --out missing": command("yank", "img2gray", "1.0.0", "--reason", "r", "--out",
                                  "nothere", expected="no such folder"),
    "yank --out read-only": command("yank", "img2gray", "1.0.0", "--reason", "r",
                                    expected="cannot be written", setup=chmod("index", 0o555)),
    "publish a missing folder": command("publish", "nothere", "--to", "site",
                                        expected="no such folder"),
    "publish --to a password": command(
        "publish", "--to", "https://u:pw-s3cret@example.invalid/x",
        expected="--to: 'https://***@example.invalid/x' holds a password"),
    "publish --to s3 keys": command("publish", "--to", "s3://AKIAXX:S3CRETKEY@bucket/x",
                                    expected="--to: 's3://***@bucket/x' holds a password"),
    "publish --to hf token": command("publish", "--to", "hf://user:hf_s3cretTOKEN@datasets/o/x",
                                     expected="--to: 'hf://***@datasets/o/x' holds a password"),
    "publish --to a token query": command("publish", "--to", "https://h.invalid/x?token="
                                          "tok-s3cret", expected="'https://h.invalid/x?token=***'"),
    "publish --repository-url password": command(
        "publish", "--repository-url", "https://u:pw-s3cret@example.invalid/legacy/",
        expected="--repository-url: 'https://***@example.invalid/legacy/' holds a password"),
    "publish --index-url password": command(
        "publish", "--repository-url", "https://example.invalid/legacy/", "--index-url",
        "https://u:pw-s3cret@example.invalid/simple/",
        expected="--index-url: 'https://***@example.invalid/simple/' holds a password"),
    "TWINE_REPOSITORY_URL password": command(
        "publish", "--dry-run", expected="TWINE_REPOSITORY_URL: 'https://***@example.invalid/x' "
        "holds a password", env=(("TWINE_REPOSITORY_URL", "https://u:pw-s3cret@example.invalid/x"),)),
    "publish --to a private_token": command(
        "publish", "--to", "https://h.invalid/x?private_token=tok-s3cret",
        expected="--to: 'https://h.invalid/x?private_token=***' holds a 'private_token' query "
        "parameter, which may be a secret"),
    "publish --to a fragment": command(
        "publish", "--to", "https://h.invalid/x#tok-s3cret",
        expected="--to: 'https://h.invalid/x#***' holds a fragment, which may be a secret"),
    "publish --repository-url a jwt": command(
        "publish", "--repository-url", "https://example.invalid/legacy/?jwt=tok-s3cret",
        expected="holds a 'jwt' query parameter, which may be a secret"),
    "publish --index-url an api_token": command(
        "publish", "--repository-url", "https://example.invalid/legacy/", "--index-url",
        "https://example.invalid/simple/?api_token=tok-s3cret",
        expected="--index-url: 'https://example.invalid/simple/?api_token=***' holds"),
    "TWINE_REPOSITORY_URL a refresh_token": command(
        "publish", "--dry-run", expected="holds a 'refresh_token' query parameter",
        env=(("TWINE_REPOSITORY_URL", "https://example.invalid/x?refresh_token=tok-s3cret"),)),
    "TWINE_REPOSITORY_URL a password holding @": command(
        "publish", "--dry-run", expected="TWINE_REPOSITORY_URL: 'https://***@example.invalid/x' "
        "holds a password", env=(("TWINE_REPOSITORY_URL",
                                  "https://u:pw@pw-s3cret@example.invalid/x"),)),
    "index --merge an hf_token": command(
        "index", "--merge", "https://example.invalid/site/?hf_token=hf_s3cretTOKEN",
        expected="holds a 'hf_token' query parameter, which may be a secret"),
    "index --merge a fragment": command(
        "index", "--merge", "https://example.invalid/site/#access_token=tok-s3cret",
        expected="'https://example.invalid/site/#access_token=***' holds a fragment"),
    "build --base-url an auth_token": command(
        "build", "matrix.yaml", "--base-url", "https://example.invalid/w?auth_token=tok-s3cret",
        expected="'https://example.invalid/w?auth_token=***' is not an http(s) URL"),
    "build --verify-objects 2": command("build", "matrix.yaml", "--verify-objects", "2",
                                        expected="must be between 0 and 1"),
    "build --verify-objects -5%": command("build", "matrix.yaml", "--verify-objects=-5%",
                                          expected="must be between 0 and 1"),
    "build --unit-shard past the bound": command(
        "build", "matrix.yaml", "--unit-shard", "1/99999999999999999999",
        expected="is not a shard I/N with 1 <= I <= N <= 10000"),
    "build --memory of 400 digits": command("build", "matrix.yaml", "--memory", "9" * 400,
                                            expected="is not a usable size"),
    "plan --torch-python that floods": command(
        "plan", "matrix.yaml", "--torch-python", "flood/python",
        expected="printed more than 4194304 bytes",
        setup=lambda p: (write(p / "flood" / "python", "#!/bin/sh\nexec yes hf_s3cretTOKEN\n"),
                         (p / "flood" / "python").chmod(0o755))),
    "doctor --python that floods": command(
        "doctor", "--python", "flood/python", expected="printed more than 4194304 bytes", exit=1,
        setup=lambda p: (write(p / "flood" / "python", "#!/bin/sh\nexec yes tok-s3cret\n"),
                         (p / "flood" / "python").chmod(0o755))),
    "costs: a file": replaced('["2.11"]', '["2.11"]', "costs: 'matrix.yaml' is not a folder",
                              extra="costs: matrix.yaml\n"),
    "costs: missing": replaced('["2.11"]', '["2.11"]', "costs: 'measured' is not a folder",
                               extra="costs: measured\n"),
    "git URL with an hf_token": replaced(
        "path: demo", "git: https://example.com/k.git?hf_token=hf_s3cretTOKEN",
        "holds a 'hf_token' query parameter, which may be a secret"),
    "torch index with a jwt": replaced(
        'sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: https://example.com/whl?jwt=tok-s3cret',
        "torch-index: 'https://example.com/whl?jwt=***' holds a 'jwt' query parameter"),
    "publish --to ftp": command("publish", "--to", "ftp://example.invalid/x",
                                expected="is not a folder, s3://"),
    "publish --to the output": command("publish", "--to", "index",
                                       expected="is the output folder, or inside it"),
    "publish --to inside the output": command("publish", "--to", "index/site",
                                              expected="is the output folder, or inside it"),
    "publish --to a file": command("publish", "--to", "matrix.yaml",
                                   expected="exists and is not a folder"),
    "publish --to and --repository": command("publish", "--to", "x", "--repository", "y",
                                             expected="not allowed with argument"),
    "serve port 70000": command("serve", "--port", "70000", expected="is not a port number"),
    "serve port -1": command("serve", "--port", "-1", expected="is not a port number"),
    "serve a missing folder": command("serve", "nothere", expected="nothere"),
    "inspect a folder named .whl": command("inspect", "x.whl", expected="no such wheel",
                                           setup=lambda p: (p / "x.whl").mkdir()),
    "inspect an empty wheel": command("inspect", "index/files/e-1.0-py3-none-any.whl",
                                      expected="cannot read the wheel (not a zip file)",
                                      setup=files_entry("e-1.0-py3-none-any.whl", b"")),
    "inspect a text file": command("inspect", "index/files/t-1.0-py3-none-any.whl",
                                   expected="cannot read the wheel",
                                   setup=files_entry("t-1.0-py3-none-any.whl", b"not a zip")),
    "inspect a bad wheel name": command("inspect", "x.whl", expected="cannot read the wheel",
                                        setup=lambda p: (p / "x.whl").write_bytes(b"PK")),
    "verify an empty wheel": command("verify", "index/files/e-1.0-py3-none-any.whl",
                                     expected="cannot read the wheel",
                                     setup=files_entry("e-1.0-py3-none-any.whl", b"")),
    "verify a missing wheel": command("verify", "gone-1.0-py3-none-any.whl",
                                      expected="no such wheel"),
    "verify --source empty": command("verify", "x.whl", "--source", "",
                                     expected="argument --source: must not be empty"),
    # ---- output folder states ------------------------------------------------------------
    "index: a cell folder links outside": command(
        "index", expected="is a link to ../old-site/kept; the factory writes only inside",
        setup=link("index/cu124torch26", "../old-site/kept")),
    "index: files/ links outside": command(
        "index", expected="is a link to", setup=in_turn(
            lambda p: shutil.move(p / "index" / "files", p / "elsewhere"),
            lambda p: os.symlink("../elsewhere", p / "index" / "files"))),
    "index --merge: files/ links outside": command(
        "index", "--merge", "merged", expected="is a link to ../old-site/files",
        setup=in_turn(
            lambda p: shutil.copytree(p / "index", p / "merged"),
            lambda p: make_wheel(p / "merged" / "files", "extra", "1.0.0+cu130torch211"),
            lambda p: (p / "old-site").mkdir(),
            lambda p: shutil.move(p / "index" / "files", p / "old-site"),
            lambda p: os.symlink("../old-site/files", p / "index" / "files"))),
    "index --merge: a job's wheel that no build of it published": command(
        "index", "--merge", "job", "--out", "site", exit=1,
        expected="stray-9.9-cp39-abi3-linux_x86_64.whl: no build of job published it (its "
                 "manifest does not record it); nothing was merged",
        setup=lambda p: (shutil.copytree(p / "index", p / "job"),
                         make_wheel(p / "job" / "files", "stray", "9.9"))),
    "a git source whose scp-like user part is a token": replaced(
        "path: demo", "git: ghp_s3cretTOKEN0123456789abcdefghij@github.com:org/k.git",
        "kernels[0].git: '***@github.com:org/k.git' holds a token in its user part"),
    "serve with a negative per-client limit": command(
        "serve", "index", "--per-client", "-3", expected="'-3' is not a number of connections "
        "(0 to 1024)"),
    "init --github pinned by a tag": command(
        "init", "demo", "--github", "--ref", "v1.2.0", expected="--ref: is 'v1.2.0'; a caller "
        "pins the reusable workflow by a full commit (40 hex digits)"),
    "init --github through a .github that links outside": command(
        "init", "demo", "--github", expected="demo/.github: --github: is a link to "
        "../old-site/kept; the factory writes only inside the kernel's folder",
        setup=in_turn(lambda p: (p / "old-site" / "kept").mkdir(parents=True),
                      lambda p: os.symlink("../old-site/kept", p / "demo" / ".github"))),
    "publish a folder holding a wheel its index does not record": command(
        "publish", "index", "--repository-url", "http://127.0.0.1:9/", exit=1,
        expected="stray-9.9-cp39-abi3-linux_x86_64.whl: the index of index does not record it; "
                 "nothing was uploaded",
        setup=lambda p: make_wheel(p / "index" / "files", "stray", "9.9")),
    "index: .factory links outside": command(
        "index", expected="is a link to", setup=in_turn(
            lambda p: shutil.move(p / "index" / ".factory", p / "private"),
            lambda p: os.symlink("../private", p / "index" / ".factory"))),
    "build: a dangling link where a project folder goes": command(
        "build", "matrix.yaml", expected="is a link to ../../../old-site/kept",
        setup=link("index/simple/img2gray", "../../../old-site/kept")),
    "build: a project folder links outside": command(
        "build", "matrix.yaml", expected="is a link to ../../old-site/kept",
        setup=link("index/simple/img2gray", "../../old-site/kept")),
    "yank: a label folder links outside": command(
        "yank", "img2gray", "1.0.0", "--reason", "r", expected="is a link to",
        setup=link("index/cu130torch213", "../old-site/kept")),
    "manifest cut short": command("index", expected="manifest.json cannot be read (not valid "
                                  "JSON): move it away", exit=1, setup=manifest(b'{"schema": "k')),
    "manifest garbage": command("index", expected="cannot be read (not valid JSON)", exit=1,
                                setup=manifest(b"\x00\xff garbage")),
    "manifest a list": command("index", expected="is not a manifest this factory reads",
                               exit=1, setup=manifest(b"[1, 2, 3]")),
    "manifest a number": command("index", expected="is not a manifest this factory reads",
                                 exit=1, setup=manifest(b"42")),
    "manifest a folder": command("index", expected="manifest.json cannot be read (Is a "
                                 "directory)", exit=1, setup=manifest(None)),
    "manifest of another schema": command("index", expected="(schema 'other/9')", exit=1,
                                          setup=manifest(b'{"schema": "other/9"}')),
    "manifest rows of the wrong shape": command(
        "index", expected="is damaged (a record of the wrong shape)", exit=1,
        setup=lambda p: _edit_manifest(p, lambda data: data["files"].__setitem__(0, [1, 2]))),
    "manifest leading a page outside": command(
        "index", expected="is damaged (a record of the wrong shape)", exit=1,
        setup=lambda p: _edit_manifest(p, lambda data: data["files"][0].__setitem__(
            1, "../../../escaped"))),
    "manifest with markup for a time": command(
        "index", expected="is damaged (a record of the wrong shape)", exit=1,
        setup=lambda p: _edit_manifest(p, lambda data: data["files"][0].__setitem__(
            data["file_fields"].index("upload_time"), "<script>alert(1)</script>"))),
    "manifest cells of the wrong shape": command(
        "yank", "img2gray", "1.0.0", "--reason", "r", expected="is damaged", exit=1,
        setup=lambda p: _edit_manifest(p, lambda data: data.__setitem__("cells", {"x": [1]}))),
    # ---- a kernel's tests: what pytest is given --------------------------------------------
    "tests: a path out of tests/": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {paths: [../../etc/passwd]}",
        "must be a path inside the kernel's tests/ folder"),
    "tests: an absolute path": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {paths: [/etc]}",
        "must be a path inside the kernel's tests/ folder"),
    "tests: an option as a path": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {paths: [-p=evil_plugin]}",
        "is not a path or pytest node id inside tests/"),
    "tests: a path holding a newline": replaced(
        "version: 1.0.0", 'version: 1.0.0\n    tests: {paths: ["a.py\\n--pdb"]}',
        "is not a path or pytest node id inside tests/"),
    "tests: a keyword holding a NUL": replaced(
        "version: 1.0.0", 'version: 1.0.0\n    tests: {keyword: "a\\0b"}',
        "the expression must be one line of printable text"),
    "tests: a requirement from a URL with a token": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {requires: ['e @ https://h.invalid/e.whl"
        "?token=tok-s3cret']}", "name a project on the index, not a URL"),
    "tests: a timeout of ten years": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {timeout: 87600h}",
        "must be between 1 second and a year"),
    "tests: a list": replaced("version: 1.0.0", "version: 1.0.0\n    tests: [a.py]",
                              "expected a table"),
    "tests: a budget of ten years": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {budget: 87600h}",
        "must be between 1 second and a year"),
    "tests: required, perhaps": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {required: perhaps}",
        "expected a boolean, got a string 'perhaps'"),
    "tests: without a requirement, not a name": replaced(
        "version: 1.0.0", "version: 1.0.0\n    tests: {without: ['numpy>=2']}",
        "is not a project name (give the name alone, e.g. numpy)"),
    "tests: the matrix's own tests choosing paths": replaced(
        "version: 1.0.0", "version: 1.0.0", "'paths' chooses one kernel's tests: give it in "
        "that kernel's tests: table", extra="tests: {paths: [test_a.py]}\n"),
    "tests: the matrix's own tests, an unknown key": replaced(
        "version: 1.0.0", "version: 1.0.0", "tests.budjet: unknown key (did you mean 'budget'?)",
        extra="tests: {budjet: 5m}\n"),
    # ---- wheelhouses: folders of wheels for the tests' environments ------------------------
    "wheelhouse: a file": Case(
        ("build", "matrix.yaml"), "wheelhouse 'wh' is not a folder", matrix=GOOD_MATRIX
        + "wheelhouse: wh\n", setup=lambda p: (p / "wh").write_text("x")),
    "wheelhouse: missing": replaced("version: 1.0.0", "version: 1.0.0",
                                    "wheelhouse 'nowhere' does not exist",
                                    extra="wheelhouse: [nowhere]\n"),
    "wheelhouse: no wheel in it": Case(
        ("build", "matrix.yaml"), "wheelhouse 'wh' holds no wheel", matrix=GOOD_MATRIX
        + "wheelhouse: wh\n", setup=lambda p: (p / "wh").mkdir()),
    "wheelhouse: a damaged wheel": Case(
        ("build", "matrix.yaml"), "holds a damaged wheel, einops-0.8.2-py3-none-any.whl: not a "
        "readable zip file", matrix=GOOD_MATRIX + "wheelhouse: wh\n",
        setup=lambda p: damaged_wheelhouse(p / "wh")),
    "--wheelhouse a file": command(
        "build", "matrix.yaml", "--wheelhouse", "matrix.yaml",
        expected="matrix.yaml: --wheelhouse: is not a folder (a wheelhouse is a folder of .whl "
                 "files)"),
    "--wheelhouse with no wheel": command(
        "test", "matrix.yaml", "--wheelhouse", "demo",
        expected="demo: --wheelhouse: holds no wheel (.whl files at its top level)"),
    "--wheelhouse, a wheel that names another project": command(
        "build", "matrix.yaml", "--wheelhouse", "wh",
        expected="holds a damaged wheel, einops-0.8.2-py3-none-any.whl: its METADATA names six "
                 "1.0, its file name einops 0.8.2",
        setup=lambda p: renamed_wheelhouse(p / "wh")),
    "wheelhouse --installed, a line that is not one": command(
        "wheelhouse", "matrix.yaml", "wh", "--installed", "frozen.txt",
        expected="frozen.txt:2: --installed: 'not a requirement!' is not a line of `pip freeze`",
        setup=lambda p: (p / "frozen.txt").write_text("numpy==2.5.2\nnot a requirement!\n")),
    "wheelhouse --installed, a FIFO": command(
        "wheelhouse", "matrix.yaml", "wh", "--installed", "frozen.fifo",
        expected="frozen.fifo: --installed: is not a regular file of at most 4.0 MiB",
        setup=lambda p: os.mkfifo(p / "frozen.fifo")),
    "wheelhouse --installed, a device": command(
        "wheelhouse", "matrix.yaml", "wh", "--installed", "/dev/zero",
        expected="/dev/zero: --installed: is not a regular file of at most 4.0 MiB"),
    # ---- the object cache's key --------------------------------------------------------------
    "object key, not UTF-8": build(
        "$KERNEL_WHEEL_FACTORY_OBJECT_KEY: is not UTF-8 text",
        env=(("KERNEL_WHEEL_FACTORY_OBJECT_KEY", "object-key-\udcff-object-key"),)),
    "object key file readable by others": build(
        "object-cache.key: is readable by others (mode 0644)", setup=lambda p: key_file(p, 0o644),
        env=_KEY_FILE_ENV),
    "object key file, a FIFO": build(
        "object-cache.key: is not a small regular file", setup=lambda p: key_file(p, None),
        env=_KEY_FILE_ENV),
    "object key file, a link": build(
        "object-cache.key: cannot be read as the object cache's key (is a link)",
        setup=lambda p: key_file(p, 0o600, link=True), env=_KEY_FILE_ENV),
    "wheelhouse --python four": command(
        "wheelhouse", "matrix.yaml", "wh", "--python", "4",
        expected="argument --python: give a CPython as 3.N or, free-threaded, 3.Nt (e.g. 3.12, "
                 "3.14t), got '4'"),
    "wheelhouse --python 3.12t": command(
        "wheelhouse", "matrix.yaml", "wh", "--python", "3.12t",
        expected="argument --python: CPython 3.12 has no free-threaded build"),
    "wheelhouse into a file": command(
        "wheelhouse", "matrix.yaml", "matrix.yaml", expected="exists and is not a folder"),
    "verify an index without a manifest": command(
        "index", "--verify", expected="has no .factory/manifest.json to verify against",
        setup=lambda p: (p / "index" / ".factory" / "manifest.json").unlink()),
}


# ---- every way a URL enters, with every place a secret hides in one ----------------------
# Each entry point takes a URL; each form hides a secret in it (its user part, a query value
# under a name no list may know, a fragment). Every one is refused in one line that shows the
# URL masked, and nothing of the secret.
_ENTRY_POINTS: dict[str, tuple[str, Callable[[str, str], Case]]] = {
    "a git source": ("https://example.com/k.git", lambda url, said: replaced(
        "path: demo", f"git: {url}", said)),
    "torch-index": ("https://example.com/whl", lambda url, said: replaced(
        'sms: ["9.0"]', f'sms: ["9.0"]\n    torch-index: {url}', said)),
    "publish --to": ("https://h.invalid/x", lambda url, said: command(
        "publish", "--to", url, expected=said)),
    "publish --repository-url": ("https://example.invalid/legacy/", lambda url, said: command(
        "publish", "--repository-url", url, expected=said)),
    "publish --index-url": ("https://example.invalid/simple/", lambda url, said: command(
        "publish", "--repository-url", "https://example.invalid/legacy/", "--index-url", url,
        expected=said)),
    "TWINE_REPOSITORY_URL": ("https://example.invalid/x", lambda url, said: command(
        "publish", "--dry-run", expected=said, env=(("TWINE_REPOSITORY_URL", url),))),
    "index --merge": ("https://example.invalid/site/", lambda url, said: command(
        "index", "--merge", url, expected=said)),
    "build --base-url": ("https://example.invalid/w", lambda url, said: command(
        "build", "matrix.yaml", "--base-url", url, expected=said)),
}
_QUERY_NAMES = ("token", "access_token", "private_token", "auth_token", "api_token", "apikey",
                "hf_token", "jwt", "refresh_token", "X-Amz-Signature", "X-Goog-Signature",
                "sig", "password", "session", "code")


def _secret_forms(base: str) -> dict[str, tuple[str, str]]:
    """form -> (the URL with a secret in it, what the one line shows of it)."""
    scheme, rest = base.split("://", 1)
    forms = {"a password": (f"{scheme}://u:pw-s3cret@{rest}", f"'{scheme}://***@{rest}'"),
             "a password holding @": (f"{scheme}://u:pw@pw-s3cret@{rest}",
                                      f"'{scheme}://***@{rest}'"),
             "a token as its user": (f"{scheme}://ghp_s3cret0123456789abcdef@{rest}",
                                     f"'{scheme}://***@{rest}'"),
             "a fragment": (f"{base}#tok-s3cret", f"'{base}#***'")}
    for name in _QUERY_NAMES:
        forms[f"a {name} query"] = (f"{base}?{name}=tok-s3cret", f"'{base}?{name}=***'")
    return forms


URL_CASES = {f"{form} in {entry}": make(url, said)
             for entry, (base, make) in _ENTRY_POINTS.items()
             for form, (url, said) in _secret_forms(base).items()}
assert not set(URL_CASES) & set(CASES)
CASES |= URL_CASES

# Permissions do not hold back root: these cases are hostile only to other users.
AS_ROOT = os.geteuid() == 0
if AS_ROOT:
    CASES = {name: case for name, case in CASES.items()
             if "read-only" not in name and "unreadable" not in name}


def _edit_manifest(project: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    import json

    path = project / "index" / ".factory" / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="session")
def published_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder with a real index of small wheels, made once and copied per case."""
    out = small_index_files(tmp_path_factory.mktemp("hostile") / "index")
    update_index(out)
    return out


@pytest.fixture
def hostile_project(tmp_path: Path, published_index: Path,
                    monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    shutil.copytree(published_index, tmp_path / "index", symlinks=True)
    make_kernel(tmp_path / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(tmp_path / "matrix.yaml", GOOD_MATRIX)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNEL_WHEEL_FACTORY_CACHE", str(tmp_path / "cache"))
    for name in ("UV_OFFLINE", "HF_HUB_OFFLINE", "PIP_NO_INDEX"):  # a case that got through
        monkeypatch.setenv(name, "1")  # must fail fast, not download toolkits
    for name in ("TWINE_REPOSITORY_URL", "SOURCE_DATE_EPOCH"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    for folder, subfolders, _ in os.walk(tmp_path):  # let pytest clean up what a case locked
        for name in subfolders:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(stat.S_IRWXU)
    for name in ("matrix.yaml",):
        if (tmp_path / name).exists():
            (tmp_path / name).chmod(0o644)

