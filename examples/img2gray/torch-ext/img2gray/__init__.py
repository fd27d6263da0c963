"""RGB to grayscale: uint8 (H, W, 3) -> uint8 (H, W), weights 0.21 R + 0.72 G + 0.07 B.

The result is rounded half up and computed exactly in integers, so the CPU and CUDA
implementations agree bit for bit. The op has a fake implementation too, so torch.compile
traces it (fullgraph=True) without running it.
"""

import torch

from ._ops import add_op_namespace_prefix, ops


@torch.library.register_fake(add_op_namespace_prefix("img2gray"))
def _img2gray_fake(rgb: torch.Tensor) -> torch.Tensor:
    """The output's shape, dtype and device, with the checks the kernels make."""
    torch._check(rgb.dim() == 3 and rgb.size(2) == 3,
                 lambda: f"img2gray expects an RGB image of shape (H, W, 3), got {rgb.shape}")
    torch._check(rgb.dtype == torch.uint8,
                 lambda: f"img2gray expects a uint8 image, got {rgb.dtype}")
    return rgb.new_empty(rgb.shape[:2])


def img2gray(rgb: torch.Tensor) -> torch.Tensor:
    """Grayscale of a uint8 RGB image, on the image's own device (CPU or CUDA)."""
    return ops.img2gray(rgb)


__all__ = ["add_op_namespace_prefix", "img2gray", "ops"]
