// The CUDA kernel: one thread per element, computed in float, stored in the tensor's type.
#include "relu_scale.h"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace {

template <typename scalar_t>
__global__ void relu_scale_kernel(const scalar_t *__restrict__ x, scalar_t *__restrict__ out,
                                  int64_t n, float scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float value = static_cast<float>(x[i]);
    out[i] = static_cast<scalar_t>(fmaxf(value, 0.0f) * scale);
  }
}

}  // namespace

void relu_scale_cuda(const at::Tensor &x, double scale, at::Tensor &out) {
  const at::cuda::CUDAGuard guard(x.device());
  const int64_t n = x.numel();
  if (n == 0) {
    return;
  }
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned int>((n + threads - 1) / threads);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "relu_scale_cuda", [&] {
    relu_scale_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n, static_cast<float>(scale));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
