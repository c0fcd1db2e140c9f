// probe.cu — step 08's building blocks checked one at a time on a single tile, below the
// whole kernel: if the shared suite (test_08_tma_wgmma) fails, this says which layer broke.
//
// One CTA, one warpgroup, 64 query rows and one 128-key tile of K and V — the shapes of the
// kernel's wgmmas (head 1 of 2, so the head coordinate counts; N_kv = 100, so keys 100 … 127
// come from TMA's zero fill):
//   1. TMA (tensor maps from api.cu, 128-byte swizzle) + mbarrier expect_tx / wait
//   2. S = Q Kᵀ with wgmma m64n128k16, A and B from shared memory (K-major descriptors),
//      the accumulator layout read back through the same indexing the kernel uses
//   3. O = P V with wgmma m64n64k16, P = S rounded to 16 bits from registers (the A-fragment
//      conversion) and V through the transposed (MN-major) descriptor
// Each is compared with a double-precision computation on the host, for fp16 and bf16,
// d = 64 and 128, both layouts. Exit status: 0 all pass, 1 a failure, 77 no compute
// capability 9.0 device (skipped).
//
//   build/bin/probe_08_tma_wgmma
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../flash_fwd_kernel.cuh"
#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/launch.h"

namespace fa::step08 {
namespace {

constexpr int kRows = 64;      // query rows: one warpgroup
constexpr int kKeys = 128;     // keys of the tile: S is one m64n128 wgmma per k step
constexpr int kValidKv = 100;  // K, V rows past this are zero-filled by TMA
constexpr int kHeads = 2, kHead = 1;

template <int kD, class Element>
__global__ void __launch_bounds__(128, 1)
    probe_kernel(const __grid_constant__ CUtensorMap tma_q,
                 const __grid_constant__ CUtensorMap tma_k,
                 const __grid_constant__ CUtensorMap tma_v, bool heads_inner, float* s_out,
                 float* o_out) {
  using Traits = KernelTraits<kD, kRows, kKeys, 2, Element>;
  constexpr int kQTile = kRows * kD * 2, kKVTile = kKeys * kD * 2;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + kQTile, sV = sK + kKVTile, bar = sV + kKVTile;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  if (tid == 0) {
    mbarrier_init(bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    mbarrier_arrive_expect_tx(bar, kQTile + 2 * kKVTile);
    load_tile<Traits, kRows>(sQ, &tma_q, bar, 0, kHead, 0, heads_inner);
    load_tile<Traits, kKeys>(sK, &tma_k, bar, 0, kHead, 0, heads_inner);
    load_tile<Traits, kKeys>(sV, &tma_v, bar, 0, kHead, 0, heads_inner);
  }
  mbarrier_wait(bar, 0);

  float s[kKeys / 2];
  fence_operands(s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
    wgmma_ss<Element, kKeys>(s, desc_k_major(sQ + (ks / 4) * kRows * 128 + (ks % 4) * 32),
                             desc_k_major(sK + (ks / 4) * kKeys * 128 + (ks % 4) * 32), ks > 0);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_operands(s);
#pragma unroll
  for (int i = 0; i < kKeys / 2; ++i)  // s[4j + 2h + e]: row 16·warp + g + 8h, key 8j + 2t + e
    s_out[(16 * warp + g + 8 * ((i % 4) / 2)) * kKeys + 8 * (i / 4) + 2 * t + i % 2] = s[i];

  uint32_t pa[kKeys / 16][4];
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      pa[kk][r] = pack_pair<Element>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  float o[kD / 64][32];
#pragma unroll
  for (int db = 0; db < kD / 64; ++db)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[db][i] = 0.f;
#pragma unroll
  for (int db = 0; db < kD / 64; ++db) fence_operands(o[db]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
    for (int db = 0; db < kD / 64; ++db)
      wgmma_rs_n64_trans_b<Element>(o[db], pa[kk],
                                    desc_mn_major(sV + db * kKeys * 128 + kk * 16 * 128));
  wgmma_commit_group();
  wgmma_wait_group<0>();
#pragma unroll
  for (int db = 0; db < kD / 64; ++db) {
    fence_operands(o[db]);
#pragma unroll
    for (int i = 0; i < 32; ++i)
      o_out[(16 * warp + g + 8 * ((i % 4) / 2)) * kD + 64 * db + 8 * (i / 4) + 2 * t + i % 2] =
          o[db][i];
  }
}

float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
float to_float(__half x) { return __half2float(x); }
template <class Element>
Element from_float(float x) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}

/// \brief Runs one configuration; prints one line; returns whether it passed.
template <int kD, class Element>
bool probe(Layout layout) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = kHeads;
  p.n_q = kRows;
  p.n_kv = kValidKv;
  p.head_dim = kD;
  p.dtype = std::is_same_v<Element, __nv_bfloat16> ? DType::BF16 : DType::F16;
  p.layout = layout;
  const Strides qs = p.q_strides(), kvs = p.kv_strides();

  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto make = [&](int rows) {
    std::vector<Element> x(static_cast<std::size_t>(kHeads) * rows * kD);
    for (auto& e : x) e = from_float<Element>(normal(rng));
    return x;
  };
  const std::vector<Element> q = make(kRows), k = make(kValidKv), v = make(kValidKv);
  auto at = [&](const std::vector<Element>& x, const Strides& s, int row, int c) {
    return static_cast<double>(to_float(x[kHead * s.head + row * s.row + c]));
  };

  // Device copies (common/device_buffer.h frees them on every exit, a failed check's included).
  auto upload = [](const std::vector<Element>& x) {
    DeviceBuffer b(x.size() * sizeof(Element));
    CUDA_CHECK(cudaMemcpy(b.get(), x.data(), b.bytes(), cudaMemcpyHostToDevice));
    return b;
  };
  const DeviceBuffer dq = upload(q), dk = upload(k), dv = upload(v);
  const DeviceBuffer ds(kRows * kKeys * sizeof(float)), dout(kRows * kD * sizeof(float));
  DeviceTensors t;
  t.q = dq.get();
  t.k = dk.get();
  t.v = dv.get();
  const TensorMaps maps = make_tensor_maps(p, t, kRows, kKeys);
  const int smem = (kRows + 2 * kKeys) * kD * 2 + 8 + 1024;
  const auto kernel = probe_kernel<kD, Element>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(maps.q, maps.k, maps.v, layout == Layout::BNHD, ds.as<float>(),
                           dout.as<float>());
  CUDA_CHECK_LAUNCH();
  std::vector<float> s(kRows * kKeys), o(kRows * kD);
  CUDA_CHECK(cudaMemcpy(s.data(), ds.get(), ds.bytes(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(o.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost));

  // S against Q Kᵀ in double (zero for the zero-filled keys); O against P V with P the
  // kernel's own S rounded to Element, so that a wrong S does not hide a right P V.
  double s_err = 0, s_max = 0, o_err = 0, o_max = 0;
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kKeys; ++j) {
      double ref = 0;
      if (j < kValidKv)
        for (int c = 0; c < kD; ++c) ref += at(q, qs, i, c) * at(k, kvs, j, c);
      s_err = std::fmax(s_err, std::fabs(s[i * kKeys + j] - ref));
      s_max = std::fmax(s_max, std::fabs(ref));
    }
  for (int i = 0; i < kRows; ++i)
    for (int c = 0; c < kD; ++c) {
      double ref = 0;
      for (int j = 0; j < kValidKv; ++j)
        ref +=
            static_cast<double>(to_float(from_float<Element>(s[i * kKeys + j]))) * at(v, kvs, j, c);
      o_err = std::fmax(o_err, std::fabs(o[i * kD + c] - ref));
      o_max = std::fmax(o_max, std::fabs(ref));
    }
  // fp32 accumulation of exact 16-bit products: errors of order 1e-6 of the magnitudes; a
  // wrong layout gives errors of the order of the magnitudes themselves.
  const bool ok = s_err <= 1e-3 * s_max && o_err <= 1e-3 * o_max;
  std::printf(
      "%s  d=%-3d %-4s %s  S: max err %.3g (max |S| %.3g)   O = P V: max err %.3g "
      "(max |O| %.3g)\n",
      ok ? "PASS" : "FAIL", kD, dtype_name(p.dtype), layout_name(layout), s_err, s_max, o_err,
      o_max);
  return ok;
}

}  // namespace
}  // namespace fa::step08

int main() {
  using namespace fa;
  if (const std::string why = no_usable_device(); !why.empty()) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const DeviceLimits limits = device_limits(device);
  if (limits.major != 9 || limits.minor != 0) {
    std::printf("SKIPPED: compute capability %d.%d; step 08 needs compute capability 9.0\n",
                limits.major, limits.minor);
    return 77;
  }
  bool ok = true;
  for (Layout layout : {Layout::BNHD, Layout::BHND}) {
    ok &= step08::probe<64, __nv_bfloat16>(layout);
    ok &= step08::probe<128, __nv_bfloat16>(layout);
    ok &= step08::probe<64, __half>(layout);
    ok &= step08::probe<128, __half>(layout);
  }
  return ok ? 0 : 1;
}
