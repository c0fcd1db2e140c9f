// hopper.cuh — the Hopper (sm_90a) instructions step 09 is built on, one thin wrapper each.
//
//   mbarrier.*                    a barrier object in shared memory that counts arrivals AND
//                                 bytes; TMA completes its bytes, threads wait on its phase
//   cp.async.bulk.tensor (TMA)    one thread copies a whole 2-D box of a tensor, global →
//                                 shared, swizzled on the way; out-of-bounds rows read as zeros
//   wgmma.mma_async               a warpgroup (4 warps, 128 threads) computes D[64×N] (+)= A·B
//                                 with A and B read from shared memory through descriptors
//                                 (or A from registers), asynchronously
//   wgmma.fence / commit_group / wait_group   ordering around the asynchronous wgmma
//
// TUTORIAL: step 07 moved every byte with instructions that each thread issued (cp.async,
// ldmatrix) and fed the tensor cores one warp at a time (mma.sync, 16 × 8 × 16). Hopper adds
// two engines that work on their own once started. The TMA copies a tile described by a
// tensor map (built on the host, api.cu) and reports the bytes on an mbarrier; wgmma reads
// its operands straight from shared memory, 64 rows × N columns at a time for a whole
// warpgroup, while the threads go on issuing other work. What the threads must do is say
// WHEN: wait on the mbarrier before reading a tile, fence and commit before and after the
// wgmmas, wait for them before touching their accumulators.
//
// Everything here is sm_90a-only ("a": architecture-specific features, not forward-
// compatible), which is why the step is compiled for arch=compute_90a,code=sm_90a alone and
// refuses other devices before any launch (api.cu).
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: the driver is reached through the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fa::step09 {

// ---------------------------------------------------------------------------------------------
// Shared-memory addresses and plain accesses
// ---------------------------------------------------------------------------------------------

/// \brief The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

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

/// \brief 16 bytes → global memory in one instruction (16-byte aligned address).
__device__ __forceinline__ void st_global_v4(void* gmem, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(gmem), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

/// \brief Two fp32 values → one register of two 16-bit Elements (round to nearest even),
/// `lo` in the lower half: the lower column of an A fragment.
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    static_assert(std::is_same_v<Element, __half>, "Element must be __nv_bfloat16 or __half");
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// ---------------------------------------------------------------------------------------------
// mbarrier: arrivals + transaction bytes, completed phase by phase
// ---------------------------------------------------------------------------------------------

// TUTORIAL: an mbarrier is 8 bytes of shared memory holding an expected arrival count, a
// pending count of transaction bytes, and a phase bit. A phase completes when all expected
// arrivals have arrived AND the pending bytes are back to zero; then the counts reset and
// the phase bit flips. So the same barrier serves tile after tile: waiting for "the phase
// with parity P to have completed" is waiting for use number n of the barrier, P = n % 2.
//
//   full barrier (count 1):  the producer thread arrives once with expect_tx(bytes of the
//                            tile); the TMA unit subtracts the bytes as they land. The phase
//                            completes when the whole tile is in shared memory.
//   empty barrier (count = consumer threads): every consumer thread arrives once it has
//                            finished reading the stage; the producer waits on it before
//                            it overwrites the stage with the next tile.

/// \brief Initialises the barrier at `bar` to expect `count` arrivals per phase (phase 0).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/// \brief Makes the mbarrier.init writes visible to the async proxy (the TMA unit) and to the
/// other threads; followed by __syncthreads() before any use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// \brief One arrival that also announces `bytes` more transaction bytes for this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

/// \brief One arrival (release: this thread's earlier reads of the stage are done).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/// \brief Whether the phase of parity `parity` has completed (acquire: the bytes TMA wrote in
/// that phase are visible afterwards). try_wait suspends the thread for a hardware-chosen
/// time before it returns false, so a loop around it does not spin hot.
__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.b32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

/// \brief Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------------------------
// TMA: cp.async.bulk.tensor, global → shared, completion on an mbarrier
// ---------------------------------------------------------------------------------------------

/// \brief Brings the 128-byte tensor map (a kernel parameter) into the descriptor cache.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

/// \brief Copies the box of `map` whose first element is at coordinates (c0, c1, c2, c3)
/// (innermost first, in elements) to shared memory at `dst` (1024-byte aligned for the
/// 128-byte swizzle) and completes its bytes on the mbarrier `bar`. Issued by ONE thread.
/// Coordinates past the tensor's extent read as zeros (and still count as bytes).
/// The destination is written ".shared::cluster": a CTA's own shared-memory address is a
/// valid cluster address of itself, with or without a cluster launch.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma shared-memory descriptors
// ---------------------------------------------------------------------------------------------

// TUTORIAL: wgmma does not take addresses of fragments (there are no fragments: ldmatrix is
// gone); it takes ONE 64-bit descriptor per operand that tells the tensor cores where the
// matrix starts in shared memory and how it is laid out. Its fields:
//
//   bits  0–13  start address >> 4      the operand's first byte; 16-byte units, so 14 bits
//                                       address the whole 256 KB shared window
//   bits 16–29  leading byte offset >> 4 (LBO)
//   bits 32–45  stride byte offset >> 4  (SBO)
//   bits 49–51  base offset             0: our tiles start on a 1024-byte boundary, where the
//                                       swizzle pattern starts (see below)
//   bits 62–63  swizzle mode            1 = 128-byte swizzle (2 = 64 B, 3 = 32 B, 0 = none)
//
// The layout our tiles have (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B, a box 64
// elements = 128 bytes wide): row r of a tile is 128 bytes at byte r·128, and its eight
// 16-byte chunks are permuted — chunk c is stored at chunk c ^ (r % 8). Eight rows make one
// 1024-byte "swizzle atom"; the hardware un-permutes by XORing address bits 4–6 with bits
// 7–9, i.e. from the absolute shared-memory address, which is why every tile starts on a
// 1024-byte boundary. (Step 07 did the same XOR by hand, kernel_traits.cuh there.)
//
// K-major operands (Q as A of S = Q·Kᵀ, K as B of it: both stored [row][d], contiguous along
// the reduction dimension K = d):
//   SBO = 1024: from one group of 8 rows (M or N) to the next, one swizzle atom.
//   LBO: the distance between 128-byte column blocks along K. One wgmma reads K = 16
//        elements = 32 bytes, always inside one 128-byte block, so the hardware never uses it
//        for swizzled K-major layouts; 1 (16 bytes) by convention.
//   k step j of 16 elements inside a 128-byte block: start address + 32·j bytes. The start
//        is then no longer 1024-aligned, but the swizzle is computed from the address bits,
//        so the chunk the hardware reads for row r is (2j + c) ^ (r % 8): what TMA wrote.
//
// MN-major operand (V as B of O += P·V: stored [key][d], contiguous along N = d, not along
// the reduction dimension K = keys; "transposed", imm-trans-b = 1):
//   each 128-byte row is one key (one K index) holding 64 consecutive d (N) values;
//   SBO = 1024: from one group of 8 keys (K) to the next;
//   LBO: from one 64-element block of N to the next. We issue wgmmas with N = 64 only (one
//        block), so it is never used; we still set it to 1024 so that the descriptor would be
//        right under either reading of the two fields for this case.
//   k step of 16 keys: start address + 16·128 = 2048 bytes (two whole atoms).

/// \brief The wgmma descriptor of a 128-byte-swizzled operand at shared address `addr`.
/// \param lbo leading byte offset (bytes, multiple of 16) \param sbo stride byte offset
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr >> 4) & 0x3FFFu);       // bits 0–13: start >> 4
  desc |= static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16;  // bits 16–29: LBO >> 4
  desc |= static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;  // bits 32–45: SBO >> 4
  desc |= static_cast<uint64_t>(1) << 62;                     // bits 62–63: 128-byte swizzle
  return desc;                                                // bits 49–51 (base offset): 0
}

/// \brief K-major, 128-byte swizzle (Q and K): SBO one atom, LBO unused (16).
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return make_smem_desc(addr, 16, 1024);
}

/// \brief MN-major, 128-byte swizzle, N = 64 (V): SBO one atom, LBO unused (see above).
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr) {
  return make_smem_desc(addr, 1024, 1024);
}

// ---------------------------------------------------------------------------------------------
// wgmma.mma_async and its ordering
// ---------------------------------------------------------------------------------------------

// TUTORIAL: the accumulator layout of m64nNk16 (fp32 D): warp w of the warpgroup owns rows
// 16w … 16w+15, and inside a warp it is mma.sync's C layout (step 07's mma.cuh) repeated
// along N: register 4j + e of lane (g = lane / 4, t = lane % 4) holds
//     e = 0, 1:  row 16w + g,      column 8j + 2t + e
//     e = 2, 3:  row 16w + g + 8,  column 8j + 2t + e − 2
// so a row still lives in the 4 lanes of a quad (softmax: two xor-shuffles, as in step 07).
// The A-from-registers operand (m64k16, 16-bit) is, per warp, mma.sync's A fragment of its
// 16 rows: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..). Two
// neighbouring n8 column blocks of D, rounded to 16 bits, ARE one k16 A fragment: P goes from
// the S accumulators into O += P·V without touching shared memory.
//
// Ordering rules (PTX ISA, "asynchronous warpgroup level matrix multiply"):
//   wgmma.fence            before the first wgmma, and again whenever the registers a wgmma
//                          uses (accumulators, A fragments) were written by other
//                          instructions since the last one
//   wgmma.commit_group     closes the wgmmas issued so far into one group
//   wgmma.wait_group N     waits until at most N groups are pending; only then may the
//                          accumulators (and A registers) be read or written again
// All three are .sync.aligned: every thread of the warpgroup executes them, convergently.

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// \brief Keeps the compiler from moving reads or writes of `r` across a wgmma fence, commit
/// or wait (it does not know that the asynchronous wgmma owns these registers until waited
/// for).
template <int kN>
__device__ __forceinline__ void fence_operands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
/// \brief The same for A fragments held in registers (P).
template <int kN>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The instructions, one operand list per shape (N = 64 and 128 columns). TYPES is the
// ".bf16.bf16" or ".f16.f16" of the inputs. Operands:
//   SS:  d[N/2] accumulators, desc_a, desc_b, scale_d (0: D = A·B, 1: D += A·B),
//        then imm-scale-a = 1, imm-scale-b = 1 (no negation), imm-trans-a = 0, imm-trans-b = 0
//        (both K-major)
//   RS:  d[N/2], a[4] (this warp's A fragment), desc_b, scale_d, imm-scale-a, imm-scale-b,
//        imm-trans-b = 1 (B is MN-major: V stored [key][d])

// D[64×64] (+)= A[64×16] · B[16×64], A and B from shared memory (descriptors).
#define FA_WGMMA_SS_N64(TYPES)                                                                     \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32" TYPES                                           \
      " "                                                                                          \
      "{"                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"             \
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// D[64×128] (+)= A[64×16] · B[16×128], A and B from shared memory (descriptors).
#define FA_WGMMA_SS_N128(TYPES)                                                                    \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32" TYPES                                          \
      " "                                                                                          \
      "{"                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "           \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "           \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"             \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])                                                                                \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// D[64×64] += A[64×16] · B[16×64], A from registers, B from shared memory (descriptor),
// B MN-major (imm-trans-b = 1).
#define FA_WGMMA_RS_N64_TRANS_B(TYPES)                                                             \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32" TYPES                                           \
      " "                                                                                          \
      "{"                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"             \
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                             \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                         \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

/// \brief d[64×kN per warpgroup] (+)= A·B with A (64×16) and B (16×kN) in shared memory.
template <class Element, int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma_ss: N = 64 or 128");
  constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<Element, __half>, "16-bit elements only");
  if constexpr (kN == 64) {
    if constexpr (kBf16)
      FA_WGMMA_SS_N64(".bf16.bf16");
    else
      FA_WGMMA_SS_N64(".f16.f16");
  } else {
    if constexpr (kBf16)
      FA_WGMMA_SS_N128(".bf16.bf16");
    else
      FA_WGMMA_SS_N128(".f16.f16");
  }
}

/// \brief d[64×64 per warpgroup] += A·B with A (64×16) from registers (`a`: this warp's
/// fragment) and B (16×64) MN-major in shared memory.
template <class Element>
__device__ __forceinline__ void wgmma_rs_n64_trans_b(float (&d)[32], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
  constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<Element, __half>, "16-bit elements only");
  const int scale_d = 1;
  if constexpr (kBf16)
    FA_WGMMA_RS_N64_TRANS_B(".bf16.bf16");
  else
    FA_WGMMA_RS_N64_TRANS_B(".f16.f16");
}

#undef FA_WGMMA_SS_N64
#undef FA_WGMMA_SS_N128
#undef FA_WGMMA_RS_N64_TRANS_B

// ---------------------------------------------------------------------------------------------
// Warp specialisation: register reallocation and named barriers
// ---------------------------------------------------------------------------------------------

// TUTORIAL: a CTA launched with T threads and __launch_bounds__(T, 1) gets R = 65536 / T
// registers per thread (rounded down to a multiple of 8), every warp the same. setmaxnreg
// moves registers between warpgroups at run time: `setmaxnreg.dec R'` gives this warpgroup's
// surplus back to the CTA's pool, `setmaxnreg.inc R''` blocks until the pool has enough and
// takes it. The counts are immediates, multiples of 8 in [24, 256]; every warp of a warpgroup
// executes the same one (.sync.aligned). ptxas compiles the code after an inc/dec for the new
// limit, which is why the launch bound must pin R: the kernel starts with exactly R per thread
// and the sums below must come out at or under 65536.

/// \brief Lowers this warpgroup's per-thread register limit to kRegs (a producer's).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
/// \brief Raises this warpgroup's per-thread register limit to kRegs (a consumer's); waits
/// until the CTA's pool has the registers (the producer's dec supplies them).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// TUTORIAL: the SM has 16 hardware barriers per CTA; __syncthreads() is barrier 0 with every
// thread. `bar.sync id, n` waits until n threads have arrived at barrier id (itself
// included); `bar.arrive id, n` counts this thread's arrival and goes on without waiting. So a
// barrier of n = 256 that warpgroup A waits on (128 threads, bar.sync) and warpgroup B only
// arrives at (128 threads, bar.arrive) is a signal from B to A: A passes once B has arrived,
// and B never waits for A. The ids are immediates so that ptxas reserves just these barriers,
// not all 16 as a register id would make it; n is a multiple of 32 (whole warps).

/// \brief bar.sync kId, kCount (waits until kCount threads have arrived at barrier kId).
template <int kId, int kCount>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(kId >= 1 && kId < 16 && kCount % 32 == 0, "named barriers 1..15, whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
/// \brief bar.arrive kId, kCount (counts this thread, does not wait).
template <int kId, int kCount>
__device__ __forceinline__ void named_barrier_arrive() {
  static_assert(kId >= 1 && kId < 16 && kCount % 32 == 0, "named barriers 1..15, whole warps");
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}

}  // namespace fa::step09
