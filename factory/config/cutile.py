"""The signatures a cuTile project compiles ahead of time, as its pyproject.toml declares them.

    [[tool.kernel-wheel-factory.cutile.kernel]]
    function = "tile_add.kernels:add_kernel"      # module:name of a @ct.kernel
    dtypes = ["float16", "bfloat16", "float32"]   # what "dtype" stands for below
    parameters = [
        {array = "dtype", ndim = 1},              # a torch tensor of that dtype and rank
        {array = "dtype", ndim = 1},
        {scalar = "float32"},                     # a Python number
        {constant = [256, 1024]},                 # a ct.Constant: one signature per value
    ]
    divisible = [16, 1]                           # the shape divisibility compiled for

Each kernel gets one signature per dtype x constant value x divisibility. An array stands for a
contiguous tensor from torch's allocator, described as cuTile describes such a tensor when it
compiles at run time: 32-bit indices, a 16-byte aligned base, unit stride in its last dimension,
non-negative strides, and for a divisibility d every extent divisible by d. A launch whose
arguments promise at least what a shipped signature assumes is served by it
(data/cutile/runtime.py); one that promises less compiles as it would without the wheel's code.
`divisible = [1]` alone covers every contiguous tensor with one signature; adding 16 ships
faster code for aligned shapes. A dimension of extent 1 is the exception: cuTile compiles it as
a constant shape, which its calling convention v1 admits only at run time (cuda-tile 1.7's
ahead-of-time compiler refuses it), so such a launch compiles as it would without the wheel's
code.

The expanded signatures are plain data (one mapping per parameter), the form the exporter
compiles and the loader compares; they travel as JSON.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .nodes import Node, load_toml

__all__ = ["DTYPES", "TABLE", "CutileKernel", "read_declaration"]

TABLE = "tool.kernel-wheel-factory.cutile"
# cuTile's dtype names and their sizes in bytes (the stride divisibility a 16-byte row gives).
DTYPES = {"bool_": 1, "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
          "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
          "uint32": 4, "int32": 4, "float32": 4, "tfloat32": 4,
          "uint64": 8, "int64": 8, "float64": 8}
_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_MOST_SIGNATURES = 512


@dataclass(frozen=True)
class CutileKernel:
    """One declared kernel: where it lives and the signatures it is compiled for."""

    function: str  # module:name
    signatures: tuple[tuple[dict[str, Any], ...], ...]
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "signatures": [list(s) for s in self.signatures]}


def read_declaration(path: Path) -> tuple[CutileKernel, ...] | None:
    """The kernels pyproject.toml declares under [tool.kernel-wheel-factory.cutile]; None when it
    has no such table."""
    document = load_toml(path)
    node: Node | None = document
    for part in TABLE.split("."):
        if node is None or not isinstance(node.value, dict):
            return None
        node = node.mapping().get(part)
    if node is None:
        return None
    table = node.table(["kernel"], ["kernel"])
    entries = table["kernel"].list()
    if not entries:
        raise table["kernel"].error("declares no kernel: list each @ct.kernel with its "
                                    "signatures")
    merged: dict[str, CutileKernel] = {}
    for entry in entries:  # a function may be declared more than once: its signatures add up
        kernel = _kernel(entry)
        known = merged.get(kernel.function)
        if known is not None:
            kernel = CutileKernel(kernel.function,
                                  _unique(known.signatures + kernel.signatures), known.line)
            if len(kernel.signatures) > _MOST_SIGNATURES:
                raise entry.error(f"brings {kernel.function}'s signatures to "
                                  f"{len(kernel.signatures):,}; at most {_MOST_SIGNATURES} are "
                                  "compiled ahead of time for one kernel")
        merged[kernel.function] = kernel
    return tuple(merged.values())


def _unique(signatures: tuple[tuple[dict[str, Any], ...], ...]
            ) -> tuple[tuple[dict[str, Any], ...], ...]:
    seen: dict[str, tuple[dict[str, Any], ...]] = {}
    for signature in signatures:
        seen.setdefault(_frozen(signature), signature)
    return tuple(seen.values())


def _kernel(node: Node) -> CutileKernel:
    fields = node.table(["function", "dtypes", "parameters", "divisible"],
                        ["function", "parameters"])
    function = fields["function"].str()
    if not _FUNCTION.fullmatch(function):
        raise fields["function"].error(f"'{function}' is not module:name (e.g. "
                                       "\"tile_add.kernels:add_kernel\")")
    dtypes: tuple[str | None, ...] = (None,)
    if "dtypes" in fields:
        dtypes = tuple(_dtype(item) for item in fields["dtypes"].list())
        if not dtypes:
            raise fields["dtypes"].error("must name at least one dtype")
    divisible: tuple[int, ...] = (16, 1)
    if "divisible" in fields:
        divisible = tuple(_power_of_two(item) for item in fields["divisible"].list())
        if not divisible:
            raise fields["divisible"].error("must give at least one divisibility")
    parameters = fields["parameters"].list()
    if not parameters:
        raise fields["parameters"].error("a kernel with no parameters needs no declaration; "
                                         "list one entry per parameter")
    choices = [_parameter(item, "dtypes" in fields) for item in parameters]
    uses_dtype = any(choice.uses_dtype for choice in choices)
    if "dtypes" in fields and not uses_dtype:
        raise fields["dtypes"].error("no parameter says \"dtype\", so dtypes means nothing")
    constants = [choice.values for choice in choices]
    # counted from its parts before anything is expanded: twelve parameters of ten constants
    # each are 10^12 signatures in a kilobyte of TOML
    arrays = any(choice.kind == "array" for choice in choices)
    count = math.prod([len(set(dtypes)) if uses_dtype else 1,
                       len(set(divisible)) if arrays else 1,
                       *(len(set(map(repr, values))) for values in constants)])
    if count > _MOST_SIGNATURES:
        raise node.error(f"declares {count:,} signatures; at most {_MOST_SIGNATURES} are "
                         "compiled ahead of time for one kernel")
    signatures = []
    for dtype, divisor, values in itertools.product(dtypes, divisible,
                                                    itertools.product(*constants)):
        signatures.append(tuple(choice.expand(dtype, divisor, value)
                                for choice, value in zip(choices, values, strict=True)))
    return CutileKernel(function, _unique(tuple(signatures)), node.line)


def _frozen(signature: tuple[dict[str, Any], ...]) -> str:
    return repr([sorted(item.items()) for item in signature])


@dataclass(frozen=True)
class _Choice:
    node: Node
    kind: str
    dtype: str | None  # None: "dtype", the kernel's dtypes
    ndim: int = 0
    contiguous: bool = True
    index: str = "int32"
    values: tuple[Any, ...] = (None,)

    @property
    def uses_dtype(self) -> bool:
        return self.kind in ("array", "scalar") and self.dtype is None

    def expand(self, dtype: str | None, divisor: int, value: Any) -> dict[str, Any]:
        if self.kind == "constant":
            return {"kind": "constant", "value": value}
        name = self.dtype or dtype
        assert name is not None
        if self.kind == "scalar":
            return {"kind": "scalar", "dtype": name}
        return array_parameter(name, self.ndim, divisor, self.contiguous, self.index)


def array_parameter(dtype: str, ndim: int, divisor: int, contiguous: bool = True,
                    index: str = "int32") -> dict[str, Any]:
    """A tensor parameter as cuTile describes a tensor of torch's allocator: `divisor` divides
    every extent; contiguous tensors have unit stride in their last dimension and strides
    divisible by up to 16 bytes' worth of elements."""
    row = max(1, 16 // DTYPES[dtype])
    if contiguous and ndim:
        stride_constant = [None] * (ndim - 1) + [1]
        stride_lower = [0] * (ndim - 1) + [None]
        stride_div = [min(divisor, row) if divisor > 1 else 1] * (ndim - 1) + [1]
    else:
        stride_constant = [None] * ndim
        stride_lower = [0] * ndim
        stride_div = [1] * ndim
    return {"kind": "array", "dtype": dtype, "ndim": ndim, "index": index,
            "stride_lower": stride_lower, "stride_constant": stride_constant,
            "shape_constant": [None] * ndim, "stride_div": stride_div,
            "shape_div": [divisor] * ndim, "base": 16, "alias_groups": [], "may_alias": False}


def _parameter(node: Node, has_dtypes: bool) -> _Choice:
    if not isinstance(node.value, dict):
        raise node.error("expected a table: {array = ...}, {scalar = ...} or {constant = ...}")
    kinds = [kind for kind in ("array", "scalar", "constant") if kind in node.value]
    if len(kinds) != 1:
        raise node.error("each parameter is exactly one of array, scalar or constant")
    kind = kinds[0]
    allowed = {"array": ["array", "ndim", "contiguous", "index"], "scalar": ["scalar"],
               "constant": ["constant"]}[kind]
    fields = node.table(allowed, ["ndim"] if kind == "array" else [])
    if kind == "constant":
        given = fields["constant"]
        values = tuple(given.list()) if isinstance(given.value, list) else (given,)
        if not values:
            raise given.error("must give at least one value")
        for item in values:
            if not isinstance(item.value, (bool, int, float)):
                raise item.error("a constant is a number or a boolean")
        return _Choice(node, kind, None, values=tuple(item.value for item in values))
    named = fields[kind]
    dtype = None if named.value == "dtype" else _dtype(named)
    if dtype is None and not has_dtypes:
        raise named.error("\"dtype\" stands for each of the kernel's dtypes, and it gives "
                          "none: add dtypes = [...]")
    if kind == "scalar":
        return _Choice(node, kind, dtype)
    ndim = fields["ndim"].int()
    if not 0 <= ndim <= 8:
        raise fields["ndim"].error("must be between 0 and 8")
    contiguous = fields["contiguous"].bool() if "contiguous" in fields else True
    index = fields["index"].str() if "index" in fields else "int32"
    if index not in ("int32", "int64"):
        raise fields["index"].error("must be int32 or int64")
    return _Choice(node, kind, dtype, ndim, contiguous, index)


def _dtype(node: Node) -> str:
    name = node.str()
    if name not in DTYPES:
        raise node.error(f"'{name}' is not a cuTile dtype; known: {', '.join(DTYPES)}")
    return name


def _power_of_two(node: Node) -> int:
    value = node.int()
    if value < 1 or value & (value - 1) or value > 1024:
        raise node.error("must be a power of two between 1 and 1024")
    return value
