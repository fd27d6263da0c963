"""RGB to grayscale: uint8 (H, W, 3) -> uint8 (H, W), weights 0.21 R + 0.72 G + 0.07 B.

The result is rounded half up and computed exactly in integers, so the CPU and CUDA
implementations agree bit for bit.
"""

import torch

from ._ops import add_op_namespace_prefix, ops


def img2gray(rgb: torch.Tensor) -> torch.Tensor:
    """Grayscale of a uint8 RGB image, on the image's own device (CPU or CUDA)."""
    return ops.img2gray(rgb)


__all__ = ["add_op_namespace_prefix", "img2gray", "ops"]
