"""The tile kernel: each block adds one tile of TILE elements."""

import cuda.tile as ct

TILE = 1024


@ct.kernel
def add_kernel(a, b, out, tile: ct.Constant[int]):
    block = ct.bid(0)
    x = ct.load(a, index=(block,), shape=(tile,), padding_mode=ct.PaddingMode.ZERO)
    y = ct.load(b, index=(block,), shape=(tile,), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(block,), tile=x + y)
