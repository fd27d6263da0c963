#pragma once

// ATen's tensor alone: the CUDA unit compiles in a fraction of the time torch/extension.h
// (the whole C++ API and pybind11) would take it; only the binding needs that header.
#include <ATen/core/Tensor.h>

// out = max(x, 0) * scale on the GPU, for a contiguous floating tensor `x` on a CUDA device.
void relu_scale_cuda(const at::Tensor &x, double scale, at::Tensor &out);
