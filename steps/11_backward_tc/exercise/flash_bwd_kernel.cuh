// flash_bwd_kernel.cuh — step 11's three kernels: the backward pass on mma.sync.
//
//   1. bwd_preprocess_kernel   D = rowsum(dO ∘ O) in fp32, one warp per query row; the same
//                              warp zeroes the row's dQ accumulator (rows no key reaches keep 0)
//   2. flash_bwd_kernel        one CTA per (K/V tile of kBlockN keys, batch, K/V head):
//        prologue   K, V tile and the first Q tile ──cp.async──▶ shared memory
//        for each query head of the K/V head's group, each Q tile of kBlockM rows that sees
//        a key of the tile (GQA: the group summed here, in registers, in a fixed order):
//          wait for this Q tile's copies; __syncthreads()
//          cp.async the next Q, dO, L, D ──▶ the other stage
//          Sᵀ = K Qᵀ, dPᵀ = V dOᵀ            mma.sync, fp32, 16 keys × kBlockM per warp
//          Pᵀ = exp2(Sᵀ·scale·log2e − L·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − D)   (selects: masked → 0)
//          dV += Pᵀ dO,  dK += dSᵀ Q         Pᵀ, dSᵀ → 16 bits → A fragments, registers only
//          dSᵀ → shared memory; __syncthreads()
//          dQ_acc += dS K                     mma.sync on ldmatrix.trans of dSᵀ, fp32 atomics
//        dK = scale · dK, dV → 16 bits → shared memory → 16-byte stores (once, no atomics)
//   3. bwd_convert_dq_kernel   dQ = scale · dQ_acc → 16 bits, in Q's layout
//
// Deterministic mode (Problem::deterministic): the main kernel stores its part of dQ into a
// slab of its own instead of adding it atomically, nothing is zeroed, and the convert kernel
// sums the slabs of the CTAs that visited each row in a fixed order (api.cu: what it costs).
//
// kernel_traits.cuh says why the warps split the keys and why Sᵀ rather than S.
//
// Masking and NaN. Every entry of Pᵀ and dSᵀ is chosen by a select: a (row, key) pair that is
// masked (causal, a row past N_q, a key past N_kv) gets exactly 0, whatever its score (NaN,
// ±inf, L = −inf). The matrix products after it are another matter: a tensor core computes
// 0 · NaN = NaN, so in dV += Pᵀ dO a row's NaN (or inf) in dO would reach the keys it does not
// see through their P = 0, in dK += dSᵀ Q its Q, and in dQ += dS K a key's NaN in K would reach
// the rows that do not see it. That can only happen in a Q tile that hides some key of the
// CTA's tile from some of its rows (mask.cuh, tile_hides_a_pair: the causal diagonal; the
// zero-filled tails never hold NaN). For those tiles alone the CTA checks whether any of K, V
// (once) or the tile's Q, dO holds a non-finite value; if so, the tile's three products are
// done on the CUDA cores with the mask applied pair by pair (the "exact path" below, slow
// but rare); otherwise the mma path is exact too. A row that sees no key (L = −inf, D may be
// NaN from 0 · inf) has every pair masked: its dQ stays 0 and it adds nothing to dK and dV.
// (kMaskFree: a tile in which every pair is visible skips the selects, which would all return
// their first operand; such a tile hides no pair, so never takes the exact path.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "../07_flash_attention_2/online_softmax.cuh"  // fast_exp2
#include "common/cuda_check.h"
#include "kernel_traits.cuh"
#include "mask.cuh"
#include "mma.cuh"

namespace fa::step11 {

/// \brief Step 07's tile copy: rows [0, kRows) of a tile in global memory → a swizzled
/// [kRows][kHeadDim] tile in shared memory, rows at and past `valid_rows` as zeros.
/// Asynchronous: cp_async_commit(), cp_async_wait<>() and a barrier before use.
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile_async(uint32_t s_tile,
                                                const typename Traits::Element* g_tile,
                                                int row_stride, int valid_rows) {
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kRowsPerPass = Traits::kNumThreads / kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && kRows % kRowsPerPass == 0, "whole passes");
  const int row = threadIdx.x / kChunksPerRow, chunk = threadIdx.x % kChunksPerRow;
  const uint32_t dst = s_tile + Traits::swizzle(row, chunk);
  const int src = row * row_stride + chunk * 8;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = row + i * kRowsPerPass < valid_rows;
    const int offset = valid ? src + i * kRowsPerPass * row_stride : 0;  // in bounds anyway
    cp_async_16(dst + i * kRowsPerPass * Traits::kRowBytes, g_tile + offset, valid);
  }
}

/// \brief Does a 32-bit word of two 16-bit Elements hold an inf or a NaN (exponent all ones)?
template <class Element>
__device__ __forceinline__ bool nonfinite_pair(uint32_t w) {
  constexpr uint32_t m = std::is_same_v<Element, __half> ? 0x7C00u : 0x7F80u;
  return (w & m) == m || ((w >> 16) & m) == m;
}

/// \brief This thread's share of the question "does the shared-memory tile hold an inf or a
/// NaN?" (the layout does not matter: every byte is looked at). Combine with __syncthreads_or.
template <class Traits>
__device__ __forceinline__ bool tile_has_nonfinite(uint32_t s_tile, int bytes) {
  using Element = typename Traits::Element;
  bool bad = false;
  for (int off = 16 * threadIdx.x; off < bytes; off += 16 * Traits::kNumThreads) {
    const uint4 v = ld_shared_v4(s_tile + off);
    bad |= nonfinite_pair<Element>(v.x) | nonfinite_pair<Element>(v.y) |
           nonfinite_pair<Element>(v.z) | nonfinite_pair<Element>(v.w);
  }
  return bad;
}

/// \brief 2^x for P = exp2(S·scale_log2 − L·log2e): exp2f, or with kFast (the traits'
/// kFastExp2) step 07's fast_exp2, one ex2.approx.ftz.f32 without exp2f's handling of
/// subnormal results (kernel_traits.cuh, kFastExp2, has the count and the numerics).
template <bool kFast>
__device__ __forceinline__ float exp2_p(float x) {
  if constexpr (kFast)
    return step07::fast_exp2(x);
  else
    return exp2f(x);
}

/// \brief Q and dO of the Q tile of query head h at row i0 (kBlockM rows, zeros past N_q), and
/// those rows' L and D, into stage `stage` of their shared tiles, by cp.async: one Q tile's
/// copies, the same for both main kernels (this file's and flash_bwd_2d.cuh's). q_all and
/// do_all are p.q and p.d_o, read once by the kernel.
template <class Traits, class Element>
__device__ __forceinline__ void load_q_stage(const BwdParams& p, const Element* q_all,
                                             const Element* do_all, int b, int h, int i0, int stage,
                                             uint32_t sQ, uint32_t sdO, uint32_t sL, uint32_t sD) {
  constexpr int kBlockM = Traits::kBlockM;
  const int q_off = b * p.q_batch_stride + h * p.q_head_stride + i0 * p.q_row_stride;
  load_tile_async<Traits, kBlockM>(sQ + stage * Traits::kQBytes, q_all + q_off, p.q_row_stride,
                                   p.n_q - i0);
  load_tile_async<Traits, kBlockM>(sdO + stage * Traits::kQBytes, do_all + q_off, p.q_row_stride,
                                   p.n_q - i0);
  const int tid = threadIdx.x;
  if (tid < kBlockM) {  // L and D of the tile's rows; zeros past N_q
    const int i = i0 + tid;
    const int r = (b * p.heads_q + h) * p.n_q + (i < p.n_q ? i : i0);
    cp_async_4(sL + stage * Traits::kRowVecBytes + 4 * tid, p.lse + r, i < p.n_q);
    cp_async_4(sD + stage * Traits::kRowVecBytes + 4 * tid, p.delta + r, i < p.n_q);
  }
}

/// \brief The prologue's copies of K and V, the same for both main kernels: keys j0 …
/// j0 + kBlockN − 1 of k_head and v_head (the CTA's K/V head) into the K and V tiles at sK and
/// sV, zeros past N_kv, by cp.async (committed by the caller, with the first Q tile's copies).
template <class Traits>
__device__ __forceinline__ void load_kv_async(const BwdParams& p,
                                              const typename Traits::Element* k_head,
                                              const typename Traits::Element* v_head, int j0,
                                              uint32_t sK, uint32_t sV) {
  constexpr int kBlockN = Traits::kBlockN;
  load_tile_async<Traits, kBlockN>(sK, k_head + j0 * p.kv_row_stride, p.kv_row_stride, p.n_kv - j0);
  load_tile_async<Traits, kBlockN>(sV, v_head + j0 * p.kv_row_stride, p.kv_row_stride, p.n_kv - j0);
}

/// \brief Causal, in the prologue of either main kernel: does the CTA's K or V tile hold an inf
/// or a NaN? (Then the tiles on the diagonal take the exact path; see the top of this file.)
/// Waits for the prologue's copies; the answer is the same in every thread, and every thread
/// must call it (barriers). Without causal, or without visits, false and no barrier.
template <class Traits, bool IsCausal>
__device__ __forceinline__ bool kv_has_nonfinite(int visits, uint32_t sK) {
  static_assert(Traits::kOffV == Traits::kOffK + Traits::kKVBytes,
                "the V tile right after the K tile: one look at 2 · kKVBytes covers both");
  bool kv_nonfinite = false;
  if (IsCausal && visits > 0) {
    cp_async_wait<0>();
    __syncthreads();
    kv_nonfinite = __syncthreads_or(tile_has_nonfinite<Traits>(sK, 2 * Traits::kKVBytes)) != 0;
  }
  return kv_nonfinite;
}

/// \brief The last step of both main kernels: rows row0 … row0 + kRows − 1 of the CTA's K and V
/// tiles, which by then hold dK (scaled) and dV in 16 bits, to dK and dV in device memory (key
/// j0 + row of the (batch, K/V head) at kv_off; rows past N_kv left out), 16 bytes per store.
/// The calling threads share the kRows · kChunksPerRow chunks: this one stores chunks first,
/// first + step, … (the 1-D kernel: a warp its own 16 rows; the 2-D kernel: the CTA all rows).
template <class Traits, int kRows>
__device__ __forceinline__ void store_dk_dv(const BwdParams& p, int kv_off, int j0, int row0,
                                            int first, int step, uint32_t sK, uint32_t sV) {
  using Element = typename Traits::Element;
  Element* dk = static_cast<Element*>(p.dk) + kv_off;
  Element* dv = static_cast<Element*>(p.dv) + kv_off;
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  for (int c = first; c < kRows * kChunksPerRow; c += step) {
    const int row = row0 + c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int j = j0 + row;
    if (j >= p.n_kv) break;  // c only grows, and so does the row
    const int off = j * p.kv_row_stride + chunk * 8;
    st_global_v4(dk + off, ld_shared_v4(sK + Traits::swizzle(row, chunk)));
    st_global_v4(dv + off, ld_shared_v4(sV + Traits::swizzle(row, chunk)));
  }
}

/// \brief Writes a warp's 16 × kBlockM A fragments (Pᵀ or dSᵀ: keys 16·warp … +15 as rows,
/// the Q tile's rows as columns) into the [kBlockN][kBlockM + 8] tile at s_ds.
template <class Traits>
__device__ __forceinline__ void store_transposed(uint32_t s_ds,
                                                 const uint32_t (&a)[Traits::kKStepsD][4], int warp,
                                                 int g, int t) {
  const uint32_t row0 = s_ds + (16 * warp + g) * Traits::kDsRowBytes;  // key 16·warp + g
  constexpr uint32_t kRow8 = 8 * Traits::kDsRowBytes;                  // key + 8
#pragma unroll
  for (int kk = 0; kk < Traits::kKStepsD; ++kk) {
    const uint32_t col = 2 * (16 * kk + 2 * t);  // bytes: rows 16kk + 2t, +1 of the Q tile
    st_shared_u32(row0 + col, a[kk][0]);
    st_shared_u32(row0 + kRow8 + col, a[kk][1]);
    st_shared_u32(row0 + col + 16, a[kk][2]);  // rows + 8: 16 bytes further
    st_shared_u32(row0 + kRow8 + col + 16, a[kk][3]);
  }
}

/// \brief The exact path's dQ_acc += dS K for one Q tile, pair by pair: row r sees a prefix of
/// the keys (mask.cuh). The 16-bit dS tile is at byte ds_offset of shared memory, in either
/// kernel's layout: ds_index(r, key) is the index of the element of row r of the Q tile and key
/// `key` (the 1-D kernel's dSᵀ tile holds the keys as rows, the 2-D kernel's dS tile the Q
/// tile's rows). Each kernel calls it through a function of its own that is not inlined:
/// exact_dq below, with the offset of the dSᵀ buffer in use, and flash_bwd_2d.cuh's exact_dq_2d.
template <class Traits, bool IsCausal, class DsIndex>
__device__ __forceinline__ void exact_dq_tile(const BwdParams& p, const unsigned char* smem,
                                              int ds_offset, DsIndex ds_index, float* dq_rows,
                                              int i0, int j0) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  const Element* ds = reinterpret_cast<const Element*>(smem + ds_offset);
  const unsigned char* k_tile = smem + Traits::kOffK;
  for (int e = threadIdx.x; e < Traits::kBlockM * kHeadDim; e += Traits::kNumThreads) {
    const int r = e / kHeadDim, c = e % kHeadDim;
    if (i0 + r >= p.n_q) break;  // e only grows, and so does r
    const int limit = kv_limit<IsCausal>(i0 + r, p.n_q, p.n_kv) - j0;
    float sum = 0.f;
    for (int key = 0; key < Traits::kBlockN && key < limit; ++key)
      sum = fmaf(
          static_cast<float>(ds[ds_index(r, key)]),
          static_cast<float>(*reinterpret_cast<const Element*>(k_tile + Traits::element(key, c))),
          sum);
    float* at = dq_rows + r * kHeadDim + c;
    if (p.deterministic)
      *at = sum;
    else
      atomicAdd(at, sum);
  }
}

/// \brief exact_dq_tile on this file's kernel's dSᵀ tile at ds_offset ([kBlockN][kBlockM + 8]:
/// keys as rows). Not inlined: it runs while the caller holds dK and dV in registers, and on
/// its own it needs few. (flash_bwd_2d.cuh's kernel calls exact_dq_2d, the same on its dS tile.)
template <class Traits, bool IsCausal>
__device__ __noinline__ void exact_dq(const BwdParams& p, const unsigned char* smem, int ds_offset,
                                      float* dq_rows, int i0, int j0) {
  exact_dq_tile<Traits, IsCausal>(
      p, smem, ds_offset, [](int r, int key) { return key * (Traits::kDsRowBytes / 2) + r; },
      dq_rows, i0, j0);
}

// ---------------------------------------------------------------------------------------------
// 1. D = rowsum(dO ∘ O), and dQ_acc = 0. One warp per row of [B, H_q, N_q], grid-stride.
// ---------------------------------------------------------------------------------------------
template <class Element>
__global__ void bwd_preprocess_kernel(const __grid_constant__ BwdParams p) {
  const int rows = p.batch * p.heads_q * p.n_q;  // < 2^31: L's element count
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32);
  for (int r = (blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const int i = r % p.n_q, bh = r / p.n_q;
    const int off = (bh / p.heads_q) * p.q_batch_stride + (bh % p.heads_q) * p.q_head_stride +
                    i * p.q_row_stride;
    const Element* o = static_cast<const Element*>(p.o) + off;
    const Element* d_o = static_cast<const Element*>(p.d_o) + off;
    float sum = 0.f;
    for (int x = lane; x < p.head_dim; x += 32)
      sum = fmaf(static_cast<float>(d_o[x]), static_cast<float>(o[x]), sum);
#pragma unroll
    for (int s = 16; s > 0; s /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
    if (lane == 0) p.delta[r] = sum;
    if (p.deterministic) continue;           // every slab element a CTA reads back it has written
    float* acc = p.dq_acc + r * p.head_dim;  // < 2^31: Q's element count
    for (int x = lane; x < p.head_dim; x += 32) acc[x] = 0.f;
  }
}

// ---------------------------------------------------------------------------------------------
// 3. dQ = scale · dQ_acc, 8 dims (16 bytes of output) per thread, grid-stride. Deterministic
//    mode: dQ_acc is the sum of the slabs of the CTAs that visited the row, n = 0, 1, … in
//    that order (causal: a prefix of the CTAs, those whose first Q tile starts at or above it).
// ---------------------------------------------------------------------------------------------
template <class Traits>
__global__ void bwd_convert_dq_kernel(const __grid_constant__ BwdParams p) {
  using Element = typename Traits::Element;
  const int n8 = p.batch * p.heads_q * p.n_q * (p.head_dim / 8);
  const int n_blocks = (p.n_kv + Traits::kBlockN - 1) / Traits::kBlockN;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < n8; e += gridDim.x * blockDim.x) {
    const int flat = 8 * e, r = flat / p.head_dim, x = flat % p.head_dim;
    const int i = r % p.n_q, bh = r / p.n_q;
    const int off = (bh / p.heads_q) * p.q_batch_stride + (bh % p.heads_q) * p.q_head_stride +
                    i * p.q_row_stride + x;
    float4 lo = reinterpret_cast<const float4*>(p.dq_acc + flat)[0];
    float4 hi = reinterpret_cast<const float4*>(p.dq_acc + flat)[1];
    if (p.deterministic) {
      // Slab 0 is loaded; CTA 0 sees key 0, the first any row sees, so it visits every row
      // that any CTA visits (a row it does not visit sees no key: its slab 0 entry is then
      // unwritten, and dQ is 0).
      const int fr0 = p.causal ? first_row_seeing<true>(0, p.n_q, p.n_kv) : 0;
      if (fr0 >= p.n_q || i < fr0 / Traits::kBlockM * Traits::kBlockM)
        lo = hi = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int n = 1; n < n_blocks; ++n) {
        const int fr = p.causal ? first_row_seeing<true>(n * Traits::kBlockN, p.n_q, p.n_kv) : 0;
        if (fr >= p.n_q || i < fr / Traits::kBlockM * Traits::kBlockM) break;  // and the rest
        const float4* slab = reinterpret_cast<const float4*>(p.dq_acc + n * p.q_elems + flat);
        const float4 a = slab[0], c = slab[1];
        lo = make_float4(lo.x + a.x, lo.y + a.y, lo.z + a.z, lo.w + a.w);
        hi = make_float4(hi.x + c.x, hi.y + c.y, hi.z + c.z, hi.w + c.w);
      }
    }
    const float c = p.scale;
    const uint4 out = {
        pack_pair<Element>(c * lo.x, c * lo.y), pack_pair<Element>(c * lo.z, c * lo.w),
        pack_pair<Element>(c * hi.x, c * hi.y), pack_pair<Element>(c * hi.z, c * hi.w)};
    st_global_v4(static_cast<Element*>(p.dq) + off, out);
  }
}

// ---------------------------------------------------------------------------------------------
// 2. The main kernel. grid: (⌈N_kv / kBlockN⌉, B · H_kv), or the two swapped where
//    heavy_first_grid (kernel_traits.cuh), block: kNumThreads, smem: kSmemBytes.
//    Deterministic: the mode, read only with Traits::kDetCompiled (then p.deterministic must
//    equal it: launch_flash_bwd_main); otherwise p.deterministic is read at run time.
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal, bool Deterministic = false>
__global__ void __launch_bounds__(Traits::kNumThreads, Traits::kMinBlocks)
    flash_bwd_kernel(const __grid_constant__ BwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim, kRowBytes = Traits::kRowBytes;
  constexpr int kNTilesS = Traits::kNTilesS, kKStepsS = Traits::kKStepsS;
  constexpr int kNTilesD = Traits::kNTilesD, kKStepsD = Traits::kKStepsD;
  constexpr int kNTilesDq = Traits::kNTilesDq, kKStepsDq = Traits::kKStepsDq;
  constexpr int kDsRowBytes = Traits::kDsRowBytes;
  // The k loops of Sᵀ and dQ: unrolled by 2, or not at all for the large Q tiles (64 rows at
  // d = 128, 128 at d = 64), where Sᵀ and dPᵀ alone hold 2 · kBlockM registers per lane and
  // the fragments of a second step in flight would spill.
  constexpr int kUnrollS = kBlockM * kHeadDim >= 8192 ? 1 : 2;
  // kDqBulk: dQ added by bulk reductions from shared memory (sm_90 only; before it, and in the
  // deterministic mode, the stores of the other switches).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulk = Traits::kDqBulk;
#else
  constexpr bool kBulk = false;
#endif
  // kDetCompiled: the mode a constant, so that dQ's stores below compile to the one kind the
  // mode uses. Read at run time, each of a lane's dQ stores is compiled to both kinds: a plain
  // store predicated on the mode (issued, predicate off, when the mode is off) beside the
  // reduction. exact_dq, on the rare exact path, still reads p.deterministic (equal to it).
  auto deterministic = [&] { return Traits::kDetCompiled ? Deterministic : p.deterministic; };

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s0 = smem_u32(smem);
  const uint32_t sK = s0 + Traits::kOffK, sV = s0 + Traits::kOffV;
  const uint32_t sQ = s0 + Traits::kOffQ, sdO = s0 + Traits::kOffDo;  // [kStages] each
  const uint32_t sDs0 = s0 + Traits::kOffDs;  // dSᵀ, 16 bits ([kDsBuffers] of them)
  const uint32_t sL = s0 + Traits::kOffL, sD = s0 + Traits::kOffD;  // [kStages][kBlockM]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // mma.cuh: lane (g, t) holds rows g, g+8, cols 2t, 2t+1
  // The CTA's K/V tile n_blk of ⌈N_kv / kBlockN⌉ and its (batch, K/V head) bh: grid x and y,
  // or y and x when heavy_first_grid (kernel_traits.cuh; launch_flash_bwd_main).
  constexpr bool kHeavyFirst = heavy_first_grid<Traits, IsCausal>();
  const int n_blk = kHeavyFirst ? blockIdx.y : blockIdx.x;
  const int n_blocks = kHeavyFirst ? gridDim.y : gridDim.x;
  const int bh = kHeavyFirst ? blockIdx.x : blockIdx.y;
  const int j0 = n_blk * kBlockN;  // first key of this CTA's tile
  const int b = bh / p.heads_kv, h_kv = bh % p.heads_kv;
  const int kv_off = b * p.kv_batch_stride + h_kv * p.kv_head_stride;
  const Element* k_head = static_cast<const Element*>(p.k) + kv_off;
  const Element* v_head = static_cast<const Element*>(p.v) + kv_off;
  const Element* q_all = static_cast<const Element*>(p.q);
  const Element* do_all = static_cast<const Element*>(p.d_o);

  // The Q tiles this CTA visits: for each query head of the group, the tiles from the one
  // holding the first row that sees key j0 to the last (causal: rows above see nothing here).
  const int first_row = first_row_seeing<IsCausal>(j0, p.n_q, p.n_kv);
  const int i_first = first_row / kBlockM * kBlockM;
  const int num_m = first_row < p.n_q ? (p.n_q - i_first + kBlockM - 1) / kBlockM : 0;
  const int visits = p.group * num_m;
  // kStagger: visit `rot` is the first, and the order wraps round (the same tiles, the same
  // sums of dK and dV in another fixed order).
  const int rot = Traits::kStagger && visits > 0
                      ? static_cast<int>(static_cast<long long>(n_blk) * visits / n_blocks)
                      : 0;

  auto tile_of = [&](int it, int* h, int* i0) {
    const int v = it + rot < visits ? it + rot : it + rot - visits;
    *h = h_kv * p.group + v / num_m;
    *i0 = i_first + (v % num_m) * kBlockM;
  };
  auto load_q_async = [&](int it, int stage) {
    int h, i0;
    tile_of(it, &h, &i0);
    load_q_stage<Traits>(p, q_all, do_all, b, h, i0, stage, sQ, sdO, sL, sD);
  };

  // Prologue: K, V and the first Q tile in one group.
  if (visits > 0) {
    load_kv_async<Traits>(p, k_head, v_head, j0, sK, sV);
    load_q_async(0, 0);
  }
  cp_async_commit();

  // Causal: does K or V hold an inf or a NaN? (Then the diagonal's tiles take the exact path.)
  const bool kv_nonfinite = kv_has_nonfinite<Traits, IsCausal>(visits, sK);
  // kOneBarrier: the first tile is waited for here, the second one's copies are issued, and
  // from then on each tile's barrier also publishes the next tile (see the loop).
  if (Traits::kOneBarrier && visits > 0) {
    cp_async_wait<0>();
    __syncthreads();
    if (visits > 1) load_q_async(1, 1);
    cp_async_commit();
  }

  float acc_dk[kNTilesD][4], acc_dv[kNTilesD][4];  // 16 keys × d per warp, fp32 registers
#pragma unroll
  for (int nt = 0; nt < kNTilesD; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[nt][e] = acc_dv[nt][e] = 0.f;

  // Per-lane ldmatrix offsets (mma.cuh, and step 07's kernel for the same patterns):
  //   a_lane   A from a [row][d] tile, non-transposed: K or V, the warp's 16 keys
  //   b_lane   B from a [row][d] tile, non-transposed: Q or dO as B of Sᵀ = K Qᵀ (two n8 tiles
  //            of rows per ldmatrix)
  //   bt_lane  B from a [row][d] tile, transposed: dO, Q (dV, dK) or K (dQ), two n8 tiles of
  //            dims per ldmatrix
  //   ds_lane  A of dQ = dS K from the dSᵀ tile, transposed
  // Step j along d reads chunk c ^ 2j: one XOR with 32·j (step 07's kernel says why).
  const uint32_t a_lane = Traits::swizzle(16 * warp + lane % 16, lane / 16);
  const uint32_t b_lane = Traits::swizzle(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const uint32_t bt_lane = Traits::swizzle(lane % 16, lane / 16);
  const int dq_m = 16 * (warp % Traits::kDqWarpsM);               // the warp's rows of dQ
  const int dq_c = Traits::kDqCols * (warp / Traits::kDqWarpsM);  // its first dim of dQ
  const uint32_t ds_lane =
      (lane % 8 + 8 * (lane / 16)) * kDsRowBytes + 16 * ((lane / 8) % 2) + 2 * dq_m;
  const int key0 = 16 * warp + g;  // this lane's keys in the tile: key0 and key0 + 8

  for (int it = 0; it < visits; ++it) {
    const int stage = it % Traits::kStages;
    int h, i0;
    tile_of(it, &h, &i0);
    const uint32_t sQs = sQ + stage * Traits::kQBytes, sdOs = sdO + stage * Traits::kQBytes;
    const float* lse =
        reinterpret_cast<const float*>(smem + Traits::kOffL + stage * Traits::kRowVecBytes);
    const float* delta =
        reinterpret_cast<const float*>(smem + Traits::kOffD + stage * Traits::kRowVecBytes);

    const uint32_t sDs = sDs0 + (it % Traits::kDsBuffers) * Traits::kDsBytes;
    if (!Traits::kOneBarrier) {
      // This tile's copies have landed and every warp is done with the previous tile (its
      // stage and the dSᵀ tile); then the next tile's copies go to the other stage.
      cp_async_wait<0>();
      __syncthreads();
      if (it + 1 < visits) load_q_async(it + 1, (it + 1) % Traits::kStages);
      cp_async_commit();
    }

    // ---- Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: the warp's 16 keys × kBlockM rows ---------------------
    float s[kNTilesS][4], dp[kNTilesS][4];
#pragma unroll
    for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll(kUnrollS)  // not fully: fewer fragments loaded ahead, no spills at d = 128
    for (int ks = 0; ks < kKStepsS; ++ks) {
      uint32_t ak[4], av[4];
      ldmatrix_x4(ak, sK + (a_lane ^ (32 * ks)));
      ldmatrix_x4(av, sV + (a_lane ^ (32 * ks)));
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, sQs + np * 16 * kRowBytes + (b_lane ^ (32 * ks)));
        ldmatrix_x4(bo, sdOs + np * 16 * kRowBytes + (b_lane ^ (32 * ks)));
        mma_m16n8k16<Element>(s[2 * np], ak, bq[0], bq[1]);
        mma_m16n8k16<Element>(s[2 * np + 1], ak, bq[2], bq[3]);
        mma_m16n8k16<Element>(dp[2 * np], av, bo[0], bo[1]);
        mma_m16n8k16<Element>(dp[2 * np + 1], av, bo[2], bo[3]);
      }
    }

    // ---- Pᵀ and dSᵀ in place, masked by selects, then → 16 bits ----------------------------
    // s[nt][2h + e]: key key0 + 8h, row i0 + 8nt + 2t + e of the Q tile. kMasked false: the
    // same values without the visibility test and its selects, for a tile where every pair is
    // visible (mask_free below). The 16-bit packing is inside, so that with kMaskFree the two
    // paths join on pa and dsa (32 registers), not on s and dp (64): joined on s and dp, the
    // d = 128 kernel (255 registers) spilled 32-52 bytes (ptxas, CUDA 13.0), joined here none.
    uint32_t pa[kKStepsD][4], dsa[kKStepsD][4];
    auto p_ds = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * nt + 2 * t + e;
          if constexpr (kMasked) {
            const int limit = kv_limit<IsCausal>(i0 + col, p.n_q, p.n_kv);
            const bool row_ok = i0 + col < p.n_q;
            const float l2 = lse[col] * kLog2e, dlt = delta[col];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int x = 2 * hh + e;
              const bool vis = row_ok && j0 + key0 + 8 * hh < limit;
              const float pr = exp2_p<Traits::kFastExp2>(fmaf(s[nt][x], p.scale_log2, -l2));
              const float pv = vis ? pr : 0.f;
              dp[nt][x] = vis ? pv * (dp[nt][x] - dlt) : 0.f;
              s[nt][x] = pv;
            }
          } else {
            const float l2 = lse[col] * kLog2e, dlt = delta[col];
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int x = 2 * hh + e;
              const float pv = exp2_p<Traits::kFastExp2>(fmaf(s[nt][x], p.scale_log2, -l2));
              dp[nt][x] = pv * (dp[nt][x] - dlt);
              s[nt][x] = pv;
            }
          }
        }
      }
      // ---- Pᵀ, dSᵀ → 16 bits: two neighbouring n8 accumulator tiles make one k16 A tile -----
      // TODO(exercise): pa[kk] and dsa[kk], the A fragments (16 keys × 16 rows of the Q tile,
      // 16 bits) of dV += Pᵀ dO and dK += dSᵀ Q for k16 step kk, made from the accumulators
      // above without any shared memory: Pᵀ is in s[nt][0..3], dSᵀ in dp[nt][0..3], the
      // accumulator layout of an n8 tile (mma.cuh: lane (g, t) holds key g at elements 0, 1 and
      // key g + 8 at 2, 3, rows 8nt + 2t and + 1). An A fragment's four registers are 16-bit
      // pairs (pack_pair<Element>(lo, hi)): key g and key g + 8 at rows 2t, 2t + 1 of the k16
      // step, then the same at rows 2t + 8, 2t + 9. Which two n8 tiles of s make k16 step kk?
      // As given, every fragment is 0: dV and dK stay 0 (and dSᵀ, hence dQ, is 0 too).
      for (int kk = 0; kk < kKStepsD; ++kk)
        for (int r = 0; r < 4; ++r) pa[kk][r] = dsa[kk][r] = 0u;
    };
    // kMaskFree: does this tile need no mask? Decided from i0, j0, N_q and N_kv alone, so the
    // same in every thread of the CTA (no divergence, and the barrier below is reached by all
    // on either path). It needs none when
    //   - every row is real: i0 + kBlockM <= N_q, so row_ok holds for each col < kBlockM
    //     (the lane's cols 8nt + 2t + e are all below kBlockM: nt < kBlockM / 8);
    //   - every key is real: j0 + kBlockN <= N_kv (the lane's keys key0, key0 + 8 are below
    //     kBlockN: 16 · warp + g + 8 < 16 · (warp + 1) <= 16 · kNumWarps = kBlockN);
    //   - no row misses a key of the tile: !tile_hides_a_pair, which, the keys being real, is
    //     kv_limit(i0) >= j0 + kBlockN (always so without causal: kv_limit = N_kv); kv_limit
    //     grows with the row, so every row's limit is >= j0 + kBlockN > j0 + key0 + 8hh.
    // Then vis is true for every pair, each select returns its first operand, and the path
    // without them computes the same bits (the same exp2_p, fmaf, subtraction and product).
    // A tile with a tail row (i0 + kBlockM > N_q: the zero-filled rows past N_q, whose L of 0
    // would give P = exp2(S · scale_log2) ≠ 0), a tail key or a causal pair hidden takes the
    // selects as before. The exact path (non-finite inputs) is taken only on a tile that
    // hides a pair, never on one found mask-free.
    const bool mask_free = Traits::kMaskFree && i0 + kBlockM <= p.n_q && j0 + kBlockN <= p.n_kv &&
                           !tile_hides_a_pair<IsCausal>(i0, j0, kBlockN, p.n_q, p.n_kv);
    if (mask_free)
      p_ds(std::false_type{});
    else
      p_ds(std::true_type{});

    // ---- The exact path? Only a tile that hides a pair, and only with an inf or NaN --------
    bool exact = false;
    if (tile_hides_a_pair<IsCausal>(i0, j0, kBlockN, p.n_q, p.n_kv))  // the same in the CTA
      exact = __syncthreads_or(kv_nonfinite || tile_has_nonfinite<Traits>(sQs, Traits::kQBytes) ||
                               tile_has_nonfinite<Traits>(sdOs, Traits::kQBytes)) != 0;

    // Σ over the tile's rows the key sees of w[key][row] · x[row][dim], for the lane's own
    // accumulator elements: the exact path of dV += Pᵀ dO and dK += dSᵀ Q. Rows outermost, so
    // that only one row's values are live next to the accumulators.
    auto exact_update = [&](float(&acc)[kNTilesD][4], int w_offset, uint32_t s_x) {
      const Element* w = reinterpret_cast<const Element*>(smem + w_offset);
      const unsigned char* x = smem + (s_x - s0);
#pragma unroll 1
      for (int r = 0; r < kBlockM && i0 + r < p.n_q; ++r) {
        const int limit = kv_limit<IsCausal>(i0 + r, p.n_q, p.n_kv) - j0;  // keys of the tile
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int key = key0 + 8 * hh;
          if (key >= limit) continue;  // hidden from row r: skipped, never multiplied by 0
          const float wv = static_cast<float>(w[key * (kDsRowBytes / 2) + r]);
#pragma unroll  // static indices into acc: it stays in registers
          for (int nt = 0; nt < kNTilesD; ++nt) {
            const Element* xe =
                reinterpret_cast<const Element*>(x + Traits::element(r, 8 * nt + 2 * t));
            acc[nt][2 * hh] = fmaf(wv, static_cast<float>(xe[0]), acc[nt][2 * hh]);
            acc[nt][2 * hh + 1] = fmaf(wv, static_cast<float>(xe[1]), acc[nt][2 * hh + 1]);
          }
        }
      }
    };

    // ---- dV += Pᵀ dO, dK += dSᵀ Q: the warp's 16 keys × d, fp32 registers -----------------
    if (!exact) {
#pragma unroll
      for (int dp2 = 0; dp2 < kNTilesD / 2; ++dp2) {  // 16 dims (two n8 tiles) per ldmatrix
#pragma unroll
        for (int kk = 0; kk < kKStepsD; ++kk) {  // 16 rows of the Q tile per step
          uint32_t bo[4], bq[4];
          ldmatrix_x4_trans(bo, sdOs + kk * 16 * kRowBytes + (bt_lane ^ (32 * dp2)));
          ldmatrix_x4_trans(bq, sQs + kk * 16 * kRowBytes + (bt_lane ^ (32 * dp2)));
          mma_m16n8k16<Element>(acc_dv[2 * dp2], pa[kk], bo[0], bo[1]);
          mma_m16n8k16<Element>(acc_dv[2 * dp2 + 1], pa[kk], bo[2], bo[3]);
          mma_m16n8k16<Element>(acc_dk[2 * dp2], dsa[kk], bq[0], bq[1]);
          mma_m16n8k16<Element>(acc_dk[2 * dp2 + 1], dsa[kk], bq[2], bq[3]);
        }
      }
    } else {  // Pᵀ to shared memory as well, for the exact dV below
      store_transposed<Traits>(s0 + Traits::kOffP, pa, warp, g, t);
    }

    // ---- dSᵀ → shared memory, for dQ = dS K (its rows are the Q tile's rows) --------------
    // TODO(exercise): write this warp's dSᵀ fragments (dsa: its 16 keys as rows, the Q tile's
    // rows as columns) into the [kBlockN][kBlockM + 8] tile at sDs, so that the dQ product
    // below can read dS with the QUERY rows as its A rows. The exact path above writes Pᵀ the
    // same way into its own tile. As given, the dSᵀ tile is never written.
    if (Traits::kOneBarrier) {
      // One barrier: dSᵀ is published, the next tile's copies (issued a tile ago) are waited
      // for and published, and every warp is done with this stage (the fast path reads only
      // dSᵀ and K below) and with the other dSᵀ tile (tile it − 1's dQ came before it).
      cp_async_wait<0>();
      __syncthreads();
      if (!exact) {  // the exact path below still reads this stage: it loads after it
        if (it + 2 < visits) load_q_async(it + 2, stage);
        cp_async_commit();
      }
    } else {
      __syncthreads();
    }

    // Row i0 of dQ_acc; deterministic: of this CTA's slab, written with plain stores (each
    // element of a visited tile by one lane, once), else added to with atomics.
    float* dq_rows = p.dq_acc + (deterministic() ? n_blk * p.q_elems : 0) +
                     ((b * p.heads_q + h) * p.n_q + i0) * kHeadDim;
    auto add_dq = [&](float* at, float v) {
      if (deterministic())
        *at = v;
      else
        atomicAdd(at, v);
    };
    // Two neighbouring floats (8-byte aligned: dims 2t, 2t + 1 of an even row offset).
    auto add_dq2 = [&](float* at, float v0, float v1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (deterministic())
        *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
      else
        atomicAdd(reinterpret_cast<float2*>(at), make_float2(v0, v1));  // red.global.add.v2.f32
#else
      add_dq(at, v0);
      add_dq(at + 1, v1);
#endif
    };
    // Four neighbouring floats, 16-byte aligned: dq_acc, the workspace's start, is (the
    // convert kernel reads it as float4s; cudaMalloc gives 256 bytes), a slab and a row are
    // whole multiples of d floats (d % 16 == 0), dq_c a multiple of 16 (kDqCols % 16 == 0) and
    // the caller's 8 · nt + 4 · (t / 2) one of 4.
    auto add_dq4 = [&](float* at, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (deterministic())
        *reinterpret_cast<float4*>(at) = v;
      else  // no result: a reduction, never a returning atomic
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(at), "f"(v.x),
                     "f"(v.y), "f"(v.z), "f"(v.w)
                     : "memory");
#else
      add_dq2(at, v.x, v.y);
      add_dq2(at + 2, v.z, v.w);
#endif
    };
    if (!exact) {
      // ---- dQ_acc += dS K: the warp's 16 rows × kDqCols dims ------------------------------
      float acc_dq[kNTilesDq][4];
#pragma unroll
      for (int nt = 0; nt < kNTilesDq; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dq[nt][e] = 0.f;
#pragma unroll(kUnrollS)                        // as for Sᵀ
      for (int kk = 0; kk < kKStepsDq; ++kk) {  // 16 keys per step
        // TODO(exercise): a, the A fragment of dS for this warp's 16 rows (dq_m …) and keys
        // 16·kk … 16·kk + 15: the transpose of the dSᵀ tile's rows 16·kk … +15, read with one
        // ldmatrix.trans from the lane's offset ds_lane (set up before the loop over Q tiles).
        uint32_t a[4] = {0u, 0u, 0u, 0u};
        (void)ds_lane;  // as given, unused (this line only keeps the compiler quiet)
#pragma unroll
        for (int dp2 = 0; dp2 < kNTilesDq / 2; ++dp2) {
          uint32_t bk[4];
          ldmatrix_x4_trans(bk, sK + kk * 16 * kRowBytes + (bt_lane ^ (32 * (dq_c / 16 + dp2))));
          // TODO(exercise): acc_dq's two n8 tiles of dims dq_c + 16·dp2 … +15 += dS K for
          // these 16 keys: two mma_m16n8k16 with the A fragment a and the B fragments in bk
          // (ldmatrix_x4_trans: bk[0], bk[1] the first n8 tile, bk[2], bk[3] the second). As
          // given, acc_dq stays 0, so every row's dQ is 0.
          (void)a, (void)bk;  // as given, unused (this line only keeps the compiler quiet)
        }
      }
      // The other K/V tiles' CTAs add to the same rows: fp32 atomics whose result is unused,
      // which the compiler emits as red.global.add.f32 (or this CTA's slab, deterministic).
      const bool bulk = kBulk && !deterministic();
      if (bulk) {
        // kDqBulk: the warp's 16 rows × kDqCols dims into its own staging area; lane r < 16
        // then adds row r to dQ_acc with one bulk reduction. Before the stores, the lanes that
        // issued the last tile's reductions wait until those have read the area.
        const uint32_t s_dq = s0 + Traits::kOffDq + warp * Traits::kDqWarpBytes;
        if (lane < 16) bulk_wait_read<0>();
        __syncwarp();
#pragma unroll
        for (int nt = 0; nt < kNTilesDq; ++nt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh)
            st_shared_f32x2(s_dq + (g + 8 * hh) * Traits::kDqRowBytes + 4 * (8 * nt + 2 * t),
                            acc_dq[nt][2 * hh], acc_dq[nt][2 * hh + 1]);
        fence_proxy_async_shared();  // this lane's stores, before the engine reads them
        __syncwarp();
        // Row dq_m + lane: 16-byte aligned at both ends (dq_acc as for add_dq4; kDqCols · 4
        // bytes, a multiple of 64). Rows past N_q are not added.
        if (lane < 16 && i0 + dq_m + lane < p.n_q) {
          bulk_reduce_add_f32(dq_rows + (dq_m + lane) * kHeadDim + dq_c,
                              s_dq + lane * Traits::kDqRowBytes, Traits::kDqCols * 4);
          bulk_commit();
        }
      } else if constexpr (Traits::kDqQuads) {
        // Lanes t and t ^ 1 hold dims 8nt + 2t, +1 of rows g and g + 8. The even lane gives
        // its row g + 8 pair for the odd lane's row g pair: then the even lane holds dims
        // 8nt + 2t … +3 of row g, the odd one dims 8nt + 2(t − 1) … +3 of row g + 8. The
        // exchange comes before the bounds check: every lane of the warp takes part.
        // The lane's row and address are worked out here from %laneid (a volatile read the
        // compiler cannot hoist): computed from `lane` they are kept live across the whole
        // loop, and at d = 128 (255 registers) that spilled 28 bytes (ptxas, CUDA 13.0).
        uint32_t ln;
        asm volatile("mov.u32 %0, %%laneid;" : "=r"(ln));
        const bool odd = ln & 1;
        const int row = dq_m + ln / 4 + 8 * odd;
        float* at = dq_rows + row * kHeadDim + dq_c + 4 * ((ln % 4) / 2);
#pragma unroll
        for (int nt = 0; nt < kNTilesDq; ++nt) {
          const float give0 = odd ? acc_dq[nt][0] : acc_dq[nt][2];
          const float give1 = odd ? acc_dq[nt][1] : acc_dq[nt][3];
          const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1);
          const float got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
          const float4 v = odd ? make_float4(got0, got1, acc_dq[nt][2], acc_dq[nt][3])
                               : make_float4(acc_dq[nt][0], acc_dq[nt][1], got0, got1);
          if (i0 + row < p.n_q) add_dq4(at + 8 * nt, v);
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < kNTilesDq; ++nt)
#pragma unroll
          for (int k = 0; k < 4; k += 2) {
            const int row = dq_m + g + 8 * (k / 2);
            if (i0 + row >= p.n_q) continue;
            float* at = dq_rows + row * kHeadDim + dq_c + 8 * nt + 2 * t;
            if (Traits::kDqPairs) {
              add_dq2(at, acc_dq[nt][k], acc_dq[nt][k + 1]);
            } else {
              add_dq(at, acc_dq[nt][k]);
              add_dq(at + 1, acc_dq[nt][k + 1]);
            }
          }
      }
    } else {
      const int ds_offset = static_cast<int>(sDs - s0);
      exact_update(acc_dv, Traits::kOffP, sdOs);
      exact_update(acc_dk, ds_offset, sQs);
      exact_dq<Traits, IsCausal>(p, smem, ds_offset, dq_rows, i0, j0);
      if (Traits::kOneBarrier) {  // every warp is done with this stage: the copies may go
        __syncthreads();
        if (it + 2 < visits) load_q_async(it + 2, stage);
        cp_async_commit();
      }
    }
  }

  // kDqBulk: the CTA's shared memory must outlive the reductions that read it; and they are
  // waited for to the end (global writes too) before the CTA is done.
  if (kBulk && lane < 16) bulk_wait<0>();

  // ---- dK = scale · dK, dV: this CTA alone owns its keys (the group summed above) ----------
  // As step 07's O: through shared memory, so that every store to device memory is 16
  // contiguous bytes (a lane's accumulators are 4-byte pairs spread over 2 rows). The staging
  // area is the warp's own 16 rows of the K and V tiles, once every warp is done reading them.
  __syncthreads();
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int row = key0 + 8 * hh;
#pragma unroll
    for (int nt = 0; nt < kNTilesD; ++nt) {  // dims 8nt + 2t, +1: chunk nt, bytes 4t … 4t+3
      st_shared_u32(
          sK + Traits::swizzle(row, nt) + 4 * t,
          pack_pair<Element>(p.scale * acc_dk[nt][2 * hh], p.scale * acc_dk[nt][2 * hh + 1]));
      st_shared_u32(sV + Traits::swizzle(row, nt) + 4 * t,
                    pack_pair<Element>(acc_dv[nt][2 * hh], acc_dv[nt][2 * hh + 1]));
    }
  }
  __syncwarp();  // the warp reads back only its own rows
  store_dk_dv<Traits, 16>(p, kv_off, j0, 16 * warp, lane, 32, sK, sV);
}

/// \brief The main kernel of BwdTraits `Traits` (its WarpLayout); flash_bwd_2d.cuh gives the
/// one of Bwd2dTraits.
template <class Traits, bool IsCausal, bool Deterministic>
constexpr auto main_kernel(WarpLayout1d) {
  return flash_bwd_kernel<Traits, IsCausal, Deterministic>;
}

}  // namespace fa::step11

// The main kernel with FlashAttention-2's 2-D warp layouts, the step's at both d (BwdConfig):
// it uses this file's helpers and its preprocessing and convert kernels, and is launched by the
// host side below.
#include "flash_bwd_2d.cuh"

namespace fa::step11 {

// ---------------------------------------------------------------------------------------------
// Host side: three launches on one stream, for either main kernel.
// ---------------------------------------------------------------------------------------------
/// \brief The driver's cuTensorMapEncodeTiled, reached through the runtime, as step 08 does (no
/// libcuda), looked up once.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &found));
#else
    CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw CudaError(cudaErrorSymbolNotFound,
                      "the CUDA driver does not provide cuTensorMapEncodeTiled (step 11's tensor "
                      "copies and reductions)");
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

/// \brief The tensor map of p.dq_acc for Bwd2dTraits' kDqBulk = 2 and 3: dims (d, N_q, B · H_q)
/// fp32, strides 4·d and 4·N_q·d bytes ([B, H_q, N_q, d]), boxes of box_cols dims × box_rows rows
/// of one head, 128-byte swizzle. Rows past N_q fall outside the map: a reduction skips them.
inline CUtensorMap make_dq_tensor_map(const BwdParams& p, int box_cols, int box_rows) {
  const EncodeTiled encode = tensor_map_encoder();
  const cuuint64_t d = static_cast<cuuint64_t>(p.head_dim), n = static_cast<cuuint64_t>(p.n_q);
  const cuuint64_t dims[3] = {d, n, static_cast<cuuint64_t>(p.batch) * p.heads_q};
  const cuuint64_t strides[2] = {4 * d, 4 * d * n};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows),
                             1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p.dq_acc, dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw CudaError(
        cudaErrorInvalidValue,
        "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
            ") for dQ's accumulator in step 11: dims d = " + std::to_string(d) +
            ", N_q = " + std::to_string(n) + ", B * H_q = " + std::to_string(dims[2]) +
            " (each at most 2^32), box " + std::to_string(box_cols) + " x " +
            std::to_string(box_rows) + ", workspace address mod 16 = " +
            std::to_string(reinterpret_cast<std::uintptr_t>(p.dq_acc) % 16) + " (must be 0)");
  return map;
}

/// \brief The tensor map of Q or dO (`data`: p.q or p.d_o, Element) for Bwd2dTraits' kQTma: dims
/// (d, N_q, H_q, B) by the problem's strides (either layout), boxes of 64 dims × box_rows rows
/// of one head, 128-byte swizzle; rows past N_q fall outside the map and read as zeros.
template <class Element>
CUtensorMap make_q_tensor_map(const BwdParams& p, const void* data, int box_rows,
                              const char* what) {
  const EncodeTiled encode = tensor_map_encoder();
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(p.n_q),
                              static_cast<cuuint64_t>(p.heads_q), static_cast<cuuint64_t>(p.batch)};
  const cuuint64_t strides[3] = {2 * static_cast<cuuint64_t>(p.q_row_stride),
                                 2 * static_cast<cuuint64_t>(p.q_head_stride),
                                 2 * static_cast<cuuint64_t>(p.q_batch_stride)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  constexpr CUtensorMapDataType kType = std::is_same_v<Element, __half>
                                            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  CUtensorMap map;
  const CUresult r = encode(&map, kType, 4, const_cast<void*>(data), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw CudaError(
        cudaErrorInvalidValue,
        "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
            ") for " + what + " in step 11: strides " + std::to_string(strides[0]) + ", " +
            std::to_string(strides[1]) + ", " + std::to_string(strides[2]) +
            " bytes (each a multiple of 16), address mod 16 = " +
            std::to_string(reinterpret_cast<std::uintptr_t>(data) % 16) + " (must be 0)");
  return map;
}

template <class Traits, bool IsCausal>
void launch_flash_bwd_main(const BwdParams& p, cudaStream_t stream) {
  using Layout = typename Traits::WarpLayout;
  auto kernel = main_kernel<Traits, IsCausal, false>(Layout{});
  if constexpr (Traits::kDetCompiled)  // a kernel for each mode, its argument p.deterministic
    if (p.deterministic) kernel = main_kernel<Traits, IsCausal, true>(Layout{});
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Traits::kSmemBytes));
  const unsigned n_blocks = (p.n_kv + Traits::kBlockN - 1) / Traits::kBlockN;
  const unsigned bh = p.batch * p.heads_kv;
  const dim3 grid = heavy_first_grid<Traits, IsCausal>() ? dim3(bh, n_blocks) : dim3(n_blocks, bh);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// \brief Blocks of `threads` for `work` items, at most 65,536 (the kernels stride over the rest).
inline unsigned blocks_for(long long work, int threads) {
  const long long b = (work + threads - 1) / threads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

/// \brief The PTX architecture the main kernel of `Traits` was compiled from (90 for sm_90):
/// kQTma's tensor copies exist only where it is 90 or more (built for an older GPU and run on
/// an sm_90 one through the driver's compiler, they would be empty, mma.cuh).
template <class Traits>
int main_kernel_ptx_version() {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(
      &attr, reinterpret_cast<const void*>(
                 main_kernel<Traits, false, false>(typename Traits::WarpLayout{}))));
  return attr.ptxVersion;
}

/// \brief The three kernels with the main kernel's tiles and switches `Traits`, BwdTraits or
/// Bwd2dTraits (run_flash_bwd: the step's own; bin/variants_11: others). `p` must have been made
/// for Traits::kBlockN (deterministic mode: one dQ slab per CTA along the keys).
template <class Traits>
void run_flash_bwd_traits(const BwdParams& params, cudaStream_t stream) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  // Bwd2dTraits with kDqBulk = 2, 3: dQ by tensor reductions through the map of p.dq_acc, made
  // before the first launch, so that an encode failure leaves nothing running.
  BwdParams p = params;
  if constexpr (Traits::kDqBulk >= 2)
    if (!p.deterministic) p.dq_map = make_dq_tensor_map(p, Traits::kQDims, Traits::kQRows);
  // Bwd2dTraits with kQTma: Q's and dO's copies through their maps, made here likewise (the
  // TMA is sm_90's: refused on an older device rather than left to copy nothing).
  if constexpr (Traits::kQTma) {
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 9 || main_kernel_ptx_version<Traits>() < 90)
      throw CudaError(cudaErrorInvalidDeviceFunction,
                      "step 11 with Q and dO copied by the TMA (kQTma) needs compute capability "
                      "9.0 or newer and its kernel compiled for it; this device has " +
                          std::to_string(major) + ".x, the kernel was compiled for " +
                          std::to_string(main_kernel_ptx_version<Traits>()));
    p.q_map = make_q_tensor_map<Element>(p, p.q, Traits::kBlockM, "Q");
    p.do_map = make_q_tensor_map<Element>(p, p.d_o, Traits::kBlockM, "dO");
  }
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.n_q;
  constexpr int kThreads = 256;
  bwd_preprocess_kernel<Element><<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  if (p.causal)
    launch_flash_bwd_main<Traits, true>(p, stream);
  else
    launch_flash_bwd_main<Traits, false>(p, stream);
  bwd_convert_dq_kernel<Traits>
      <<<blocks_for(rows * (kHeadDim / 8), kThreads), kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// NOTE(exercise): not part of the lesson. The exercise's configuration: the kernel above, in
/// BwdConfig's Fallback tiles at both d (the step itself runs flash_bwd_2d.cuh's kernel where
/// it fits; the exercise builds this one, so this one is what its tests run).
template <int kHeadDim, class Element>
void run_flash_bwd(const BwdParams& p, cudaStream_t stream) {
  // NOTE(exercise): Fallback at both d, as the comment above says.
  run_flash_bwd_traits<typename BwdConfig<kHeadDim, Element>::Fallback>(p, stream);
}

}  // namespace fa::step11
