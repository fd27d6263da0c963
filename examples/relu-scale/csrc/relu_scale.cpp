// The module's entry point: checks its input, then runs the CPU loop or the CUDA kernel.
#include "relu_scale.h"

#include <torch/extension.h>

#include <algorithm>

namespace {

template <typename scalar_t>
void relu_scale_cpu_loop(const scalar_t *x, scalar_t *out, int64_t n, double scale) {
  const auto factor = static_cast<float>(scale);
  for (int64_t i = 0; i < n; ++i) {
    const float value = static_cast<float>(x[i]);
    out[i] = static_cast<scalar_t>(std::max(value, 0.0f) * factor);
  }
}

}  // namespace

torch::Tensor relu_scale(const torch::Tensor &x, double scale) {
  TORCH_CHECK(x.is_floating_point(), "relu_scale: expected a floating tensor, got ",
              x.scalar_type());
  auto input = x.contiguous();
  auto out = torch::empty_like(input);
  if (input.is_cuda()) {
    relu_scale_cuda(input, scale, out);
    return out;
  }
  TORCH_CHECK(input.device().is_cpu(), "relu_scale: unsupported device ", input.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "relu_scale", [&] {
    relu_scale_cpu_loop(input.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), input.numel(), scale);
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Fused ReLU and scale";
  m.def("relu_scale", &relu_scale, "max(x, 0) * scale", pybind11::arg("x"), pybind11::arg("scale"));
}
