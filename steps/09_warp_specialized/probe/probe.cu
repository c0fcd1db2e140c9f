// probe.cu — step 09's building blocks checked below the whole kernel: if the shared suite
// (test_09_warp_specialized) fails or hangs, this says which layer broke.
//
// Part 1, the wgmma and TMA layer (this step's copy of step 08's, unchanged): one CTA, one
// warpgroup, 64 query rows and one 128-key tile of K and V — the shapes of the kernel's
// wgmmas (head 1 of 2, so the head coordinate counts; N_kv = 100, so keys 100 … 127 come
// from TMA's zero fill):
//   1. TMA (tensor maps from api.cu, 128-byte swizzle) + mbarrier expect_tx / wait
//   2. S = Q Kᵀ with wgmma m64n128k16, A and B from shared memory (K-major descriptors)
//   3. O = P V with wgmma m64n64k16, P = S rounded to 16 bits from registers and V through
//      the transposed (MN-major) descriptor
// each compared with a double-precision computation on the host, for fp16 and bf16, d = 64
// and 128, both layouts.
//
// Part 2, this step's lesson without the arithmetic: the kernel's own CTA (producer
// warpgroup + C consumers, FwdConfig's traits), setmaxnreg, the kernel's own producer
// (produce()) filling the K/V ring over T visits, and the consumers going through the
// kernel's turn schedule (wait_turn / pass_turn, T + 1 turns each, the same waits on full_k /
// full_v and releases of empty_k / empty_v) with checks in place of the wgmmas:
//   * every visit's K and V tile holds the keys it should (K[n][·] = n, V[n][·] = −n, zeros
//     past N_kv), read through the swizzle at its first and last column; Q the same (Q[i] = i)
//   * the turns come in the order 0, 1, …, C−1, 0, 1, … — C·(T + 1) of them
//   * no mbarrier wait takes longer than ~2 s: a consumer that times out records which
//     barrier, which visit and which parity into host memory and traps, so a hang becomes
//     a message ("consumer 1 timed out on full_k of visit 2, parity 1")
// for T = 1, 2 (one stage each), 3 (first reuse of a stage) and 8 (four uses, a ragged last
// tile), both head dims, both layouts, fp16 (integers up to 2048 are exact).
//
// Exit status: 0 all pass, 1 a failure, 77 no compute capability 9.0 device (skipped).
//
//   build/bin/probe_09_warp_specialized
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../flash_fwd_kernel.cuh"
#include "common/cuda_check.h"
#include "common/launch.h"

namespace fa::step09 {
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
  using Traits = KernelTraits<kD, 2, kKeys, 2, Element>;  // for load_tile: d/64 boxes
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

/// \brief A device copy of `x` (cudaMalloc'd; the caller frees it).
template <class T>
T* to_device(const std::vector<T>& x) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, x.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
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

  Element *dq = to_device(q), *dk = to_device(k), *dv = to_device(v);
  float *ds, *dout;
  CUDA_CHECK(cudaMalloc(&ds, kRows * kKeys * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dout, kRows * kD * sizeof(float)));
  DeviceTensors t;
  t.q = dq;
  t.k = dk;
  t.v = dv;
  const TensorMaps maps = make_tensor_maps(p, t, kRows, kKeys);
  const int smem = (kRows + 2 * kKeys) * kD * 2 + 8 + 1024;
  const auto kernel = probe_kernel<kD, Element>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 128, smem>>>(maps.q, maps.k, maps.v, layout == Layout::BNHD, ds, dout);
  CUDA_CHECK_LAUNCH();
  std::vector<float> s(kRows * kKeys), o(kRows * kD);
  CUDA_CHECK(cudaMemcpy(s.data(), ds, s.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(o.data(), dout, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (void* ptr : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dv),
                    static_cast<void*>(ds), static_cast<void*>(dout)})
    CUDA_CHECK(cudaFree(ptr));

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

// ---------------------------------------------------------------------------------------------
// Part 2: roles, ring and turns
// ---------------------------------------------------------------------------------------------

/// \brief Which wait timed out, in mapped host memory: readable after the trap that follows
/// (plain stores: if several threads time out, one of their records survives).
struct TimeoutLog {
  int code;  // 0, or 1 full_q, 2 full_k, 3 full_v
  int consumer, visit, parity;
};

/// \brief What the protocol kernel reports when it completes (device memory).
struct ProbeLog {
  int bad_values;    // tile elements that were not what the visit should hold
  int first_bad[4];  // what (1 Q, 2 K, 3 V), consumer, visit, value ×1 (as read)
  int turn_count;
  int turns[64];  // consumer of each turn, in the order they were taken
};

constexpr long long kTimeoutClocks = 4000000000LL;  // ~2 s at the H200's ~1.98 GHz

/// \brief mbarrier_wait with a deadline: records `code` and traps when it passes.
__device__ void wait_or_trap(uint32_t bar, uint32_t parity, int code, int consumer, int visit,
                             volatile TimeoutLog* timeout) {
  const long long start = clock64();
  while (!mbarrier_try_wait(bar, parity)) {
    if (clock64() - start > kTimeoutClocks) {
      timeout->consumer = consumer;
      timeout->visit = visit;
      timeout->parity = static_cast<int>(parity);
      timeout->code = code;
      __threadfence_system();
      __trap();
    }
  }
}

/// \brief Element (row, column) of a [kDBlocks][rows][64] swizzled 16-bit tile at `tile`.
__device__ float tile_at(uint32_t tile, int rows, int row, int col) {
  const uint32_t addr = tile + (col / 64) * rows * 128 + row * 128 +
                        (((col % 64) / 8) ^ (row % 8)) * 16 + (col % 8) * 2;
  unsigned short bits;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(bits) : "r"(addr) : "memory");
  return __half2float(__ushort_as_half(bits));
}

__device__ void check_value(float got, float want, int what, int consumer, int visit,
                            ProbeLog* log) {
  if (got == want) return;
  if (atomicAdd(&log->bad_values, 1) == 0) {
    log->first_bad[0] = what;
    log->first_bad[1] = consumer;
    log->first_bad[2] = visit;
    log->first_bad[3] = static_cast<int>(got);
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    protocol_kernel(const __grid_constant__ CUtensorMap tma_q,
                    const __grid_constant__ CUtensorMap tma_k,
                    const __grid_constant__ CUtensorMap tma_v, bool heads_inner, int n_kv,
                    ProbeLog* log, volatile TimeoutLog* timeout) {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kD = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages, kTile = Traits::kKVTileBytes;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base + Traits::kQOffset, sK = base + Traits::kKOffset;
  const uint32_t sV = base + Traits::kVOffset;
  const Barriers<Traits> bars{base + Traits::kBarOffset};
  const int tid = threadIdx.x, wg = tid / 128;
  const int num_tiles = (n_kv + kBlockN - 1) / kBlockN;

  if (tid == 0) bars.init();
  __syncthreads();
  if (wg == 0) {  // the kernel's producer, unchanged
    setmaxnreg_dec<Traits::kProducerRegs>();
    if (tid == 0)
      produce(bars, sQ, sK, sV, &tma_q, &tma_k, &tma_v, 0, kHead, kHead, 0, heads_inner, num_tiles);
    return;
  }
  setmaxnreg_inc<Traits::kConsumerRegs>();
  const int c = wg - 1, r = tid % 128;  // r: the K/V row this thread checks (kBlockN = 128)
  grant_first_turn<Traits>(c);
  wait_or_trap(bars.q, 0, 1, c, -1, timeout);
  if (r < 64)
    for (int col : {0, kD - 1})
      check_value(tile_at(sQ, kBlockM, 64 * c + r, col), static_cast<float>(64 * c + r), 1, c, -1,
                  log);
  const auto key = [&](int visit) { return (num_tiles - 1 - visit) * kBlockN + r; };
  for (int j = 0; j <= num_tiles; ++j) {  // turn j: K of visit j, V of visit j − 1
    wait_turn<Traits>(c);
    if (j < num_tiles) wait_or_trap(bars.full_k(j % kStages), (j / kStages) % 2, 2, c, j, timeout);
    if (j >= 1)
      wait_or_trap(bars.full_v((j - 1) % kStages), ((j - 1) / kStages) % 2, 3, c, j - 1, timeout);
    if (r == 0) {
      const int pos = atomicAdd(&log->turn_count, 1);
      if (pos < 64) log->turns[pos] = c;
    }
    __syncwarp();  // bar.arrive is .aligned: the whole warp, converged
    if (!(c == Traits::kNumConsumers - 1 && j == num_tiles)) pass_turn<Traits>(c);
    if (j < num_tiles) {
      const float want = key(j) < n_kv ? static_cast<float>(key(j)) : 0.f;
      for (int col : {0, kD - 1})
        check_value(tile_at(sK + (j % kStages) * kTile, kBlockN, r, col), want, 2, c, j, log);
      mbarrier_arrive(bars.empty_k(j % kStages));
    }
    if (j >= 1) {
      const float want = key(j - 1) < n_kv ? -static_cast<float>(key(j - 1)) : 0.f;
      for (int col : {0, kD - 1})
        check_value(tile_at(sV + ((j - 1) % kStages) * kTile, kBlockN, r, col), want, 3, c, j - 1,
                    log);
      mbarrier_arrive(bars.empty_v((j - 1) % kStages));
    }
  }
}

/// \brief Runs the protocol probe for head dim kD's configuration with `n_kv` keys; prints
/// one line; returns whether it passed. A trap (a timed-out wait) ends the program: the CUDA
/// context is gone, so it prints what the log says and exits 1.
template <int kD>
bool probe_protocol(Layout layout, int n_kv) {
  using Traits = typename FwdConfig<kD, __half>::Traits;
  constexpr int kC = Traits::kNumConsumers;
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = kHeads;
  p.n_q = Traits::kBlockM;
  p.n_kv = n_kv;
  p.head_dim = kD;
  p.dtype = DType::F16;
  p.layout = layout;
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  auto fill = [&](int rows, const Strides& s, float sign) {
    std::vector<__half> x(static_cast<std::size_t>(kHeads) * rows * kD);
    for (int hh = 0; hh < kHeads; ++hh)
      for (int i = 0; i < rows; ++i)
        for (int col = 0; col < kD; ++col)
          x[hh * s.head + i * s.row + col] = __float2half_rn(sign * static_cast<float>(i));
    return x;
  };
  const std::vector<__half> q = fill(p.n_q, qs, 1.f), k = fill(n_kv, kvs, 1.f),
                            v = fill(n_kv, kvs, -1.f);
  __half *dq = to_device(q), *dk = to_device(k), *dv = to_device(v);
  DeviceTensors t;
  t.q = dq;
  t.k = dk;
  t.v = dv;
  const TensorMaps maps = make_tensor_maps(p, t, Traits::kBlockM, Traits::kBlockN);
  TimeoutLog* timeout = nullptr;  // mapped: the host reads it after a trap
  CUDA_CHECK(cudaHostAlloc(&timeout, sizeof(TimeoutLog), cudaHostAllocMapped));
  *timeout = TimeoutLog{};
  TimeoutLog* dtimeout = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&dtimeout, timeout, 0));
  ProbeLog* dlog = to_device(std::vector<ProbeLog>(1));
  const auto kernel = protocol_kernel<Traits>;
  check_launch_registers<Traits>(kernel, "the protocol probe's kernel");
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Traits::kSmemBytes));
  kernel<<<1, Traits::kNumThreads, Traits::kSmemBytes>>>(
      maps.q, maps.k, maps.v, layout == Layout::BNHD, n_kv, dlog, dtimeout);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t ran = launched == cudaSuccess ? cudaDeviceSynchronize() : launched;
  const int num_tiles = (n_kv + Traits::kBlockN - 1) / Traits::kBlockN;
  const char* what[] = {"-", "Q", "K", "V"};
  if (ran != cudaSuccess) {
    static const char* barrier[] = {"(none recorded)", "full_q", "full_k", "full_v"};
    std::printf(
        "FAIL  protocol d=%-3d %s T=%d: %s; consumer %d timed out on %s of visit %d, "
        "parity %d\n",
        kD, layout_name(layout), num_tiles, cudaGetErrorString(ran), timeout->consumer,
        barrier[timeout->code >= 0 && timeout->code <= 3 ? timeout->code : 0], timeout->visit,
        timeout->parity);
    std::exit(1);  // the context is gone: nothing after this can run
  }
  ProbeLog host_log;
  CUDA_CHECK(cudaMemcpy(&host_log, dlog, sizeof(ProbeLog), cudaMemcpyDeviceToHost));
  const ProbeLog* log = &host_log;
  bool order_ok = log->turn_count == kC * (num_tiles + 1);
  if (Traits::kPingPong)  // without ping-pong the turns may come in any order
    for (int i = 0; i < log->turn_count && i < 64; ++i) order_ok &= log->turns[i] == i % kC;
  const bool ok = order_ok && log->bad_values == 0;
  std::printf("%s  protocol d=%-3d %s T=%d: %d consumers, %d turns %s, %d wrong tile values",
              ok ? "PASS" : "FAIL", kD, layout_name(layout), num_tiles, kC, log->turn_count,
              order_ok ? "in order" : "OUT OF ORDER", log->bad_values);
  if (log->bad_values > 0)
    std::printf(" (first: %s, consumer %d, visit %d, read %d)", what[log->first_bad[0] & 3],
                log->first_bad[1], log->first_bad[2], log->first_bad[3]);
  std::printf("\n");
  if (!order_ok) {
    std::printf("      turns:");
    for (int i = 0; i < log->turn_count && i < 64; ++i) std::printf(" %d", log->turns[i]);
    std::printf("\n");
  }
  CUDA_CHECK(cudaFreeHost(timeout));
  for (void* ptr : {static_cast<void*>(dq), static_cast<void*>(dk), static_cast<void*>(dv),
                    static_cast<void*>(dlog)})
    CUDA_CHECK(cudaFree(ptr));
  return ok;
}

}  // namespace
}  // namespace fa::step09

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
    std::printf("SKIPPED: compute capability %d.%d; step 09 needs compute capability 9.0\n",
                limits.major, limits.minor);
    return 77;
  }
  bool ok = true;
  std::printf("Part 1: TMA and wgmma on one tile\n");
  for (Layout layout : {Layout::BNHD, Layout::BHND}) {
    ok &= step09::probe<64, __nv_bfloat16>(layout);
    ok &= step09::probe<128, __nv_bfloat16>(layout);
    ok &= step09::probe<64, __half>(layout);
    ok &= step09::probe<128, __half>(layout);
  }
  std::printf("Part 2: producer, K/V ring and consumer turns (no arithmetic)\n");
  for (Layout layout : {Layout::BNHD, Layout::BHND})
    for (int n_kv : {100, 200, 300, 1000}) {  // T = 1, 2, 3, 8 visits of 128 keys
      ok &= step09::probe_protocol<64>(layout, n_kv);
      ok &= step09::probe_protocol<128>(layout, n_kv);
    }
  return ok ? 0 : 1;
}
