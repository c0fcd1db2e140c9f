// test_rounding.cpp — fa::round_to (host code, no CUDA header) gives bit for bit what the
// CUDA conversions the device copies use (__float2half_rn, __float2bfloat16_rn), so that the
// reference sees exactly the values the GPU sees. CPU only; built with the CUDA toolkit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/inputs.h"
#include "tests/catch.hpp"

TEST_CASE("round_to agrees with the CUDA conversions", "[rounding]") {
  std::vector<float> xs = {0.f,
                           -0.f,
                           1e-8f,
                           -1e-8f,
                           6e-8f,
                           65504.f,
                           65519.f,
                           65520.f,
                           1e30f,
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max()};
  std::mt19937 gen(12);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {  // every exponent, every mantissa pattern
    const std::uint32_t b = bits(gen);
    float x;
    std::memcpy(&x, &b, sizeof x);
    if (!std::isnan(x)) xs.push_back(x);
  }
  std::size_t f16_diff = 0, bf16_diff = 0;
  for (float x : xs) {
    const float h = __half2float(__float2half_rn(x));
    const float b = __bfloat162float(__float2bfloat16_rn(x));
    if (fa::round_to(fa::DType::F16, x) != h) ++f16_diff;
    if (fa::round_to(fa::DType::BF16, x) != b) ++bf16_diff;
  }
  CHECK(f16_diff == 0);
  CHECK(bf16_diff == 0);
  CHECK(std::isnan(fa::round_to(fa::DType::F16, std::nanf(""))));
}
