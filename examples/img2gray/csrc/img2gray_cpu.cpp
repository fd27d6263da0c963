#include "img2gray.h"

namespace img2gray {

void rgb_to_gray_cpu(const uint8_t* rgb, uint8_t* gray, int64_t pixels) {
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* pixel = rgb + 3 * i;
    const uint32_t weighted = 210u * pixel[0] + 720u * pixel[1] + 70u * pixel[2];
    gray[i] = static_cast<uint8_t>((weighted + 500u) / 1000u);
  }
}

}  // namespace img2gray
