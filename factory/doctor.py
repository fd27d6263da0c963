"""Which wheel of a kernel index fits this machine, and why the others do not.

    python doctor.py                      # this machine: Python, glibc, torch, driver, GPUs
    python doctor.py URL [PACKAGE]        # and the install command that fits it
    python doctor.py URL [PACKAGE] --json

One file, standard library only: every kernel-wheel-factory index serves it as doctor.py, so
`curl -s URL/doctor.py | python - URL` works where nothing else is installed (run it with the
Python that has the torch the kernel is for). `factory doctor` is the same program.

What it reads: torch (imported, when there is one), the NVIDIA driver through libcuda (its CUDA
version, each GPU's name and compute capability), and the index's browse data (browse.json,
browse/<project>.json), which lists every wheel with its torch requirement, CUDA version, GPU
code and tags. A wheel fits when its torch requirement holds for the installed torch, its CUDA
major is torch's, the driver is new enough, every GPU has SASS of its architecture family (or
PTX it can compile), and its Python, platform and glibc tags allow this interpreter.

Exit status: 0 when every package asked about has a wheel that fits (or no index was given),
1 when one has none or the index cannot be read, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import platform
import re
import shlex
import sys
import sysconfig
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any

SCHEMA = "kernel-wheel-factory/doctor/1"
_TIMEOUT = 30.0


# -- this machine ---------------------------------------------------------------------------

def machine_facts() -> dict[str, Any]:
    """Python, platform, glibc, torch and the GPUs of this machine."""
    glibc = platform.libc_ver()
    free = _free_threaded()
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "abi": f"cp{sys.version_info[0]}{sys.version_info[1]}{'t' if free else ''}",
        "free_threaded": free,
        "platform": sys.platform,
        "machine": platform.machine(),
        "glibc": glibc[1] if glibc[0] == "glibc" else None,
        "torch": _torch_facts(),
        "driver": _driver_facts(),
    }


def _torch_facts() -> dict[str, Any] | None:
    warnings.simplefilter("ignore")  # torch's warnings on import are not this report's
    try:
        import torch  # the user's torch, when this Python has one
    except ImportError:
        return None
    except Exception as exc:
        return {"version": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"version": torch.__version__, "cuda": torch.version.cuda,
            "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))}


def _driver_facts() -> dict[str, Any] | None:
    """The driver's CUDA version and every GPU's name and compute capability, from libcuda
    (the driver's own library: no toolkit or torch needed); None without a driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    facts: dict[str, Any] = {"cuda": f"{version.value // 1000}.{version.value % 1000 // 10}",
                             "gpus": []}
    if cuda.cuInit(0) != 0:
        facts["error"] = "the driver is there, but CUDA cannot start (cuInit failed)"
        return facts
    count = ctypes.c_int(0)
    cuda.cuDeviceGetCount(ctypes.byref(count))
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(device), ordinal)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, device)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
        facts["gpus"].append({"name": name.value.decode(errors="replace"),
                              "sm": f"{major.value}.{minor.value}"})
    return facts


# -- versions and tags (the few rules of PEP 440 and the wheel tags an index of kernels uses;
# written here because this file must run with the standard library alone) -----------------

def _release(version: str) -> tuple[int, ...]:
    found = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in found[0].split(".")) if found else ()


def _holds(specifier: str, version: str) -> bool:
    """Whether `version` satisfies a specifier set such as '==2.11.*' or '>=2.10,<3'."""
    have = _release(version)
    for clause in filter(None, (part.strip() for part in specifier.split(","))):
        found = re.fullmatch(r"(===|==|!=|~=|>=|<=|>|<)\s*(\S+)", clause)
        if not found:
            return False
        operator, text = found[1], found[2]
        wildcard = text.endswith(".*")
        want = _release(text[:-2] if wildcard else text)
        if wildcard:  # == X.Y.* and != X.Y.*: the release starts with X.Y
            same = _padded(have, len(want))[:len(want)] == want
            if same != (operator != "!="):
                return False
            continue
        size = max(len(have), len(want))
        mine, theirs = _padded(have, size), _padded(want, size)
        ok = {"==": mine == theirs, "===": mine == theirs, "!=": mine != theirs,
              ">=": mine >= theirs, "<=": mine <= theirs, ">": mine > theirs,
              "<": mine < theirs,
              "~=": mine >= theirs and mine[:len(want) - 1] == want[:-1]}[operator]
        if not ok:
            return False
    return True


def _padded(release: tuple[int, ...], size: int) -> tuple[int, ...]:
    return release + (0,) * (size - len(release))


def _tags(filename: str) -> tuple[str, str, str]:
    """(python tag, ABI tag, platform tag) of a wheel's filename."""
    parts = filename[:-len(".whl")].split("-")
    return parts[-3], parts[-2], parts[-1]


def _free_threaded() -> bool:
    """Whether this CPython is a free-threaded build (3.14t)."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _python_fits(python_tag: str, abi_tag: str, facts: dict[str, Any]) -> str | None:
    if python_tag.startswith("py"):
        return None
    if facts["implementation"] != "cpython":
        return f"it is for CPython, this is {facts['implementation']}"
    versions = [_release(tag[2:3] + "." + tag[3:]) for tag in python_tag.split(".")
                if tag.startswith("cp")]
    have = _release(facts["python"])[:2]
    free = bool(facts.get("free_threaded"))
    if abi_tag == "abi3" and free:
        return (f"an abi3 wheel cannot be loaded by a free-threaded CPython ({facts['python']}t); "
                "it needs a cp" + "".join(map(str, have)) + "t wheel")
    if abi_tag.startswith("cp") and abi_tag.endswith("t") != free:
        wheel = "a free-threaded CPython" if abi_tag.endswith("t") else "CPython with the GIL"
        this = f"free-threaded {facts['python']}t" if free else f"{facts['python']} with the GIL"
        return f"it is for {wheel} ({abi_tag}), this is {this}"
    if abi_tag == "abi3":
        if any(have >= version for version in versions):
            return None
        return f"it needs CPython {'.'.join(map(str, min(versions)))} or newer"
    if any(have == version for version in versions):
        return None
    return (f"it is for CPython {', '.join('.'.join(map(str, v)) for v in versions)}, this is "
            f"{facts['python']}")


def _platform_fits(platform_tag: str, facts: dict[str, Any]) -> str | None:
    if platform_tag == "any":
        return None
    found = re.fullmatch(r"(?:many|musl)?linux_(?:(\d+)_(\d+)_)?(\w+)", platform_tag)
    if not found or facts["platform"] != "linux":
        return f"it is for {platform_tag}, this machine is {facts['platform']}"
    if found[3] != facts["machine"]:
        return f"it is for {found[3]}, this machine is {facts['machine']}"
    if found[1] and (facts["glibc"] is None or
                     _release(facts["glibc"]) < (int(found[1]), int(found[2]))):
        return (f"it needs glibc {found[1]}.{found[2]} or newer, this machine has "
                f"{facts['glibc'] or 'no glibc'}")
    return None


def _sm_fits(gpu_code: list[str], sm: str) -> bool:
    """Whether a GPU of compute capability `sm` (9.0) can run code holding `gpu_code` (sm_90,
    compute_90, sm_90a ...): SASS of the same major and a minor not above its own (arch-
    specific SASS only on its own architecture), or PTX of an architecture not above it."""
    major, minor = (int(part) for part in sm.split("."))
    for code in gpu_code:
        found = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", code)
        if not found:
            continue
        code_major, code_minor, suffix = int(found[2]), int(found[3]), found[4]
        if found[1] == "compute" and (code_major, code_minor) <= (major, minor) and not suffix:
            return True
        if found[1] == "sm" and code_major == major and \
                (code_minor == minor if suffix == "a" else code_minor <= minor):
            return True
    return False


def why_not(wheel: dict[str, Any], cell: dict[str, Any] | None,
            facts: dict[str, Any]) -> list[str]:
    """Why a wheel of the index does not fit this machine (empty: it fits)."""
    reasons = []
    python_tag, abi_tag, platform_tag = _tags(wheel["filename"])
    for problem in (_python_fits(python_tag, abi_tag, facts),
                    _platform_fits(platform_tag, facts)):
        if problem:
            reasons.append(problem)
    torch = facts["torch"]
    needs = wheel.get("torch")
    if needs and needs != "any":
        if torch is None or not torch.get("version"):
            reasons.append(f"it needs torch{needs}, and this Python has no torch")
        elif not _holds(needs, torch["version"]):
            reasons.append(f"it needs torch{needs}, this Python has torch {torch['version']}")
    cuda = cell.get("cuda") if cell else None
    if cuda == "cpu":  # a CPU build: any build of its torch runs it, with or without a GPU
        cuda = None
    if cuda and torch and torch.get("version"):
        if not torch.get("cuda"):
            reasons.append(f"it is built for CUDA {cuda}, and torch {torch['version']} is a "
                           "build without CUDA")
        elif cuda.split(".")[0] != torch["cuda"].split(".")[0]:
            reasons.append(f"it is built for CUDA {cuda.split('.')[0]}.x, torch "
                           f"{torch['version']} is built with CUDA {torch['cuda']}")
    driver = facts["driver"]
    if cuda and driver and _release(driver["cuda"]) < _release(cuda)[:1]:
        reasons.append(f"it needs a driver for CUDA {cuda.split('.')[0]}, this driver "
                       f"supports CUDA {driver['cuda']}")
    gpu_code = wheel.get("gpu_code") or []
    if cuda and gpu_code and driver:
        for gpu in driver.get("gpus", []):
            if not _sm_fits(gpu_code, gpu["sm"]):
                reasons.append(f"it holds no code for the {gpu['name']} (SM {gpu['sm']}): it "
                               f"has {' '.join(gpu_code)}")
    return reasons


# -- the index --------------------------------------------------------------------------------

class DoctorError(Exception):
    """The index cannot be read, or holds no such package."""


# The index is data from elsewhere: every field the doctor uses is checked against what
# `factory index` writes, and commands are composed only from checked names and the URL the
# user gave (quoted for the shell), so a crafted index cannot smuggle a shell pipe, a pip
# option or a terminal escape into what the doctor prints.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]{1,40}(?:\.[a-z0-9]{1,40}){0,4}")
_VERSION = re.compile(r"[0-9][0-9A-Za-z.!+_]{0,63}")
# name-version[-build]-python-abi-platform.whl (a wheel's name has five or six parts)
_FILENAME = re.compile(r"[A-Za-z0-9._+!]{1,100}(?:-[A-Za-z0-9._+!]{1,100}){4,5}\.whl")
_SPECIFIER = re.compile(r"any|[0-9A-Za-z.*,<>=!~+]{1,100}")
_CUDA = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}|cpu")  # a CPU cell's column is "cpu"
_CODE = re.compile(r"(?:sm|compute)_[0-9]{2,3}[af]?")
_VARIANT_FILENAME = re.compile(r"[A-Za-z0-9._!]{1,100}(?:-[A-Za-z0-9._!]{1,100}){4,6}\.whl")
_VARIANT_INDEX = re.compile(r"variants/torch[0-9]{2,6}/simple/")
_VARIANT_LABEL = re.compile(r"[0-9a-z_.]{1,64}")
_PROPERTY = re.compile(r"[a-z0-9_]{1,64} :: [a-z0-9_]{1,64} :: [a-z0-9_.]{1,64}")
_VERDICT = re.compile(r"proven|untested|failed")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_ATTESTATION = re.compile(r"files/[A-Za-z0-9._+!%-]{1,300}\.whl\.provenance")
_TEXT_LIMIT = 400  # characters of a reason the index gives for a verdict, as shown


def _shown(value: Any) -> str:
    """A value of the index as the doctor quotes it: repr (escapes included), cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(value: Any, pattern: re.Pattern[str], what: str) -> str:
    if isinstance(value, str) and pattern.fullmatch(value):
        return value
    raise DoctorError(f"the index's browse data holds {what} that is not one: {_shown(value)}")


def _optional(value: Any, pattern: re.Pattern[str], what: str) -> str | None:
    return None if value is None else _checked(value, pattern, what)


def _items(value: Any, what: str) -> list[Any]:
    if isinstance(value, list):
        return value
    raise DoctorError(f"the index's browse data holds {what} that is not a list: "
                      f"{_shown(value)}")


def _table(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise DoctorError(f"the index's browse data holds {what} that is not a table: "
                      f"{_shown(value)}")


def _clean_wheel(raw: Any) -> dict[str, Any]:
    wheel = _table(raw, "a wheel")
    return {"filename": _checked(wheel.get("filename"), _FILENAME, "a wheel file name"),
            "torch": _optional(wheel.get("torch"), _SPECIFIER, "a torch requirement"),
            "gpu_code": [_checked(code, _CODE, "a GPU code")
                         for code in _items(wheel.get("gpu_code") or [], "GPU code")],
            "label": _optional(wheel.get("label"), _LABEL, "a label"),
            "cross": wheel.get("cross") is True, "yanked": wheel.get("yanked"),
            "sha256": _optional(wheel.get("sha256"), _SHA256, "a sha256"),
            "attestation": _optional(wheel.get("attestation"), _ATTESTATION,
                                     "a provenance file"),
            # a wheel that runs anywhere: what its build's tests said of it
            **({"tests": _clean_tests(wheel["tests"])} if "tests" in wheel else {})}


def _clean_variant(raw: Any) -> dict[str, Any]:
    """A cell's wheel again as a variant wheel (PEP 825), listed in a variants index."""
    variant = _table(_table(raw, "a variant wheel").get("variant"), "a variant")
    return {"filename": _checked(raw.get("filename"), _VARIANT_FILENAME,
                                 "a variant wheel file name"),
            "label": _checked(variant.get("label"), _VARIANT_LABEL, "a variant label"),
            "index": _checked(variant.get("index"), _VARIANT_INDEX, "a variants index"),
            "properties": [_checked(line, _PROPERTY, "a variant property")
                           for line in _items(variant.get("properties") or [],
                                              "variant properties")]}


def _clean_cell(raw: Any) -> dict[str, Any]:
    cell = _table(raw, "a cell")
    return {"cuda": _optional(cell.get("cuda"), _CUDA, "a CUDA version"),
            "torch": _optional(cell.get("torch"), _VERSION, "a torch version"),
            "label": _optional(cell.get("label"), _LABEL, "a label"),
            "wheels": [_clean_wheel(wheel) for wheel in _items(cell.get("wheels") or [],
                                                                "wheels")],
            "variants": [_clean_variant(wheel)
                         for wheel in _items(cell.get("variants") or [], "variant wheels")],
            "tests": _clean_tests(cell.get("tests"))}


def _clean_tests(raw: Any) -> dict[str, Any] | None:
    """What the kernel's own tests said of a cell's wheel: its verdict, why (untested or
    failed), and how many passed on which GPUs."""
    if raw is None:
        return None
    tests = _table(raw, "a cell's tests")
    passed = tests.get("passed")
    if not isinstance(passed, int) or isinstance(passed, bool) or passed < 0:
        raise DoctorError(f"the index's browse data holds a test count that is not one: "
                          f"{_shown(passed)}")
    return {"verdict": _optional(tests.get("verdict"), _VERDICT, "a test verdict"),
            "reason": _text(tests.get("reason", ""), "a test verdict's reason"),
            "passed": passed,
            "gpus": [_text(gpu, "a GPU name") for gpu in _items(tests.get("gpus") or [],
                                                                "GPUs")]}


def _text(value: Any, what: str) -> str:
    """Words of the index shown as they are, cut short: printable characters only."""
    if isinstance(value, str) and value.isprintable():
        return value if len(value) <= _TEXT_LIMIT else value[:_TEXT_LIMIT - 3] + "..."
    raise DoctorError(f"the index's browse data holds {what} that is not one: {_shown(value)}")


def _fetch_json(url: str) -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "kernel-wheel-factory-doctor"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
        return json.loads(response.read())


def index_root(url: str) -> tuple[str, dict[str, Any]]:
    """The index's root URL (where browse.json is) and browse.json, from the URL a user has:
    the root itself, a cell's index (.../cu130torch211/simple/) or the combined one."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https", "file"):
        raise DoctorError(f"'{url}' is not an index URL (http, https or file)")
    path = parts.path.rstrip("/")
    candidates = [path]
    if path.endswith("/simple"):
        candidates.append(path[:-len("/simple")])
        candidates.append(path[:-len("/simple")].rsplit("/", 1)[0])
    last: Exception | None = None
    for candidate in candidates:
        root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, candidate + "/", "", ""))
        try:
            return root, _fetch_json(root + "browse.json")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = exc
    raise DoctorError(f"no kernel-wheel-factory index at {url} (browse.json cannot be read: "
                      f"{getattr(last, 'reason', last)})")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def diagnose(url: str, package: str | None, facts: dict[str, Any]) -> list[dict[str, Any]]:
    """For each package of the index (or the one asked about): the wheel that fits, with its
    index and install commands, or the nearest wheels and why each does not fit."""
    root, browse = index_root(url)
    names = [_checked(_table(entry, "a package").get("name"), _NAME, "a package name")
             for entry in _items(_table(browse, "an index").get("packages", []), "packages")]
    if package is not None:
        wanted = [name for name in names if _normalized(name) == _normalized(package)]
        if not wanted:
            raise DoctorError(f"the index at {root} has no package {_shown(package)} (it has: "
                              f"{', '.join(names) or 'none'})")
        names = wanted
    return [_diagnose_package(root, name, facts) for name in names]


def _diagnose_package(root: str, name: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The newest release with a wheel that fits (pinned when a newer release has none: pip
    would take the newer one, which cannot run here), and the misses of the releases newer
    than it; with no fit at all, the misses of the newest release that has wheels."""
    data = _table(_fetch_json(f"{root}browse/{_normalized(name)}.json"), "a package")
    entry = {"name": name}
    misses: list[dict[str, Any]] = []
    newest_misses: list[dict[str, Any]] = []
    for raw in _items(data.get("versions", []), "versions"):
        release = _table(raw, "a release")
        release["version"] = _checked(release.get("version"), _VERSION, "a version")
        cells = [_clean_cell(cell) for cell in _items(release.get("cells") or [], "cells")]
        candidates: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
            (wheel, cell) for cell in cells for wheel in cell["wheels"]]
        # a stable-ABI wheel is listed in the cell of every torch it serves: the index of
        # this machine's torch is the one to name
        # and a CPU cell's wheel only where no CUDA build fits (it leaves the GPU idle)
        candidates.sort(key=lambda found: ((found[1] or {}).get("torch") != _torch_minor(facts),
                                           (found[1] or {}).get("cuda") == "cpu"))
        candidates += [(_clean_wheel(wheel), None)
                       for wheel in _items(release.get("anywhere") or [], "wheels")]
        here = []
        for wheel, cell in candidates:
            if wheel.get("yanked") is not None:
                continue
            reasons = why_not(wheel, cell, facts)
            if not reasons:
                pin = release["version"] if misses else None
                return {"name": entry["name"],
                        "fits": _fit(root, entry["name"], wheel, cell, pin),
                        "misses": sorted(misses, key=lambda miss: len(miss["reasons"]))}
            here.append({"wheel": wheel["filename"], "label": wheel.get("label"),
                         "version": release["version"], "reasons": reasons})
        misses += here
        if here and not newest_misses:
            newest_misses = here
    newest_misses.sort(key=lambda miss: len(miss["reasons"]))
    return {"name": entry["name"], "fits": None, "misses": newest_misses}


def _torch_minor(facts: dict[str, Any]) -> str | None:
    torch = facts.get("torch") or {}
    release = _release(str(torch.get("version") or ""))
    return ".".join(str(part) for part in release[:2]) if len(release) >= 2 else None


def _fit(root: str, name: str, wheel: dict[str, Any], cell: dict[str, Any] | None,
         pin: str | None) -> dict[str, Any]:
    label = (cell or {}).get("label") or wheel.get("label")
    index = f"{root}{label}/simple/" if label else f"{root}simple/"
    wanted = shlex.quote(f"{name}=={pin}" if pin else name)
    # pip pinned to the wheel's labelled version: PyPI refuses local versions, so a project
    # of the same name there cannot answer it; uv asks the --index first and stops there
    version = str(wheel["filename"]).split("-")[1]
    exact = shlex.quote(f"{name}=={version}") if "+" in version else wanted
    fit = {"wheel": wheel["filename"], "label": label, "index": index,
           "cuda": cell.get("cuda") if cell else None, "pinned": pin,
           "pip": f"pip install {exact} --extra-index-url {shlex.quote(index)}",
           "uv": f"uv pip install {wanted} --index {shlex.quote(index)}",
           "cross": wheel.get("cross") is True,
           "tests": cell.get("tests") if cell else wheel.get("tests"),
           "attestation": _attestation(root, wheel)}
    variants = (cell or {}).get("variants") or []
    if variants:
        # the same binaries as variant wheels: uv picks the CUDA build and GPU code itself
        where = f"{root}{variants[0]['index']}"
        fit["variants"] = {"index": where, "uv": f"uv pip install {wanted} --index "
                           f"{shlex.quote(where)} --preview-features wheel-variants",
                           "label": variants[0]["label"],
                           "properties": variants[0]["properties"]}
    return fit


def _attestation(root: str, wheel: dict[str, Any]) -> dict[str, Any]:
    """Whether the wheel is attested (PEP 740), and, where pypi-attestations is installed
    beside this Python, what its provenance file proves, checked offline (against the
    publisher its bundles name: `factory attest --check` holds them to the one a matrix
    pins)."""
    if not wheel.get("attestation") or not wheel.get("sha256"):
        return {"state": "unattested"}
    url = root + str(wheel["attestation"])
    try:
        from pypi_attestations import (  # type: ignore[import-not-found,unused-ignore]
            Distribution,
            Provenance,
        )
    except ImportError:
        return {"state": "unchecked", "url": url}
    logging.getLogger("sigstore").setLevel(logging.ERROR)  # its offline trust root's note
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "kernel-wheel-factory-"
                                                                     "doctor"})
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:
            provenance = Provenance.model_validate_json(response.read(1 << 22))
        dist = Distribution(name=wheel["filename"], digest=wheel["sha256"])
        who = []
        for bundle in provenance.attestation_bundles:
            for attestation in bundle.attestations:
                attestation.verify(bundle.publisher, dist, offline=True)
            named = bundle.publisher.model_dump()
            who.append(" ".join(str(named[key]) for key in ("kind", "repository", "workflow")
                                if named.get(key)))
    except Exception as exc:  # any failure is the one line the user reads
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {"state": "refused", "url": url, "reason": _printable(reason)[:300]}
    return {"state": "checked", "url": url, "by": _printable(", ".join(who))}


def _describe_attestation(attestation: dict[str, Any]) -> str:
    state = attestation.get("state")
    if state == "checked":
        return f"attested by {attestation['by']}: checked offline ({attestation['url']})"
    if state == "unchecked":
        return (f"attested ({attestation['url']}): pip install pypi-attestations beside this "
                "Python to check it offline")
    if state == "refused":
        return f"attestation refused: {attestation['reason']}"
    return "not attested: no CI identity signed it where it was published"


# -- output -----------------------------------------------------------------------------------

def describe_machine(facts: dict[str, Any]) -> list[str]:
    lines = [f"Python     {facts['python']} ({facts['implementation']}, {facts['abi']})",
             f"platform   {facts['platform']} {facts['machine']}, glibc "
             f"{facts['glibc'] or 'none'}"]
    torch = facts["torch"]
    if torch is None:
        lines.append("torch      not installed in this Python")
    elif torch.get("error"):
        lines.append(f"torch      cannot be imported: {torch['error']}")
    else:
        cuda = f"CUDA {torch['cuda']}" if torch.get("cuda") else "no CUDA (a CPU build)"
        abi = "cxx11 ABI" if torch.get("cxx11_abi") else "pre-cxx11 ABI"
        lines.append(f"torch      {torch['version']}, {cuda}, {abi}")
    driver = facts["driver"]
    if driver is None:
        lines.append("driver     no NVIDIA driver (libcuda.so.1 not found)")
    else:
        lines.append(f"driver     supports CUDA {driver['cuda']}"
                     + (f" ({driver['error']})" if driver.get("error") else ""))
        for number, gpu in enumerate(driver.get("gpus", [])):
            lines.append(f"GPU {number}      {gpu['name']}, SM {gpu['sm']}")
    return lines


def describe_diagnosis(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for result in results:
        fits = result["fits"]
        lines.append("")
        if fits is not None:
            lines.append(f"{result['name']}: {fits['wheel']} fits this machine")
            lines.append(f"  {fits['pip']}")
            lines.append(f"  {fits['uv']}")
            lines.append(f"  {_describe_tests(fits.get('tests'))}")
            lines.append(f"  {_describe_attestation(fits.get('attestation') or {})}")
            if fits.get("variants"):
                variant = fits["variants"]
                lines.append(f"  {variant['uv']}")
                lines.append("  (the variants index: uv chooses the CUDA build and GPU code "
                             f"for this machine; this wheel there is variant {variant['label']}:"
                             f" {', '.join(variant['properties'])})")
            if fits.get("cuda") == "cpu":
                lines.append("  (a CPU build: its ops run on the CPU, with any build of its "
                             "torch; no CUDA build of the index fits this machine)")
            if fits.get("cross"):
                lines.append("  (cross-compiled on x86_64: it was imported and its CPU tests "
                             "run under emulation; its GPU code is in the wheel but has not run "
                             "on a GPU of this platform)")
            if fits["pinned"]:
                lines.append("  (pinned: no wheel of a newer release fits, and pip would "
                             "take one)")
                lines.extend(_describe_misses(result["misses"]))
            continue
        lines.append(f"{result['name']}: no wheel of the index fits this machine")
        lines.extend(_describe_misses(result["misses"]))
    return lines


def _describe_tests(tests: dict[str, Any] | None) -> str:
    """The verdict of the kernel's own tests on the fitting wheel, in one line."""
    if tests is None:
        return "not tested: it was built without its tests (factory build --test)"
    verdict, reason = tests["verdict"], tests["reason"]
    if verdict == "proven" or (verdict is None and tests["passed"]):
        where = f" on {', '.join(dict.fromkeys(tests['gpus']))}" if tests["gpus"] else \
            " with no GPU"
        return f"proven: {tests['passed']} of its own tests passed{where}"
    if verdict == "untested":
        return f"untested: its tests could not prove it ({reason})"
    return f"{verdict or 'tested'}: {reason or 'see the index'}"


def _describe_misses(misses: list[dict[str, Any]]) -> list[str]:
    lines = []
    for miss in misses[:5]:
        lines.append(f"  {miss['wheel']}:")
        lines.extend(f"    - {reason}" for reason in miss["reasons"])
    if len(misses) > 5:
        lines.append(f"  ... and {len(misses) - 5} more")
    return lines


def _printable(line: str) -> str:
    """A line with every control character written as an escape (none reaches the terminal)."""
    return "".join(char if char.isprintable() else f"\\x{ord(char):02x}" for char in line)


def _secrets(url: str | None) -> list[str]:
    """What an index URL may carry that is nobody else's to read: its user information (a
    password, a token as user name) and its query's values (?token=...), each also as it is
    percent-decoded; longest first."""
    if not url:
        return []
    parts = urllib.parse.urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    found = [userinfo, *userinfo.split(":", 1)] + [
        value for _, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=False)]
    found += [urllib.parse.quote(value, safe="") for value in found]
    found += [urllib.parse.unquote(value) for value in found]
    return sorted({value for value in found if len(value) >= 3}, key=len, reverse=True)


def _hidden(text: str, secrets: list[str]) -> str:
    """`text` with every one of `secrets` written as ***."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="doctor.py", description="Report this machine's Python, torch, driver and GPUs; "
                                      "given a kernel index, the install command that fits.")
    parser.add_argument("url", nargs="?", help="the index (its root, or a cell's /simple/)")
    parser.add_argument("package", nargs="?", help="the package (default: every one)")
    parser.add_argument("--json", action="store_true", help=f"print JSON ({SCHEMA})")
    args = parser.parse_args(argv)
    facts = machine_facts()
    secrets = _secrets(args.url)  # nothing printed shows them, not even the URL itself
    try:
        results = diagnose(args.url, args.package, facts) if args.url else None
    except DoctorError as exc:
        sys.stderr.write(_printable(_hidden(f"error: {exc}", secrets)) + "\n")
        return 1
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError, IndexError,
            AttributeError, RecursionError) as exc:
        sys.stderr.write(_printable(_hidden(f"error: the index at {args.url} cannot be read "
                                            f"({type(exc).__name__}: {_shown(str(exc))})",
                                            secrets)) + "\n")
        return 1
    if args.json:
        sys.stdout.write(_hidden(json.dumps({"schema": SCHEMA, "machine": facts,
                                             "packages": results}, indent=2, sort_keys=True),
                                 secrets) + "\n")
    else:
        lines = describe_machine(facts) + describe_diagnosis(results or [])
        sys.stdout.write("\n".join(_printable(_hidden(line, secrets)) for line in lines) + "\n")
    return 1 if results is not None and any(r["fits"] is None for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
