"""Local version labels: the part after '+' that names a wheel's torch x CUDA cell
(img2gray-1.0.0+cu130torch211) and the per-cell index it is listed in."""

from __future__ import annotations

import re

from ..config.model import Matrix, TorchEntry
from ..errors import ConfigError
from ..values.versions import Version, compact, major_minor

__all__ = ["check_label", "matrix_labels", "render_label", "torch_label"]

_LOCAL_LABEL = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")


def render_label(template: str, torch: Version, cuda: Version) -> str:
    """The label of a cell; the template's placeholders are config/matrix/labels.py LABEL_FIELDS."""
    return template.format(
        cuda=compact(major_minor(cuda)), torch=compact(major_minor(torch)),
        cuda_major=cuda.major, cuda_minor=cuda.minor,
        torch_major=torch.major, torch_minor=torch.minor,
    )


def torch_label(template: str, torch: TorchEntry, cuda: Version) -> str:
    """The label of a cell of a torch entry: an installed torch that no index publishes adds
    its build tag (cu126torch25.nv2410; see config/torches.py)."""
    label = render_label(template, torch.release, cuda)
    tag = torch.installed.tag if torch.installed is not None else None
    return f"{label}.{tag}" if tag else label


# A wheel's file name (name-version+label-tags.whl.metadata, behind a temporary prefix) must
# fit in the 255 bytes a file name may have; short labels also keep index URLs typeable.
MAX_LABEL = 40


def check_label(label: str, matrix: Matrix, key: str = "label") -> None:
    """A label the matrix's `label` (or `stable-label`) template gave must fit in a file name
    and be a valid local version label."""
    line = matrix.stable_label_line if key == "stable-label" else matrix.label_line
    if len(label) > MAX_LABEL:
        raise ConfigError(f"the {key} template gives '{label}', {len(label)} characters long; "
                          f"a label may have at most {MAX_LABEL}", file=matrix.path,
                          line=line, key=key)
    if not _LOCAL_LABEL.fullmatch(label):
        raise ConfigError(f"the {key} template gives '{label}', which is not a valid local "
                          "version label (lowercase letters and digits, separated by '.')",
                          file=matrix.path, line=line, key=key)


def matrix_labels(matrix: Matrix) -> dict[tuple[TorchEntry, Version], str]:
    """(torch entry, CUDA major.minor) -> label, for every pair that makes cells (an installed
    torch pairs with its own CUDA only), refusing a template that gives two cells one label."""
    labels: dict[tuple[TorchEntry, Version], str] = {}
    owners: dict[str, str] = {}
    for torch in matrix.torch:
        for cuda in matrix.cuda:
            cuda_mm = major_minor(cuda.version)
            if torch.installed is not None and torch.installed.cuda_release != cuda_mm:
                continue
            label = torch_label(matrix.label, torch, cuda_mm)
            check_label(label, matrix)
            what = f"{torch.describe()} x CUDA {cuda_mm}"
            if label in owners:
                raise ConfigError(
                    f"the label template gives '{label}' both for {owners[label]} and for "
                    f"{what}; each cell needs its own label (use {{torch}} and {{cuda}})",
                    file=matrix.path, line=matrix.label_line, key="label")
            owners[label] = what
            labels[(torch, cuda_mm)] = label
    return labels
