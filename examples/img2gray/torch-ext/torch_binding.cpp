#include <torch/library.h>

#if defined(CUDA_KERNEL)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

#include "../csrc/img2gray.h"
#include "registration.h"
#include "torch_binding.h"

namespace {

at::Tensor checked_output(const at::Tensor& rgb) {
  TORCH_CHECK(rgb.dim() == 3 && rgb.size(2) == 3,
              "img2gray expects an RGB image of shape (H, W, 3), got ", rgb.sizes());
  TORCH_CHECK(rgb.scalar_type() == at::kByte,
              "img2gray expects a uint8 image, got ", rgb.scalar_type());
  return at::empty({rgb.size(0), rgb.size(1)}, rgb.options());
}

}  // namespace

at::Tensor img2gray_cpu(const at::Tensor& rgb) {
  at::Tensor gray = checked_output(rgb);
  const at::Tensor input = rgb.contiguous();
  img2gray::rgb_to_gray_cpu(input.data_ptr<uint8_t>(), gray.data_ptr<uint8_t>(), gray.numel());
  return gray;
}

#if defined(CUDA_KERNEL)
at::Tensor img2gray_cuda(const at::Tensor& rgb) {
  at::Tensor gray = checked_output(rgb);
  const at::Tensor input = rgb.contiguous();
  const c10::cuda::OptionalCUDAGuard guard(input.device());
  const int status = img2gray::rgb_to_gray_cuda(input.data_ptr<uint8_t>(),
                                                gray.data_ptr<uint8_t>(), gray.numel(),
                                                at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == cudaSuccess, "img2gray kernel launch failed: ",
              cudaGetErrorString(static_cast<cudaError_t>(status)));
  return gray;
}
#endif

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("img2gray(Tensor rgb) -> Tensor");
  ops.impl("img2gray", c10::kCPU, &img2gray_cpu);
#if defined(CUDA_KERNEL)
  ops.impl("img2gray", c10::kCUDA, &img2gray_cuda);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
