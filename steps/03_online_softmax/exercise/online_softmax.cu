// Step 03 — online softmax: softmax and PV fused into one kernel; P is never written.
//
// What changed since step 02: S still comes from step 02's tiled scores_kernel, but the
// softmax kernel and the PV kernel are replaced by one kernel, softmax_pv_kernel. A block
// owns a tile of query rows and streams their rows of S once, kBlockKv keys at a time,
// together with the matching rows of V. For each query row it keeps, in registers, the
// running max m, the running denominator ℓ and the output accumulator a (the seed's online
// softmax identity); when a tile raises the max, what was accumulated so far is rescaled by
// exp(m_old − m_new). The probabilities of a tile live in shared memory just long enough to
// be multiplied by the V tile, then are overwritten by the next tile. At the end
// O = a / ℓ and L = m + log ℓ.
//
// What it costs in memory traffic: S is written once and read once — 8 bytes per score
// against step 02's 16+ (S written, S read by the softmax, P written, P read by PV) — and
// the device memory for P (4·B·H·N_q·N_kv bytes) is gone. For d > 128 two blocks share a
// row tile (one per 128 columns of O) and each reads S. S itself is still an N_q × N_kv
// matrix in HBM.
//
// Build and run:
//   cmake --build build --target 03_online_softmax && build/bin/03_online_softmax --n 1024
//
// Not yet: computing S tile by tile inside the same kernel so it never reaches HBM either
// (step 04), double buffering, tensor cores. fp32 only.
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa::step03 {
namespace {

/// Shapes and strides the kernels need, by value (a kernel argument).
struct Params {
  int n_q, n_kv, d, heads_q, group;  // group = H_q / H_kv query heads per K/V head
  Strides qs, kvs;                   // element strides of Q/O and of K/V
  float scale;
  bool causal;
};

// Tiled configuration. Both kernels use 256 threads as a 16 × 16 grid, each thread owning a
// micro-tile of outputs, and walk their reduction dimension (d, N_kv) in chunks.
constexpr int kThreadsX = 16;
constexpr int kThreadsY = 16;
constexpr int kThreads = kThreadsX * kThreadsY;   // 256
constexpr int kBlockK = 8;                        // reduction chunk of d in scores_kernel
constexpr int kPad = 4;                           // smem row padding in floats, see below
constexpr int kRowsPerPass = kThreads / kBlockK;  // tile rows one pass of loads fills: 32
// scores_kernel: a 128 × 128 tile of S per block, 8 × 8 scores per thread.
constexpr int kBlockM = 128;                   // query rows per block
constexpr int kBlockN = 128;                   // key rows per block
constexpr int kThreadM = kBlockM / kThreadsY;  // 8 rows per thread
constexpr int kThreadN = kBlockN / kThreadsX;  // 8 S columns per thread
// softmax_pv_kernel: a tile of O as wide as the head (kBlockD = 64 or 128 columns), 32
// outputs per thread: 8 rows × 4 columns for kBlockD = 64, 4 rows × 8 columns for 128. It
// streams S and V in tiles of kBlockKv keys.
constexpr int kBlockKv = 32;  // keys per S tile (and V tile) in softmax_pv_kernel
template <int kBlockD>
struct PvConfig {
  static constexpr int kBlockM = kBlockD == 64 ? 128 : 64;  // query rows per block
  static constexpr int kThreadM = kBlockM / kThreadsY;      // 8 or 4 rows per thread
  static constexpr int kThreadD = kBlockD / kThreadsX;      // 4 or 8 columns per thread
  // For the softmax statistics a row of the S tile is split between a few adjacent threads.
  static constexpr int kStatThreads = kThreads / kBlockM;    // threads per row: 2 or 4
  static constexpr int kStatCols = kBlockKv / kStatThreads;  // S columns each: 16 or 8
};

static_assert(kBlockK % 4 == 0 && kBlockKv % 4 == 0,
              "the inner loops read float4 along the reduction dimension");

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
    // Load the chunk [k0, k0 + 8) of d for 128 Q rows and 128 K rows: thread tid loads
    // column tid % 8 of rows tid / 8 + 32·it. Consecutive threads read consecutive floats of
    // a row, so a warp reads 4 rows × 32 contiguous bytes — whole sectors (coalesced).
    // Out-of-range rows (N tails) and columns (d tail) are zero, so they add nothing.
    const int lc = tid % kBlockK, col = k0 + lc;
#pragma unroll
    for (int it = 0; it < kBlockM / kRowsPerPass; ++it) {
      const int r = tid / kBlockK + it * kRowsPerPass, i = i0 + r;
      qs[r][lc] = (i < p.n_q && col < p.d) ? qh[i * p.qs.row + col] : 0.f;
    }
#pragma unroll
    for (int it = 0; it < kBlockN / kRowsPerPass; ++it) {
      const int r = tid / kBlockK + it * kRowsPerPass, j = j0 + r;
      ks[r][lc] = (j < p.n_kv && col < p.d) ? kh[j * p.kvs.row + col] : 0.f;
    }
    __syncthreads();  // the tiles are complete before anyone reads them

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
    __syncthreads();  // everyone is done reading before the next chunk overwrites the tiles
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

// TUTORIAL: the online softmax, from the seed's formulas. For one query row, after key
// tiles 1..i have been seen,
//   m^(i) = max(m^(i−1), rowmax(S_i))                                         running max
//   ℓ^(i) = e^{m^(i−1) − m^(i)} · ℓ^(i−1) + Σ_{j∈tile i} e^{s_j − m^(i)}      running denominator
//   a^(i) = e^{m^(i−1) − m^(i)} · a^(i−1) + Σ_{j∈tile i} e^{s_j − m^(i)} v_j  running numerator
// starting from m = −inf, ℓ = 0, a = 0. Each invariant — ℓ = Σ_{j seen} e^{s_j − m},
// a = Σ_{j seen} e^{s_j − m} v_j with m the max so far — holds after every tile: the factor
// e^{m_old − m_new} ≤ 1 moves what was summed relative to the old max onto the new one. At
// the end o = a / ℓ exactly as softmax(s)·V, and L = m + log ℓ = log Σ_j e^{s_j}.

/// The running statistics of one query row (registers of the threads that own the row).
struct RowStats {
  float m = -INFINITY;  ///< max of the scores seen so far
  float l = 0.f;        ///< Σ exp(s − m) over the scores seen so far
};

/// e^{m_old − m_new}: how much ℓ and a shrink when the max grows from m_old to m_new.
/// While a row has seen only masked scores, m_new = −inf and −inf − (−inf) would be NaN;
/// ℓ and a are still 0 then, so any factor works: use 1.
__device__ __forceinline__ float rescale_factor(float m_old, float m_new) {
  // TODO(exercise): the rescale factor e^{m_old − m_new}, with the guard described above.
  // As given, 1: nothing summed so far is ever rescaled.
  return 1.f;
}

/// p = e^{s − m_new}, the unnormalised probability of one score. A masked score (−inf)
/// gives 0; the guard keeps a row with m_new = −inf at 0 instead of NaN.
__device__ __forceinline__ float shifted_exp(float s, float m_new) {
  return expf(s - (m_new == -INFINITY ? 0.f : m_new));
}

/// ℓ^(i) = factor · ℓ^(i−1) + Σ p and m^(i) = m_new, once the tile's p are summed.
__device__ __forceinline__ void update_stats(RowStats& st, float m_new, float factor,
                                             float tile_sum) {
  st.l = st.l + tile_sum;  // TODO(exercise): ℓ^(i) as in the comment above
  st.m = m_new;
}

/// 1/ℓ for o = a/ℓ; a row that saw no key at all (ℓ = 0) gets O = 0.
__device__ __forceinline__ float final_inv_l(const RowStats& st) {
  return st.l != 0.f ? 1.f / st.l : 0.f;
}

/// L = m + log ℓ (natural log); −inf for a row that saw no key.
__device__ __forceinline__ float final_lse(const RowStats& st) {
  return st.l != 0.f ? st.m + logf(st.l) : -INFINITY;
}

/// Max / sum over the kGroup adjacent lanes that share one row (kGroup divides 32).
template <int kGroup>
__device__ __forceinline__ float group_max(float x) {
  for (int off = 1; off < kGroup; off *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
template <int kGroup>
__device__ __forceinline__ float group_sum(float x) {
  for (int off = 1; off < kGroup; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// O[b, i, h, c] = Σ_j softmax_j(S[bh, i, :]) · V[b, j, h/group, c] and L[bh, i], in one pass
// over S. grid: (⌈d/kBlockD⌉, ⌈N_q/Cfg::kBlockM⌉, B·H_q), block: 16 × 16.
// Two roles per thread, each tile:
//   statistics: thread tid owns kStatCols columns of S-tile row tid / kStatThreads; with the
//     other kStatThreads − 1 threads of that row it updates the row's m and ℓ and turns the
//     S tile into P = e^{s − m} in place;
//   PV: thread (tx, ty) owns the accumulator rows ty + 16·r (r < kThreadM), columns
//     64·c4 + 4·tx + 0..3 (c4 < kBlockD/64) — the same micro-tile as step 02's pv_kernel.
template <int kBlockD>
__global__ void __launch_bounds__(kThreads, 2)
    softmax_pv_kernel(Params p, const float* __restrict__ s, const float* __restrict__ v,
                      float* __restrict__ o, float* __restrict__ lse) {
  using Cfg = PvConfig<kBlockD>;  // (Cfg::kBlockM: query rows per block, 128 or 64)
  constexpr int kThreadM = Cfg::kThreadM, kThreadD = Cfg::kThreadD;
  constexpr int kStatThreads = Cfg::kStatThreads, kStatCols = Cfg::kStatCols;
  __shared__ __align__(16) float ps[Cfg::kBlockM][kBlockKv + kPad];  // S, then P, tile, smem
  __shared__ __align__(16) float vs[kBlockKv][kBlockD];              // V tile, smem
  __shared__ float row_factor[Cfg::kBlockM];  // per row: e^{m_old − m_new}; at the end 1/ℓ

  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kThreadsX + tx;
  const int c0 = blockIdx.x * kBlockD, i0 = blockIdx.y * Cfg::kBlockM;  // tile origin in O
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q;
  const float* sh = s + std::size_t(bh) * p.n_q * p.n_kv;              // S[bh]: N_q × N_kv
  const float* vh = v + b * p.kvs.batch + (h / p.group) * p.kvs.head;  // V[b, ·, h/group, ·]

  // Causal: keys past the last one visible from the tile's last row are masked (−inf) for
  // every row of the tile and would contribute e^{−inf} = 0, so the stream stops there.
  const int j_end = kv_end(p, min(i0 + Cfg::kBlockM, p.n_q) - 1);

  const int stat_row = tid / kStatThreads;                // statistics role: tile row,
  const int stat_col = (tid % kStatThreads) * kStatCols;  // and first column of its share
  RowStats st;                                            // m, ℓ of row i0 + stat_row
  float acc[kThreadM][kThreadD] = {};  // PV role: a for this thread's outputs, registers

  for (int j0 = 0; j0 < j_end; j0 += kBlockKv) {
    // S tile: Cfg::kBlockM rows × 32 keys (a warp reads 32 consecutive floats of one row).
    // Rows past N_q and keys past j_end read as −inf: masked, they become p = 0. (Unrolled
    // by 4, not fully: up to 16 loads in flight per thread would need more than the 128
    // registers that two blocks per SM allow, and spill.)
    const int sc = tid % kBlockKv, j = j0 + sc;
#pragma unroll 4
    for (int it = 0; it < Cfg::kBlockM * kBlockKv / kThreads; ++it) {
      const int r = tid / kBlockKv + it * (kThreads / kBlockKv), i = i0 + r;
      ps[r][sc] = (i < p.n_q && j < j_end) ? sh[std::size_t(i) * p.n_kv + j] : -INFINITY;
    }
    // V tile: 32 keys × kBlockD columns (a warp reads 32 consecutive floats of one V row).
    const int vc = tid % kBlockD, col = c0 + vc;
#pragma unroll
    for (int it = 0; it < kBlockKv * kBlockD / kThreads; ++it) {
      const int r = tid / kBlockD + it * (kThreads / kBlockD), jr = j0 + r;
      vs[r][vc] = (jr < j_end && col < p.d) ? vh[jr * p.kvs.row + col] : 0.f;
    }
    __syncthreads();

    // 1. Statistics: m^(i) = max(m^(i−1), rowmax), then p = e^{s − m^(i)} and ℓ^(i).
    {
      float4* share = reinterpret_cast<float4*>(&ps[stat_row][stat_col]);  // kStatCols floats
      float tile_max = -INFINITY;
#pragma unroll
      for (int q4 = 0; q4 < kStatCols / 4; ++q4) {
        const float4 x = share[q4];
        tile_max = fmaxf(tile_max, fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)));
      }
      const float m_new = fmaxf(st.m, group_max<kStatThreads>(tile_max));
      const float factor = rescale_factor(st.m, m_new);
      float tile_sum = 0.f;
#pragma unroll
      for (int q4 = 0; q4 < kStatCols / 4; ++q4) {
        float4 x = share[q4];
        x.x = shifted_exp(x.x, m_new);
        x.y = shifted_exp(x.y, m_new);
        x.z = shifted_exp(x.z, m_new);
        x.w = shifted_exp(x.w, m_new);
        tile_sum += (x.x + x.y) + (x.z + x.w);
        share[q4] = x;  // the S tile becomes the P tile, in place
      }
      update_stats(st, m_new, factor, group_sum<kStatThreads>(tile_sum));
      if (stat_col == 0) row_factor[stat_row] = factor;
    }
    __syncthreads();  // P tile and factors complete before the PV role reads them

    // 2. a^(i) = factor · a^(i−1) + P V: rescale, then step 02's micro-tile GEMM.
    // TODO(exercise): rescale this thread's accumulator rows, a^(i−1), by the factor of
    // their query row before P V is added to them. The statistics role left each row's
    // factor in row_factor[] (indexed by tile row); this thread's rows of acc are listed in
    // the comment above the kernel. As given, acc is never rescaled.
#pragma unroll
    for (int kk = 0; kk < kBlockKv; kk += 4) {
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
    __syncthreads();  // everyone is done with ps, vs and row_factor before the next tile
  }

  // Finalize: O = a / ℓ and L = m + log ℓ (one column tile writes L).
  if (stat_col == 0) {
    row_factor[stat_row] = final_inv_l(st);
    const int i = i0 + stat_row;
    if (blockIdx.x == 0 && i < p.n_q) lse[std::size_t(bh) * p.n_q + i] = final_lse(st);
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kThreadM; ++r) {
    const int i = i0 + ty + r * kThreadsY;
    if (i >= p.n_q) continue;
    const float inv_l = row_factor[ty + r * kThreadsY];
    float* orow = o + b * p.qs.batch + h * p.qs.head + i * p.qs.row;
#pragma unroll
    for (int c = 0; c < kThreadD; ++c) {
      const int col = c0 + (c / 4) * 64 + tx * 4 + c % 4;
      if (col < p.d) orow[col] = acc[r][c] * inv_l;
    }
  }
}

std::size_t workspace_bytes(const Problem& p) {
  return sizeof(float) * std::size_t(p.batch) * p.heads_q * p.n_q * p.n_kv;  // S only
}

std::size_t nxn_bytes_written(const Problem& p) { return workspace_bytes(p); }

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  constexpr int kMinRows = PvConfig<128>::kBlockM;  // the shortest row tile: 64
  const long long row_tiles = (p.n_q + kMinRows - 1) / kMinRows;
  return check_fits(
      "03_online_softmax", prop, p, 0,
      {{2, bh, "batch*heads_q (" + std::to_string(bh) + ")"},  // both kernels
       {1, row_tiles,                                          // both kernels
        "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(row_tiles) + " row tiles"}});
}

template <int kBlockD>
void launch_softmax_pv(const Params& p, int bh, const float* s, const float* v, float* o,
                       float* lse, cudaStream_t stream) {
  constexpr int kRows = PvConfig<kBlockD>::kBlockM;
  const dim3 grid((p.d + kBlockD - 1) / kBlockD, (p.n_q + kRows - 1) / kRows, bh);
  softmax_pv_kernel<kBlockD><<<grid, dim3(kThreadsX, kThreadsY), 0, stream>>>(p, s, v, o, lse);
  CUDA_CHECK_LAUNCH();
}

void run(const Problem& prob, const DeviceTensors& t, void* workspace, cudaStream_t stream) {
  Params p{prob.n_q,          prob.n_kv,        prob.head_dim,     prob.heads_q,
           prob.group_size(), prob.q_strides(), prob.kv_strides(), prob.softmax_scale(),
           prob.causal};
  const int bh = prob.batch * prob.heads_q;
  float* s = static_cast<float*>(workspace);  // S: [B·H_q, N_q, N_kv]; there is no P

  const dim3 sgrid((p.n_kv + kBlockN - 1) / kBlockN, (p.n_q + kBlockM - 1) / kBlockM, bh);
  scores_kernel<<<sgrid, dim3(kThreadsX, kThreadsY), 0, stream>>>(
      p, static_cast<const float*>(t.q), static_cast<const float*>(t.k), s);
  CUDA_CHECK_LAUNCH();
  // The output tile is as wide as the head (up to 128), so S is streamed once for d ≤ 128.
  const float* v = static_cast<const float*>(t.v);
  float* o = static_cast<float*>(t.o);
  if (p.d <= 64)
    launch_softmax_pv<64>(p, bh, s, v, o, t.lse, stream);
  else
    launch_softmax_pv<128>(p, bh, s, v, o, t.lse, stream);
}

StepInfo info() {
  StepInfo s;
  s.number = 3;
  s.name = "03_online_softmax";
  s.lesson = "online softmax: softmax and PV fused, P never written";
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
}  // namespace fa::step03
