#include "common/inputs.h"

#include <Eigen/Core>  // Eigen::half and Eigen::bfloat16: round-to-nearest-even conversions

#include <random>

namespace fa {

const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::Normal:
      return "normal";
    case Distribution::Shifted:
      return "shifted";
    case Distribution::Large:
      return "large";
  }
  return "?";
}

bool parse_distribution(const std::string& s, Distribution* out) {
  if (s == "normal") {
    *out = Distribution::Normal;
    return true;
  }
  if (s == "shifted") {
    *out = Distribution::Shifted;
    return true;
  }
  if (s == "large") {
    *out = Distribution::Large;
    return true;
  }
  return false;
}

float round_to(DType t, float x) {
  switch (t) {
    case DType::F32:
      return x;
    case DType::F16:
      return static_cast<float>(Eigen::half(x));
    case DType::BF16:
      return static_cast<float>(Eigen::bfloat16(x));
  }
  return x;
}

HostInputs make_inputs(const Problem& p, Distribution dist, std::uint64_t seed) {
  HostInputs in;
  in.problem = p;
  in.seed = seed;
  in.dist = dist;
  std::mt19937_64 gen(seed);
  const float mean = dist == Distribution::Shifted ? 0.5f : 0.f;
  const float qk_std = dist == Distribution::Large ? 5.f : 1.f;
  std::normal_distribution<float> qk(mean, qk_std), v(mean, 1.f);
  auto fill = [&](std::vector<float>& x, std::int64_t n, std::normal_distribution<float>& d) {
    x.resize(static_cast<std::size_t>(n));
    for (float& e : x) e = round_to(p.dtype, d(gen));
  };
  fill(in.q, p.q_elems(), qk);
  fill(in.k, p.kv_elems(), qk);
  fill(in.v, p.kv_elems(), v);
  return in;
}

}  // namespace fa
