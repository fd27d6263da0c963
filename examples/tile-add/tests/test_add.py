import importlib

import pytest
import torch

import tile_add

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("size", [2, 1000, 4096, 1 << 20, 3 * 1024 + 17])
def test_add_matches_torch(dtype, size):
    a = torch.randn(size, device="cuda", dtype=dtype)
    b = torch.randn(size, device="cuda", dtype=dtype)
    torch.testing.assert_close(tile_add.add(a, b), a + b)


def test_add_keeps_shape():
    a = torch.randn(33, 65, device="cuda")
    b = torch.randn(33, 65, device="cuda")
    out = tile_add.add(a, b)
    assert out.shape == (33, 65)
    torch.testing.assert_close(out, a + b)


def test_add_under_torch_compile():
    compiled = torch.compile(lambda a, b: tile_add.add(a, b) * 2, fullgraph=True)
    a = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    torch.testing.assert_close(compiled(a, b), (a + b) * 2)


def test_shipped_code_serves_every_launch():
    """In a wheel built by kernel-wheel-factory the kernel is never compiled at run time."""
    try:
        loader = importlib.import_module("tile_add._kernel_wheel_factory_cutile")
    except ImportError:
        pytest.skip("not a wheel with code compiled ahead of time")
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for size in (1000, 4096):
            a = torch.ones(size, device="cuda", dtype=dtype)
            tile_add.add(a, a)
    torch.cuda.synchronize()
    assert loader.counts["compiled"] == 0, loader.counts
    assert loader.counts["served"] > 0, loader.counts
