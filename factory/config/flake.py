"""What a kernel-builder repo's flake.nix says its own tests need besides torch: the Python
packages named in `pythonCheckInputs` (einops for flash-attention, numpy, ...).

No maintained library reads Nix; the factory needs only this one list, in the two shapes
kernel repos write it: `pkgs: with pkgs; [ einops rich ]` and `ps: [ ps.einops ]`. Nix
attribute names of Python packages are their normalized PyPI names."""

from __future__ import annotations

import re
import stat
from pathlib import Path

__all__ = ["check_inputs"]

_LIMIT = 1 << 20  # a flake.nix is a few KiB; more is not one
_COMMENT = re.compile(r"#[^\n]*|/\*.*?\*/", re.S)
_PACKAGE = re.compile(r"(?:[A-Za-z_]\w*\.)?([A-Za-z0-9][A-Za-z0-9_-]*)")  # einops, ps.einops
_CHECK_INPUTS = re.compile(r"\bpythonCheckInputs\s*=\s*\w+\s*:\s*(?:with\s+\w+\s*;\s*)?"
                           r"\[([^\]]*)\]")


def check_inputs(root: Path) -> tuple[str, ...]:
    """The PyPI names of the packages flake.nix gives the kernel's tests; () where it names
    none, or there is no readable flake.nix."""
    path = root / "flake.nix"
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _LIMIT:
            return ()
        text = path.read_text(errors="replace")
    except OSError:
        return ()
    found = _CHECK_INPUTS.search(_COMMENT.sub(" ", text))
    if found is None:
        return ()
    names: dict[str, None] = {}
    for token in found[1].split():
        plain = _PACKAGE.fullmatch(token)  # an expression (a call, a path) is no package
        if plain is not None:
            names[plain[1]] = None
    return tuple(names)
