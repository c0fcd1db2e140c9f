#include "inputs.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>
#include <random>

#include "cuda_check.h"

namespace fa {

const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::Normal: return "normal";
    case Distribution::Shifted: return "shifted";
    case Distribution::Large: return "large";
  }
  return "?";
}

bool parse_distribution(const std::string& s, Distribution* out) {
  if (s == "normal") { *out = Distribution::Normal; return true; }
  if (s == "shifted") { *out = Distribution::Shifted; return true; }
  if (s == "large") { *out = Distribution::Large; return true; }
  return false;
}

float round_to(DType t, float x) {
  switch (t) {
    case DType::F32: return x;
    case DType::F16: return __half2float(__float2half_rn(x));
    case DType::BF16: return __bfloat162float(__float2bfloat16_rn(x));
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

void upload_as(DType t, const float* src, std::size_t n, void* dst) {
  if (t == DType::F32) {
    CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return;
  }
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = t == DType::F16 ? __half_as_ushort(__float2half_rn(src[i]))
                              : __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
  CUDA_CHECK(cudaMemcpy(dst, bits.data(), n * 2, cudaMemcpyHostToDevice));
}

void download_as(DType t, const void* src, std::size_t n, float* dst) {
  if (t == DType::F32) {
    CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
    return;
  }
  std::vector<std::uint16_t> bits(n);
  CUDA_CHECK(cudaMemcpy(bits.data(), src, n * 2, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = t == DType::F16 ? __half2float(__ushort_as_half(bits[i]))
                             : __bfloat162float(__ushort_as_bfloat16(bits[i]));
  }
}

DeviceProblem::DeviceProblem(const HostInputs& in, std::size_t workspace_bytes)
    : p_(in.problem),
      q_(in.q.size() * dtype_size(p_.dtype)),
      k_(in.k.size() * dtype_size(p_.dtype)),
      v_(in.v.size() * dtype_size(p_.dtype)),
      o_(in.q.size() * dtype_size(p_.dtype)),
      lse_(static_cast<std::size_t>(p_.lse_elems()) * sizeof(float)),
      workspace_(workspace_bytes) {
  upload_as(p_.dtype, in.q.data(), in.q.size(), q_.get());
  upload_as(p_.dtype, in.k.data(), in.k.size(), k_.get());
  upload_as(p_.dtype, in.v.data(), in.v.size(), v_.get());
  poison();
}

void DeviceProblem::poison() {
  // 0xFF bytes are a NaN in fp32, fp16 and bf16 alike.
  CUDA_CHECK(cudaMemset(o_.get(), 0xFF, o_.bytes()));
  CUDA_CHECK(cudaMemset(lse_.get(), 0xFF, lse_.bytes()));
}

DeviceTensors DeviceProblem::tensors() const {
  DeviceTensors t;
  t.q = q_.get();
  t.k = k_.get();
  t.v = v_.get();
  t.o = o_.get();
  t.lse = lse_.as<float>();
  return t;
}

void DeviceProblem::download(std::vector<float>* o, std::vector<float>* lse) const {
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::size_t n = static_cast<std::size_t>(p_.q_elems());
  o->resize(n);
  download_as(p_.dtype, o_.get(), n, o->data());
  if (lse) {
    lse->resize(static_cast<std::size_t>(p_.lse_elems()));
    CUDA_CHECK(cudaMemcpy(lse->data(), lse_.get(), lse_.bytes(), cudaMemcpyDeviceToHost));
  }
}

std::size_t DeviceProblem::device_bytes() const {
  return q_.bytes() + k_.bytes() + v_.bytes() + o_.bytes() + lse_.bytes() + workspace_.bytes();
}

}  // namespace fa
