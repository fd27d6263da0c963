"""kernel-wheel-factory: build kernel-builder repos into pip-installable wheels and an index."""

__version__ = "0.1.0"
