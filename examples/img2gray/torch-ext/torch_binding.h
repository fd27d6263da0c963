#pragma once

#include <ATen/ATen.h>

// uint8 RGB image (H, W, 3) -> uint8 grayscale image (H, W), on the image's device.
at::Tensor img2gray_cpu(const at::Tensor& rgb);

#if defined(CUDA_KERNEL)
at::Tensor img2gray_cuda(const at::Tensor& rgb);
#endif
