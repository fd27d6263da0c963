"""A kernel-builder repo that compiles: build.toml, csrc/ and torch-ext/, built by the
factory's own compilers into one abi3 shared object per cell. A kernel that targets torch's
stable ABI is one cell per CUDA major and platform serving every later torch; a kernel with a
CPU backend gets CPU cells where the matrix asks for them."""

from __future__ import annotations

from ....config.spec import KernelSpec
from ....plan.model import Cell, Kernel, Layouts
from ....values.versions import Version
from ...job import Built, Job
from ..base import BaseKind
from .build import build

__all__ = ["KERNEL_BUILDER", "KernelBuilder"]


class KernelBuilder(BaseKind):
    """A compiled kernel-builder repo."""

    def plan(self, layouts: Layouts, kernel: Kernel) -> None:
        torch = kernel.spec.torch
        if torch is not None and torch.stable_abi_for("cuda") is not None:
            layouts.stable(kernel)
        else:
            layouts.per_torch(kernel)
        layouts.cpu(kernel)

    def stable_abi(self, cell: Cell) -> Version | None:
        """The torch stable ABI a CUDA cell targets: its wheel then serves every torch from
        the one it is built against on."""
        if cell.cuda is None or cell.spec.torch is None:
            return None
        return cell.spec.torch.stable_abi_for("cuda")

    def unsupported(self, spec: KernelSpec) -> str | None:
        if spec.framework == "torch" and "cuda" not in spec.backends:
            return (f"declares no CUDA backend (backends: {', '.join(spec.backends)}); the "
                    "factory builds CUDA kernels")
        return None

    def build(self, job: Job) -> Built:
        return build(job)


KERNEL_BUILDER = KernelBuilder()
