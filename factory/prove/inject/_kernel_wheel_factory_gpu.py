"""What torch and the CUDA runtime say when there is no GPU or driver to run on: read by the
factory's pytest plugin (beside which it is copied) and by the factory, which runs the script
tests, so that a test or script that fails only for want of a GPU is skipped, not failed."""

import re

NO_GPU = re.compile(
    r"Found no NVIDIA driver|no CUDA GPUs are available|no CUDA-capable device|"
    r"CUDA driver initialization failed|cudaErrorNoDevice|cudaErrorInsufficientDriver|"
    r"Torch not compiled with CUDA enabled|libcuda\.so[^ ]* cannot open|"
    r"CUDA driver version is insufficient|cuInit", re.IGNORECASE)
