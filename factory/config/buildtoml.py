"""Read a kernel repo's build.toml, in any of the five dialects real repos use, into a KernelSpec.

The dialect is chosen by `general.edition` where present (5), else by trial: v4, v3, v2, v1,
the order kernel-builder uses (the stricter first). Every dialect refuses unknown keys. Files
named by the spec (sources, include folders, the Python package) are checked after the dialect
is known, so an error names the real problem rather than a dialect mismatch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import ConfigError
from ..policy import dependency_releases
from ..policy.capabilities import Capability, known_sms_text
from ..trust.safety import leaves_root
from ..values.versions import Version, parse_release
from .flags import compiler_flags
from .flake import check_inputs
from .nodes import Node, load_toml
from .spec import (
    BACKEND_PYTHON_DEPENDS,
    BACKENDS,
    GENERAL_PYTHON_DEPENDS,
    KernelDepend,
    KernelSection,
    KernelSpec,
    NoarchSection,
    TorchSection,
)

__all__ = ["LATEST_EDITION", "read_build_toml"]

LATEST_EDITION = 5

# Warnings found while reading one file (collected per call of read_build_toml).
_WARNINGS: ContextVar[list[str]] = ContextVar("build_toml_warnings")

# Lowercase letters, digits, "-"; older repos also use "_" (causal_conv1d, layer_norm).
_NAME = re.compile(r"[a-z][-_a-z0-9]*[a-z0-9]")
# Dependencies of other backends' kernels; `cutlass_sycl` is the older name of `sycl_tla`,
# still found in real repos.
_OTHER_BACKEND_DEPENDS = ("metal-cpp", "sycl_tla", "cutlass_sycl")


@dataclass(frozen=True)
class _Key:
    check: Callable[[Node], Any]
    required: bool = False


def _table(node: Node, schema: dict[str, _Key]) -> dict[str, Any]:
    required = [name for name, key in schema.items() if key.required]
    entries = node.table(schema, required)
    return {name: schema[name].check(child) for name, child in entries.items()}


def _sub(schema: dict[str, _Key], required: bool = False) -> _Key:
    return _Key(lambda node: _table(node, schema), required)


# ---- value checks ------------------------------------------------------------------------------

def _str(node: Node) -> str:
    return node.nonempty_str()


def _field(node: Node) -> str:
    """A value that becomes a line of the wheel's METADATA (the license): one line of text."""
    value = node.nonempty_str()
    if any(not char.isprintable() for char in value):
        raise node.error(f"{value!r} holds a control character or a line break; a METADATA "
                         "field is one line of text")
    return value


def _str_list(node: Node) -> tuple[str, ...]:
    return node.str_list()


@dataclass(frozen=True)
class _Paths:
    """Repo-relative paths with the node they came from, checked once the dialect is known."""

    entries: tuple[tuple[str, Node], ...]


def _paths(node: Node) -> _Paths:
    return _Paths(tuple((item.nonempty_str(), item) for item in node.list()))


def _version(node: Node) -> Version:
    try:
        return parse_release(node.str())
    except ValueError as exc:
        raise node.error(str(exc)) from None


# Long enough for any real kernel; short enough that its wheel's file name, with version,
# label, tags and a temporary prefix, stays inside the 255 bytes a file name may have.
MAX_NAME = 64


def _name(node: Node) -> str:
    name = node.str()
    if len(name) > MAX_NAME:
        raise node.error(f"the kernel name is {len(name)} characters long; at most {MAX_NAME}")
    if not _NAME.fullmatch(name):
        raise node.error(f"invalid kernel name '{name}': use lowercase letters, digits, '-' "
                         "and '_', starting with a letter (e.g. 'img2gray', 'flash-attn')")
    return name


def _capabilities(node: Node) -> tuple[Capability, ...]:
    capabilities = []
    for item in node.list():
        try:
            capability = Capability.parse(item.str())
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if not capability.is_known:
            # Real repos carry such entries (megablocks lists "11.8"); kernel-builder keeps them
            # and no target ever selects them. Say so rather than refuse an unmodified repo.
            _WARNINGS.get().append(item.error(
                f"'{capability}' is not a known compute capability ({known_sms_text()}); "
                "no target SM can select it").render())
        capabilities.append(capability)
    if not capabilities:
        raise node.error("must list at least one capability (or leave the key out)")
    return tuple(capabilities)


def _backends(node: Node) -> tuple[str, ...]:
    backends = []
    for item in node.list():
        value = item.str()
        if value not in BACKENDS:
            raise item.error(f"unknown backend '{value}' (known: {', '.join(BACKENDS)})")
        backends.append(value)
    return tuple(backends)


def _depends(node: Node) -> tuple[str, ...]:
    known = ["torch", *dependency_releases(), *_OTHER_BACKEND_DEPENDS]
    values = []
    for item in node.list():
        value = item.str()
        if value not in known:
            raise item.error(f"unknown dependency '{value}' (known: {', '.join(known)})")
        values.append(value)
    return tuple(values)


def _python_depends(*tables: dict[str, str]) -> Callable[[Node], tuple[str, ...]]:
    known: dict[str, str] = {}
    for table in tables:
        known.update(table)

    def check(node: Node) -> tuple[str, ...]:
        names = []
        for item in node.list():
            value = item.str()
            if value not in known:
                raise item.error(f"unknown Python dependency '{value}' "
                                 f"(known here: {', '.join(sorted(known)) or 'none'})")
            names.append(value)
        return tuple(names)

    return check


def _edition(node: Node) -> int:
    edition = node.int()
    if edition != LATEST_EDITION:
        raise node.error(f"unsupported edition {edition}: this factory reads editions up to "
                         f"{LATEST_EDITION} and the older unversioned dialects")
    return edition


def _stable_abi_any(node: Node) -> tuple[tuple[str, Version], ...]:
    """v5: one torch version for every backend, or a table of backend -> version."""
    if isinstance(node.value, dict):
        entries = []
        for backend, child in node.mapping().items():
            if backend not in BACKENDS:
                raise child.error(f"unknown backend '{backend}' (known: {', '.join(BACKENDS)})")
            entries.append((backend, _version(child)))
        return tuple(entries)
    return (("*", _version(node)),)


def _stable_abi_single(node: Node) -> tuple[tuple[str, Version], ...]:
    return (("*", _version(node)),)


def _kernel_depends(node: Node) -> tuple[KernelDepend, ...]:
    found = []
    for item in node.list():
        entry = _table(item, {"repo-id": _Key(_str, True), "version": _Key(lambda n: n.int()),
                              "revision": _Key(_str)})
        if ("version" in entry) == ("revision" in entry):
            raise item.error("give exactly one of 'version' and 'revision'")
        found.append(KernelDepend(entry["repo-id"], entry.get("version"), entry.get("revision")))
    return tuple(found)


# ---- schemas -----------------------------------------------------------------------------------

_HUB = {"repo-id": _Key(_str), "branch": _Key(_str)}

_KERNEL_COMMON = {
    "backend": _Key(_str, True),
    "src": _Key(_paths, True),
    "depends": _Key(_depends, True),
    "include": _Key(_paths),
    "cxx-flags": _Key(compiler_flags),
}
_KERNEL_BY_BACKEND = {
    "cpu": _KERNEL_COMMON,
    "metal": _KERNEL_COMMON,
    "cuda": {**_KERNEL_COMMON, "cuda-capabilities": _Key(_capabilities),
             "cuda-flags": _Key(compiler_flags), "cuda-minver": _Key(_version)},
    "rocm": {**_KERNEL_COMMON, "rocm-archs": _Key(_str_list), "hip-flags": _Key(compiler_flags)},
    "xpu": {**_KERNEL_COMMON, "sycl-flags": _Key(compiler_flags)},
}

_V1_KERNEL = {
    "cuda-capabilities": _Key(_capabilities),
    "rocm-archs": _Key(_str_list),
    "language": _Key(_str),
    "depends": _Key(_depends, True),
    "include": _Key(_paths),
    "src": _Key(_paths, True),
}
_V1_LANGUAGES = {"cuda": "cuda", "cuda-hipify": "cuda", "metal": "metal"}


def _tagged_kernels(node: Node) -> dict[str, dict[str, Any]]:
    kernels = {}
    for name, child in node.mapping().items():
        entries = child.mapping()
        if "backend" not in entries:
            raise child.error("missing required key 'backend'")
        backend = entries["backend"].str()
        if backend not in _KERNEL_BY_BACKEND:
            raise entries["backend"].error(
                f"unknown kernel backend '{backend}' (known: {', '.join(_KERNEL_BY_BACKEND)})")
        kernels[name] = _table(child, _KERNEL_BY_BACKEND[backend]) | _lines(child)
    return kernels


def _lines(table: Node) -> dict[str, int | None]:
    """Where errors about the section's SMs point: its cuda-capabilities, else its header."""
    caps = table.mapping().get("cuda-capabilities")
    return {"_caps_line": caps.line if caps else table.line}


def _v1_kernels(node: Node) -> dict[str, dict[str, Any]]:
    kernels = {}
    for name, child in node.mapping().items():
        entry = _table(child, _V1_KERNEL)
        language = entry.pop("language", "cuda")
        if language not in _V1_LANGUAGES:
            raise child.mapping()["language"].error(
                f"unknown language '{language}' (known: {', '.join(_V1_LANGUAGES)})")
        kernels[name] = entry | {"backend": _V1_LANGUAGES[language]} | _lines(child)
    return kernels


def _cuda_general(extra: dict[str, _Key]) -> _Key:
    return _sub({"minver": _Key(_version), "maxver": _Key(_version),
                 "python-depends": _Key(_python_depends(GENERAL_PYTHON_DEPENDS,
                                                        BACKEND_PYTHON_DEPENDS["cuda"])),
                 **extra})


def _backend_general(backend: str, extra: dict[str, _Key]) -> _Key:
    return _sub({"python-depends": _Key(_python_depends(GENERAL_PYTHON_DEPENDS,
                                                        BACKEND_PYTHON_DEPENDS[backend])),
                 **extra})


_TORCH_V2 = {"include": _Key(_paths), "minver": _Key(_version), "maxver": _Key(_version),
             "pyext": _Key(_str_list), "src": _Key(_paths)}
# kernel-builder's documentation writes these keys in kebab-case, and its code reads them in
# snake_case (it renames no key of this section): both are taken, one of each pair.
_NOARCH_SPELLINGS = (("cuda-capabilities", "cuda_capabilities"), ("rocm-archs", "rocm_archs"))
_TORCH_NOARCH = {"pyext": _Key(_str_list), "cuda-capabilities": _Key(_capabilities),
                 "cuda_capabilities": _Key(_capabilities), "rocm-archs": _Key(_str_list),
                 "rocm_archs": _Key(_str_list)}
_TVM_FFI = {"include": _Key(_paths), "pyext": _Key(_str_list), "src": _Key(_paths, True),
            "cxx-flags": _Key(compiler_flags)}

_GENERAL_V3 = {
    "name": _Key(_name, True),
    "version": _Key(lambda node: node.int()),
    "license": _Key(_field),
    "upstream": _Key(_str),
    "backends": _Key(_backends, True),
    "cuda": _cuda_general({}),
    "hub": _sub(_HUB),
    "neuron": _backend_general("neuron", {}),
    "python-depends": _Key(_python_depends(GENERAL_PYTHON_DEPENDS)),
    "xpu": _backend_general("xpu", {}),
}
_GENERAL_V4 = {**_GENERAL_V3, "version": _Key(lambda node: node.int(), True),
               "license": _Key(_field, True), "source": _Key(_str)}
_KERNEL_DEPENDS = {"kernel-depends": _Key(_kernel_depends)}
_GENERAL_V5 = {**_GENERAL_V4, "edition": _Key(_edition, True), **_KERNEL_DEPENDS,
               "cuda": _cuda_general(_KERNEL_DEPENDS),
               "neuron": _backend_general("neuron", _KERNEL_DEPENDS),
               "xpu": _backend_general("xpu", _KERNEL_DEPENDS),
               "tpu": _backend_general("tpu", {})}

_TORCH_V4 = {**_TORCH_V2, "stable-abi": _Key(_stable_abi_single), "cxx-flags": _Key(compiler_flags)}
_TORCH_V5 = {**_TORCH_V4, "stable-abi": _Key(_stable_abi_any)}


def _parse_v1(root: Node) -> dict[str, Any]:
    data = _table(root, {
        "general": _sub({"name": _Key(_name, True)}, True),
        "torch": _sub({"include": _Key(_paths), "pyext": _Key(_str_list), "src": _Key(_paths),
                       "universal": _Key(lambda node: node.bool())}, True),
        "kernel": _Key(_v1_kernels),
    })
    universal = data["torch"].pop("universal", False)
    return _normalise(data, framework="torch-noarch" if universal else "torch",
                      framework_key="torch")


def _parse_v2(root: Node) -> dict[str, Any]:
    data = _table(root, {
        "general": _sub({
            "name": _Key(_name, True),
            "universal": _Key(lambda node: node.bool()),
            "cuda-maxver": _Key(_version),
            "cuda-minver": _Key(_version),
            "hub": _sub(_HUB),
            "python-depends": _Key(_python_depends(GENERAL_PYTHON_DEPENDS,
                                                   BACKEND_PYTHON_DEPENDS["cuda"])),
        }, True),
        "torch": _sub(_TORCH_V2),
        "kernel": _Key(_tagged_kernels),
    })
    general = data["general"]
    if "torch" not in data and not general.get("universal"):
        raise root.error("missing required key 'torch' (only a universal kernel may leave it out)")
    general["cuda"] = {k: general.pop(f"cuda-{k}") for k in ("minver", "maxver")
                       if f"cuda-{k}" in general}
    universal = general.pop("universal", False)
    return _normalise(data, framework="torch-noarch" if universal else "torch",
                      framework_key="torch")


def _parse_v3(root: Node) -> dict[str, Any]:
    data = _table(root, {"general": _sub(_GENERAL_V3, True), "torch": _sub(_TORCH_V2),
                         "tvm-ffi": _sub(_TVM_FFI), "kernel": _Key(_tagged_kernels)})
    present = _frameworks(root, data, ("torch", "tvm-ffi"), required=False)
    return _normalise(data, framework=present or "torch-noarch", framework_key=present)


def _parse_v4(root: Node) -> dict[str, Any]:
    return _parse_framework_dialect(root, _GENERAL_V4, _TORCH_V4)


def _parse_v5(root: Node) -> dict[str, Any]:
    return _parse_framework_dialect(root, _GENERAL_V5, _TORCH_V5)


def _parse_framework_dialect(root: Node, general: dict[str, _Key],
                             torch: dict[str, _Key]) -> dict[str, Any]:
    data = _table(root, {"general": _sub(general, True), "torch": _sub(torch),
                         "torch-noarch": _sub(_TORCH_NOARCH), "tvm-ffi": _sub(_TVM_FFI),
                         "kernel": _Key(_tagged_kernels)})
    present = _frameworks(root, data, ("torch", "torch-noarch", "tvm-ffi"), required=True)
    assert present is not None  # required: a missing section was refused
    if present == "torch-noarch":
        _one_spelling(root.mapping()["torch-noarch"], data["torch-noarch"])
    return _normalise(data, framework=present, framework_key=present)


def _one_spelling(node: Node, section: dict[str, Any]) -> None:
    """[torch-noarch]'s arch keys under their kebab-case names, whichever spelling gave them."""
    for kebab, snake in _NOARCH_SPELLINGS:
        if kebab in section and snake in section:
            raise node.mapping()[snake].error(f"'{kebab}' is given too: give one of the two "
                                              "spellings")
        if snake in section:
            section[kebab] = section.pop(snake)


def _frameworks(root: Node, data: dict[str, Any], names: tuple[str, ...],
                required: bool) -> str | None:
    present = [name for name in names if name in data]
    if len(present) > 1:
        second = root.mapping()[present[1]]
        raise second.error(f"only one framework section may be given, found [{present[0]}] too")
    if required and not present:
        sections = ", ".join(f"[{name}]" for name in names)
        raise root.error(f"missing a framework section: one of {sections}")
    return present[0] if present else None


def _normalise(data: dict[str, Any], framework: str,
               framework_key: str | None) -> dict[str, Any]:
    data["framework"] = framework
    data["framework_section"] = data.get(framework_key, {}) if framework_key else {}
    data.setdefault("kernel", {})
    return data


_DIALECTS: dict[int, Callable[[Node], dict[str, Any]]] = {
    5: _parse_v5, 4: _parse_v4, 3: _parse_v3, 2: _parse_v2, 1: _parse_v1,
}


# ---- entry point -------------------------------------------------------------------------------

def read_build_toml(root: Path) -> KernelSpec:
    """Read and validate `root/build.toml`; raise ConfigError naming file, line and key."""
    path = root / "build.toml"
    if not root.is_dir():
        raise ConfigError("kernel folder not found", file=root)
    document = load_toml(path)
    warnings: list[str] = []
    token = _WARNINGS.set(warnings)
    try:
        dialect, data = _detect(document)
    finally:
        _WARNINGS.reset(token)
    name_line = document.mapping()["general"].mapping()["name"].line
    return _to_spec(root, path, dialect, data, name_line, tuple(dict.fromkeys(warnings)))


def _detect(document: Node) -> tuple[int, dict[str, Any]]:
    general = document.mapping().get("general") if isinstance(document.value, dict) else None
    if general is None:
        raise document.error("missing required table [general]")
    general_keys = general.mapping()
    if "edition" in general_keys:
        _edition(general_keys["edition"])
        return 5, _parse_v5(document)

    errors: dict[int, ConfigError] = {}
    for dialect in (4, 3, 2, 1):
        try:
            return dialect, _DIALECTS[dialect](document)
        except ConfigError as exc:
            errors[dialect] = exc
    raise errors[_likely_dialect(document)]


def _likely_dialect(document: Node) -> int:
    """The dialect a file that fits none was most probably meant to be, for the error shown."""
    general = document.mapping()["general"].mapping()
    if "backends" in general:
        return 4 if ("version" in general or "license" in general) else 3
    kernels = document.mapping().get("kernel")
    tagged = kernels is not None and isinstance(kernels.value, dict) and any(
        isinstance(k.value, dict) and "backend" in k.value for k in kernels.value.values())
    if tagged or any(key in general for key in ("universal", "cuda-minver", "cuda-maxver")):
        return 2
    return 1


def _to_spec(root: Path, path: Path, dialect: int, data: dict[str, Any],
             name_line: int | None, warnings: tuple[str, ...]) -> KernelSpec:
    general = data["general"]
    section = data["framework_section"]
    framework = data["framework"]
    cuda = general.get("cuda", {})

    torch = None
    if framework == "torch":
        torch = TorchSection(
            src=_checked(root, section.get("src"), kind="file"),
            include=_checked(root, section.get("include"), kind="dir"),
            pyext=section.get("pyext", ()),
            minver=section.get("minver"),
            maxver=section.get("maxver"),
            cxx_flags=section.get("cxx-flags", ()),
            stable_abi=section.get("stable-abi", ()),
        )
    noarch = None
    if framework == "torch-noarch":
        noarch = NoarchSection(pyext=section.get("pyext", ()),
                               cuda_capabilities=section.get("cuda-capabilities", ()))

    kernels = [_kernel_section(root, name, entry)
               for name, entry in sorted(data["kernel"].items())]

    backends = general.get("backends")
    if backends is None:  # v1/v2: the backends are those of the kernels
        backends = tuple(sorted({kernel.backend for kernel in kernels}))
        if framework == "torch-noarch":
            backends = tuple(b for b in BACKENDS if b != "tpu")

    spec = KernelSpec(
        root=root, build_toml=path, dialect=dialect,
        name=general["name"], major_version=general.get("version"),
        license=general.get("license"), backends=backends, framework=framework,
        python_depends=general.get("python-depends", ()),
        backend_python_depends=tuple(
            (backend, general[backend]["python-depends"]) for backend in BACKENDS
            if isinstance(general.get(backend), dict) and general[backend].get("python-depends")),
        cuda_minver=cuda.get("minver"), cuda_maxver=cuda.get("maxver"),
        torch=torch, noarch=noarch, kernels=tuple(kernels), warnings=warnings,
        test_requires=check_inputs(root),
        kind="noarch" if framework == "torch-noarch" else "kernel-builder",
        upstream=general.get("upstream"), source_url=general.get("source"),
        kernel_depends=tuple(
            (backend, depends) for backend, depends in
            [("", general.get("kernel-depends", ())),
             *((name, general[name].get("kernel-depends", ())) for name in BACKENDS
               if isinstance(general.get(name), dict))] if depends),
    )
    if framework in ("torch", "torch-noarch"):
        init = spec.package_dir / "__init__.py"
        if not init.is_file():
            raise ConfigError(
                f"the Python package is missing: expected {init.relative_to(root)} "
                "(torch-ext/<name with '-' as '_'>/__init__.py)",
                file=path, line=name_line, key="general.name")
    return spec


def _kernel_section(root: Path, name: str, entry: dict[str, Any]) -> KernelSection:
    return KernelSection(
        name=name,
        backend=entry["backend"],
        src=_checked(root, entry["src"], kind="file"),
        depends=entry["depends"],
        include=_checked(root, entry.get("include"), kind="dir"),
        cxx_flags=entry.get("cxx-flags", ()),
        cuda_capabilities=entry.get("cuda-capabilities"),
        cuda_flags=entry.get("cuda-flags", ()),
        cuda_minver=entry.get("cuda-minver"),
        capabilities_line=entry["_caps_line"],
    )


def _checked(root: Path, paths: _Paths | None, kind: str) -> tuple[str, ...]:
    """Repo-relative paths that stay inside the repo and exist."""
    if paths is None:
        return ()
    resolved_root = root.resolve()
    checked = []
    for text, node in paths.entries:
        relative = PurePosixPath(text)
        if leaves_root(text):
            raise node.error(f"'{text}' must be a path inside the kernel repo "
                             "(relative, without '..')")
        target = root / relative
        try:
            target.resolve().relative_to(resolved_root)
        except ValueError:
            raise node.error(f"'{text}' leads outside the kernel repo (through a symlink)") \
                from None
        exists = target.is_file() if kind == "file" else target.is_dir()
        if not exists:
            noun = "file" if kind == "file" else "folder"
            raise node.error(f"{noun} '{text}' does not exist in {root}")
        checked.append(relative.as_posix())
    return tuple(checked)
