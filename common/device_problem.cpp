#include "common/device_problem.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"

namespace fa {

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

namespace {

/// n elements of `t` on the device.
DeviceBuffer alloc(DType t, std::size_t n) { return DeviceBuffer(n * dtype_size(t)); }

/// A device copy of `src` as `t`.
DeviceBuffer to_device(DType t, const std::vector<float>& src) {
  DeviceBuffer b = alloc(t, src.size());
  upload_as(t, src.data(), src.size(), b.get());
  return b;
}

/// Fills each buffer with 0xFF bytes: a NaN in fp32, fp16 and bf16 alike.
void poison_all(std::initializer_list<const DeviceBuffer*> buffers) {
  for (const DeviceBuffer* b : buffers)
    if (b->bytes() > 0) CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));
}

}  // namespace

DeviceProblem::DeviceProblem(const HostInputs& in, std::size_t workspace_bytes)
    : p_(in.problem),
      q_(to_device(p_.dtype, in.q)),
      k_(to_device(p_.dtype, in.k)),
      v_(to_device(p_.dtype, in.v)),
      o_(alloc(p_.dtype, in.q.size())),
      lse_(alloc(DType::F32, static_cast<std::size_t>(p_.lse_elems()))),
      workspace_(workspace_bytes) {
  poison();
}

void DeviceProblem::poison() { poison_all({&o_, &lse_}); }

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

namespace {

/// `in`, after checking that O, L and dO have the problem's sizes.
const HostInputs& checked(const HostInputs& in, const std::vector<float>& o,
                          const std::vector<float>& lse, const std::vector<float>& d_o) {
  const std::size_t nq = in.q.size(), nl = static_cast<std::size_t>(in.problem.lse_elems());
  if (o.size() != nq || d_o.size() != nq || lse.size() != nl)
    throw std::invalid_argument("DeviceBackward: o and d_o must hold " + std::to_string(nq) +
                                " values and lse " + std::to_string(nl) + " (got " +
                                std::to_string(o.size()) + ", " + std::to_string(d_o.size()) +
                                ", " + std::to_string(lse.size()) + ")");
  return in;
}

}  // namespace

DeviceBackward::DeviceBackward(const HostInputs& in, const std::vector<float>& o,
                               const std::vector<float>& lse, const std::vector<float>& d_o,
                               std::size_t workspace_bytes)
    : p_(checked(in, o, lse, d_o).problem),
      q_(to_device(p_.dtype, in.q)),
      k_(to_device(p_.dtype, in.k)),
      v_(to_device(p_.dtype, in.v)),
      o_(to_device(p_.dtype, o)),
      lse_(to_device(DType::F32, lse)),
      d_o_(to_device(p_.dtype, d_o)),
      dq_(alloc(p_.dtype, in.q.size())),
      dk_(alloc(p_.dtype, in.k.size())),
      dv_(alloc(p_.dtype, in.v.size())),
      workspace_(workspace_bytes) {
  poison();
}

// The workspace too: a step may not count on finding it zeroed.
void DeviceBackward::poison() { poison_all({&dq_, &dk_, &dv_, &workspace_}); }

BackwardTensors DeviceBackward::tensors() const {
  BackwardTensors t;
  t.q = q_.get();
  t.k = k_.get();
  t.v = v_.get();
  t.o = o_.get();
  t.lse = lse_.as<float>();
  t.d_o = d_o_.get();
  t.dq = dq_.get();
  t.dk = dk_.get();
  t.dv = dv_.get();
  return t;
}

void DeviceBackward::download(std::vector<float>* dq, std::vector<float>* dk,
                              std::vector<float>* dv) const {
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto nq = static_cast<std::size_t>(p_.q_elems());
  const auto nkv = static_cast<std::size_t>(p_.kv_elems());
  dq->resize(nq);
  dk->resize(nkv);
  dv->resize(nkv);
  download_as(p_.dtype, dq_.get(), nq, dq->data());
  download_as(p_.dtype, dk_.get(), nkv, dk->data());
  download_as(p_.dtype, dv_.get(), nkv, dv->data());
}

DecodeBuffers::DecodeBuffers(const DecodeProblem& p) {
  const std::size_t es = dtype_size(p.dtype);
  q = DeviceBuffer(p.q_elems() * es);
  k_new = DeviceBuffer(p.new_kv_elems() * es);
  v_new = DeviceBuffer(p.new_kv_elems() * es);
  k_cache = DeviceBuffer(p.cache_elems() * es);
  v_cache = DeviceBuffer(p.cache_elems() * es);
  lens = DeviceBuffer(p.cache_lens.size() * sizeof(int));
  table = DeviceBuffer(p.block_table.size() * sizeof(int));
  o = DeviceBuffer(p.q_elems() * es);
  lse = DeviceBuffer(p.lse_elems() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(lens.get(), p.cache_lens.data(), lens.bytes(), cudaMemcpyHostToDevice));
  if (table.bytes() > 0)
    CUDA_CHECK(
        cudaMemcpy(table.get(), p.block_table.data(), table.bytes(), cudaMemcpyHostToDevice));
}

DecodeTensors DecodeBuffers::tensors() const {
  DecodeTensors t;
  t.q = q.get();
  t.k_new = k_new.get();
  t.v_new = v_new.get();
  t.k_cache = k_cache.get();
  t.v_cache = v_cache.get();
  t.cache_lens = lens.as<int>();
  t.block_table = table.bytes() > 0 ? table.as<int>() : nullptr;
  t.o = o.get();
  t.lse = lse.as<float>();
  return t;
}

void DecodeBuffers::poison() { poison_all({&o, &lse}); }

}  // namespace fa
