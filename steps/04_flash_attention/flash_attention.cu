// Step 04 — FlashAttention: one fused kernel, S never leaves the chip.
//
// What changed since step 03: step 03 fused the softmax with P V, but S = scale · Q Kᵀ still
// came from a separate kernel (step 02's tiled scores_kernel) and made a round trip through
// device memory (HBM): written once, read once, N_q × N_kv floats per head. Now the scores are
// computed inside the same kernel, tile by tile, and consumed where they are computed. One
// thread block owns kBlockM query rows from start to finish:
//
//   load Qᵀ tile into shared memory                       (once)
//   for each K/V tile of kBlockN keys the block can see:
//     Kᵀ, V tiles → shared memory                        (float4 loads → registers → shared)
//     barrier 1                                           (Qᵀ, Kᵀ, V complete)
//     S  = Q Kᵀ          kBlockM × kBlockN, in registers  (never written anywhere)
//     online softmax:    m, ℓ in registers, S → P in place, O rescaled by α
//     Pᵀ → shared memory (on chip)
//     barrier 2                                           (Pᵀ complete)
//     O += P V                                            O accumulator in registers
//     barrier 3                                           (Kᵀ, V, Pᵀ free for the next tile)
//   O = O / ℓ, L = m + log ℓ → HBM                        (the only writes)
//
// The loads are plain and synchronous, like step 03's: the block waits for each tile before
// it computes on it, and the three barriers are step 03's three with S computed instead of
// read.
//
// Both matrix products are register-blocked like a good SGEMM (see outer_product_mma): each
// thread accumulates a small 8 × 4 or 8 × 8 block of S or O from float4 shared-memory reads,
// so most issued instructions are FFMAs. Everything is fp32 on CUDA cores — no tensor cores,
// no TF32 — so results match the fp32 steps before it up to summation order.
//
// What it costs in memory traffic: no N×N bytes at all — step 03 still wrote and read 8 bytes
// per score, 2 GiB for N = 4096, B·H = 16, against 16 MiB each for Q, K, V and O at d = 64.
// Q is read once and O, L are written once. K and V are read once per query block, i.e.
// ⌈N_q / kBlockM⌉ times per head, 2 · N_kv · d · 4 bytes each time; the blocks of one head run
// side by side, so after the first these are L2 hits: kBlockM / 2 FLOPs per byte from L2
// (32 at kBlockM = 64). No workspace.
//
// Build and run:
//   cmake --build build --target 04_flash_attention && build/bin/04_flash_attention --n 4096
//   (compile alone: nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Icommon
//                   -Xptxas -v -c steps/04_flash_attention/flash_attention.cu)
//
// Not yet: tensor cores and half precision (later steps); overlapping the loads with compute:
// step 07's pipeline; head dims are limited to the tuned set {16, 32, 64, 128} (256 would not
// fit two blocks per SM at these tile sizes); no backward pass.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "mask.cuh"
#include "online_softmax.cuh"

namespace fa::step04 {
namespace {

/// Shapes and strides the kernel needs, by value (a kernel argument).
struct Params {
  int n_q, n_kv, heads_q, group;  // group = H_q / H_kv query heads per K/V head
  Strides qs, kvs;                // element strides of Q/O and of K/V
  float scale_log2;               // softmax scale · log2(e), see online_softmax.cuh
};

// ---------------------------------------------------------------------------------------------
// Tile configuration and who owns what.
//
// A block of kNumThreads threads is viewed as kRowGroups × kColThreads. Thread t is in row
// group rg = t / kColThreads and column lane cl = t % kColThreads, so the kColThreads lanes
// of a row group are consecutive lanes of ONE warp: the softmax row reductions are a few
// __shfl_xor_sync, no shared memory, no barrier.
//
// Rows and columns are handed out in quads of 4 (one float4), interleaved so that the lanes of
// a warp read consecutive float4s from shared memory. For d = 128 (kBlockM = kBlockN = 64,
// 128 threads = 8 row groups × 16 column lanes), each entry (rg,cl) below is a 4 × 4 block
// held in the registers of thread 16·rg + cl:
//
//                 S tile 64 × 64                      O tile 64 × 128
//               keys 0-3  4-7  …  60-63         dims 0-3  4-7 … 60-63 | 64-67 … 124-127
//   rows  0- 3   (0,0)  (0,1)  …  (0,15)             (0,0) (0,1) … (0,15) | (0,0) … (0,15)
//   rows  4- 7   (1,0)  (1,1)  …  (1,15)             (1,0) (1,1) … (1,15) | (1,0) … (1,15)
//     …
//   rows 28-31   (7,0)    …       (7,15)             (7,0)   …     (7,15) | (7,0) … (7,15)
//   rows 32-35   (0,0)    …       (0,15)    ← the second row quad of the same threads
//     …
//   rows 60-63   (7,0)    …       (7,15)             (7,0)   …     (7,15) | (7,0) … (7,15)
//
// So a thread holds an 8 × 4 block of S and an 8 × 8 block of O; warp 0 is row groups 0 and 1
// (lanes 0-15 and 16-31), warp 1 is row groups 2 and 3, and so on.
//
// Thread (rg, cl) owns query rows {4·rg … 4·rg+3} ∪ {32 + 4·rg …} in BOTH tiles, so the row
// max, α and ℓ it computes for S apply directly to its rows of O.
//
// Why these sizes (H200: 228 KB shared memory and 64 K registers per SM, 227 KB per block):
//   * Register blocking sets the arithmetic intensity of shared memory. Per step of the inner
//     loop a thread loads kRowsPerThread/4 + kColsPerThread/4 float4s and issues
//     kRowsPerThread · kColsPerThread FFMAs: 3 loads per 32 FFMAs at 8 × 4, 4 per 64 at 8 × 8
//     (the shape of a fast SGEMM). Bigger blocks need more registers than we have: a thread
//     holds its O block (64 floats), its S block (32-64) and the operands at once.
//   * 128 threads, __launch_bounds__(128, 2): two blocks per SM may use 255 registers each
//     thread (64 K / 256 threads). 8 warps per SM is few, so the inner loops are unrolled
//     for instruction-level parallelism instead (as in SGEMM).
//   * Shared memory decides the rest. d = 128: Qᵀ 32 KB + Kᵀ 32 KB + V 32 KB + Pᵀ 16 KB =
//     112 KB, two blocks per SM (2 × (112 + 1 reserved) = 226 ≤ 228 KB). kBlockM = 128 would
//     double the O registers (128) and kBlockN = 32 would halve the S block to 8 × 2, which
//     no longer reads float4s. d = 64: kBlockM = 128 gives the 8 × 8 blocks for both products
//     at 97 KB (two per SM) and halves the K/V traffic per FLOP. d = 32 and 16 reuse that
//     shape with thinner O blocks (they are not the performance targets).
// ---------------------------------------------------------------------------------------------
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, int kColThreads_, int kPtPad_>
struct Config {
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kBlockM = kBlockM_;    // query rows per block (Q, O tile rows)
  static constexpr int kBlockN = kBlockN_;    // keys per K/V tile (S tile columns)
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kMinBlocksPerSm = 2;         // for __launch_bounds__: 255 registers
  static constexpr int kColThreads = kColThreads_;  // lanes sharing a row
  static constexpr int kRowGroups = kNumThreads / kColThreads;
  static constexpr int kRowsPerThread = kBlockM / kRowGroups;    // rows of S and O
  static constexpr int kColsPerThread = kBlockN / kColThreads;   // columns (keys) of S
  static constexpr int kDimsPerThread = kHeadDim / kColThreads;  // columns (dims) of O
  // Pᵀ rows are padded by kPtPad floats. Unpadded, every key row of Pᵀ starts at bank 0, and
  // the 32 lanes of one P store (float4 of 4 rows, one key per lane) land on only as many
  // bank groups as the warp has row groups: 8 or 16 wavefronts instead of the minimum 4.
  // A pad of 4 makes them conflict-free (d ≤ 64). It costs 1 KB, which d = 128 can only just
  // spare: 2 × (113 + 1 reserved) KB is exactly the 228 KB of an SM, no margin at all. So
  // d = 128 stays unpadded and its 8 stores per tile take 16 wavefronts each (a pad would
  // make it 8), about 7% more shared-memory traffic, outside the FFMA loops.
  static constexpr int kPtStride = kBlockM + kPtPad_;

  // Shared memory, in floats. All four tiles start at multiples of 16 bytes.
  static constexpr int kQtFloats = kHeadDim * kBlockM;   // Qᵀ [kHeadDim][kBlockM]
  static constexpr int kKtFloats = kHeadDim * kBlockN;   // Kᵀ [kHeadDim][kBlockN]
  static constexpr int kVFloats = kBlockN * kHeadDim;    // V  [kBlockN][kHeadDim]
  static constexpr int kPtFloats = kBlockN * kPtStride;  // Pᵀ [kBlockN][kPtStride]
  static constexpr std::size_t kSmemBytes =
      sizeof(float) * (kQtFloats + kKtFloats + kVFloats + kPtFloats);

  static_assert(32 % kColThreads == 0, "a row group must not straddle two warps");
  static_assert(kRowsPerThread % 4 == 0 && kColsPerThread % 4 == 0 && kDimsPerThread % 4 == 0,
                "threads own whole float4 quads of rows, keys and dims");
  static_assert(kRowGroups * kRowsPerThread == kBlockM, "rows must split evenly");
  static_assert(kPtStride % 4 == 0, "Pᵀ rows must stay 16-byte aligned");

  /// Tile row (query) of the thread's r-th row, r < kRowsPerThread.
  __device__ static constexpr int row_of(int rg, int r) {
    return ((r / 4) * kRowGroups + rg) * 4 + r % 4;
  }
  /// Tile column (key) of the thread's c-th column of S, c < kColsPerThread.
  __device__ static constexpr int col_of(int cl, int c) {
    return ((c / 4) * kColThreads + cl) * 4 + c % 4;
  }
  /// Head-dim index of the thread's c-th column of O, c < kDimsPerThread.
  __device__ static constexpr int dim_of(int cl, int c) {
    return ((c / 4) * kColThreads + cl) * 4 + c % 4;
  }
};

//                      d   kBlockM kBlockN warps lanes/row pad   S block  O block  smem
using ConfigD16 = Config<16, 128, 64, 4, 4, 4>;    //            4 × 16   4 × 4    50 KB
using ConfigD32 = Config<32, 128, 64, 4, 8, 4>;    //            8 × 8    8 × 4    65 KB
using ConfigD64 = Config<64, 128, 64, 4, 8, 4>;    //            8 × 8    8 × 8    97 KB
using ConfigD128 = Config<128, 64, 64, 4, 16, 0>;  //            8 × 4    8 × 8   112 KB

// ---------------------------------------------------------------------------------------------
// Moving tiles into shared memory.
// ---------------------------------------------------------------------------------------------

/// \brief V tile [kBlockN][kHeadDim] ← rows [0, kBlockN) of `tile` (row stride in elements),
/// zero rows at and past `valid_rows`. Consecutive threads copy consecutive 16-byte chunks of
/// a row: coalesced reads, conflict-free shared writes. Each pass is a float4 load into
/// registers and a float4 store; the loop is unrolled, so the loads of several passes can be
/// in flight before the first store waits.
template <class Cfg>
__device__ __forceinline__ void load_v(float* sV, const float* tile, std::int64_t row_stride,
                                       int valid_rows) {
  constexpr int kChunksPerRow = Cfg::kHeadDim / 4;
  constexpr int kRowsPerPass = Cfg::kNumThreads / kChunksPerRow;
  constexpr int kPasses = Cfg::kBlockN / kRowsPerPass;
  static_assert(Cfg::kNumThreads % kChunksPerRow == 0 && Cfg::kBlockN % kRowsPerPass == 0, "");
  const int row = threadIdx.x / kChunksPerRow, chunk = threadIdx.x % kChunksPerRow;
  const float* src = tile + row * row_stride + chunk * 4;
  const std::int64_t pass_stride = kRowsPerPass * row_stride;
  const int rows_left = valid_rows - row;
  float4* dst = reinterpret_cast<float4*>(sV + row * Cfg::kHeadDim + chunk * 4);
#pragma unroll
  for (int i = 0; i < kPasses; ++i)  // a row past the end is not read: it is stored as zeros
    dst[i * kRowsPerPass * Cfg::kHeadDim / 4] =
        i * kRowsPerPass < rows_left ? *reinterpret_cast<const float4*>(src + i * pass_stride)
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
}

/// \brief Loads a [kRows][kHeadDim] tile from global memory into registers and stores it
/// transposed, as [kHeadDim][kRows], into shared memory. load() issues all of a thread's loads
/// before store() waits for the first of them, so they are in flight together.
// TUTORIAL: why transpose? The matrix products read "one value of k for each of my rows/keys"
// every step. In a [d][rows] layout those values are contiguous, so a thread fetches four of
// them with one 16-byte load, and the lanes of a warp read consecutive float4s — no bank
// conflicts and no padding. The transposing happens once per tile; every value stored is then
// read by every row group (Kᵀ) or column lane (Qᵀ) of the block.
//
// The unit of work is a 4 × 4 block: 4 consecutive rows × one 16-byte chunk. A thread loads
// the 4 rows' chunk (4 float4 loads) and now holds the block; its transpose is free — it is
// only a different way to group the same 16 registers — and goes out as 4 float4 stores, one
// per column. Lanes are laid out 8 row-quads × 4 chunks per warp:
//   loads:  8 rows × 64 contiguous bytes per instruction (8 cache lines, whole sectors);
//   stores: 8 different row-quads × 4 columns — the 8 row-quads fill all 32 banks, so each
//           store instruction takes the minimum 4 shared-memory wavefronts.
// (One thread per row with 16-byte loads would touch 32 cache lines per instruction.)
template <class Cfg, int kRows>
struct TransposedTileLoader {
  static constexpr int kChunks = Cfg::kHeadDim / 4;                    // 16-byte chunks in one row
  static constexpr int kRowQuadGroups = kRows / 32;                    // groups of 8 row-quads
  static constexpr int kChunkGroups = kChunks / 4;                     // groups of 4 chunks
  static constexpr int kWarpStride = Cfg::kNumWarps / kRowQuadGroups;  // chunk groups per pass
  static constexpr int kUnitsPerThread = (kChunkGroups + kWarpStride - 1) / kWarpStride;
  static_assert(kRows % 32 == 0 && kChunks % 4 == 0, "whole 8 × 4 lane patterns");
  static_assert(Cfg::kNumWarps % kRowQuadGroups == 0, "each warp keeps one row-quad group");

  float4 regs[kUnitsPerThread][4];  // [unit][row within the quad]: one 4 × 4 block per unit

  // This thread's blocks: rows 4·row_quad() … +3, chunks chunk(0), chunk(1), …
  __device__ __forceinline__ static int warp() { return threadIdx.x / 32; }
  __device__ __forceinline__ static int row_quad() {
    return (warp() % kRowQuadGroups) * 8 + threadIdx.x % 8;
  }
  __device__ __forceinline__ static int chunk(int unit) {
    return (warp() / kRowQuadGroups + unit * kWarpStride) * 4 + (threadIdx.x % 32) / 8;
  }
  // Small heads (d = 16) have fewer blocks than threads: the surplus warps sit out.
  static constexpr bool kAllActive = kChunkGroups % kWarpStride == 0;
  __device__ __forceinline__ static bool active(int unit) {
    return kAllActive || warp() / kRowQuadGroups + unit * kWarpStride < kChunkGroups;
  }

  /// \param tile        the tile's first row in global memory
  /// \param row_stride  elements between rows
  /// \param valid_rows  rows at and past this are zero-filled (the ragged tail), ≥ 1
  __device__ __forceinline__ void load(const float* tile, std::int64_t row_stride, int valid_rows) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // A row past the end reads the last valid row instead (always in bounds) and is then
      // zeroed: no branch around the loads, so all of them are in flight at once.
      const int row = 4 * row_quad() + r;
      const bool valid = row < valid_rows;
      const float* src = tile + (valid ? row : valid_rows - 1) * row_stride + chunk(0) * 4;
#pragma unroll
      for (int u = 0; u < kUnitsPerThread; ++u) {
        if (!active(u)) continue;
        const float4 x = *reinterpret_cast<const float4*>(src + u * kWarpStride * 16);  // chunk(u)
        regs[u][r] = valid ? x : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }

  /// \param dst  [kHeadDim][kRows] in shared memory
  __device__ __forceinline__ void store(float* dst) const {
#pragma unroll
    for (int u = 0; u < kUnitsPerThread; ++u) {
      if (!active(u)) continue;
      // In float4 units: column 4·chunk(u) + e of Qᵀ/Kᵀ, rows 4·row_quad() … +3.
      float4* col = reinterpret_cast<float4*>(dst) + chunk(u) * kRows + row_quad();
      const float4(&b)[4] = regs[u];
      col[0 * kRows / 4] = make_float4(b[0].x, b[1].x, b[2].x, b[3].x);
      col[1 * kRows / 4] = make_float4(b[0].y, b[1].y, b[2].y, b[3].y);
      col[2 * kRows / 4] = make_float4(b[0].z, b[1].z, b[2].z, b[3].z);
      col[3 * kRows / 4] = make_float4(b[0].w, b[1].w, b[2].w, b[3].w);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The register-blocked matrix product, used for both S = Q Kᵀ and O += P V.
// ---------------------------------------------------------------------------------------------

/// \brief acc[r][c] += Σ_{k < kDepth} A[k][row r] · B[k][col c], both operands in shared memory
/// with the reduction index outermost: A is [kDepth][kStrideA], B is [kDepth][kStrideB].
/// The thread's rows are quads (q · kThreadsA + ta) · 4 + 0..3, its columns likewise with tb.
///   S = Q Kᵀ:  A = Qᵀ [d][kBlockM],  B = Kᵀ [d][kBlockN],  reduction over d
///   O += P V:  A = Pᵀ [kBlockN][·],  B = V  [kBlockN][d],  reduction over keys
// TUTORIAL: this is an outer product per step k: kRows values of A times kCols values of B
// give kRows·kCols FFMAs from (kRows + kCols)/4 float4 loads. All indices into acc, a and b
// are compile-time constants after unrolling, so the arrays live in registers. The k loop is
// unrolled by 8, not fully: a fully unrolled d = 128 loop is ~70 KB of code, bigger than the
// instruction caches; 8 steps give the scheduler enough independent loads and FFMAs.
template <int kDepth, int kStrideA, int kStrideB, int kThreadsA, int kThreadsB, int kRows,
          int kCols>
__device__ __forceinline__ void outer_product_mma(float (&acc)[kRows][kCols],
                                                  const float* __restrict__ a,
                                                  const float* __restrict__ b, int ta, int tb) {
  a += ta * 4;
  b += tb * 4;
#pragma unroll 8
  for (int k = 0; k < kDepth; ++k) {
    float ra[kRows], rb[kCols];
#pragma unroll
    for (int q = 0; q < kRows / 4; ++q) {
      const float4 x = *reinterpret_cast<const float4*>(a + k * kStrideA + q * kThreadsA * 4);
      ra[4 * q + 0] = x.x;
      ra[4 * q + 1] = x.y;
      ra[4 * q + 2] = x.z;
      ra[4 * q + 3] = x.w;
    }
#pragma unroll
    for (int q = 0; q < kCols / 4; ++q) {
      const float4 x = *reinterpret_cast<const float4*>(b + k * kStrideB + q * kThreadsB * 4);
      rb[4 * q + 0] = x.x;
      rb[4 * q + 1] = x.y;
      rb[4 * q + 2] = x.z;
      rb[4 * q + 3] = x.w;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] = fmaf(ra[r], rb[c], acc[r][c]);
  }
}

/// \brief Pᵀ[key][row] ← this thread's block of P (its rows × its keys), one float4 of 4
/// consecutive rows per store.
template <class Cfg>
__device__ __forceinline__ void store_pt(float* sPt,
                                         const float (&p)[Cfg::kRowsPerThread][Cfg::kColsPerThread],
                                         int rg, int cl) {
#pragma unroll
  for (int c = 0; c < Cfg::kColsPerThread; ++c) {
    float* key_row = sPt + Cfg::col_of(cl, c) * Cfg::kPtStride;
#pragma unroll
    for (int q = 0; q < Cfg::kRowsPerThread / 4; ++q)
      *reinterpret_cast<float4*>(key_row + Cfg::row_of(rg, 4 * q)) =
          make_float4(p[4 * q + 0][c], p[4 * q + 1][c], p[4 * q + 2][c], p[4 * q + 3][c]);
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, B·H_q), block: kNumThreads, dynamic smem: kSmemBytes.
// ---------------------------------------------------------------------------------------------
template <class Cfg, bool IsCausal>
__global__ void __launch_bounds__(Cfg::kNumThreads, Cfg::kMinBlocksPerSm)
    flash_attention_kernel(const Params p, const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, float* __restrict__ o,
                           float* __restrict__ lse) {
  constexpr int kRows = Cfg::kRowsPerThread, kCols = Cfg::kColsPerThread;
  constexpr int kDims = Cfg::kDimsPerThread;

  extern __shared__ float4 smem_f4[];  // float4: 16-byte alignment for the vector accesses
  float* sQt = reinterpret_cast<float*>(smem_f4);  // Qᵀ [kHeadDim][kBlockM], whole kernel
  float* sKt = sQt + Cfg::kQtFloats;               // Kᵀ [kHeadDim][kBlockN], one tile
  float* sV = sKt + Cfg::kKtFloats;                // V  [kBlockN][kHeadDim], one tile
  float* sPt = sV + Cfg::kVFloats;                 // Pᵀ [kBlockN][kPtStride], one tile

  // TUTORIAL: with a causal mask, late query blocks visit many K/V tiles and early ones few.
  // Blocks are launched roughly in blockIdx order, so hand out the longest first: the short
  // ones then fill the gaps at the end instead of a long one running alone.
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * Cfg::kBlockM;  // first query row of this block
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int g = h / p.group;  // the K/V head this query head reads (GQA)
  const std::int64_t q_off = b * p.qs.batch + h * p.qs.head;
  const std::int64_t kv_off = b * p.kvs.batch + g * p.kvs.head;
  const float* k_head = k + kv_off;
  const float* v_head = v + kv_off;

  const int rg = threadIdx.x / Cfg::kColThreads;  // row group
  const int cl = threadIdx.x % Cfg::kColThreads;  // column lane within the row group

  const KvTiles tiles = kv_tiles<IsCausal>(m0, Cfg::kBlockM, Cfg::kBlockN, p.n_q, p.n_kv);

  // Prologue: Qᵀ. Query rows past N_q are zeros: they compute finite garbage that is never
  // stored.
  {
    TransposedTileLoader<Cfg, Cfg::kBlockM> q_loader;
    q_loader.load(q + q_off + m0 * p.qs.row, p.qs.row, p.n_q - m0);
    q_loader.store(sQt);
  }

  float acc_o[kRows][kDims];  // O accumulator, registers: this thread's kRows × kDims of O
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kDims; ++c) acc_o[r][c] = 0.f;
  OnlineSoftmax<kRows, Cfg::kColThreads> softmax;
  softmax.init();

  for (int t = 0; t < tiles.num_tiles; ++t) {
    const int n0 = t * Cfg::kBlockN;  // first key of this tile
    // Kᵀ(t), V(t) → shared. No barrier needed first: every thread finished reading the
    // previous tile's before barrier 3.
    {
      TransposedTileLoader<Cfg, Cfg::kBlockN> k_loader;
      k_loader.load(k_head + n0 * p.kvs.row, p.kvs.row, p.n_kv - n0);
      k_loader.store(sKt);
    }
    load_v<Cfg>(sV, v_head + n0 * p.kvs.row, p.kvs.row, p.n_kv - n0);
    // Barrier 1: Kᵀ(t), V(t) (and at t = 0, Qᵀ) are complete.
    __syncthreads();

    float s[kRows][kCols];  // S tile, registers: this thread's kRows × kCols of S
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kCols; ++c) s[r][c] = 0.f;
    outer_product_mma<Cfg::kHeadDim, Cfg::kBlockM, Cfg::kBlockN, Cfg::kRowGroups, Cfg::kColThreads>(
        s, sQt, sKt, rg, cl);     // S = Q Kᵀ (unscaled)
    if (t >= tiles.num_unmasked)  // only tiles crossing the diagonal or the end of K
      apply_mask<IsCausal, Cfg>(s, m0, n0, rg, cl, p.n_q, p.n_kv);
    softmax.update(s, acc_o, p.scale_log2);  // s now holds P (unnormalised)

    // Pᵀ(t) → shared. No barrier needed first: sPt was last read in P V of tile t−1, which
    // every thread finished before barrier 3.
    store_pt<Cfg>(sPt, s, rg, cl);
    // Barrier 2: Pᵀ(t) is complete.
    __syncthreads();

    outer_product_mma<Cfg::kBlockN, Cfg::kPtStride, Cfg::kHeadDim, Cfg::kRowGroups,
                      Cfg::kColThreads>(acc_o, sPt, sV, rg, cl);  // O += P V
    // Barrier 3: every thread has finished reading Kᵀ(t), V(t) and Pᵀ(t), so the next tile
    // may overwrite them.
    __syncthreads();
  }

  // Epilogue: O = O / ℓ and L, the only writes to device memory.
  float row_lse[kRows];
  softmax.finalize(acc_o, row_lse);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = m0 + Cfg::row_of(rg, r);
    if (i >= p.n_q) continue;  // the block's tail rows past N_q
    float* o_row = o + q_off + i * p.qs.row;
#pragma unroll
    for (int c = 0; c < kDims; c += 4)
      *reinterpret_cast<float4*>(o_row + Cfg::dim_of(cl, c)) =
          make_float4(acc_o[r][c], acc_o[r][c + 1], acc_o[r][c + 2], acc_o[r][c + 3]);
    if (cl == 0) lse[static_cast<std::int64_t>(bh) * p.n_q + i] = row_lse[r];
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------

/// \brief Calls f(Cfg{}) with the tile configuration for `head_dim`; false if there is none.
template <class F>
bool with_config(int head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      f(ConfigD16{});
      return true;
    case 32:
      f(ConfigD32{});
      return true;
    case 64:
      f(ConfigD64{});
      return true;
    case 128:
      f(ConfigD128{});
      return true;
    default:
      return false;
  }
}

std::size_t workspace_bytes(const Problem&) { return 0; }

std::size_t nxn_bytes_written(const Problem&) { return 0; }  // S and P stay on chip

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  std::size_t smem = 0;
  long long block_m = 1;
  with_config(p.head_dim, [&](auto cfg) {
    smem = decltype(cfg)::kSmemBytes;
    block_m = decltype(cfg)::kBlockM;
  });
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  const long long m_blocks = (p.n_q + block_m - 1) / block_m;
  return check_fits("04_flash_attention", prop, p, smem,
                    {{1, bh, "batch*heads_q (" + std::to_string(bh) + ")"},
                     {0, m_blocks,
                      "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(m_blocks) +
                          " query blocks"}});
}

template <class Cfg, bool IsCausal>
void launch(const Params& p, int batch, const DeviceTensors& t, cudaStream_t stream) {
  const auto kernel = flash_attention_kernel<Cfg, IsCausal>;
  // Above 48 KB of dynamic shared memory a kernel must opt in; preferring the largest
  // shared-memory carveout lets two blocks share an SM (what the tile sizes are chosen for).
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Cfg::kSmemBytes)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  const dim3 grid((p.n_q + Cfg::kBlockM - 1) / Cfg::kBlockM, batch * p.heads_q);
  kernel<<<grid, Cfg::kNumThreads, Cfg::kSmemBytes, stream>>>(
      p, static_cast<const float*>(t.q), static_cast<const float*>(t.k),
      static_cast<const float*>(t.v), static_cast<float*>(t.o), t.lse);
  CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void launch(const Params& p, int batch, bool causal, const DeviceTensors& t, cudaStream_t stream) {
  if (causal)
    launch<Cfg, true>(p, batch, t, stream);
  else
    launch<Cfg, false>(p, batch, t, stream);
}

void run(const Problem& prob, const DeviceTensors& t, void* /*workspace*/, cudaStream_t stream) {
  const Params p{prob.n_q,
                 prob.n_kv,
                 prob.heads_q,
                 prob.group_size(),
                 prob.q_strides(),
                 prob.kv_strides(),
                 prob.softmax_scale() * kLog2e};
  const bool supported = with_config(prob.head_dim, [&](auto cfg) {
    launch<decltype(cfg)>(p, prob.batch, prob.causal, t, stream);
  });
  if (!supported)  // check_step rejects these before run(); this guards direct calls
    throw std::invalid_argument("head_dim (" + std::to_string(prob.head_dim) +
                                ") is not supported by step 04_flash_attention");
}

StepInfo info() {
  StepInfo s;
  s.number = 4;
  s.name = "04_flash_attention";
  s.lesson = "one fused kernel: S never leaves the chip, only O and L are written";
  s.dtypes = {DType::F32};
  s.head_dims = {16, 32, 64, 128};
  s.max_head_dim = 128;
  s.alignment = 16;  // float4 loads of 16 bytes; rows are multiples of d ≥ 16
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step04
