"""Which kind of project a kernel source is, and the spec of a PEP 517 one.

A folder with a build.toml is a kernel-builder repo (config/buildtoml.py reads it). A folder with
a setup.py or a pyproject.toml and no build.toml is a PEP 517 project: a torch CUDA extension the
factory builds with `build`, through the project's own build backend. Of such a project the plan
needs its name (and, where its files state it, its version) before anything runs; they are read
from pyproject.toml's [project] table, setup.cfg's [metadata], or the literal arguments of
setup.py's setup() call. setup.py is parsed, never run: running it means importing torch and,
for many real projects, reaching the network.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ConfigError
from .buildtoml import read_build_toml
from .cutile import CutileKernel, read_declaration
from .nodes import Node, load_toml
from .spec import KernelSpec, ProjectKind

__all__ = ["PROJECT_FILES", "project_kind", "read_project", "static_version"]

PROJECT_FILES = ("setup.py", "pyproject.toml")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_LIMITED_API = re.compile(r"py_limited_api\s*=\s*(True|['\"]?cp3\d+)")


def project_kind(root: Path, stated: ProjectKind | None = None) -> ProjectKind | None:
    """The kind of project in `root`: the one stated (when its files are there), else
    kernel-builder when it has a build.toml, pep517 when it has setup.py or pyproject.toml;
    None when it is neither."""
    builder = (root / "build.toml").is_file()
    pep517 = any((root / name).is_file() for name in PROJECT_FILES)
    if stated is not None:
        return stated if (builder if stated == "kernel-builder" else pep517) else None
    if builder:
        return "kernel-builder"
    return "pep517" if pep517 else None


def read_project(root: Path, kind: ProjectKind) -> KernelSpec:
    """The spec of the project in `root`, read as `kind`."""
    if kind == "kernel-builder":
        return read_build_toml(root)
    return _read_pep517(root)


def static_version(root: Path) -> str | None:
    """The version the PEP 517 project in `root` states in its files, or None when only
    running it would tell."""
    return _read_pep517(root).static_version


def _read_pep517(root: Path) -> KernelSpec:
    name, version, license_text, origin = _pyproject(root)
    dependencies = _static_dependencies(root)
    cutile, requirement = _cutile(root)
    for reader in (_setup_cfg, _setup_py):
        if name is not None:
            break
        name, found, origin = reader(root)
        version = version or found
    if name is None:
        where = root / ("setup.py" if (root / "setup.py").is_file() else "pyproject.toml")
        raise ConfigError("the project's name cannot be read without running its build: give "
                          "setup() a literal name=, or a [project] name in pyproject.toml",
                          file=where, key="name")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"'{name}' is not a valid project name", file=origin, key="name")
    try:
        canonicalize_name(name, validate=True)
    except InvalidName:
        raise ConfigError(f"'{name}' is not a valid project name", file=origin,
                          key="name") from None
    if version is not None:
        try:
            version = str(Version(version))
        except InvalidVersion:
            version = None  # a build backend may still make sense of it; the tag or matrix rules
    limited = any(_LIMITED_API.search(_text(root / name))
                  for name in ("setup.py", "setup.cfg", "pyproject.toml"))
    return KernelSpec(
        root=root, build_toml=origin, dialect=0, name=name, major_version=None,
        license=license_text, backends=("cuda",), framework="torch", python_depends=(),
        backend_python_depends=(), cuda_minver=None, cuda_maxver=None, torch=None, noarch=None,
        kernels=(), kind="cutile" if requirement else "pep517", limited_api=limited,
        static_version=version, cutile=cutile, cutile_requirement=requirement,
        project_dependencies=dependencies,
    )


def _cutile(root: Path) -> tuple[tuple[CutileKernel, ...], str | None]:
    """A cuTile project's declared kernels and its requirement on cuda-tile: a project is one
    when [project] dependencies name cuda-tile; it must then declare what to compile ahead of
    time (config/cutile.py)."""
    path = root / "pyproject.toml"
    project = _project_table(path)
    if project is None or "dependencies" not in project:
        return (), None
    requirement = None
    for node in project["dependencies"].list():
        try:
            parsed = Requirement(node.str())
        except InvalidRequirement:
            raise node.error(f"'{node.value}' is not a requirement") from None
        if canonicalize_name(parsed.name) == "cuda-tile" and parsed.marker is None:
            requirement = str(parsed)
    if requirement is None:
        return (), None
    declared = read_declaration(path)
    if declared is None:
        raise ConfigError("a cuTile project (it depends on cuda-tile) must declare the "
                          "signatures its kernels are compiled for ahead of time: "
                          "[[tool.kernel-wheel-factory.cutile.kernel]] with function and "
                          "parameters (see docs/guides/cutile.md)", file=path,
                          key="tool.kernel-wheel-factory.cutile")
    return declared, requirement


def _project_table(path: Path) -> dict[str, Node] | None:
    """pyproject.toml's [project] table, where there is one."""
    if not path.is_file():
        return None
    document = load_toml(path)
    project = document.mapping().get("project") if isinstance(document.value, dict) else None
    return project.mapping() if project is not None and isinstance(project.value, dict) else None


def _dynamic(project: dict[str, Node]) -> set[str]:
    """The [project] fields it leaves to the build backend."""
    listed = project["dynamic"].value if "dynamic" in project else []
    return {item.value for item in listed if isinstance(item.value, str)} \
        if isinstance(listed, list) else set()


def _static_dependencies(root: Path) -> tuple[str, ...]:
    """pyproject.toml's [project] dependencies, unless it leaves them to the build backend
    (dynamic) or states none: what the project's wheels require, known before building."""
    project = _project_table(root / "pyproject.toml")
    if project is None or "dependencies" not in project:
        return ()
    if "dependencies" in _dynamic(project):
        return ()
    found = []
    for node in project["dependencies"].list():
        try:
            found.append(str(Requirement(node.str())))
        except InvalidRequirement:
            raise node.error(f"'{node.value}' is not a requirement") from None
    return tuple(found)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return ""


def _pyproject(root: Path) -> tuple[str | None, str | None, str | None, Path]:
    """[project] name, static version and license text of pyproject.toml."""
    path = root / "pyproject.toml"
    fields = _project_table(path)
    if fields is None:
        return None, None, None, path
    name = fields["name"].str() if "name" in fields else None
    version = None
    if "version" in fields and "version" not in _dynamic(fields):
        version = fields["version"].str()
    license_text = None
    if "license" in fields:
        node = fields["license"]
        if isinstance(node.value, str):
            license_text = node.value
        elif isinstance(node.value, dict) and "text" in node.mapping():
            license_text = node.mapping()["text"].str()
    return name, version, license_text, path


def _setup_cfg(root: Path) -> tuple[str | None, str | None, Path]:
    path = root / "setup.cfg"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_text(path))
    except configparser.Error:
        return None, None, path
    name = parser.get("metadata", "name", fallback=None)
    version = parser.get("metadata", "version", fallback=None)
    if version is not None and version.startswith(("attr:", "file:")):
        version = None
    return name, version, path


def _setup_py(root: Path) -> tuple[str | None, str | None, Path]:
    """The name= and version= of setup.py's setup() call, where each is a string literal or a
    module-level constant (PACKAGE_NAME = "causal_conv1d")."""
    path = root / "setup.py"
    try:
        tree = ast.parse(_text(path), filename=str(path))
    except (SyntaxError, ValueError):
        return None, None, path
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value

    def literal(value: ast.expr) -> str | None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        if isinstance(value, ast.Name):
            return constants.get(value.id)
        return None

    for found in ast.walk(tree):
        if not isinstance(found, ast.Call):
            continue
        function = found.func
        called = function.id if isinstance(function, ast.Name) else \
            function.attr if isinstance(function, ast.Attribute) else None
        if called != "setup":
            continue
        given = {keyword.arg: keyword.value for keyword in found.keywords if keyword.arg}
        name = literal(given["name"]) if "name" in given else None
        version = literal(given["version"]) if "version" in given else None
        return name, version, path
    return None, None, path
