"""Element-wise addition of two CUDA tensors, computed by a cuTile kernel."""

from .ops import add

__all__ = ["add"]
