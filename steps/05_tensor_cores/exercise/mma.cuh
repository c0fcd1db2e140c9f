// mma.cuh — the tensor-core operations step 05 is built on, and the 16-bit values they take.
//
//   wmma::load_matrix_sync    shared → a warp's fragment of a 16 × 16 tile
//   wmma::mma_sync            D[16×16] = A[16×16] · B[16×16] + C on the tensor cores, fp32 C, D
//   wmma::store_matrix_sync   a warp's fragment → memory
//   pack_pair                 two fp32 → one register of two 16-bit values
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
// a multiple of 16 bytes. What WMMA does not tell us is which lane holds which element
// (accumulator_rows, below, finds out what the kernel needs of it).
//
// The two 16-bit element types:
//   fp16 (__half):          1 sign, 5 exponent, 10 mantissa bits: max 65504, eps 2^-10
//   bf16 (__nv_bfloat16):   1 sign, 8 exponent,  7 mantissa bits: fp32's range, eps 2^-7
// The tensor cores multiply either type exactly and add the products in fp32, so the only
// rounding this step adds to step 04's fp32 algorithm is at the three places where a value is
// stored in 16 bits: the inputs (given), P before the P V product, and O at the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fa::step05 {

namespace wmma = nvcuda::wmma;

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
// back. Then a per-row α or 1/ℓ is applied as x[i] *= scale[row[i]] (scale_rows, in
// online_softmax.cuh) and O never leaves the registers. No layout is assumed, only that one
// type has one layout.

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

// ---------------------------------------------------------------------------------------------
// 16-bit values
// ---------------------------------------------------------------------------------------------

/// \brief Two fp32 values → one 32-bit register of two Elements, round to nearest even;
/// `lo` goes to the lower half (the lower address once stored). Pairs because the hardware
/// converts two floats in one instruction (F2FP.PACK_AB) and the stores want whole 32-bit
/// words; plain words because a uint2 / uint4 of them is stored as ONE 8- or 16-byte
/// instruction (a struct of __half2 members is copied member by member: four 4-byte stores).
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  uint32_t bits;
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  } else {
    static_assert(std::is_same_v<Element, __half>, "Element must be __nv_bfloat16 or __half");
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&bits, &v, sizeof(bits));
  }
  return bits;
}

}  // namespace fa::step05
