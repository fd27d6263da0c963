#pragma once

#include <cstdint>

// RGB to grayscale with the weights 0.21 R + 0.72 G + 0.07 B, rounded half up.
// Both implementations compute it exactly in integers, (210 R + 720 G + 70 B + 500) / 1000,
// so the CPU and the GPU agree bit for bit.
namespace img2gray {

// `rgb` holds `pixels` interleaved RGB triplets; `gray` receives one byte per pixel.
void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels);

// Launches the conversion on `stream` (a cudaStream_t). Returns the launch's cudaError_t.
int rgb_to_gray_cuda(const uint8_t* rgb, uint8_t* gray, int64_t pixels, void* stream);

}  // namespace img2gray
