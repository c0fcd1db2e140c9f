// Step 01 — naive attention: the formula, literally, in three kernels.
//
// What changed since step 00: the CPU reference moves to the GPU, one kernel per line of
//   S = scale · Q Kᵀ        (scores_kernel:  one thread per score)
//   P = softmax(S)          (softmax_kernel: one block per row, numerically stable)
//   O = P V                 (pv_kernel:      one thread per output element)
// Each kernel reads its inputs from device memory (HBM) and writes its result back there.
//
// What it costs in memory traffic: S and P are N_q × N_kv fp32 matrices per head. The
// scores kernel writes S (4·B·H·N_q·N_kv bytes), the softmax reads S and writes P (twice
// that), the PV kernel reads P. For N = 4096, B·H = 16 that is 1 GiB written per matrix —
// against 16 MiB for each of Q, K, V, O. The extra device memory, 2 matrices, grows as N².
// And every thread of scores_kernel and pv_kernel re-reads a whole row of its inputs from
// global memory: no reuse through shared memory yet (that is step 02).
//
// Build and run:
//   cmake --build build --target 01_naive_attention && build/bin/01_naive_attention --n 1024
//
// Not yet: data reuse (step 02), fusing softmax with PV (step 03), or keeping S on chip
// (step 04). fp32 only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa::step01 {
namespace {

/// Shapes and strides the kernels need, by value (a kernel argument).
struct Params {
  int n_q, n_kv, d, heads_q, group;  // group = H_q / H_kv query heads per K/V head
  Strides qs, kvs;                   // element strides of Q/O and of K/V
  float scale;
  bool causal;
};

constexpr int kTile = 16;  // scores_kernel: 16 × 16 threads per block
constexpr int kSoftmaxThreads = 256;
constexpr int kPvThreadsX = 32;  // pv_kernel: 32 output columns × 8 rows per block
constexpr int kPvThreadsY = 8;

/// Key rows [0, kv_end) are visible from query row i. Causal masks are aligned to the
/// bottom-right corner, so with N_q ≠ N_kv the last query row still sees every key.
__device__ __forceinline__ int kv_end(const Params& p, int i) {
  if (!p.causal) return p.n_kv;
  return min(max(i + p.n_kv - p.n_q + 1, 0), p.n_kv);
}

// S[bh, i, j] = scale · q_i · k_j, or -inf where the mask hides j from i.
// grid: (⌈N_kv/16⌉, ⌈N_q/16⌉, B·H_q), block: 16 × 16.
__global__ void scores_kernel(Params p, const float* __restrict__ q, const float* __restrict__ k,
                              float* __restrict__ s) {
  const int j = blockIdx.x * kTile + threadIdx.x;  // key row
  const int i = blockIdx.y * kTile + threadIdx.y;  // query row
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.n_q || j >= p.n_kv) return;
  // TODO(exercise): indexing. Point qi at row i of query head h in batch b, and kj at row j
  // of the K/V head that query head h reads (GQA: p.group query heads share one). Strides
  // are in elements (p.qs for Q, p.kvs for K); the head dimension is contiguous. As given,
  // every (b, h) reads batch 0, head 0.
  (void)b, (void)h;  // as given, unused (this line only keeps the compiler quiet)
  const float* qi = q + i * p.qs.row;
  const float* kj = k + j * p.kvs.row;
  float acc = 0.f;
  for (int c = 0; c < p.d; ++c) acc += qi[c] * kj[c];  // every thread re-reads both rows
  const std::size_t row = (std::size_t(bh) * p.n_q + i) * p.n_kv;  // N×N index: 64-bit
  s[row + j] = j < kv_end(p, i) ? acc * p.scale : -INFINITY;
}

// P[bh, i, :] = softmax(S[bh, i, :]) and L[bh, i] = log Σ_j exp(S[bh, i, j]).
// One block per row: a block-wide max, then a block-wide sum of exp(s − max).
// grid: (N_q, B·H_q), block: 256.
__global__ void softmax_kernel(Params p, const float* __restrict__ s, float* __restrict__ pm,
                               float* __restrict__ lse) {
  __shared__ float red[kSoftmaxThreads / 32];  // one partial per warp
  const int i = blockIdx.x, bh = blockIdx.y;
  const std::size_t row = (std::size_t(bh) * p.n_q + i) * p.n_kv;
  const float* srow = s + row;
  float* prow = pm + row;

  // Block-wide reduction: within each warp by shuffles, then across warps in shared memory.
  auto block_reduce = [&](float v, bool is_max) {
    // TODO(exercise): the row reduction. Each of the 256 threads holds a partial max (or
    // sum) of the row; return the max (or sum) over ALL of them, the same value in every
    // thread: first within each warp (__shfl_xor_sync), then across the warps through the
    // shared array red[], with barriers where one thread reads what another wrote. Every
    // thread of the block calls this, so a barrier here is safe. As given, each thread keeps
    // its own partial.
    (void)red[0];  // as given, unused (this line only keeps the compiler quiet)
    return v;
  };

  float m = -INFINITY;
  for (int j = threadIdx.x; j < p.n_kv; j += kSoftmaxThreads) m = fmaxf(m, srow[j]);
  m = block_reduce(m, true);
  // A fully masked row has m = -inf; exp(-inf - (-inf)) would be NaN. Such a row gets
  // P = 0 and L = -inf, as FlashAttention does.
  const float m_safe = m == -INFINITY ? 0.f : m;
  float l = 0.f;
  for (int j = threadIdx.x; j < p.n_kv; j += kSoftmaxThreads) l += expf(srow[j] - m_safe);
  l = block_reduce(l, false);
  const float inv_l = l != 0.f ? 1.f / l : 0.f;
  for (int j = threadIdx.x; j < p.n_kv; j += kSoftmaxThreads)
    prow[j] = expf(srow[j] - m_safe) * inv_l;
  if (threadIdx.x == 0) lse[std::size_t(bh) * p.n_q + i] = l != 0.f ? m + logf(l) : -INFINITY;
}

// O[b, i, h, c] = Σ_j P[bh, i, j] · V[b, j, h/group, c].
// grid: (⌈d/32⌉, ⌈N_q/8⌉, B·H_q), block: 32 × 8.
__global__ void pv_kernel(Params p, const float* __restrict__ pm, const float* __restrict__ v,
                          float* __restrict__ o) {
  const int c = blockIdx.x * kPvThreadsX + threadIdx.x;  // output column
  const int i = blockIdx.y * kPvThreadsY + threadIdx.y;  // query row
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.n_q || c >= p.d) return;
  const float* prow = pm + (std::size_t(bh) * p.n_q + i) * p.n_kv;
  // TODO(exercise): indexing. Point vc at column c of the V head that query head h reads
  // in batch b; its rows are p.kvs.row apart, as the loop below assumes. As given, every
  // (b, h) reads V of batch 0, head 0.
  (void)b, (void)h;  // as given, unused (this line only keeps the compiler quiet)
  const float* vc = v + c;
  float acc = 0.f;
  for (int j = 0; j < p.n_kv; ++j) acc += prow[j] * vc[j * p.kvs.row];
  o[i * p.qs.row + c] = acc;  // TODO(exercise): write O[b, i, h, c], in Q's layout (p.qs)
}

std::size_t workspace_bytes(const Problem& p) {
  return 2 * sizeof(float) * std::size_t(p.batch) * p.heads_q * p.n_q * p.n_kv;  // S and P
}

std::size_t nxn_bytes_written(const Problem& p) { return workspace_bytes(p); }

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  // scores and PV put B·H_q on grid z, the softmax on grid y: both limits apply.
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  const long long row_tiles = (p.n_q + kTile - 1) / kTile;
  const std::string bh_what = "batch*heads_q (" + std::to_string(bh) + ")";
  return check_fits(
      "01_naive_attention", prop, p, 0,
      {{2, bh, bh_what},
       {1, bh, bh_what},
       {1, row_tiles,
        "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(row_tiles) + " row tiles"}});
}

void run(const Problem& prob, const DeviceTensors& t, void* workspace, cudaStream_t stream) {
  Params p{prob.n_q,          prob.n_kv,        prob.head_dim,     prob.heads_q,
           prob.group_size(), prob.q_strides(), prob.kv_strides(), prob.softmax_scale(),
           prob.causal};
  const int bh = prob.batch * prob.heads_q;
  float* s = static_cast<float*>(workspace);               // S: [B·H_q, N_q, N_kv]
  float* pm = s + std::size_t(bh) * prob.n_q * prob.n_kv;  // P: same shape

  const dim3 sgrid((p.n_kv + kTile - 1) / kTile, (p.n_q + kTile - 1) / kTile, bh);
  scores_kernel<<<sgrid, dim3(kTile, kTile), 0, stream>>>(p, static_cast<const float*>(t.q),
                                                          static_cast<const float*>(t.k), s);
  CUDA_CHECK_LAUNCH();
  softmax_kernel<<<dim3(p.n_q, bh), kSoftmaxThreads, 0, stream>>>(p, s, pm, t.lse);
  CUDA_CHECK_LAUNCH();
  const dim3 ogrid((p.d + kPvThreadsX - 1) / kPvThreadsX, (p.n_q + kPvThreadsY - 1) / kPvThreadsY,
                   bh);
  pv_kernel<<<ogrid, dim3(kPvThreadsX, kPvThreadsY), 0, stream>>>(
      p, pm, static_cast<const float*>(t.v), static_cast<float*>(t.o));
  CUDA_CHECK_LAUNCH();
}

StepInfo info() {
  StepInfo s;
  s.number = 1;
  s.name = "01_naive_attention";
  s.lesson = "the formula literally: S and P written to HBM";
  s.dtypes = {DType::F32};
  s.max_head_dim = 256;
  s.alignment = 4;
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step01
