"""Read and validate matrix.yaml: every error names the file, the line and the key.

The file's top table is read here; each section has its reader beside it: the kernels and
their sources (kernels.py, sources.py), the kernels' tests (tests.py), the torch releases
(torches.py), the CUDA versions (cuda.py), the label templates (labels.py) and the other
settings of a build (settings.py), with the values several of them take in fields.py.
"""

from __future__ import annotations

from pathlib import Path

from ... import defaults
from ...errors import ConfigError
from ..model import ALL_TESTS, Matrix, NameCheck
from ..nodes import Node, load_yaml
from ..publisher import read_publisher
from ..rules import apply_rule_entries, shipped_rules
from .cuda import read_cuda_entries, read_follow
from .fields import read_compress, read_size_limit
from .kernels import read_kernels
from .labels import STABLE_LABEL_FIELDS, check_label_template, read_dist_name
from .settings import (
    read_costs_folder,
    read_cpu,
    read_docker,
    read_excludes,
    read_name_check,
    read_object_store,
    read_platforms,
    read_pythons,
    read_runner,
    read_wheelhouses,
)
from .sources import read_depends
from .tests import read_tests
from .torches import (
    read_command_line_torches,
    read_known_builds,
    read_latest,
    read_torch_entries,
    with_resolved_torches,
)

__all__ = ["load_matrix"]


def load_matrix(path: Path, torch_pythons: list[Path] | None = None,
                filling: bool = False) -> Matrix:
    """The matrix at `path`; `torch_pythons` (--torch-python) replace its torch list with the
    torches of those interpreters. `filling`: its wheelhouses are being filled (`factory
    wheelhouse`), so they need not hold wheels yet."""
    top = _top_table(load_yaml(path))
    base = path.parent
    latest = read_latest(top["torch"]) if isinstance(top["torch"].value, dict) and \
        "latest" in top["torch"].value and not torch_pythons else None
    follow = read_follow(top["cuda"]) if isinstance(top["cuda"].value, dict) and \
        "follow" in top["cuda"].value else None
    if follow is not None and torch_pythons:
        raise ConfigError("cuda: {follow: torch} takes the CUDA versions of torch releases; "
                          "with --torch-python list the CUDA versions", key="--torch-python")
    tests = read_tests(top["tests"], ALL_TESTS, every_kernel=True) if "tests" in top else ALL_TESTS
    rules = (apply_rule_entries(shipped_rules(), top["toolchain-rules"])
             if "toolchain-rules" in top else shipped_rules())
    matrix = Matrix(
        path=path,
        kernels=read_kernels(top["kernels"], base, tests, rules),
        torch=(read_command_line_torches(torch_pythons) if torch_pythons
               else () if latest else read_torch_entries(top["torch"], base)),
        cuda=() if follow else read_cuda_entries(top["cuda"], base),
        platforms=read_platforms(top.get("platforms")),
        label=top["label"].nonempty_str() if "label" in top else defaults.LABEL_TEMPLATE,
        label_line=top["label"].line if "label" in top else None,
        excludes=read_excludes(top.get("exclude")),
        runner=read_runner(top["runner"]) if "runner" in top else None,
        docker_base=read_docker(top["docker"]) if "docker" in top else None,
        depends=read_depends(top["depends"], base) if "depends" in top else (),
        python=read_pythons(top["python"]) if "python" in top else (),
        stable_label=(top["stable-label"].nonempty_str() if "stable-label" in top
                      else defaults.STABLE_LABEL_TEMPLATE),
        stable_label_line=top["stable-label"].line if "stable-label" in top else None,
        compress=read_compress(top["compress"]) if "compress" in top else defaults.COMPRESS,
        max_wheel_size=(read_size_limit(top["max-wheel-size"]) if "max-wheel-size" in top
                        else None),
        costs=read_costs_folder(top["costs"], base) if "costs" in top else None,
        torch_latest=latest, cuda_follow=follow,
        dist_name=read_dist_name(top["dist-name"]) if "dist-name" in top else None,
        name_clash=read_name_check(top["name-clash"]) if "name-clash" in top else NameCheck(),
        variants=top["variants"].bool() if "variants" in top else False,
        cross=top["cross"].bool() if "cross" in top else False,
        cpu=read_cpu(top["cpu"]) if "cpu" in top else None,
        wheelhouses=(read_wheelhouses(top["wheelhouse"], base, filling) if "wheelhouse" in top
                     else ()),
        wheelhouse_line=top["wheelhouse"].line if "wheelhouse" in top else None,
        object_store=read_object_store(top["object-store"]) if "object-store" in top else None,
        publisher=read_publisher(top["publisher"]) if "publisher" in top else None,
        rules=rules,
    )
    if follow is not None and latest is None:
        matrix = with_resolved_torches(matrix, read_known_builds(matrix, top["cuda"]))
    if "label" in top:
        check_label_template(top["label"])
    if "stable-label" in top:
        check_label_template(top["stable-label"], STABLE_LABEL_FIELDS)
    return matrix


def _top_table(root: Node) -> dict[str, Node]:
    """The matrix's settings: a table of known keys, the three required ones there."""
    if not isinstance(root.value, dict):
        raise root.error("expected a table of settings at the top of the file")
    return root.table(["kernels", "torch", "cuda", "python", "platforms", "label",
                       "stable-label", "exclude", "runner", "docker", "depends", "compress",
                       "max-wheel-size", "costs", "dist-name", "name-clash", "variants", "cross",
                       "cpu", "tests", "wheelhouse", "toolchain-rules", "object-store",
                       "publisher"],
                      required=["kernels", "torch", "cuda"])
