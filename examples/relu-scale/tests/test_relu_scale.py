"""The project's own tests: run them against an installed relu-scale."""

import pytest
import torch

import relu_scale

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_matches_torch(device, dtype):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 37, generator=generator).to(device=device, dtype=dtype)
    expected = (torch.relu(x.float()) * 2.5).to(dtype)
    assert torch.equal(relu_scale.relu_scale(x, 2.5), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_keeps_shape_and_handles_views_and_empty(device):
    x = torch.arange(-6.0, 6.0, device=device).reshape(3, 4).t()  # not contiguous
    assert relu_scale.relu_scale(x, -1.0).tolist() == (torch.relu(x) * -1.0).tolist()
    assert relu_scale.relu_scale(torch.empty(0, 5, device=device), 3.0).shape == (0, 5)


def test_rejects_integer_tensors():
    with pytest.raises(RuntimeError, match="floating"):
        relu_scale.relu_scale(torch.arange(4), 2.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_equals_cpu_on_a_large_tensor():
    x = torch.randn(1 << 24, generator=torch.Generator().manual_seed(7))
    assert torch.equal(relu_scale.relu_scale(x.cuda(), 0.5).cpu(), relu_scale.relu_scale(x, 0.5))
