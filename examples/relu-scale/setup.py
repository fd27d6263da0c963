"""relu-scale: max(x, 0) * scale in one pass, as a classic torch CUDA extension (a pybind11
module built by torch.utils.cpp_extension), the way most CUDA extensions are laid out."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="relu-scale",
    version="1.0.0",
    description="Fused ReLU and scale for PyTorch tensors, on the CPU and on CUDA GPUs",
    license="Apache-2.0",
    packages=["relu_scale"],
    ext_modules=[
        CUDAExtension(
            name="relu_scale._C",
            sources=["csrc/relu_scale.cpp", "csrc/relu_scale_cuda.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
    python_requires=">=3.9",
)
