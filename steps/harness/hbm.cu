// hbm.cu — see hbm.h.
#include "hbm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "common/perf.h"
#include "steps/harness/spin.h"

namespace fa::bench {
namespace {

constexpr int kThreads = 256;

// SplitMix64's finaliser: a well-mixed 64-bit hash of a counter.
__device__ std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class Element>
__global__ void fill_normal_kernel(Element* data, std::size_t n, std::uint64_t seed) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t h = mix(seed ^ mix(i));
    // Two uniforms in (0, 1] and [0, 1) from the hash's halves, then Box–Muller.
    const float u1 = (static_cast<float>(h >> 40) + 1.f) * (1.f / 16777216.f);
    const float u2 = static_cast<float>((h >> 16) & 0xFFFFFF) * (1.f / 16777216.f);
    const float z = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if constexpr (std::is_same_v<Element, __nv_bfloat16>)
      data[i] = __float2bfloat16(z);
    else
      data[i] = __float2half(z);
  }
}

// Every 16-byte piece of `data` read once, four loads in flight per thread. The XOR of what a
// thread read is written only if it equals a value the caller never fills in, so the loads
// cannot be dropped and nothing is written.
__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* __restrict__ data, std::size_t n, unsigned sentinel,
                unsigned* __restrict__ sink) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  std::size_t i = std::size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldcs(data + i), b = __ldcs(data + i + stride);
    const uint4 c = __ldcs(data + i + 2 * stride), d = __ldcs(data + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(data + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == sentinel) sink[0] = acc;
}

// kv_rows_read: one block per (head, sequence) copies its head's rows of K and V into shared
// memory as the decoding candidate does (decode_kernel_mma.cuh, m3w4spa): tiles of 64 rows of
// each, three stages, the next tile but one asked for while this one is "used", thread t
// copying chunk t % 16 of rows t / 16 + 8i with 16-byte cp.async, then one 16-byte read of the
// tile per thread in place of the attention's arithmetic. Only the rows' addresses depend on
// the layout. 96 KiB of shared memory: two blocks per SM, as the candidate's 100 KiB.
// With kHeads > 1 (m3w4spah2, m3w4spah4 of bin/variants_12), a block copies kHeads
// neighbouring heads, tiles of 64 / kHeads positions of each, thread t chunk t % (16 kHeads)
// of a position's kHeads rows (side by side in bnhd), and each (head group, sequence) is split
// in kHeads runs of positions, grid (splits, head groups, sequences), so that the grid has as
// many blocks of as many bytes as with one head per block.
// `starts` (a KvStarts) is the tile each block begins at (rot below); it wraps round to its
// first.
constexpr int kRowThreads = 128, kRowChunks = 16, kTileRows = 64, kRowStages = 3;
constexpr int kRowTileBytes = kTileRows * kRowChunks * 16;  // one of K or V
constexpr int kRowSmemBytes = kRowStages * 2 * kRowTileBytes;

__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

template <KvLayout kLayout, int kHeads>
__global__ void __launch_bounds__(kRowThreads)
    kv_rows_read_kernel(const uint4* __restrict__ k, const uint4* __restrict__ v, int heads, int n,
                        KvStarts starts, unsigned sentinel, unsigned* __restrict__ sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kWide = kRowChunks * kHeads;      // chunks of a position's kHeads rows
  constexpr int kPositions = kTileRows / kHeads;  // positions per tile
  constexpr int kPerPass = kRowThreads / kWide;   // positions per pass of the block
  const int split = blockIdx.x, b = blockIdx.z;
  const int tiles = n / kTileRows;  // per split: n / kHeads positions, tiles of kPositions
  const int first_tile = split * tiles;
  const int rot = starts == KvStarts::kSpread
                      ? static_cast<int>((int64_t{blockIdx.y} + int64_t{gridDim.y} * b) * tiles /
                                         (int64_t{gridDim.y} * gridDim.z))
                  : starts == KvStarts::kSequences
                      ? static_cast<int>(int64_t{b} * tiles / gridDim.z)
                      : 0;
  const int i0 = threadIdx.x / kWide, wide = threadIdx.x % kWide;
  const int h = blockIdx.y * kHeads + wide / kRowChunks, chunk = wide % kRowChunks;
  const uint32_t s0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto load = [&](int tile, int stage) {
    tile = tile + rot < tiles ? tile + rot : tile + rot - tiles;  // the block's own order
    const uint32_t dst = s0 + stage * 2 * kRowTileBytes + threadIdx.x * 16;
#pragma unroll
    for (int i = 0; i < kPositions / kPerPass; ++i) {
      const std::size_t pos = std::size_t(first_tile + tile) * kPositions + i0 + kPerPass * i;
      const std::size_t row = kLayout == KvLayout::kBhnd ? (std::size_t(b) * heads + h) * n + pos
                                                         : (std::size_t(b) * n + pos) * heads + h;
      const uint32_t at = dst + i * kRowThreads * 16;
      cp_async_16(at, k + row * kRowChunks + chunk);
      cp_async_16(at + kRowTileBytes, v + row * kRowChunks + chunk);
    }
  };
#pragma unroll
  for (int s = 0; s < kRowStages - 1; ++s) {
    if (s < tiles) load(s, s);
    cp_async_commit();
  }
  unsigned acc = 0;
  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<kRowStages - 2>();
    __syncthreads();  // tile t landed for every thread; every thread is done with tile t - 1
    if (t + kRowStages - 1 < tiles) load(t + kRowStages - 1, (t + kRowStages - 1) % kRowStages);
    cp_async_commit();
    const uint4 x = reinterpret_cast<const uint4*>(
        smem +
        (t % kRowStages) * 2 * kRowTileBytes)[(threadIdx.x * 7 + t) % (2 * kRowTileBytes / 16)];
    acc ^= x.x ^ x.y ^ x.z ^ x.w;
  }
  cp_async_wait<0>();
  if (acc == sentinel) sink[0] = acc;
}

int grid_for(std::size_t n, int per_sm) {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t needed = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::size_t>(needed, std::size_t(sms) * per_sm));
}

}  // namespace

void fill_normal(void* data, std::size_t n, DType dtype, std::uint64_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const int grid = grid_for(n, 16);
  if (dtype == DType::BF16)
    fill_normal_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, seed);
  else if (dtype == DType::F16)
    fill_normal_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(data), n, seed);
  else
    throw std::invalid_argument(std::string("fill_normal: dtype (") + dtype_name(dtype) +
                                ") must be fp16 or bf16");
  CUDA_CHECK_LAUNCH();
}

HbmRead measure_hbm_read(std::size_t bytes, int warmup, int reps, long long spin_cycles) {
  if (bytes < 16 || bytes % 16 != 0)  // the rest is time_hbm_read's to check
    throw std::invalid_argument("measure_hbm_read: bytes (" + std::to_string(bytes) +
                                ") must be a positive multiple of 16");
  DeviceBuffer buffer(bytes);
  fill_normal(buffer.get(), bytes / 2, DType::BF16, 7);  // random bits, never zeros
  return time_hbm_read(buffer.get(), bytes, warmup, reps, spin_cycles);
}

HbmRead time_hbm_read(const void* data, std::size_t bytes, int warmup, int reps,
                      long long spin_cycles) {
  if (bytes < 16 || bytes % 16 != 0 || reps < 1 || warmup < 0)
    throw std::invalid_argument("time_hbm_read: bytes (" + std::to_string(bytes) +
                                ") must be a positive multiple of 16, reps (" +
                                std::to_string(reps) + ") at least 1, warmup (" +
                                std::to_string(warmup) + ") at least 0");
  if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0)
    throw std::invalid_argument("time_hbm_read: data (" +
                                std::to_string(reinterpret_cast<std::uintptr_t>(data)) +
                                ") must be 16-byte aligned");
  // The word a read writes only by chance: one per program, so that probing in a loop
  // (wait_for_hbm_read) allocates and frees nothing.
  static DeviceBuffer sink(sizeof(unsigned));
  const std::size_t n = bytes / 16;
  const int grid = grid_for(n, 8);
  // Should the XOR of one thread's reads ever equal the sentinel (odds of 2^-32), that thread
  // writes one word: harmless to the figure.
  auto run = [&] {
    read_kernel<<<grid, kThreads>>>(static_cast<const uint4*>(data), n, 0xFFFFFFFFu,
                                    sink.as<unsigned>());
    CUDA_CHECK_LAUNCH();
  };
  HbmRead r;
  r.bytes = double(bytes);
  r.reps = reps;
  r.median_ms = time_median_ms(run, warmup, reps, nullptr, [&] { gpu_spin(spin_cycles); });
  r.tbps = r.bytes / (r.median_ms * 1e-3) / 1e12;
  return r;
}

HbmRead kv_rows_read(const void* k, const void* v, int batch, int heads, int n, KvLayout layout,
                     int heads_per_block, int warmup, int reps, long long spin_cycles,
                     KvStarts starts) {
  if (batch < 1 || heads < 1 || heads > 65535 || batch > 65535 || n < kTileRows ||
      n % kTileRows != 0 || reps < 1 || warmup < 0)
    throw std::invalid_argument("kv_rows_read: batch (" + std::to_string(batch) + ") and heads (" +
                                std::to_string(heads) + ") must be in [1, 65535], n (" +
                                std::to_string(n) + ") a positive multiple of " +
                                std::to_string(kTileRows) + ", reps (" + std::to_string(reps) +
                                ") at least 1, warmup (" + std::to_string(warmup) + ") at least 0");
  if ((heads_per_block != 1 && heads_per_block != 2 && heads_per_block != 4) ||
      heads % heads_per_block != 0)
    throw std::invalid_argument(
        "kv_rows_read: heads_per_block (" + std::to_string(heads_per_block) +
        ") must be 1, 2 or 4 and divide heads (" + std::to_string(heads) + ")");
  if (reinterpret_cast<std::uintptr_t>(k) % 16 != 0 || reinterpret_cast<std::uintptr_t>(v) % 16)
    throw std::invalid_argument("kv_rows_read: k and v must be 16-byte aligned");
  static DeviceBuffer sink(sizeof(unsigned));
  // The kernel for (layout, heads per block), its shared memory allowed once.
  using Kernel = void (*)(const uint4*, const uint4*, int, int, KvStarts, unsigned, unsigned*);
  static const auto kernels = [] {
    const std::array<Kernel, 6> all{
        kv_rows_read_kernel<KvLayout::kBhnd, 1>, kv_rows_read_kernel<KvLayout::kBhnd, 2>,
        kv_rows_read_kernel<KvLayout::kBhnd, 4>, kv_rows_read_kernel<KvLayout::kBnhd, 1>,
        kv_rows_read_kernel<KvLayout::kBnhd, 2>, kv_rows_read_kernel<KvLayout::kBnhd, 4>};
    for (Kernel f : all)
      CUDA_CHECK(
          cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kRowSmemBytes));
    return all;
  }();
  const Kernel kernel = kernels[(layout == KvLayout::kBnhd ? 3 : 0) +
                                (heads_per_block == 4 ? 2 : heads_per_block - 1)];
  const dim3 grid(static_cast<unsigned>(heads_per_block),
                  static_cast<unsigned>(heads / heads_per_block), static_cast<unsigned>(batch));
  auto run = [&] {
    kernel<<<grid, kRowThreads, kRowSmemBytes>>>(static_cast<const uint4*>(k),
                                                 static_cast<const uint4*>(v), heads, n, starts,
                                                 0xFFFFFFFFu, sink.as<unsigned>());
    CUDA_CHECK_LAUNCH();
  };
  HbmRead r;
  r.bytes = 2.0 * batch * heads * double(n) * kRowChunks * 16;
  r.reps = reps;
  r.median_ms = time_median_ms(run, warmup, reps, nullptr, [&] { gpu_spin(spin_cycles); });
  r.tbps = r.bytes / (r.median_ms * 1e-3) / 1e12;
  return r;
}

HbmWait wait_for_hbm_read(const void* data, std::size_t bytes, double tbps, double fraction,
                          int interval_ms, int max_ms) {
  if (!(tbps > 0) || !(fraction > 0 && fraction <= 1) || interval_ms < 1 || max_ms < 0)
    throw std::invalid_argument("wait_for_hbm_read: tbps (" + std::to_string(tbps) +
                                ") must be > 0, fraction (" + std::to_string(fraction) +
                                ") in (0, 1], interval_ms (" + std::to_string(interval_ms) +
                                ") at least 1, max_ms (" + std::to_string(max_ms) + ") at least 0");
  const auto start = std::chrono::steady_clock::now();
  auto waited_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  HbmWait w;
  int probes = 0;
  for (;;) {
    ++probes;
    w.at_speed = time_hbm_read(data, bytes, 1, 3, 0).tbps >= fraction * tbps;
    if (w.at_speed || waited_ms() >= max_ms) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  // At speed at the first probe (a few milliseconds): no wait.
  w.ms = w.at_speed && probes == 1 ? 0.0 : waited_ms();
  return w;
}

}  // namespace fa::bench
