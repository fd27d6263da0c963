"""The kernel's own tests: run them against an installed img2gray."""

import pytest
import torch

import img2gray


def reference(rgb: torch.Tensor) -> torch.Tensor:
    weighted = rgb.to(torch.int32) * torch.tensor([210, 720, 70], dtype=torch.int32,
                                                  device=rgb.device)
    return ((weighted.sum(dim=-1) + 500) // 1000).to(torch.uint8)


NEEDS_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NEEDS_GPU)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (256, 512)])
def test_matches_reference(device, shape):
    generator = torch.Generator().manual_seed(0)
    rgb = torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=generator).to(device)
    assert torch.equal(img2gray.img2gray(rgb), reference(rgb))


@pytest.mark.parametrize("device", DEVICES)
def test_extremes(device):
    rgb = torch.tensor([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]],
                       dtype=torch.uint8, device=device)
    assert img2gray.img2gray(rgb).tolist() == [[0, 255, 54, 184, 18]]


def test_rejects_bad_input():
    with pytest.raises(RuntimeError, match="shape"):
        img2gray.img2gray(torch.zeros(4, 4, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="uint8"):
        img2gray.img2gray(torch.zeros(4, 4, 3, dtype=torch.float32))


def test_op_is_registered_under_its_namespace():
    name = img2gray.add_op_namespace_prefix("img2gray")
    namespace, op = name.split("::")
    assert getattr(getattr(torch.ops, namespace), op) is not None


@NEEDS_GPU
def test_cuda_equals_cpu_on_a_large_image():
    generator = torch.Generator().manual_seed(4096)
    rgb = torch.randint(0, 256, (4096, 4096, 3), dtype=torch.uint8, generator=generator)
    on_gpu = img2gray.img2gray(rgb.cuda())
    assert on_gpu.device.type == "cuda" and on_gpu.shape == (4096, 4096)
    assert torch.equal(on_gpu.cpu(), img2gray.img2gray(rgb))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_the_op_in_one_graph(device):
    generator = torch.Generator().manual_seed(7)
    rgb = torch.randint(0, 256, (64, 48, 3), dtype=torch.uint8, generator=generator).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(img2gray.img2gray, fullgraph=True)
    assert torch.equal(compiled(rgb), reference(rgb))


def test_fake_implementation_gives_shape_dtype_and_device():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        gray = img2gray.img2gray(torch.empty(5, 9, 3, dtype=torch.uint8, device="cuda"))
    assert (tuple(gray.shape), gray.dtype, gray.device.type) == ((5, 9), torch.uint8, "cuda")
