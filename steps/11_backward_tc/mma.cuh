// mma.cuh — step 07's four PTX instructions and fragment layouts, copied (a step is
// self-contained), plus what the backward adds at the end: a 4-byte cp.async for L and D.
//
// Step 07's text, unchanged: the four PTX instructions it is built on, and who holds what.
//
//   cp.async.cg.shared.global   global → shared, 16 bytes, no registers, no waiting
//   ldmatrix.sync.aligned.x4    shared → registers, four 8 × 8 matrices of 16-bit values
//   mma.sync.aligned.m16n8k16   D[16×8] += A[16×16] · B[16×8] on the tensor cores, fp32 D
//   cvt.rn.{bf16x2,f16x2}.f32   two fp32 → one register of two 16-bit values
//
// TUTORIAL: steps 01–04 could say "thread t computes element (i, j)". From here on a whole
// warp computes a 16 × 8 tile in one instruction, and the hardware decides which of its
// lanes holds which element. Everything else in the kernel — the softmax, the mask, the
// epilogue — follows from these three pictures. Notation: lane = 0..31 of the warp,
//     g = lane / 4   ("group", 0..7)       t = lane % 4   ("thread in group", 0..3)
//
// A: 16 × 16, row-major (rows = M, cols = K), four 32-bit registers a0..a3 per lane, each
//    holding two neighbouring 16-bit values (the lower column in the lower half):
//
//              K:  0  1 | 2  3 | 4  5 | 6  7 ‖ 8  9 |10 11 |12 13 |14 15
//      row  0     T0    | T1   | T2   | T3   ‖ T0   | T1   | T2   | T3        a0 ‖ a2
//      row  1     T4    | T5   | T6   | T7   ‖ T4   | T5   | T6   | T7
//       …                 (row g: lanes 4g … 4g+3)
//      row  7     T28   | T29  | T30  | T31  ‖ T28  | …
//      row  8     T0    | T1   | T2   | T3   ‖ T0   | …                        a1 ‖ a3
//       …
//      row 15     T28   | T29  | T30  | T31  ‖ T28  | …
//
//    lane (g, t): a0 = A[g][2t, 2t+1]   a1 = A[g+8][2t, 2t+1]
//                 a2 = A[g][2t+8, 2t+9] a3 = A[g+8][2t+8, 2t+9]
//
// B: 16 × 8 (rows = K, cols = N), "col" layout: two registers b0, b1 per lane, each two
//    values that are neighbours along K (i.e. one COLUMN of B, two rows):
//
//              N:   0    1    2  …   7
//      K  0,1      T0   T4   T8  …  T28        b0: lane (g, t) holds B[2t, 2t+1][g]
//      K  2,3      T1   T5   T9  …  T29
//      K  4,5      T2   T6  T10  …  T30
//      K  6,7      T3   T7  T11  …  T31
//      K  8,9      T0   T4   …                 b1: lane (g, t) holds B[2t+8, 2t+9][g]
//       …
//      K 14,15     T3   T7   …      T31
//
// C/D: 16 × 8 fp32, four registers c0..c3 per lane:
//
//              N:  0  1 | 2  3 | 4  5 | 6  7
//      row  0     T0    | T1   | T2   | T3          c0, c1: lane (g, t) holds C[g][2t, 2t+1]
//       …
//      row  7     T28   | T29  | T30  | T31
//      row  8     T0    | T1   | T2   | T3          c2, c3: lane (g, t) holds C[g+8][2t, 2t+1]
//       …
//      row 15     T28   | …
//
// Two facts the kernel leans on:
//  * A row of C lives in the 4 lanes of one quad (4g … 4g+3). Row max and row sum over a
//    warp's S tile are therefore a loop over the lane's own registers plus two xor-shuffles
//    (offsets 1 and 2) — no other warp, no shared memory.
//  * C of two neighbouring n8 tiles, converted to 16 bits, IS the A fragment of a 16 × 16
//    tile: A[g][2t,2t+1] = C_left[g][2t,2t+1], A[g][2t+8, 2t+9] = C_right[g][2t, 2t+1], and
//    likewise for row g+8. So P = softmax(S) feeds the second matrix product (P V) straight
//    from registers: no shared-memory round trip, unlike step 05's S and P tiles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::step11 {

// ---------------------------------------------------------------------------------------------
// Shared-memory addresses
// ---------------------------------------------------------------------------------------------

/// \brief The 32-bit shared-memory address of a generic pointer into shared memory. ldmatrix,
/// cp.async and st/ld.shared take these; keeping them as 32-bit integers (not 64-bit generic
/// pointers) halves the registers every address costs.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---------------------------------------------------------------------------------------------
// cp.async: global → shared without passing through registers (sm_80+)
// ---------------------------------------------------------------------------------------------

// TUTORIAL: the thread issues the copy and walks on; the bytes arrive while it computes.
// Copies are grouped with commit_group and waited for with wait_group<N> ("until at most N
// of my groups are still in flight"); a __syncthreads() afterwards makes every thread's
// copies visible to every other thread. `.cg` caches in L2 only — K and V are read by many
// blocks (through L2) but only once per block, so there is nothing to gain from L1.
// With src-size 0 the instruction reads nothing and writes 16 zero bytes: the tail rows of
// a tile past N are zero-filled without a branch and without reading out of bounds.

/// \brief 16 bytes global → shared, or 16 zero bytes when !valid (then `gmem` is not read,
/// but we still pass an in-bounds address).
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

/// \brief Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// \brief Waits until at most kPending of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---------------------------------------------------------------------------------------------
// ldmatrix: four 8 × 8 matrices of 16-bit values, shared → registers, in fragment layout
// ---------------------------------------------------------------------------------------------

// TUTORIAL: each 8 × 8 matrix is 8 rows of 16 contiguous bytes. Lanes 8i … 8i+7 give the
// addresses of the 8 rows of matrix i (any addresses: rows need not be adjacent). Lane (g, t)
// receives in register r[i] the two values at row g, columns 2t and 2t+1 of matrix i — exactly
// the "c0,c1" position above. With .trans it receives row 2t and 2t+1 of column g instead,
// i.e. the matrix is transposed on the way: that turns row-major V [key][dim] into the
// column-of-B layout that mma wants for P V.
//
// One x4 instruction moves 512 bytes for the whole warp. Each 8-lane phase reads 8 rows of
// 16 bytes; those 8 rows must fall in 8 different groups of four banks or the phase is
// replayed — the reason for the swizzled layout (kernel_traits.cuh).

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

// ---------------------------------------------------------------------------------------------
// mma.sync m16n8k16: D = A · B + C with fp32 accumulators (C and D in the same registers)
// ---------------------------------------------------------------------------------------------

/// \brief c[16×8] += a[16×16] · b[16×8], Element = __nv_bfloat16 or __half.
/// A pure register-to-register operation, so the asm is not volatile: the compiler may
/// schedule it freely.
template <class Element>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<Element, __half>, "Element must be __nv_bfloat16 or __half");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// \brief Two fp32 values → one 32-bit register of two Elements, round to nearest even;
/// `lo` goes to the lower half (the lower column of a fragment). One cvt instruction.
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// ---------------------------------------------------------------------------------------------
// Plain accesses for the epilogue: staging O in shared memory, 16-byte stores to global
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void st_shared_u32(uint32_t smem_addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t smem_addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr)
               : "memory");
  return v;
}

/// \brief 16 bytes → global memory in one instruction (the address must be 16-byte aligned).
/// Written out because a plain `*reinterpret_cast<uint4*>(p) = v` through a pointer derived
/// from a 2-byte Element* may be split by the compiler into four 4-byte stores.
__device__ __forceinline__ void st_global_v4(void* gmem, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(gmem), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// Added for the backward
// ---------------------------------------------------------------------------------------------

/// \brief 4 bytes global → shared (L and D of a Q tile), or 4 zero bytes when !valid. `.ca`:
/// the only size cp.async.cg does not take.
__device__ __forceinline__ void cp_async_4(uint32_t smem_addr, const void* gmem, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// Bulk reductions shared → global (sm_90, kDqBulk): the copy engine adds a contiguous run of
// fp32 values from shared memory to global memory, in the async proxy
// ---------------------------------------------------------------------------------------------

// TUTORIAL: the thread names a source in shared memory, a destination in global memory and a
// size (a multiple of 16 bytes, both addresses 16-byte aligned), and walks on; the engine reads
// the shared memory later. So: the generic-proxy stores that filled the source are made
// visible to the async proxy first (fence.proxy.async.shared::cta by each thread that stored,
// then a barrier or __syncwarp), and the source is not written again before the thread that
// issued the reduction has seen it read (commit_group, then wait_group.read).
// Compiled for an older GPU these functions are empty: the kernel calls them only where
// __CUDA_ARCH__ >= 900 (kBulk in flash_bwd_kernel.cuh and flash_bwd_2d.cuh), or, for kQTma's
// tensor copies below, the host launches that kernel only when it was compiled for sm_90 or newer
// (main_kernel_ptx_version, flash_bwd_kernel.cuh); and an
// unoptimised (-G) build for sm_80 still emits the code of a branch that cannot be taken,
// which ptxas would refuse.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FA_STEP11_BULK_ASM(...)
#else
#define FA_STEP11_BULK_ASM(...) asm volatile(__VA_ARGS__)
#endif

/// \brief Orders this thread's earlier shared-memory stores before later async-proxy reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
  FA_STEP11_BULK_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// \brief gmem[0 … bytes/4) += the fp32 values at smem_addr, by the copy engine (red.add per
/// element, as atomics). bytes: a multiple of 16; both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, uint32_t smem_addr, int bytes) {
  FA_STEP11_BULK_ASM(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem),
      "r"(smem_addr), "r"(bytes)
      : "memory");
}

/// \brief The box of `map` at (x, y, z) += the fp32 values at smem_addr (the box's bytes in
/// the map's swizzle), by the copy engine: a tensor reduction, one instruction for the whole
/// box (Bwd2dTraits' kDqBulk = 2 and 3). `map`: the address of a __grid_constant__ parameter's
/// map.
__device__ __forceinline__ void tma_reduce_add_3d(const void* map, uint32_t smem_addr, int x, int y,
                                                  int z) {
  FA_STEP11_BULK_ASM(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], "
      "[%1];\n" ::"l"(map),
      "r"(smem_addr), "r"(x), "r"(y), "r"(z)
      : "memory");
}

/// \brief Closes the group of bulk operations issued by this thread since the last commit.
__device__ __forceinline__ void bulk_commit() {
  FA_STEP11_BULK_ASM("cp.async.bulk.commit_group;\n" ::: "memory");
}

/// \brief Waits until at most kPending of this thread's bulk groups are still reading their
/// shared-memory sources (their writes to global memory may still be under way).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  FA_STEP11_BULK_ASM("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

/// \brief Waits until at most kPending of this thread's bulk groups are in flight at all.
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  FA_STEP11_BULK_ASM("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Tensor copies global → shared (sm_90, Bwd2dTraits' kQTma): one thread asks the TMA for a
// whole box of a tensor map; the box's bytes complete on an mbarrier in shared memory, which
// every thread then waits on (step 08's hopper.cuh explains the barrier's phases)
// ---------------------------------------------------------------------------------------------

/// \brief Initialises the mbarrier at `bar` for `count` arrivals per phase; then
/// fence_mbarrier_init() and a __syncthreads() before any other thread uses it.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  FA_STEP11_BULK_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/// \brief Makes this thread's mbarrier.init writes visible to the async proxy (the TMA).
__device__ __forceinline__ void fence_mbarrier_init() {
  FA_STEP11_BULK_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// \brief One arrival on `bar` that also announces `bytes` more bytes for its current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  FA_STEP11_BULK_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                     "r"(bytes)
                     : "memory");
}

/// \brief Waits until the phase of parity `parity` of `bar` has completed: the bytes the TMA
/// wrote in that phase are then visible to this thread.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.b32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

/// \brief The box of `map` whose first element is at (c0, c1, c2, c3), innermost first, to
/// shared memory at `dst` (1024-byte aligned for the 128-byte swizzle), its bytes completed on
/// the mbarrier `bar`; coordinates past the tensor's extent read as zeros and still count.
/// Issued by one thread. `map`: the address of a __grid_constant__ parameter's map.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  FA_STEP11_BULK_ASM(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
#undef FA_STEP11_BULK_ASM

/// \brief Two fp32 values → shared memory in one 8-byte store (8-byte aligned address).
__device__ __forceinline__ void st_shared_f32x2(uint32_t smem_addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(smem_addr), "f"(a), "f"(b) : "memory");
}

}  // namespace fa::step11
