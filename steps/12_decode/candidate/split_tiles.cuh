// split_tiles.cuh — what step 12's two candidate kernels (decode_kernel_v2.cuh on the CUDA
// cores, decode_kernel_mma.cuh on the tensor cores) share: a split's run of tiles, and the copy
// of one tile of K and V into shared memory with cp.async.
#pragma once

#include "../decode_kernel.cuh"  // cache_row, kv_len_of, the cp.async helpers

namespace fa::step12 {

/// \brief cp_async_16 asking L2 to fetch kL2Bytes (128 or 256) aligned bytes around the chunk
/// from HBM at once (cp.async's prefetch-size qualifier .L2::128B / .L2::256B, sm_80), instead
/// of the sectors the request touches; 0: cp_async_16 itself.
template <int kL2Bytes>
__device__ __forceinline__ void cp_async_16_l2(uint32_t smem_addr, const void* gmem, bool valid) {
  static_assert(kL2Bytes == 0 || kL2Bytes == 128 || kL2Bytes == 256, "an L2 prefetch size");
  if constexpr (kL2Bytes == 0) {
    cp_async_16(smem_addr, gmem, valid);
  } else {
    const int src_bytes = valid ? 16 : 0;
    if constexpr (kL2Bytes == 128)
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr),
                   "l"(gmem), "r"(src_bytes)
                   : "memory");
    else
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_addr),
                   "l"(gmem), "r"(src_bytes)
                   : "memory");
  }
}

/// \brief A block's part of sequence b's keys: tiles [t_begin, t_end) of kN keys (the chapter's
/// rule, ⌈tiles / num_splits⌉ each), keys at or past key_end not attended to.
struct SplitTiles {
  int cache_len;  ///< keys cached before the step
  int t_begin;    ///< the split's first tile
  int t_end;      ///< one past its last (t_begin >= t_end: an empty split)
  int key_end;    ///< one past its last key
};

template <int kN>
__device__ __forceinline__ SplitTiles split_tiles(const DecodeParams& p, int b, int split) {
  SplitTiles s;
  s.cache_len = p.cache_lens[b];
  const int kv_len = kv_len_of(p, s.cache_len);
  const int n_tiles = (kv_len + kN - 1) / kN;
  const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  s.t_begin = split * per_split;
  s.t_end = min(n_tiles, s.t_begin + per_split);
  s.key_end = min(s.t_end * kN, kv_len);
  return s;
}

/// \brief Element offset of 16-byte chunk c of row `key` of a K or V tile in shared memory:
/// rows of kStride elements, chunk c at c ^ (key % 8) with kSwizzle; with kPanelRows > 0, the
/// TMA's layout (decode_kernel_mma.cuh, DecodeTraitsMma::kTma): d / 64 panels of kPanelRows
/// rows of 64 elements, chunk c in panel c / 8 at (c % 8) ^ (key % 8).
template <int kStride, bool kSwizzle, int kPanelRows>
__device__ __forceinline__ int tile_chunk(int key, int c) {
  if constexpr (kPanelRows > 0) {
    return (c / 8) * kPanelRows * 64 + key * 64 + ((c % 8) ^ (key % 8)) * 8;
  } else {
    return key * kStride + (kSwizzle ? c ^ (key % 8) : c) * 8;
  }
}

/// \brief Tile `tile` of K/V head g of sequence b into sK and sV ([kN][kStride] Elements each):
/// thread threadIdx.x copies chunks threadIdx.x, + kThreads, … (16 bytes each, cp.async). Keys
/// at or past key_end, and rows the cache does not hold, are zero-filled, as in the chapter's
/// kernel. A tile lies in one page when the page size is a multiple of kN (tiles start at
/// multiples of kN): then its rows follow its first row, one block-table lookup per tile.
/// kSwizzle: the rows unpadded (kStride == kD) with chunk c of row `key` stored at chunk
/// c ^ (key % 8), instead of padded rows.
/// kTileTable: when pages are smaller than a tile and divide it (16 or 32 rows at kN = 64), the
/// tile's kN / page_size block-table entries are read once per tile, by the first lanes of each
/// warp, and every chunk's page comes from them by a shuffle, instead of a cache_row() (a
/// dependent read of the table, a division, its checks) per chunk. The same rows and the same
/// checks as cache_row(): a position past key_end or the capacity, a column outside the table,
/// an entry outside the pool: a zero row, nothing read outside the table or the pool.
/// kL2Bytes: the copies' L2 prefetch size (cp_async_16_l2), 0 for none.
/// kPanelRows: the tile in the TMA's panels (tile_chunk), 0: rows of kStride.
/// kTileBase: a tile whose keys are all attended to and lie in one page (or in the contiguous
/// cache) is copied from one base address per thread: a thread copies the same chunk c of
/// rows key, key + kThreads / kChunks, …, which lie a fixed stride apart in the cache and in
/// shared memory, so each copy costs an address addition instead of the per-chunk row, checks
/// and selects of the general path (m3w4sp's kernel executes about 30 integer and branch
/// instructions per cp.async in Nsight Compute's count, most of them, we read, this path's).
/// Any other tile takes the general path.
template <int kD, int kN, int kStride, int kThreads, bool kSwizzle = false, bool kTileTable = false,
          int kL2Bytes = 0, bool kTileBase = false, int kPanelRows = 0, class Element>
__device__ __forceinline__ void load_tile_async(const DecodeParams& p, int b, int g, int tile,
                                                int key_end, Element* sK, Element* sV) {
  constexpr int kChunks = kD / 8;
  static_assert(!kSwizzle || (kStride == kD && kChunks % 8 == 0), "swizzled rows are unpadded");
  static_assert(kPanelRows == 0 || (kSwizzle && kPanelRows == kN), "the panels hold the tile");
  const Element* k_cache = static_cast<const Element*>(p.k_cache);
  const Element* v_cache = static_cast<const Element*>(p.v_cache);
  const int64_t row_elems = int64_t{p.heads_kv} * kD;
  const bool tile_in_page = !p.paged || p.page_size % kN == 0;
  const int pos0 = tile * kN;
  if constexpr (kTileTable) {
    static_assert((kN & (kN - 1)) == 0, "a page that divides the tile is a power of two");
    static_assert((kN * kChunks) % kThreads == 0 && kThreads % 32 == 0,
                  "every lane copies as many chunks: the shuffles need the whole warp");
    const int ps = p.page_size;
    // Pages of 16 or 32 rows at kN = 64 (at most 32 entries a tile, one per lane); any other
    // size takes the path below.
    if (!tile_in_page && ps > 0 && ps < kN && kN % ps == 0 && kN / ps <= 32) {
      const int shift = __ffs(ps) - 1;  // ps = 2^shift
      const int lane = threadIdx.x % 32;
      // Lane j < kN / ps: column pos0 / ps + j of the table, as the first pool row of its page
      // (entry · page_size), or −1: a column outside the table (table_entry: never read), an
      // entry outside the pool, or a page wholly past key_end (never read, as cache_row is
      // never called there). A pool row fits an int: validate() keeps num_pages · page_size
      // <= 2^31 (DecodeLimits::kMaxPoolRows); the element offset below is 64-bit.
      int page_row = -1;
      if (lane < (kN >> shift) && pos0 + (lane << shift) < key_end) {
        const int page = table_entry(p, b, (pos0 >> shift) + lane);
        if (page >= 0 && page < p.num_pages) page_row = page * ps;
      }
      // A count known at compile time: every lane runs every shuffle. Unrolled by 4, not 8:
      // fully unrolled, ptxas gives the kernel 224 registers instead of m3w4s's 166.
#pragma unroll 4
      for (int i = 0; i < kN * kChunks / kThreads; ++i) {
        const int x = threadIdx.x + i * kThreads;
        const int key = x / kChunks, c = x % kChunks;
        const int pos = pos0 + key;  // >= 0
        const int first = __shfl_sync(0xffffffffu, page_row, key >> shift);
        // cache_row's checks: pos inside the capacity, the entry inside the pool (the slot,
        // pos mod ps, lies in [0, ps) by construction); and pos < key_end as above.
        const bool ok = pos < key_end && pos < p.capacity && first >= 0;
        const int64_t src =
            ok ? int64_t{first + (pos & (ps - 1))} * row_elems + int64_t{g} * kD + c * 8 : 0;
        const int dst = tile_chunk<kStride, kSwizzle, kPanelRows>(key, c);
        cp_async_16_l2<kL2Bytes>(smem_u32(sK + dst), k_cache + src, ok);
        cp_async_16_l2<kL2Bytes>(smem_u32(sV + dst), v_cache + src, ok);
      }
      return;
    }
  }
  const int64_t first = tile_in_page ? cache_row(p, b, pos0) : -1;
  if constexpr (kTileBase) {
    if (first >= 0 && pos0 + kN <= key_end) {
      static_assert(kThreads % kChunks == 0, "a thread copies one chunk column of the tile");
      static_assert(sizeof(Element) == 2, "16-byte chunks of 8 elements");
      constexpr int kRowsPerPass = kThreads / kChunks;
      static_assert(kN % kRowsPerPass == 0, "every row of the tile copied");
      static_assert(!kSwizzle || kRowsPerPass % 8 == 0,
                    "the swizzle's key % 8, hence the chunk's place, the same in every pass");
      const int key = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
      const int64_t src = first + key * row_elems + int64_t{g} * kD + c * 8;
      const int64_t step = kRowsPerPass * row_elems;  // elements between a thread's rows
      const uint32_t dst = static_cast<uint32_t>(tile_chunk<kStride, kSwizzle, kPanelRows>(key, c) *
                                                 sizeof(Element));
      const uint32_t k_dst = smem_u32(sK) + dst, v_dst = smem_u32(sV) + dst;
      constexpr uint32_t kDstStep =
          kRowsPerPass * (kPanelRows > 0 ? 64 : kStride) * sizeof(Element);  // bytes
#pragma unroll
      for (int i = 0; i < kN / kRowsPerPass; ++i) {
        cp_async_16_l2<kL2Bytes>(k_dst + i * kDstStep, k_cache + src + i * step, true);
        cp_async_16_l2<kL2Bytes>(v_dst + i * kDstStep, v_cache + src + i * step, true);
      }
      return;
    }
  }
#pragma unroll
  for (int x = threadIdx.x; x < kN * kChunks; x += kThreads) {
    const int key = x / kChunks, c = x % kChunks;
    const int pos = pos0 + key;
    int64_t row = -1;
    if (pos < key_end)
      row = tile_in_page ? (first < 0 ? -1 : first + key * row_elems) : cache_row(p, b, pos);
    const bool ok = row >= 0;
    const int64_t src = ok ? row + int64_t{g} * kD + c * 8 : 0;
    const int dst = tile_chunk<kStride, kSwizzle, kPanelRows>(key, c);
    cp_async_16_l2<kL2Bytes>(smem_u32(sK + dst), k_cache + src, ok);
    cp_async_16_l2<kL2Bytes>(smem_u32(sV + dst), v_cache + src, ok);
  }
}

/// \brief Tile `tile` of K/V heads g0 … g0 + kHeads − 1 of sequence b (kN / kHeads positions of
/// each) into sK and sV, head-major: head h's row for the tile's position i is row
/// h · (kN / kHeads) + i of the [kN][kStride] stage, so that a warp's 16 rows are one head's 16
/// positions, as with one head per block. Thread x copies 16-byte chunk x % (kHeads · d / 8) of
/// a position's kHeads rows, which lie side by side in the cache: kHeads · 2 · d contiguous
/// bytes per position instead of 2 · d. Heads at or past heads_kv and keys at or past key_end
/// are zero-filled and read nothing. A tile whose keys are all attended to, in one page (or the
/// contiguous cache), with every head present, is copied from one base address per thread plus
/// a fixed stride, as kTileBase does for one head.
/// kFixedRows: thread x copies chunk x % (d / 8) of positions x / (d / 8) + 8s of every head
/// instead, so that its rows in shared memory keep one row % 8, hence one swizzled chunk, and
/// its copies differ by offsets known at compile time (one 16-byte chunk of 8 positions and one
/// head per instruction of the block; a position's kHeads rows from a few instructions apart).
/// With kHeads > 1 the kernel copies only through this function: its own whole-tile path
/// stands in for kTileBase, and kTileTable and kL2Bytes do not apply.
template <int kD, int kN, int kStride, int kThreads, bool kSwizzle, int kHeads,
          bool kFixedRows = false, class Element>
__device__ __forceinline__ void load_tile_heads_async(const DecodeParams& p, int b, int g0,
                                                      int tile, int key_end, Element* sK,
                                                      Element* sV) {
  constexpr int kChunks = kD / 8;
  constexpr int kKeys = kN / kHeads;          // positions per tile
  constexpr int kWide = kHeads * kChunks;     // chunks of one position's kHeads rows
  constexpr int kPerPass = kThreads / kWide;  // positions per pass of the block
  static_assert(kThreads % kWide == 0 && kKeys % kPerPass == 0, "every position copied");
  static_assert(sizeof(Element) == 2, "16-byte chunks of 8 elements");
  const Element* k_cache = static_cast<const Element*>(p.k_cache);
  const Element* v_cache = static_cast<const Element*>(p.v_cache);
  const int64_t row_elems = int64_t{p.heads_kv} * kD;
  const bool tile_in_page = !p.paged || p.page_size % kKeys == 0;
  const int pos0 = tile * kKeys;
  const int64_t first = tile_in_page ? cache_row(p, b, pos0) : -1;
  // This thread's chunk of a position: head h, chunk c; its first position i0.
  const int i0 = threadIdx.x / kWide, h = (threadIdx.x / kChunks) % kHeads,
            c = threadIdx.x % kChunks;
  auto dst_of = [&](int i) {  // bytes into the stage
    const int row = h * kKeys + i;
    return static_cast<uint32_t>((row * kStride + (kSwizzle ? c ^ (row % 8) : c) * 8) *
                                 sizeof(Element));
  };
  const uint32_t k_smem = smem_u32(sK), v_smem = smem_u32(sV);
  if constexpr (kFixedRows) {
    constexpr int kPositions = kThreads / kChunks;  // positions per pass: 8 at d = 128
    static_assert(
        kThreads % kChunks == 0 && kKeys % kPositions == 0 && (!kSwizzle || kPositions % 8 == 0),
        "a thread's rows keep one row % 8");
    const int pi = threadIdx.x / kChunks, ci = threadIdx.x % kChunks;
    const uint32_t dst0 = static_cast<uint32_t>(
        (pi * kStride + (kSwizzle ? ci ^ (pi % 8) : ci) * 8) * sizeof(Element));
    constexpr uint32_t kRowBytes = kStride * sizeof(Element);
    if (first >= 0 && pos0 + kKeys <= key_end && g0 + kHeads <= p.heads_kv) {
      const int64_t src0 = first + pi * row_elems + int64_t{g0} * kD + ci * 8;
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh)
#pragma unroll
        for (int j = 0; j < kKeys / kPositions; ++j) {
          const int64_t src = src0 + j * kPositions * row_elems + hh * kD;
          const uint32_t dst = dst0 + (hh * kKeys + j * kPositions) * kRowBytes;
          cp_async_16(k_smem + dst, k_cache + src, true);
          cp_async_16(v_smem + dst, v_cache + src, true);
        }
      return;
    }
#pragma unroll
    for (int hh = 0; hh < kHeads; ++hh)
#pragma unroll
      for (int j = 0; j < kKeys / kPositions; ++j) {
        const int i = pi + j * kPositions, pos = pos0 + i;
        int64_t row = -1;
        if (pos < key_end && g0 + hh < p.heads_kv)
          row = tile_in_page ? (first < 0 ? -1 : first + i * row_elems) : cache_row(p, b, pos);
        const bool ok = row >= 0;
        const int64_t src = ok ? row + int64_t{g0 + hh} * kD + ci * 8 : 0;
        const uint32_t dst = dst0 + (hh * kKeys + j * kPositions) * kRowBytes;
        cp_async_16(k_smem + dst, k_cache + src, ok);
        cp_async_16(v_smem + dst, v_cache + src, ok);
      }
    return;
  }
  if (first >= 0 && pos0 + kKeys <= key_end && g0 + kHeads <= p.heads_kv) {
    const int64_t src = first + i0 * row_elems + int64_t{g0 + h} * kD + c * 8;
    const int64_t step = kPerPass * row_elems;
#pragma unroll
    for (int j = 0; j < kKeys / kPerPass; ++j) {
      const uint32_t dst = dst_of(i0 + j * kPerPass);
      cp_async_16(k_smem + dst, k_cache + src + j * step, true);
      cp_async_16(v_smem + dst, v_cache + src + j * step, true);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kKeys / kPerPass; ++j) {
    const int i = i0 + j * kPerPass, pos = pos0 + i;
    int64_t row = -1;
    if (pos < key_end && g0 + h < p.heads_kv)
      row = tile_in_page ? (first < 0 ? -1 : first + i * row_elems) : cache_row(p, b, pos);
    const bool ok = row >= 0;
    const int64_t src = ok ? row + int64_t{g0 + h} * kD + c * 8 : 0;
    const uint32_t dst = dst_of(i);
    cp_async_16(k_smem + dst, k_cache + src, ok);
    cp_async_16(v_smem + dst, v_cache + src, ok);
  }
}

}  // namespace fa::step12
