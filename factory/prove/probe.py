"""Load a wheel's modules with a torch and say what they registered; run as a file by the
interpreter of the cell's torch environment (it needs nothing but the standard library and torch):

    python -I probe.py SITE MODULE [MODULE ...]

SITE is the folder the wheel was installed into (added as a site folder, so its .pth files
count); each MODULE is imported in turn, after torch. The last line of the output is JSON: the
torch seen, the modules imported, the first import that failed (the loader's message, whose C++
names load.py demangles), and every op the imports registered: its dispatch keys with a kernel,
and whether torch.compile can trace it (a fake/meta implementation, or a composite kernel that
needs none).
"""

from __future__ import annotations

import importlib
import json
import site
import sys
import warnings
from typing import Any

# The keys whose kernels FakeTensorMode can run an op with: a meta kernel (torch.library's
# register_fake registers one), or a composite kernel that decomposes or runs on any device.
TRACEABLE = ("Meta", "CompositeExplicitAutograd", "CompositeImplicitAutograd")
KEYS = ("CPU", "CUDA", *TRACEABLE)


def main(argv: list[str]) -> int:
    folder, modules = argv[0], argv[1:]
    sys.path.insert(0, folder)
    site.addsitedir(folder)
    warnings.simplefilter("ignore")
    import torch

    report: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                                 "imported": [], "error": None, "ops": []}
    before = set(torch._C._dispatch_get_all_op_names())
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            report["error"] = {"module": name, "message": f"{type(exc).__name__}: {exc}"}
            break
        report["imported"].append(name)  # type: ignore[attr-defined]
    added = sorted(set(torch._C._dispatch_get_all_op_names()) - before)
    report["ops"] = [describe(torch, name) for name in added]
    sys.stdout.write("\n" + json.dumps(report) + "\n")
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
    keys = [key for key in KEYS if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)]
    fake = any(key in TRACEABLE for key in keys) or _python_fake(torch, f"{namespace}::{name}")
    return {"name": qualified, "resolves": error is None, "error": error, "keys": keys,
            "fake": fake}


def _python_fake(torch: Any, name: str) -> bool:
    """A fake implementation registered from Python (torch.library.register_fake)."""
    try:
        from torch._library.simple_registry import singleton
    except ImportError:
        return False
    return bool(singleton.find(name).fake_impl.kernel is not None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
