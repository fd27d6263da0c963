#include <cuda_runtime.h>

#include <algorithm>

#include "img2gray.h"

namespace img2gray {
namespace {

__global__ void rgb_to_gray_kernel(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray,
                                   int64_t pixels) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels;
       i += stride) {
    const uint8_t* pixel = rgb + 3 * i;
    const uint32_t weighted = 210u * pixel[0] + 720u * pixel[1] + 70u * pixel[2];
    gray[i] = static_cast<uint8_t>((weighted + 500u) / 1000u);
  }
}

}  // namespace

int rgb_to_gray_cuda(const uint8_t* rgb, uint8_t* gray, int64_t pixels, void* stream) {
  if (pixels == 0) {
    return cudaSuccess;
  }
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 1 << 16;  // the grid-stride loop covers the rest
  const int64_t blocks = std::min<int64_t>((pixels + kThreads - 1) / kThreads, kMaxBlocks);
  rgb_to_gray_kernel<<<static_cast<unsigned int>(blocks), kThreads, 0,
                       static_cast<cudaStream_t>(stream)>>>(rgb, gray, pixels);
  return cudaGetLastError();
}

}  // namespace img2gray
