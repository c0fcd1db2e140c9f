// Step 02 — tiled matmul: the same three kernels, but both matmuls reuse data on chip.
//
// What changed since step 01: S = scale · Q Kᵀ and O = P V are now shared-memory tiled GEMMs.
// A block of 256 threads owns a tile of outputs (128 × 128 scores; 128 × 64 or 64 × 128 of
// O). It walks the reduction dimension (d for QKᵀ, N_kv for PV) in chunks of 8: the whole
// block copies a chunk of each operand from global into shared memory with coalesced loads,
// waits at a barrier, and then every thread computes a micro-tile of outputs (8 × 8 scores,
// 32 outputs of O) from shared memory into registers. Each element loaded from HBM is now
// used by a whole tile of outputs instead of by one. The softmax kernel is unchanged, and
// S and P are still written to HBM.
//
// What it costs in memory traffic: S and P are unchanged from step 01 — 4·B·H·N_q·N_kv bytes
// each, written once and read back (the softmax reads S and writes P, PV reads P). What
// drops is the traffic for the operands: step 01 loaded 2·d floats per score (a Q row and a
// K row, mostly from cache); here a block loads a 128 × d Q tile and a 128 × d K tile for
// 128 × 128 scores, i.e. 2·d/128 floats per score. Likewise PV loads each P element once
// (d ≤ 128) and each V element once per tile of 128 or 64 query rows. With causal masking,
// tiles that the mask hides entirely are skipped (their S is still written as -inf).
//
// Build and run:
//   cmake --build build --target 02_tiled_matmul && build/bin/02_tiled_matmul --n 1024
//
// Not yet: fusing softmax with PV so P is never written (step 03), keeping S on chip
// (step 04), overlapping the next tile's loads with compute (double buffering), tensor
// cores. fp32 only.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa::step02 {
namespace {

/// Shapes and strides the kernels need, by value (a kernel argument).
struct Params {
  int n_q, n_kv, d, heads_q, group;  // group = H_q / H_kv query heads per K/V head
  Strides qs, kvs;                   // element strides of Q/O and of K/V
  float scale;
  bool causal;
};

// Tiled GEMM configuration. Both GEMMs use 256 threads as a 16 × 16 grid, each thread
// owning a micro-tile of outputs, and walk the reduction dimension in chunks of kBlockK.
constexpr int kThreadsX = 16;
constexpr int kThreadsY = 16;
constexpr int kThreads = kThreadsX * kThreadsY;   // 256
constexpr int kBlockK = 8;                        // reduction chunk: d (QKᵀ) or N_kv (PV)
constexpr int kPad = 4;                           // smem row padding in floats, see below
constexpr int kRowsPerPass = kThreads / kBlockK;  // tile rows one pass of loads fills: 32
// scores_kernel: a 128 × 128 tile of S per block, 8 × 8 scores per thread.
constexpr int kBlockM = 128;                   // query rows per block
constexpr int kBlockN = 128;                   // key rows per block
constexpr int kThreadM = kBlockM / kThreadsY;  // 8 rows per thread
constexpr int kThreadN = kBlockN / kThreadsX;  // 8 S columns per thread
// pv_kernel: a tile of O as wide as the head (kBlockD = 64 or 128 columns), 32 outputs per
// thread: 8 rows × 4 columns for kBlockD = 64, 4 rows × 8 columns for kBlockD = 128.
template <int kBlockD>
struct PvConfig {
  static constexpr int kBlockM = kBlockD == 64 ? 128 : 64;  // query rows per block
  static constexpr int kThreadM = kBlockM / kThreadsY;      // 8 or 4 rows per thread
  static constexpr int kThreadD = kBlockD / kThreadsX;      // 4 or 8 columns per thread
};
constexpr int kSoftmaxThreads = 256;

static_assert(kBlockK % 4 == 0, "the inner loops read float4 along the reduction dimension");

/// Key rows [0, kv_end) are visible from query row i. Causal masks are aligned to the
/// bottom-right corner, so with N_q ≠ N_kv the last query row still sees every key.
__device__ __forceinline__ int kv_end(const Params& p, int i) {
  if (!p.causal) return p.n_kv;
  return min(max(i + p.n_kv - p.n_q + 1, 0), p.n_kv);
}

/// acc + a·b over four consecutive reduction steps, in order (so rounding matches a plain
/// sequential loop over the reduction dimension).
__device__ __forceinline__ float fma4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

/// Component k (a compile-time constant after unrolling) of a float4.
__device__ __forceinline__ float component(float4 v, int k) {
  return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

// S[bh, i, j] = scale · q_i · k_j, or -inf where the mask hides j from i.
// grid: (⌈N_kv/128⌉, ⌈N_q/128⌉, B·H_q), block: 16 × 16. Thread (tx, ty) computes the 8 × 8
// scores of query rows ty + 16·r and key rows tx + 16·c (r, c = 0..7).
__global__ void __launch_bounds__(kThreads, 2)
    scores_kernel(Params p, const float* __restrict__ q, const float* __restrict__ k,
                  float* __restrict__ s) {
  // TUTORIAL: why the +kPad. Shared memory has 32 banks of 4 bytes; two addresses in the
  // same bank (but not the same word) are served one after another — a bank conflict. In
  // the inner loop the 16 threads of a half-warp read a float4 (4 banks) from each of the
  // rows tx + 16·c of ks. Unpadded, rows are 8 floats apart and start in only 4 different
  // 4-bank groups (0, 8, 16, 24): 4 passes for the 16 reads. Padded to 12 floats, rows 0..7
  // start at banks 0, 12, 24, 4, 16, 28, 8, 20 — all 32 banks: 2 passes, the minimum for
  // 256 bytes. The pad is 4 (not 1) so each row stays 16-byte aligned for float4 reads.
  __shared__ __align__(16) float qs[kBlockM][kBlockK + kPad];  // Q tile, smem [128 × 8(+4)]
  __shared__ __align__(16) float ks[kBlockN][kBlockK + kPad];  // K tile, smem [128 × 8(+4)]

  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int j0 = blockIdx.x * kBlockN, i0 = blockIdx.y * kBlockM;  // tile origin in S
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const float* qh = q + b * p.qs.batch + h * p.qs.head;                // Q[b, ·, h, ·]
  const float* kh = k + b * p.kvs.batch + (h / p.group) * p.kvs.head;  // K[b, ·, h/group, ·]

  // TUTORIAL: tiles let us skip work. If the causal mask hides this whole tile (its first
  // key is past what its last query row may see), the GEMM is skipped and the epilogue
  // writes -inf everywhere. kv_end grows with i, so checking the last row is enough.
  const int i_last = min(i0 + kBlockM, p.n_q) - 1;
  const int d_end = j0 < kv_end(p, i_last) ? p.d : 0;

  float acc[kThreadM][kThreadN] = {};  // this thread's 8 × 8 scores, registers

  for (int k0 = 0; k0 < d_end; k0 += kBlockK) {
    // TODO(exercise): the tile loads. All 256 threads together copy the chunk [k0, k0 + 8) of
    // d for the tile's 128 Q rows (from qh, into qs[r][0..7] for query row i0 + r) and its
    // 128 K rows (from kh, into ks[r][0..7] for key row j0 + r): 1024 floats each, so 4 per
    // thread per tile. Let consecutive threads read consecutive floats of a row (coalesced).
    // Rows past N_q or N_kv and columns past d are stored as 0, never read: they then add
    // nothing to the dot products. As given, nothing is loaded and the tiles hold whatever
    // an earlier block left in shared memory.
    (void)tid, (void)*qh, (void)*kh;  // as given, unused (this line keeps the compiler quiet)
    // TODO(exercise): a barrier? The loop below reads elements of qs and ks that other
    // threads stored.

    // TUTORIAL: the register micro-tile. Per 4 reduction steps a thread reads 8 + 8 float4
    // from shared memory and does 8 · 8 · 4 = 256 FMAs from registers: each value read from
    // shared memory is used 8 times. With one output per thread it would be 2 shared loads
    // per FMA, and shared memory — not the FMA units — would set the speed. The tile in
    // shared memory saves HBM traffic; the tile in registers saves shared-memory traffic.
#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += 4) {
      float4 kf[kThreadN];  // K fragment: d-values kk..kk+3 of this thread's 8 key rows
#pragma unroll
      for (int c = 0; c < kThreadN; ++c)
        kf[c] = *reinterpret_cast<const float4*>(&ks[tx + c * kThreadsX][kk]);
#pragma unroll
      for (int r = 0; r < kThreadM; ++r) {
        const float4 qf = *reinterpret_cast<const float4*>(&qs[ty + r * kThreadsY][kk]);
#pragma unroll
        for (int c = 0; c < kThreadN; ++c) acc[r][c] = fma4(qf, kf[c], acc[r][c]);
      }
    }
    // TODO(exercise): a barrier? The next chunk's loads overwrite qs and ks.
  }

  // Write the 8 × 8 scores (a warp writes two rows of 16 consecutive floats per store).
#pragma unroll
  for (int r = 0; r < kThreadM; ++r) {
    const int i = i0 + ty + r * kThreadsY;
    if (i >= p.n_q) continue;
    const int end = kv_end(p, i);
    float* srow = s + (std::size_t(bh) * p.n_q + i) * p.n_kv;  // N×N index: 64-bit
#pragma unroll
    for (int c = 0; c < kThreadN; ++c) {
      const int j = j0 + tx + c * kThreadsX;
      if (j < p.n_kv) srow[j] = j < end ? acc[r][c] * p.scale : -INFINITY;
    }
  }
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
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < kSoftmaxThreads / 32; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
    __syncthreads();  // red is reused by the next reduction
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
// grid: (⌈d/kBlockD⌉, ⌈N_q/Cfg::kBlockM⌉, B·H_q), block: 16 × 16. For d ≤ 128 a block covers a
// whole row of O, so P is read from HBM once. Thread (tx, ty) computes rows ty + 16·r
// (r < kThreadM) and columns 64·c4 + 4·tx + 0..3 (c4 < kBlockD/64).
template <int kBlockD>
__global__ void __launch_bounds__(kThreads, 2)
    pv_kernel(Params p, const float* __restrict__ pm, const float* __restrict__ v,
              float* __restrict__ o) {
  using Cfg = PvConfig<kBlockD>;  // (Cfg::kBlockM: rows of O per block, 128 or 64)
  constexpr int kThreadM = Cfg::kThreadM, kThreadD = Cfg::kThreadD;
  __shared__ __align__(16) float ps[Cfg::kBlockM][kBlockK + kPad];  // P tile, smem [128|64 × 8(+4)]
  __shared__ __align__(16) float vs[kBlockK][kBlockD];              // V tile, smem [8 × kBlockD]
  // (vs needs no padding: in the inner loop a warp reads within one row of it.)

  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int c0 = blockIdx.x * kBlockD, i0 = blockIdx.y * Cfg::kBlockM;  // tile origin in O
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const float* ph = pm + std::size_t(bh) * p.n_q * p.n_kv;             // P[bh]: N_q × N_kv
  const float* vh = v + b * p.kvs.batch + (h / p.group) * p.kvs.head;  // V[b, ·, h/group, ·]

  // Causal: P is exactly 0 beyond kv_end(i), so the reduction stops at the last key visible
  // from the tile's last row (as in scores_kernel: about half the work when N_q = N_kv).
  const int j_end = kv_end(p, min(i0 + Cfg::kBlockM, p.n_q) - 1);

  float acc[kThreadM][kThreadD] = {};  // this thread's kThreadM × kThreadD outputs, registers

  for (int j0 = 0; j0 < j_end; j0 += kBlockK) {
    // P chunk: Cfg::kBlockM rows × 8 keys, thread tid loads key tid % 8 of rows tid / 8 + 32·it.
    const int pc = tid % kBlockK, j = j0 + pc;
#pragma unroll
    for (int it = 0; it < Cfg::kBlockM / kRowsPerPass; ++it) {
      const int r = tid / kBlockK + it * kRowsPerPass, i = i0 + r;
      ps[r][pc] = (i < p.n_q && j < j_end) ? ph[std::size_t(i) * p.n_kv + j] : 0.f;
    }
    // V chunk: 8 keys × kBlockD columns (a warp reads 32 consecutive floats of one V row).
    const int vc = tid % kBlockD, col = c0 + vc;
#pragma unroll
    for (int it = 0; it < kBlockK * kBlockD / kThreads; ++it) {
      const int r = tid / kBlockD + it * (kThreads / kBlockD), jr = j0 + r;
      vs[r][vc] = (jr < j_end && col < p.d) ? vh[jr * p.kvs.row + col] : 0.f;
    }
    // TODO(exercise): a barrier? (as in scores_kernel: who reads what another thread stored)

#pragma unroll
    for (int kk = 0; kk < kBlockK; kk += 4) {
      float4 pf[kThreadM];  // P fragment: keys kk..kk+3 of this thread's rows
#pragma unroll
      for (int r = 0; r < kThreadM; ++r)
        pf[r] = *reinterpret_cast<const float4*>(&ps[ty + r * kThreadsY][kk]);
#pragma unroll
      for (int kq = 0; kq < 4; ++kq) {
#pragma unroll
        for (int c4 = 0; c4 < kThreadD / 4; ++c4) {
          // V fragment: key kk + kq, this thread's 4 columns 64·c4 + 4·tx + 0..3
          const float4 vf = *reinterpret_cast<const float4*>(&vs[kk + kq][c4 * 64 + tx * 4]);
#pragma unroll
          for (int r = 0; r < kThreadM; ++r) {
            const float pr = component(pf[r], kq);
            acc[r][c4 * 4 + 0] = fmaf(pr, vf.x, acc[r][c4 * 4 + 0]);
            acc[r][c4 * 4 + 1] = fmaf(pr, vf.y, acc[r][c4 * 4 + 1]);
            acc[r][c4 * 4 + 2] = fmaf(pr, vf.z, acc[r][c4 * 4 + 2]);
            acc[r][c4 * 4 + 3] = fmaf(pr, vf.w, acc[r][c4 * 4 + 3]);
          }
        }
      }
    }
    // TODO(exercise): a barrier? (as in scores_kernel: the next chunk overwrites ps and vs)
  }

#pragma unroll
  for (int r = 0; r < kThreadM; ++r) {
    const int i = i0 + ty + r * kThreadsY;
    if (i >= p.n_q) continue;
    float* orow = o + b * p.qs.batch + h * p.qs.head + i * p.qs.row;
#pragma unroll
    for (int c = 0; c < kThreadD; ++c) {
      const int col = c0 + (c / 4) * 64 + tx * 4 + c % 4;
      if (col < p.d) orow[col] = acc[r][c];
    }
  }
}

std::size_t workspace_bytes(const Problem& p) {
  return 2 * sizeof(float) * std::size_t(p.batch) * p.heads_q * p.n_q * p.n_kv;  // S and P
}

std::size_t nxn_bytes_written(const Problem& p) { return workspace_bytes(p); }

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  const std::string bh_what = "batch*heads_q (" + std::to_string(bh) + ")";
  constexpr int kMinRows = PvConfig<128>::kBlockM;  // the shortest row tile: 64
  const long long row_tiles = (p.n_q + kMinRows - 1) / kMinRows;
  return check_fits(
      "02_tiled_matmul", prop, p, 0,
      {{2, bh, bh_what},  // scores_kernel and pv_kernel: grid z
       {1, bh, bh_what},  // softmax_kernel: grid y
       {1, row_tiles,     // scores_kernel and pv_kernel: grid y
        "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(row_tiles) + " row tiles"}});
}

template <int kBlockD>
void launch_pv(const Params& p, int bh, const float* pm, const float* v, float* o,
               cudaStream_t stream) {
  constexpr int kRows = PvConfig<kBlockD>::kBlockM;
  const dim3 grid((p.d + kBlockD - 1) / kBlockD, (p.n_q + kRows - 1) / kRows, bh);
  pv_kernel<kBlockD><<<grid, dim3(kThreadsX, kThreadsY), 0, stream>>>(p, pm, v, o);
  CUDA_CHECK_LAUNCH();
}

void run(const Problem& prob, const DeviceTensors& t, void* workspace, cudaStream_t stream) {
  Params p{prob.n_q,          prob.n_kv,        prob.head_dim,     prob.heads_q,
           prob.group_size(), prob.q_strides(), prob.kv_strides(), prob.softmax_scale(),
           prob.causal};
  const int bh = prob.batch * prob.heads_q;
  float* s = static_cast<float*>(workspace);               // S: [B·H_q, N_q, N_kv]
  float* pm = s + std::size_t(bh) * prob.n_q * prob.n_kv;  // P: same shape

  const dim3 sgrid((p.n_kv + kBlockN - 1) / kBlockN, (p.n_q + kBlockM - 1) / kBlockM, bh);
  scores_kernel<<<sgrid, dim3(kThreadsX, kThreadsY), 0, stream>>>(
      p, static_cast<const float*>(t.q), static_cast<const float*>(t.k), s);
  CUDA_CHECK_LAUNCH();
  softmax_kernel<<<dim3(p.n_q, bh), kSoftmaxThreads, 0, stream>>>(p, s, pm, t.lse);
  CUDA_CHECK_LAUNCH();
  // The output tile is as wide as the head (up to 128), so P is streamed once for d ≤ 128.
  const float* v = static_cast<const float*>(t.v);
  float* o = static_cast<float*>(t.o);
  if (p.d <= 64)
    launch_pv<64>(p, bh, pm, v, o, stream);
  else
    launch_pv<128>(p, bh, pm, v, o, stream);
}

StepInfo info() {
  StepInfo s;
  s.number = 2;
  s.name = "02_tiled_matmul";
  s.lesson = "shared-memory tiling: each loaded element reused by a whole tile";
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
}  // namespace fa::step02
