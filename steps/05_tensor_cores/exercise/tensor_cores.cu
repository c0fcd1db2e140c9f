// Step 05 — tensor cores: step 04's flash kernel with fp16/bf16 inputs, both matrix products on
// the tensor cores through WMMA, every sum in fp32.
//
// What changed since step 04: the algorithm is the same (one fused kernel, S never leaves the
// chip, online softmax). What computes it is not. Step 04 spent its instructions on FFMAs on
// the CUDA cores, whose fp32 peak on an H200 is ~67 TFLOP/s. A tensor core multiplies a
// 16 × 16 by a 16 × 16 matrix of 16-bit numbers, adding to fp32, in a handful of cycles: an
// order of magnitude more FLOPs per SM, but only for 16-bit inputs (or TF32) and only through
// warp-wide instructions whose operands are spread over the 32 lanes of a warp. So:
//   * Q, K, V and O are fp16 or bf16 (half the bytes of step 04); S, the softmax state and the
//     O accumulator stay fp32, and P is rounded to 16 bits because it is a tensor-core input.
//   * S = Q Kᵀ and O += P V are WMMA calls (nvcuda::wmma, <mma.h>) on 16 × 16 fragments.
//   * WMMA does not tell us which lane holds which element of a fragment, and the softmax
//     needs whole rows. So each warp stores its S fragments to shared memory
//     (store_matrix_sync), does the softmax there with a plain row-per-lane-pair layout,
//     writes P back in 16 bits, and loads P as fragments for P V. That round trip is the
//     price of WMMA's hidden layout (the profile shows it; the next step removes it).
//   * Each warp owns 16 whole query rows (one fragment row) of S, P and O, so between the two
//     products a warp only synchronises with itself (__syncwarp), never with the block.
//
//   load Q tile → shared                                     (once)
//   for each K/V tile of kBlockN keys the block can see:
//     S  = Q Kᵀ             WMMA, fp32 fragments → smem       (16 × kBlockN per warp)
//     online softmax        per row in smem: m, ℓ in registers; P (16-bit) overwrites S
//     O  = α·O + P V        α applied to the accumulator fragments, then WMMA
//   O = O / ℓ → 16 bits, L = m + log ℓ → HBM                  (the only writes)
//
// What it costs in memory traffic: as step 04, in 2-byte elements: half the bytes. Q is read
// once, O and L written once, K and V read once per query block (⌈N_q / 64⌉ times per head,
// mostly L2 hits): for N = 4096, B·H = 16, d = 64 that is 8 MiB each for Q, K, V and O in
// device memory and 64 × 16 MiB of K and V from L2. No N×N bytes, no workspace.
// The traffic that now matters is on chip. Per warp and K/V tile (16 rows × 64 keys), shared
// memory serves, at d = 64 (d = 128):
//   Q fragments 2 KB (4), K fragments 8 KB (16), V fragments 8 KB (16)    the products' inputs
//   S stored and read back 4 + 4 KB, P stored and read back 2 + 2 KB       the round trip
// 30 KB (48 KB) for 262 K (524 K) FLOPs: ~9 (11) FLOPs per shared byte, and 40% (25%) of the
// bytes are the round trip. At 128 bytes per clock per SM that caps the kernel near 300 TFLOP/s
// before the softmax's own instructions are counted — far below the tensor cores' peak, which
// is why the next step keeps S and P in registers.
//
// Build and run:
//   cmake --build build --target 05_tensor_cores && build/bin/05_tensor_cores --n 4096 --dtype bf16
//   (compile alone: nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icommon -Xptxas -v
//                   -gencode arch=compute_90,code=sm_90 -c steps/05_tensor_cores/tensor_cores.cu)
//
// Not yet: S and P still make a round trip through shared memory, because WMMA hides the
// fragment layout (the next step uses mma.sync with its documented register layout, so the
// softmax runs on the accumulators themselves, FlashAttention-2 style); K/V tiles are single-
// buffered; no Hopper-specific wgmma/TMA; no fp32 inputs (see step 04) and head dims
// {32, 64, 128} only; no backward pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "half_types.cuh"
#include "mask.cuh"
#include "online_softmax.cuh"

namespace fa::step05 {
namespace {

namespace wmma = nvcuda::wmma;

/// Shapes and strides the kernel needs, by value (a kernel argument).
struct Params {
  int n_q, n_kv, heads_q, group;  // group = H_q / H_kv query heads per K/V head
  Strides qs, kvs;                // element strides of Q/O and of K/V
  float scale_log2;               // softmax scale · log2(e), see online_softmax.cuh
};

// ---------------------------------------------------------------------------------------------
// Tile configuration and who owns what.
//
// TUTORIAL: WMMA (warp matrix multiply-accumulate, sm_70+) is the C++ face of the tensor
// cores. A `fragment` is a 16 × 16 tile spread over the registers of the 32 lanes of a warp;
// every call is made by all 32 lanes together:
//   load_matrix_sync(frag, ptr, ldm)        16 × 16 tile from memory (row stride ldm elements)
//   mma_sync(d, a, b, c)                    d = a · b + c, a: 16×16 (matrix_a), b: 16×16
//                                           (matrix_b), c, d: 16×16 fp32 (accumulator)
//   store_matrix_sync(ptr, frag, ldm, layout)
// On sm_80/sm_90 one 16 × 16 × 16 mma_sync is two HMMA.16816 instructions. A fragment's
// `row_major` / `col_major` says how the tile lies in memory, so K [keys][d] read as
// col_major IS Kᵀ [d][keys]: no transpose anywhere. The pointer must be 32-byte aligned and ldm
// a multiple of 16 bytes. What WMMA does not tell us is which lane holds which element.
//
// The block (4 warps, 128 threads) owns kBlockM = 64 query rows; warp w owns rows
// 16w … 16w + 15 — one row of fragments — of S, P and O:
//
//             S tile 64 × 64 (fp32, smem)              O accumulator 64 × d (fp32, registers)
//           keys 0-15 16-31 32-47 48-63              dims 0-15  16-31  …  d-16 … d-1
//   rows  0-15  [w0]   [w0]   [w0]   [w0]               [w0]     [w0]   …   [w0]
//   rows 16-31  [w1]   [w1]   [w1]   [w1]               [w1]     [w1]   …   [w1]
//   rows 32-47  [w2]    …                               [w2]      …
//   rows 48-63  [w3]    …                               [w3]      …
//
// Every [w] is one 16 × 16 fragment. So warp w computes its 4 S fragments from its Q rows and
// all of K, and its d/16 O fragments from its P rows and all of V. Every warp reads the whole
// K and V tile (that is the cost of the split); no warp reads another warp's S, P or O.
//
// In the softmax, lanes 2r and 2r + 1 of warp w own S row 16w + r; lane `half` (0 or 1) takes
// the float4 column groups half, half + 2, half + 4, … (col_of):
//   lane 0: cols 0-3, 8-11, …, 56-59    lane 1: cols 4-7, 12-15, …, 60-63     (row 0)
//   lane 2: cols 0-3, 8-11, …           lane 3: cols 4-7, …                    (row 1) …
//
// Shared-memory rows are padded (kSkew): an unpadded row of d = 64 16-bit values is 128
// bytes, so row r of every tile starts at bank 0 and the 8 rows read by one ldmatrix phase
// would all hit the same 4 banks (8-way conflict). 16 extra bytes per row shift each row by 4
// banks: conflict-free fragment loads. For the fp32 S tile, 8 extra floats (32 bytes) make the
// 4 rows read in one phase of the softmax's float4 loads land on 4 different 8-bank groups.
//
// Why these sizes (H200: 228 KB shared memory, 64 K registers per SM):
//   * 16 rows per warp is the fragment height; 4 warps × 16 = 64 rows per block.
//   * kBlockN = 64 keys: 4 S fragments per warp (32 fp32 registers) and 32 scores per lane.
//   * Shared memory: Q, K, V tiles (2·64·(d+8) bytes each) + S (64 × 72 floats, 18 KB; P lives
//     in it) = 69 KB at d = 128 (three blocks per SM), 45 KB at d = 64 (four).
//   * Registers follow (kMinBlocksPerSm): O is d/2 fp32 registers per lane (64 at d = 128), S
//     32 more; ptxas fits d = 128 into 168 per thread and d = 64 into 128, without spills.
// ---------------------------------------------------------------------------------------------
template <class T, int kHeadDim_>
struct Config {
  using Element = T;                          // __half or __nv_bfloat16
  static constexpr int kHeadDim = kHeadDim_;  // d
  static constexpr int kFrag = 16;            // WMMA fragment: m = n = k = 16
  static constexpr int kNumWarps = 4;
  static constexpr int kNumThreads = 32 * kNumWarps;
  static constexpr int kWarpRows = kFrag;                // query rows per warp: one fragment row
  static constexpr int kBlockM = kNumWarps * kWarpRows;  // query rows per block (Q, O rows)
  static constexpr int kBlockN = 64;                     // keys per K/V tile (S columns)
  static constexpr int kMinBlocksPerSm = kHeadDim >= 128 ? 3 : 4;  // what smem allows

  static constexpr int kSFrags = kBlockN / kFrag;     // S fragments per warp (columns)
  static constexpr int kOFrags = kHeadDim / kFrag;    // O fragments per warp (columns)
  static constexpr int kDimSteps = kHeadDim / kFrag;  // k-steps of S = Q Kᵀ
  static constexpr int kKeySteps = kBlockN / kFrag;   // k-steps of O += P V

  static constexpr int kRowLanes = 32 / kWarpRows;          // lanes sharing an S row: 2
  static constexpr int kColsPerLane = kBlockN / kRowLanes;  // scores per lane per tile: 32

  // Padded row strides (see above), in elements of their tile.
  static constexpr int kSkew = 16 / sizeof(T);          // 16 bytes of 16-bit elements
  static constexpr int kTileStride = kHeadDim + kSkew;  // Q, K, V rows
  static constexpr int kSStride = kBlockN + 8;          // S rows, floats
  static constexpr int kPStride = kBlockN + kSkew;      // P rows (P overlays S, see kernel)
  static constexpr int kOutCols = kHeadDim < kBlockN ? kHeadDim : kBlockN;  // O cols per pass

  // Shared memory. Every region starts at a multiple of 32 bytes (WMMA's pointer alignment).
  static constexpr int kQElems = kBlockM * kTileStride;   // Q [kBlockM][kTileStride]
  static constexpr int kKVElems = kBlockN * kTileStride;  // K, V [kBlockN][kTileStride]
  static constexpr int kSFloats = kBlockM * kSStride;     // S [kBlockM][kSStride]
  static constexpr std::size_t kSmemBytes =
      sizeof(T) * (kQElems + 2 * kKVElems) + sizeof(float) * (kSFloats + kBlockM);

  static_assert(sizeof(T) == 2, "16-bit element types only");
  static_assert(kHeadDim % kFrag == 0 && kBlockN % kFrag == 0, "whole fragments");
  static_assert(kRowLanes * kWarpRows == 32, "a warp's lanes cover its rows exactly");
  static_assert(kColsPerLane % 4 == 0, "lanes own whole float4 column groups");
  static_assert((sizeof(T) * kQElems) % 32 == 0 && (sizeof(T) * kKVElems) % 32 == 0,
                "tile regions keep 32-byte alignment");
  static_assert(kWarpRows * kPStride * sizeof(T) <= kWarpRows * kSStride * sizeof(float),
                "a warp's P rows fit in its S rows");
  static_assert(kHeadDim % kOutCols == 0 && kOutCols % 8 == 0, "whole epilogue passes");

  /// Tile column (key) of the c-th score a lane holds, c < kColsPerLane.
  __device__ static constexpr int col_of(int half, int c) {
    return ((c / 4) * kRowLanes + half) * 4 + c % 4;
  }
};

// The fragments. K is [keys][d] in shared memory; read col_major it is the matrix_b Kᵀ.
template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;  // Q or P, 16×16
template <class T>
using FragKt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;  // Kᵀ 16 d × 16 keys
template <class T>
using FragV = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;  // V 16 keys × 16 d
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;  // S or O 16×16, fp32
constexpr int kAccElems = FragAcc::num_elements;                       // elements per lane (8)

/// \brief frag ← the 16 × 16 tile at `tile` in shared memory (row stride ldm elements):
/// wmma::load_matrix_sync, except for bf16.
// TUTORIAL: a wrinkle of <mma.h> (seen with CUDA 13.0). For fp16 the compiler sees that the
// pointer points into shared memory and emits `wmma.load ... .shared.f16`, which becomes one
// ldmatrix (LDSM) per fragment. The bf16 overloads lose that information and emit a generic
// `wmma.load ... .bf16` (look for it in the PTX: nvcc -ptx), which ptxas turns into four generic
// 32-bit loads (LD.E) per fragment: 4× the load instructions in the inner loops (cuobjdump
// -sass). So for bf16 we issue the same PTX instruction with the state space spelled out, into
// the fragment's own registers; the fragment type, its layout and mma_sync are unchanged.
template <class Frag, class T>
__device__ __forceinline__ void load_fragment(Frag& frag, const T* tile, unsigned ldm) {
  wmma::load_matrix_sync(frag, tile, ldm);
}

template <class Frag>
__device__ __forceinline__ void load_fragment(Frag& frag, const __nv_bfloat16* tile, unsigned ldm) {
  static_assert(sizeof(frag.x) == 16, "a 16 x 16 bf16 operand fragment is 4 registers");
  unsigned* r = reinterpret_cast<unsigned*>(frag.x);
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
  if constexpr (std::is_same_v<Frag, FragA<__nv_bfloat16>>)
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr), "r"(ldm)
                 : "memory");
  else if constexpr (std::is_same_v<Frag, FragKt<__nv_bfloat16>>)
    asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr), "r"(ldm)
                 : "memory");
  else if constexpr (std::is_same_v<Frag, FragV<__nv_bfloat16>>)
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0,%1,%2,%3}, [%4], %5;"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr), "r"(ldm)
                 : "memory");
  else
    static_assert(sizeof(Frag) == 0, "no bf16 load for this fragment type");
}

// ---------------------------------------------------------------------------------------------
// Moving tiles into shared memory.
// ---------------------------------------------------------------------------------------------

// TUTORIAL: cp.async (sm_80+) copies global → shared without passing through registers, and
// the thread does not wait for it: it issues the copy, computes, and waits only when it needs
// the data. With a src-size of 0 it writes 16 zero bytes instead of reading — how the ragged
// tails of Q, K and V are zero-filled without reading past the end.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/// \brief tile [kRows][kTileStride] ← rows [0, kRows) of `src` (row stride in elements), zero
/// rows at and past `valid_rows`. Consecutive threads copy consecutive 16-byte chunks of a
/// row: coalesced reads, conflict-free shared writes. No transpose (step 04 needed one):
/// WMMA reads K as Kᵀ by declaring it col_major. Asynchronous: cp_async_commit(), then
/// cp_async_wait_all() and a barrier before use.
template <class Cfg, int kRows, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, std::int64_t row_stride,
                                                int valid_rows) {
  constexpr int kChunksPerRow = Cfg::kHeadDim * sizeof(T) / 16;  // 16-byte chunks in a row
  constexpr int kRowsPerPass = Cfg::kNumThreads / kChunksPerRow;
  constexpr int kElemsPerChunk = 16 / sizeof(T);
  static_assert(Cfg::kNumThreads % kChunksPerRow == 0 && kRows % kRowsPerPass == 0, "");
  const int row = threadIdx.x / kChunksPerRow;
  const int col = (threadIdx.x % kChunksPerRow) * kElemsPerChunk;
  T* dst = tile + row * Cfg::kTileStride + col;
  const T* src_row = src + row * row_stride + col;
  const std::int64_t pass_stride = kRowsPerPass * row_stride;
  const int rows_left = valid_rows - row;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = i * kRowsPerPass < rows_left;
    // An invalid row reads nothing (src-size 0); it is given the tile's own first address.
    cp_async_16(dst + i * kRowsPerPass * Cfg::kTileStride, valid ? src_row : src, valid);
    src_row += pass_stride;
  }
}

// ---------------------------------------------------------------------------------------------
// The row map of an accumulator fragment.
// ---------------------------------------------------------------------------------------------

// TUTORIAL: where does O live? The online softmax multiplies row r of O by α_r after every
// tile, so whoever holds O must know which row each of its numbers belongs to. Three options:
//   (a) O as an fp32 tile in shared memory: load it into fragments before P V, store it after,
//       rescale it there. Clear, but 2 × 16·d·4 bytes of shared traffic per warp and tile on
//       top of S's, and 32 KB more shared memory at d = 128.
//   (b) P V into a fresh fragment, stored to shared memory and added to O there by the lanes
//       that know their rows: the same traffic as (a), plus a pass.
//   (c) keep O in accumulator fragments (registers) and find out, once, which row each
//       fragment element belongs to. This kernel does (c).
// WMMA does not document the layout ("unspecified", says the programming guide), but the
// layout is a property of the fragment TYPE on a given GPU: element x[i] of every 16×16 float
// accumulator fragment, loaded or computed by mma_sync, is the same (row, column) of its tile.
// NVIDIA's own samples rely on that for `c.x[i] = alpha * acc.x[i] + beta * c.x[i]`. So we ask:
// store the tile whose element (r, c) is r, load it into an accumulator fragment and read x[i]
// back. Then a per-row α or 1/ℓ is applied as x[i] *= scale[row[i]] and O never leaves the
// registers. No layout is assumed, only that one type has one layout.

/// \brief row[i] = tile row (0-15) of element x[i] of any FragAcc, found by loading a tile of
/// row numbers. `scratch` is 16 rows of the calling warp's own shared memory (stride ldm).
__device__ __forceinline__ void accumulator_rows(int (&row)[kAccElems], float* scratch, int ldm) {
  // TODO(exercise): the row-number trick described above. The 32 lanes of the warp together
  // fill the 16 × 16 float tile at `scratch` (row stride ldm floats) so that element (r, c)
  // holds r; once every lane's stores are visible to the whole warp, load the tile into a
  // FragAcc and read row[i] off its x[i]. As given, every element is taken for row 0: all 16
  // rows of O get row 0's factor.
  for (int i = 0; i < kAccElems; ++i) row[i] = 0;
}

/// \brief o[f].x[i] *= scale[row[i]] for all of a warp's accumulator fragments: row r of the
/// warp's O (16 × d) is multiplied by scale[r]. `scale` is in shared memory (16 floats).
template <int kFrags>
__device__ __forceinline__ void scale_rows(FragAcc (&o)[kFrags], const float* scale,
                                           const int (&row)[kAccElems]) {
  // TODO(exercise): the rescale in registers. Element x[i] of every fragment o[f] lies in
  // row row[i] of the warp's O, so it is multiplied by that row's scale. Read the kAccElems
  // factors from shared memory once, not once per fragment. As given, O is never rescaled:
  // not by α between tiles, nor by 1/ℓ at the end.
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, B·H_q), block: kNumThreads, dynamic smem: kSmemBytes.
// ---------------------------------------------------------------------------------------------
template <class Cfg, bool IsCausal>
__global__ void __launch_bounds__(Cfg::kNumThreads, Cfg::kMinBlocksPerSm)
    tensor_core_attention_kernel(const Params p, const typename Cfg::Element* __restrict__ q,
                                 const typename Cfg::Element* __restrict__ k,
                                 const typename Cfg::Element* __restrict__ v,
                                 typename Cfg::Element* __restrict__ o, float* __restrict__ lse) {
  using T = typename Cfg::Element;
  constexpr int kFrag = Cfg::kFrag;

  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);  // Q [kBlockM][kTileStride], whole kernel
  T* sK = sQ + Cfg::kQElems;           // K [kBlockN][kTileStride], one tile
  T* sV = sK + Cfg::kKVElems;          // V [kBlockN][kTileStride], one tile
  float* sS = reinterpret_cast<float*>(sV + Cfg::kKVElems);  // S [kBlockM][kSStride], one tile
  float* sRowScale = sS + Cfg::kSFloats;                     // α or 1/ℓ [kBlockM]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // This warp's 16 rows of each tile. Only this warp touches them.
  const T* sQ_w = sQ + warp * Cfg::kWarpRows * Cfg::kTileStride;  // Q [16][kTileStride]
  float* sS_w = sS + warp * Cfg::kWarpRows * Cfg::kSStride;       // S [16][kSStride]
  // TUTORIAL: P overwrites S in place. A lane reads all its scores into registers first, the
  // warp synchronises, and only then is P written — into the same bytes, with its own row
  // stride, [16][kPStride] 16-bit values in the first half of the warp's S rows. Step 04 did
  // the same in registers (s became p); here it saves 9 KB of shared memory per block, which
  // is what lets three blocks share an SM at d = 128.
  T* sP_w = reinterpret_cast<T*>(sS_w);                 // P [16][kPStride]
  float* sScale_w = sRowScale + warp * Cfg::kWarpRows;  // [16]

  // The softmax's view: lanes 2r, 2r + 1 hold row r of this warp's S.
  const int r = lane / Cfg::kRowLanes;     // row within the warp's 16
  const int half = lane % Cfg::kRowLanes;  // which of the row's lanes (its columns: col_of)

  // TUTORIAL: with a causal mask, late query blocks visit many K/V tiles and early ones few.
  // Blocks are launched roughly in blockIdx order, so hand out the longest first: the short
  // ones then fill the gaps at the end instead of a long one running alone.
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * Cfg::kBlockM;             // first query row of this block
  const int row_i = m0 + warp * Cfg::kWarpRows + r;  // the query row this lane's softmax holds
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int g = h / p.group;  // the K/V head this query head reads (GQA)
  const std::int64_t q_off = b * p.qs.batch + h * p.qs.head;
  const std::int64_t kv_off = b * p.kvs.batch + g * p.kvs.head;
  const T* k_head = k + kv_off;
  const T* v_head = v + kv_off;

  const KvTiles tiles = kv_tiles<IsCausal>(m0, Cfg::kBlockM, Cfg::kBlockN, p.n_q, p.n_kv);

  // Prologue: Q and the first K tile in flight together. Query rows past N_q are zeros: they
  // compute finite garbage that is never stored. A block whose rows see no key at all loads
  // nothing and goes straight to the epilogue (O = 0, L = -inf).
  if (tiles.num_tiles > 0) {
    load_tile_async<Cfg, Cfg::kBlockM>(sQ, q + q_off + m0 * p.qs.row, p.qs.row, p.n_q - m0);
    load_tile_async<Cfg, Cfg::kBlockN>(sK, k_head, p.kvs.row, p.n_kv);
    cp_async_commit();
  }

  int acc_row[kAccElems];  // tile row (0-15) of each element of an accumulator fragment
  accumulator_rows(acc_row, sS_w, Cfg::kSStride);  // uses this warp's S rows as scratch

  FragAcc acc_o[Cfg::kOFrags];  // O accumulator, registers: this warp's 16 rows × d, fp32
#pragma unroll
  for (int f = 0; f < Cfg::kOFrags; ++f) wmma::fill_fragment(acc_o[f], 0.f);
  OnlineSoftmax<Cfg::kRowLanes> softmax;  // state of row row_i
  softmax.init();

  for (int t = 0; t < tiles.num_tiles; ++t) {
    const int n0 = t * Cfg::kBlockN;  // first key of this tile
    cp_async_wait_all();
    // Barrier 1: K(t) (and at t = 0, Q) is complete, and every warp has finished P V of tile
    // t−1, so sV may be overwritten (and this warp's S/P rows and row scales are free again).
    __syncthreads();
    load_tile_async<Cfg, Cfg::kBlockN>(sV, v_head + n0 * p.kvs.row, p.kvs.row, p.n_kv - n0);
    cp_async_commit();  // V(t) flies while S and the softmax are computed

    // ---- S = Q Kᵀ for this warp's 16 rows: 16 × kBlockN, fp32 (unscaled) ----
    FragAcc acc_s[Cfg::kSFrags];  // S, registers: 16 rows × 16 keys each
#pragma unroll
    for (int j = 0; j < Cfg::kSFrags; ++j) wmma::fill_fragment(acc_s[j], 0.f);
      // The k-loops of both products are not unrolled: unrolled, the compiler hoists every
      // fragment load of the tile (up to 32 K or V fragments) and runs out of registers. The
      // 12-16 warps on each SM hide the load latency instead.
#pragma unroll 1
    for (int kk = 0; kk < Cfg::kDimSteps; ++kk) {
      // TODO(exercise): k-step kk (head dims 16kk … 16kk + 15) of S = Q Kᵀ for this warp's 16
      // rows. Load the warp's Q fragment (a FragA<T>, from its rows sQ_w) once; then, for each
      // of the kSFrags blocks of 16 keys, load the Kᵀ fragment (a FragKt<T>, from sK) and
      // accumulate a_q · b_k into acc_s[j] with wmma::mma_sync. Load with load_fragment
      // (above), strides in elements. As given, nothing is loaded and S stays 0.
    }
    // TUTORIAL: the round trip. The softmax needs, for every row, the max over its 64 scores;
    // the scores are in acc_s, but WMMA does not say which lanes hold a given row (the row map
    // above tells us rows, yet a row's 64 values are spread over lanes we would have to find
    // and shuffle between). Storing S and reading it back by row is simple and correct; it
    // costs 2 × 4 KB of shared-memory traffic per warp and tile, plus 2 × 2 KB for P.
#pragma unroll
    for (int j = 0; j < Cfg::kSFrags; ++j)
      wmma::store_matrix_sync(sS_w + j * kFrag, acc_s[j], Cfg::kSStride, wmma::mem_row_major);
    __syncwarp();  // S rows visible to the lanes that own them

    // ---- Online softmax on row row_i: lanes 2r, 2r+1 each hold 32 of its 64 scores ----
    float s[Cfg::kColsPerLane];  // this lane's scores of row r, raw q·k
    {
      const float* s_row = sS_w + r * Cfg::kSStride;
#pragma unroll
      for (int c = 0; c < Cfg::kColsPerLane; c += 4) {
        const float4 x = *reinterpret_cast<const float4*>(s_row + Cfg::col_of(half, c));
        s[c] = x.x;
        s[c + 1] = x.y;
        s[c + 2] = x.z;
        s[c + 3] = x.w;
      }
    }
    __syncwarp();                 // every lane has its scores: P may now overwrite S
    if (t >= tiles.num_unmasked)  // only tiles crossing the diagonal or the end of K
      apply_mask<IsCausal, Cfg>(s, row_i, n0, half, p.n_q, p.n_kv);
    unsigned prob[Cfg::kColsPerLane / 2];  // P = exp2(s·scale·log2e − m) in T, 2 per word
    const float alpha = softmax.template update<T>(s, prob, p.scale_log2);
    {
      T* p_row = sP_w + r * Cfg::kPStride;
#pragma unroll
      for (int c = 0; c < Cfg::kColsPerLane; c += 4)  // 4 values (8 bytes) per store
        *reinterpret_cast<uint2*>(p_row + Cfg::col_of(half, c)) =
            make_uint2(prob[c / 2], prob[c / 2 + 1]);
    }
    if (half == 0) sScale_w[r] = alpha;

    cp_async_wait_all();
    // Barrier 2: V(t) is complete, P and α are visible to the whole warp, and every warp has
    // finished reading K(t), so sK may be overwritten.
    __syncthreads();
    if (t + 1 < tiles.num_tiles) {  // K(t+1) flies while P V is computed
      load_tile_async<Cfg, Cfg::kBlockN>(sK, k_head + (n0 + Cfg::kBlockN) * p.kvs.row, p.kvs.row,
                                         p.n_kv - n0 - Cfg::kBlockN);
      cp_async_commit();
    }

    // ---- O = diag(α) · O + P V ----
    scale_rows(acc_o, sScale_w, acc_row);
#pragma unroll 1
    for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
      // TODO(exercise): k-step kk (keys 16kk … 16kk + 15) of O += P V for this warp's 16 rows:
      // the warp's P fragment (a FragA<T>, from sP_w — mind its row stride), then, for each of
      // the kOFrags blocks of 16 head dims, the V fragment (a FragV<T>, from sV) and
      // wmma::mma_sync into acc_o[f]. As given, nothing is added and O stays 0.
    }
  }

  // ---- Epilogue: O = O / ℓ, L = m + log ℓ, the only writes to device memory ----
  float row_lse;
  const float inv_l = softmax.finalize(&row_lse);
  __syncwarp();  // every lane of the warp is done with sScale_w, sS_w and sP_w
  if (half == 0) sScale_w[r] = inv_l;
  __syncwarp();
  scale_rows(acc_o, sScale_w, acc_row);

  // O leaves through the warp's S rows, kOutCols columns at a time: fragments → fp32 smem →
  // 16-bit, 16-byte stores, consecutive lanes writing consecutive chunks of a row (coalesced).
  constexpr int kChunksPerRow = Cfg::kOutCols / 8;  // 8 values = 16 bytes per chunk
  constexpr int kChunksPerLane = Cfg::kWarpRows * kChunksPerRow / 32;
  static_assert(Cfg::kWarpRows * kChunksPerRow % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int c0 = 0; c0 < Cfg::kHeadDim; c0 += Cfg::kOutCols) {
#pragma unroll
    for (int f = 0; f < Cfg::kOutCols / kFrag; ++f)
      wmma::store_matrix_sync(sS_w + f * kFrag, acc_o[c0 / kFrag + f], Cfg::kSStride,
                              wmma::mem_row_major);
    __syncwarp();
#pragma unroll
    for (int it = 0; it < kChunksPerLane; ++it) {
      const int e = it * 32 + lane;  // chunk e: row e / kChunksPerRow of the warp's 16
      const int rr = e / kChunksPerRow, col = (e % kChunksPerRow) * 8;
      const int i = m0 + warp * Cfg::kWarpRows + rr;
      if (i >= p.n_q) continue;  // the block's tail rows past N_q
      const float* src = sS_w + rr * Cfg::kSStride + col;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      const uint4 packed = make_uint4(Half<T>::pack(x0.x, x0.y), Half<T>::pack(x0.z, x0.w),
                                      Half<T>::pack(x1.x, x1.y), Half<T>::pack(x1.z, x1.w));
      // __stwb is a plain store (write-back, the default cache policy) that is always ONE
      // 16-byte instruction; written as `*reinterpret_cast<uint4*>(dst) = packed`, nvcc 13.0
      // splits some of these into four 4-byte stores.
      __stwb(reinterpret_cast<uint4*>(o + q_off + i * p.qs.row + c0 + col), packed);
    }
    __syncwarp();  // before the next pass overwrites the staging rows
  }
  if (half == 0 && row_i < p.n_q) lse[static_cast<std::int64_t>(bh) * p.n_q + row_i] = row_lse;
}

// ---------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------

/// \brief Calls f(Cfg{}) with the configuration for (dtype, head_dim); false if there is none.
template <class F>
bool with_config(DType dtype, int head_dim, F&& f) {
  auto for_type = [&](auto element) {
    using T = decltype(element);
    switch (head_dim) {
      case 32:
        f(Config<T, 32>{});
        return true;
      case 64:
        f(Config<T, 64>{});
        return true;
      case 128:
        f(Config<T, 128>{});
        return true;
      default:
        return false;
    }
  };
  switch (dtype) {
    case DType::F16:
      return for_type(__half{});
    case DType::BF16:
      return for_type(__nv_bfloat16{});
    default:
      return false;
  }
}

std::size_t workspace_bytes(const Problem&) { return 0; }

std::size_t nxn_bytes_written(const Problem&) { return 0; }  // S and P stay on chip

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  if (prop.major < 8)  // bf16 WMMA and cp.async arrived with Ampere (sm_80)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " is below the 8.0 that step 05_tensor_cores needs";
  std::size_t smem = 0;
  long long block_m = 1;
  with_config(p.dtype, p.head_dim, [&](auto cfg) {
    smem = decltype(cfg)::kSmemBytes;
    block_m = decltype(cfg)::kBlockM;
  });
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  const long long m_blocks = (p.n_q + block_m - 1) / block_m;
  return check_fits("05_tensor_cores", prop, p, smem,
                    {{1, bh, "batch*heads_q (" + std::to_string(bh) + ")"},
                     {0, m_blocks,
                      "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(m_blocks) +
                          " query blocks"}});
}

template <class Cfg, bool IsCausal>
void launch(const Params& p, int batch, const DeviceTensors& t, cudaStream_t stream) {
  using T = typename Cfg::Element;
  const auto kernel = tensor_core_attention_kernel<Cfg, IsCausal>;
  // Above 48 KB of dynamic shared memory a kernel must opt in; preferring the largest
  // shared-memory carveout lets 3-4 blocks share an SM (what the tile sizes are chosen for).
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Cfg::kSmemBytes)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared));
  const dim3 grid((p.n_q + Cfg::kBlockM - 1) / Cfg::kBlockM, batch * p.heads_q);
  kernel<<<grid, Cfg::kNumThreads, Cfg::kSmemBytes, stream>>>(
      p, static_cast<const T*>(t.q), static_cast<const T*>(t.k), static_cast<const T*>(t.v),
      static_cast<T*>(t.o), t.lse);
  CUDA_CHECK_LAUNCH();
}

void run(const Problem& prob, const DeviceTensors& t, void* /*workspace*/, cudaStream_t stream) {
  const Params p{prob.n_q,
                 prob.n_kv,
                 prob.heads_q,
                 prob.group_size(),
                 prob.q_strides(),
                 prob.kv_strides(),
                 prob.softmax_scale() * kLog2e};
  const bool supported = with_config(prob.dtype, prob.head_dim, [&](auto cfg) {
    if (prob.causal)
      launch<decltype(cfg), true>(p, prob.batch, t, stream);
    else
      launch<decltype(cfg), false>(p, prob.batch, t, stream);
  });
  if (!supported)  // check_step rejects these before run(); this guards direct calls
    throw std::invalid_argument("dtype " + std::string(dtype_name(prob.dtype)) +
                                " with head_dim (" + std::to_string(prob.head_dim) +
                                ") is not supported by step 05_tensor_cores");
}

StepInfo info() {
  StepInfo s;
  s.number = 5;
  s.name = "05_tensor_cores";
  s.lesson = "tensor cores through WMMA: fp16/bf16 inputs, fp32 accumulation";
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {32, 64, 128};
  s.max_head_dim = 128;
  s.alignment = 16;  // 16-byte cp.async and stores; rows are multiples of d ≥ 32 elements
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step05
