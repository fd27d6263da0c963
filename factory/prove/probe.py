"""Load a wheel's modules with a torch and say what they registered; run as a file by the
interpreter of the cell's torch environment (it needs nothing but the standard library and torch):

    python -I probe.py SITE MODULE [MODULE ...]

SITE is the folder the wheel was installed into (added as a site folder, so its .pth files
count); each MODULE is imported in turn, after torch. The last line of the output is JSON: the
torch seen, the modules imported, the first import that failed (the loader's message, whose C++
names load.py demangles), and every op the imports registered: its dispatch keys with a kernel,
and whether torch.compile can trace it (a fake/meta implementation, or a composite kernel that
needs none). In a free-threaded CPython it also says which import, if any, turned the GIL back
on.

A kernel's import may load modules from outside the wheel that register ops of their own (natten
loads torch's flex attention, which loads torch._inductor), and may start CUDA (torch registers
its Triton sparse ops then). Those ops are not the wheel's: the report names the outside modules
loaded ("outside") and whether CUDA started ("cuda_started"), and the factory then runs
`probe.py --outside [--cuda] MODULE ...` in a fresh interpreter, which imports the same outside
modules (starting CUDA too) and prints the ops that registers; load.py sets those apart.
"""

from __future__ import annotations

import importlib
import json
import os
import site
import sys
import warnings
from typing import Any

# The keys whose kernels FakeTensorMode can run an op with: a meta kernel (torch.library's
# register_fake registers one), or a composite kernel that decomposes or runs on any device.
TRACEABLE = ("Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
KEYS = ("CPU", "CUDA", *TRACEABLE)


def gil_enabled() -> bool:
    """Whether the GIL is on (always, in a CPython built with it)."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def main(argv: list[str]) -> int:
    folder, modules = argv[0], argv[1:]
    # A free-threaded CPython turns the GIL back on when it loads an extension module that does
    # not declare it can run without it (a warning, which is ignored below): the gate asks.
    free_threaded = not gil_enabled()
    sys.path.insert(0, folder)
    site.addsitedir(folder)
    warnings.simplefilter("ignore")
    import torch

    report: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                                 "imported": [], "error": None, "ops": []}
    if free_threaded:
        report["free_threaded"] = True
        if gil_enabled():
            report["gil_enabled_by"] = "torch"
    before = set(torch._C._dispatch_get_all_op_names())
    known = set(sys.modules)
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            report["error"] = {"module": name, "message": f"{type(exc).__name__}: {exc}"}
            break
        report["imported"].append(name)  # type: ignore[attr-defined]
        if free_threaded and "gil_enabled_by" not in report and gil_enabled():
            report["gil_enabled_by"] = name  # its import turned the GIL back on
    added = set(torch._C._dispatch_get_all_op_names()) - before
    report["outside"] = [name for name, module in list(sys.modules.items())
                         if name not in known and module is not None
                         and not _within(module, folder)]
    # the import started CUDA: torch registers ops then
    report["cuda_started"] = torch.cuda.is_initialized()
    report["ops"] = [describe(torch, name) for name in sorted(added)]
    sys.stdout.write("\n" + json.dumps(report) + "\n")
    return 0


def _within(module: Any, folder: str) -> bool:
    """Whether a module was loaded from the wheel's folder."""
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), "")
    return bool(where) and os.path.realpath(where).startswith(os.path.realpath(folder) + os.sep)


def outside(modules: list[str]) -> int:
    warnings.simplefilter("ignore")
    import torch

    before = set(torch._C._dispatch_get_all_op_names())
    if modules[:1] == ["--cuda"]:
        modules = modules[1:]
        try:
            torch.cuda.init()
        except Exception:
            pass  # no GPU here after all: what CUDA's start registers stays the wheel's
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException:
            continue  # a module that needs the wheel's context: what it registers stays the wheel's
    sys.stdout.write("\n" + json.dumps(sorted(set(torch._C._dispatch_get_all_op_names())
                                               - before)) + "\n")
    return 0


def describe(torch: Any, qualified: str) -> dict[str, object]:
    """One op (ns::name or ns::name.overload): whether torch.ops resolves it, its kernels,
    and whether torch.compile can trace it."""
    namespace, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    error = None
    try:
        getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    keys = [key for key in (*KEYS, *sorted(set(torch._C.DispatchKey.__members__) - set(KEYS)))
            if _has_kernel(torch, qualified, key)]
    fake = any(key in TRACEABLE for key in keys) or _python_fake(torch, f"{namespace}::{name}")
    return {"name": qualified, "resolves": error is None, "error": error, "keys": keys,
            "fake": fake}


def _has_kernel(torch: Any, qualified: str, key: str) -> bool:
    """Whether the op has a kernel of its own for `key` (an op may have only backend-specific
    ones: torch registers its Triton sparse ops for SparseCsrCUDA alone)."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key))
    except RuntimeError:  # a marker in the enum (StartOfDenseBackends...), not a key
        return False


def _python_fake(torch: Any, name: str) -> bool:
    """A fake implementation registered from Python (torch.library.register_fake)."""
    try:
        from torch._library.simple_registry import singleton
    except ImportError:
        return False
    return bool(singleton.find(name).fake_impl.kernel is not None)


if __name__ == "__main__":
    sys.exit(outside(sys.argv[2:]) if sys.argv[1:2] == ["--outside"] else main(sys.argv[1:]))
