#pragma once

#include <torch/extension.h>

// out = max(x, 0) * scale on the GPU, for a contiguous floating tensor `x` on a CUDA device.
void relu_scale_cuda(const torch::Tensor &x, double scale, torch::Tensor &out);
