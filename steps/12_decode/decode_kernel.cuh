// decode_kernel.cuh — step 12's split-KV attention kernel and the combine kernel.
//
//   attention, grid (num_splits, H_kv · row_chunks, B), block 128 threads:
//     Q rows of the group (scaled by scale·log2 e, fp32) ──▶ sQ
//     the split's key range of sequence b: ⌈tiles / num_splits⌉ tiles of 64 keys
//     for each tile (two cp.async stages, pages resolved through the block table):
//       S  = Q Kᵀ          lane j: keys j and j + 32 of the tile, every row of its warp
//       mask               key < split end and key <= cache_len + i  (causal, bottom-right)
//       online softmax     row max over the warp (5 shuffles), P = exp2(S − m), O *= α
//       O += P V           lane: kHeadDim / 32 columns of O, every row of its warp
//     O_s = O / ℓ, L_s = ln 2 · (m + log2 ℓ)  ──▶ the workspace, fp32
//   combine, grid ⌈B·H_q·q_len / 4⌉, block 128 threads (a warp per row):
//     L = log Σ_s exp(L_s),  O = Σ_s exp(L_s − L) · O_s  ──▶ O (Element) and L
//     (combine_row in combine.cuh, shared with step 13's merge of the ring's partials)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../07_flash_attention_2/mma.cuh"  // cp.async, smem_u32
#include "combine.cuh"                      // combine_row and the warp helpers, shared with step 13
#include "common/cuda_check.h"
#include "decode_params.cuh"

namespace fa::step12 {

using step07::cp_async_16;
using step07::cp_async_commit;
using step07::cp_async_wait;
using step07::smem_u32;

constexpr float kLn2 = 0.69314718055994530942f;

/// \brief Column j of sequence b's block table (a pool page), or −1 for a column outside the
/// table, which is then never read.
__device__ __forceinline__ int table_entry(const DecodeParams& p, int b, int j) {
  return j >= 0 && j < p.max_pages ? p.block_table[int64_t{b} * p.max_pages + j] : -1;
}

/// \brief Element offset of row `pos` of sequence b, K/V head 0, in the cache, or −1 when the
/// position lies outside what the cache holds for b: past the capacity, or on a block-table
/// entry outside the pool. The host validated the problem, so −1 never comes with a device
/// table that matches it; it keeps every access inside the cache if the device copy differs.
__device__ __forceinline__ int64_t cache_row(const DecodeParams& p, int b, int pos) {
  const int64_t row_elems = int64_t{p.heads_kv} * p.head_dim;
  if (pos < 0 || pos >= p.capacity) return -1;
  if (!p.paged) return (int64_t{b} * p.n_max + pos) * row_elems;
  // The page lookup: position pos is row `slot` of pool page `page`.
  const int page = table_entry(p, b, pos / p.page_size);
  const int slot = pos % p.page_size;
  // Whatever page and slot say, nothing outside the pool is ever addressed.
  if (page < 0 || page >= p.num_pages || slot < 0 || slot >= p.page_size) return -1;
  return (int64_t{page} * p.page_size + slot) * row_elems;
}

/// \brief Keys sequence b attends to: cache_len + q_len, kept within [0, capacity].
__device__ __forceinline__ int kv_len_of(const DecodeParams& p, int cache_len) {
  return max(0, min(cache_len + p.q_len, p.capacity));
}

/// \brief Rows row0 … row0 + rows − 1 of K/V head g's group (row r = hg · q_len + i: query head
/// g · group + hg, new token i) of sequence b's Q into sQ ([rows][kD], fp32), scaled by
/// scale · log2(e) so that scores come out in log2 units; called by the kThreads threads of
/// the block.
template <int kD, int kThreads, class Element>
__device__ __forceinline__ void load_q(const DecodeParams& p, int b, int g, int row0, int rows,
                                       float* sQ) {
  constexpr int kChunks = kD / 8;
  const Element* q = static_cast<const Element*>(p.q);
  for (int x = threadIdx.x; x < rows * kChunks; x += kThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const int hg = (row0 + r) / p.q_len, i = (row0 + r) % p.q_len;
    const int h = g * p.group + hg;
    const uint4 u = *reinterpret_cast<const uint4*>(
        q + ((int64_t{b} * p.q_len + i) * p.heads_q + h) * kD + c * 8);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = unpack_pair<Element>(w[k]);
      sQ[r * kD + c * 8 + 2 * k] = f.x * p.scale_log2;
      sQ[r * kD + c * 8 + 2 * k + 1] = f.y * p.scale_log2;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The split-KV attention kernel
// ---------------------------------------------------------------------------------------------
template <class Traits, class Element>
__global__ void __launch_bounds__(Traits::kThreads)
    decode_attention_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kD = Traits::kHeadDim, kN = Traits::kBlockN, kW = Traits::kWarps;
  constexpr int kR = Traits::kRowsPerWarp, kStride = Traits::kStride;
  constexpr int kChunks = Traits::kChunksPerRow, kCols = Traits::kColsPerLane;

  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem);                         // [kMaxRows][kD]
  Element* sKV = reinterpret_cast<Element*>(smem + Traits::kQBytes);  // [stage][K, V][kN][kStride]
  float* sP =
      reinterpret_cast<float*>(smem + Traits::kQBytes + 2 * Traits::kStages * Traits::kTileBytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x;
  const int g = blockIdx.y / p.row_chunks, chunk = blockIdx.y % p.row_chunks;
  const int b = blockIdx.z;
  const int row0 = chunk * Traits::kMaxRows;
  const int rows = min(Traits::kMaxRows, p.group * p.q_len - row0);

  // This split's keys of sequence b: whole tiles, ⌈tiles / num_splits⌉ of them per split.
  const int cache_len = p.cache_lens[b];
  const int kv_len = kv_len_of(p, cache_len);
  const int n_tiles = (kv_len + kN - 1) / kN;
  const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  const int t_begin = split * per_split, t_end = min(n_tiles, t_begin + per_split);
  const int key_end = min(t_end * kN, kv_len);

  // Where this block's rows go in the workspace: row (b·H_q + h)·q_len + i of split `split`,
  // and h = g·group + hg, so the block's rows are consecutive from part_row0.
  const int64_t rows_all = int64_t{p.batch} * p.heads_q * p.q_len;
  const int64_t part_row0 =
      split * rows_all + (int64_t{b} * p.heads_q + int64_t{g} * p.group) * p.q_len + row0;

  if (t_begin >= t_end) {  // an empty split (more splits than tiles): O_s = 0, L_s = −inf
    for (int x = tid; x < rows * kD; x += Traits::kThreads) p.o_part[part_row0 * kD + x] = 0.f;
    for (int r = tid; r < rows; r += Traits::kThreads) p.lse_part[part_row0 + r] = -INFINITY;
    return;
  }

  const Element* k_cache = static_cast<const Element*>(p.k_cache);
  const Element* v_cache = static_cast<const Element*>(p.v_cache);
  // Starts copying tile `tile` into stage `stage`: thread tid copies chunks tid, tid + 128, …
  // of the tile's kN × kChunks chunks (consecutive threads, consecutive 16 bytes of a row).
  // Keys at or past key_end are zero-filled and never read: the rows past a sequence's end
  // may hold anything (NaN in the tests), and a masked P of 0 times a NaN V would be NaN.
  auto load_tile = [&](int tile, int stage) {
    Element* sK = sKV + (2 * stage) * kN * kStride;
    Element* sV = sK + kN * kStride;
#pragma unroll
    for (int x = tid; x < kN * kChunks; x += Traits::kThreads) {
      const int key = x / kChunks, c = x % kChunks;
      const int pos = tile * kN + key;
      const int64_t row = pos < key_end ? cache_row(p, b, pos) : -1;
      const bool ok = row >= 0;
      // A skipped chunk still names an in-bounds address (the cache's first), never read.
      const int64_t src = ok ? row + int64_t{g} * kD + c * 8 : 0;
      cp_async_16(smem_u32(sK + key * kStride + c * 8), k_cache + src, ok);
      cp_async_16(smem_u32(sV + key * kStride + c * 8), v_cache + src, ok);
    }
  };
  load_tile(t_begin, 0);
  cp_async_commit();

  // Q of the block's rows, scaled by scale · log2(e) so that scores come out in log2 units.
  load_q<kD, Traits::kThreads, Element>(p, b, g, row0, rows, sQ);

  // Per row rr of this warp (row warp + kW·rr): the running max m (log2 units, the same in
  // every lane), this lane's share of the running sum ℓ, and its kCols columns of O.
  float m[kR], l[kR], o[kR][kCols];
#pragma unroll
  for (int rr = 0; rr < kR; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[rr][c] = 0.f;
  }
  float* sPw = sP + warp * kR * kN;  // this warp's P, [kR][kN]

  for (int t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) % 2;
    // The other stage held tile t − 1, whose readers all passed the barrier at the end of
    // the previous iteration: refill it with tile t + 1 while tile t is computed.
    if (t + 1 < t_end) load_tile(t + 1, stage ^ 1);
    cp_async_commit();  // possibly an empty group, so that wait<1> below always means tile t
    cp_async_wait<1>();
    __syncthreads();
    const Element* sK = sKV + (2 * stage) * kN * kStride;
    const Element* sV = sK + kN * kStride;
    const int key0 = t * kN;

    // S = Q Kᵀ: lane j scores keys j and j + 32 against every row of its warp. Each 16-byte
    // chunk of a key is read once and used for all the rows; Q is read as a broadcast.
    float s[kR][2];
#pragma unroll
    for (int rr = 0; rr < kR; ++rr) s[rr][0] = s[rr][1] = 0.f;
#pragma unroll 2
    for (int c = 0; c < kChunks; ++c) {
      float k0[8], k1[8];
      const uint4 u0 = *reinterpret_cast<const uint4*>(sK + lane * kStride + c * 8);
      const uint4 u1 = *reinterpret_cast<const uint4*>(sK + (lane + 32) * kStride + c * 8);
      const uint32_t w0[4] = {u0.x, u0.y, u0.z, u0.w}, w1[4] = {u1.x, u1.y, u1.z, u1.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 a = unpack_pair<Element>(w0[k]), bb = unpack_pair<Element>(w1[k]);
        k0[2 * k] = a.x, k0[2 * k + 1] = a.y, k1[2 * k] = bb.x, k1[2 * k + 1] = bb.y;
      }
#pragma unroll
      for (int rr = 0; rr < kR; ++rr) {
        const int r = warp + kW * rr;
        if (r >= rows) break;  // the same for the whole warp
        const float4 qa = *reinterpret_cast<const float4*>(sQ + r * kD + c * 8);
        const float4 qb = *reinterpret_cast<const float4*>(sQ + r * kD + c * 8 + 4);
        s[rr][0] += qa.x * k0[0] + qa.y * k0[1] + qa.z * k0[2] + qa.w * k0[3] + qb.x * k0[4] +
                    qb.y * k0[5] + qb.z * k0[6] + qb.w * k0[7];
        s[rr][1] += qa.x * k1[0] + qa.y * k1[1] + qa.z * k1[2] + qa.w * k1[3] + qb.x * k1[4] +
                    qb.y * k1[5] + qb.z * k1[6] + qb.w * k1[7];
      }
    }

    // Mask and online softmax, row by row (the same rescale as between two splits, in the
    // combine kernel): m' = max(m, max_j s_j), α = 2^(m − m'), ℓ' = α ℓ + Σ_j 2^(s_j − m'),
    // O' = α O + Σ_j 2^(s_j − m') v_j.
#pragma unroll
    for (int rr = 0; rr < kR; ++rr) {
      const int r = warp + kW * rr;
      if (r >= rows) break;
      const int i = (row0 + r) % p.q_len;
      // Row i sees keys [0, cache_len + i + 1) (causal among the new tokens, bottom-right),
      // and this split only up to key_end.
      const int limit = min(key_end, cache_len + i + 1);
      const float sa = key0 + lane < limit ? s[rr][0] : -INFINITY;
      const float sb = key0 + lane + 32 < limit ? s[rr][1] : -INFINITY;
      const float m_new = fmaxf(m[rr], warp_max(fmaxf(sa, sb)));
      // A row that has seen no key yet keeps m = −inf; exponentiate against 0 then, so that
      // 2^(−inf − 0) = 0 rather than 2^(−inf + inf) = NaN.
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m[rr] - m_use);
      const float pa = exp2f(sa - m_use), pb = exp2f(sb - m_use);
      l[rr] = l[rr] * alpha + pa + pb;
      m[rr] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[rr][c] *= alpha;
      sPw[rr * kN + lane] = pa;
      sPw[rr * kN + lane + 32] = pb;
    }
    __syncwarp();

    // O += P V: key by key, lane reads its kCols columns of V once and updates every row.
    const int n_keys = min(kN, key_end - key0);  // the zero-filled keys past the end add 0
    for (int j = 0; j < n_keys; ++j) {
      float v[kCols];
      load_cols<Element, kCols>(sV + j * kStride + lane * kCols, v);
#pragma unroll
      for (int rr = 0; rr < kR; ++rr) {
        const int r = warp + kW * rr;
        if (r >= rows) break;
        const float pj = sPw[rr * kN + j];
#pragma unroll
        for (int c = 0; c < kCols; ++c) o[rr][c] += pj * v[c];
      }
    }
    __syncthreads();  // every warp is done with this stage (and its P) before it is refilled
  }
  cp_async_wait<0>();  // the last (empty) group, so nothing is in flight at exit

  // The split's partial result. ℓ = 0 only for a row that saw no key in this split (its
  // causal end lies before the split): O_s = 0, L_s = −inf, which weighs 0 in the combine.
  // A NaN ℓ (NaN in the inputs) falls through to the division and propagates.
#pragma unroll
  for (int rr = 0; rr < kR; ++rr) {
    const int r = warp + kW * rr;
    if (r >= rows) break;
    const float lsum = warp_sum(l[rr]);
    const bool empty = lsum == 0.f;
    const float inv = empty ? 0.f : 1.f / lsum;
    float* dst = p.o_part + (part_row0 + r) * kD + lane * kCols;
    if constexpr (kCols == 2) {
      *reinterpret_cast<float2*>(dst) = make_float2(o[rr][0] * inv, o[rr][1] * inv);
    } else {
      *reinterpret_cast<float4*>(dst) =
          make_float4(o[rr][0] * inv, o[rr][1] * inv, o[rr][2] * inv, o[rr][3] * inv);
    }
    if (lane == 0) p.lse_part[part_row0 + r] = empty ? -INFINITY : (m[rr] + log2f(lsum)) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------------
// The combine kernel: one warp per row, the splits' partials merged by combine_row()
// (combine.cuh, the rescale written once for this step and step 13's ring). An empty split
// (L_s = −inf) weighs 0 and its O_s is never read. A row whose every split is empty cannot
// occur (query i always sees key 0) but would give O = 0, L = −inf.
// ---------------------------------------------------------------------------------------------
template <int kHeadDim, class Element>
__global__ void __launch_bounds__(32 * kCombineRowsPerBlock)
    decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kCols = kHeadDim / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows_all = int64_t{p.batch} * p.heads_q * p.q_len;
  const int64_t row = int64_t{blockIdx.x} * kCombineRowsPerBlock + warp;  // (b·H_q + h)·q_len + i
  if (row >= rows_all) return;
  // Split s of the row: L at lse_part[s · rows_all + row], O at o_part[(s · rows_all + row) · d].
  float acc[kCols];
  const float lse =
      combine_row<kHeadDim, float>(p.num_splits, p.lse_part + row, rows_all,
                                   p.o_part + row * kHeadDim, rows_all * kHeadDim, acc);

  const int i = static_cast<int>(row % p.q_len);
  const int64_t bh = row / p.q_len;  // b·H_q + h
  const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
  Element* o = static_cast<Element*>(p.o) +
               ((int64_t{b} * p.q_len + i) * p.heads_q + h) * kHeadDim + lane * kCols;
  store_cols<Element, kCols>(o, acc);
  if (lane == 0) p.lse[row] = lse;
}

// ---------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------
/// \brief Launches `attend` (an attention kernel of Traits' block and shared memory) over the
/// grid (num_splits, H_kv · row chunks, B), then the combine kernel.
/// \param attend the kernel \param p the parameters \param stream the stream
template <class Traits, class Element>
void launch_attend_combine(void (*attend)(DecodeParams), const DecodeParams& p,
                           cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(attend, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Traits::kSmemBytes)));
  const dim3 grid(p.num_splits, p.heads_kv * p.row_chunks, p.batch);
  attend<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();

  const long long rows_all = static_cast<long long>(p.batch) * p.heads_q * p.q_len;
  const unsigned blocks =
      static_cast<unsigned>((rows_all + kCombineRowsPerBlock - 1) / kCombineRowsPerBlock);
  decode_combine_kernel<Traits::kHeadDim, Element>
      <<<blocks, 32 * kCombineRowsPerBlock, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_attend_combine(const DecodeParams& p, cudaStream_t stream) {
  using Traits = DecodeTraits<kHeadDim>;
  launch_attend_combine<Traits, Element>(decode_attention_kernel<Traits, Element>, p, stream);
}

}  // namespace fa::step12
