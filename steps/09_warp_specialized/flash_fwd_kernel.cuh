// flash_fwd_kernel.cuh — step 09's kernel: step 08's FlashAttention forward pass on TMA and
// wgmma, warp-specialised (kernel_traits.cuh: the roles, and what each technique should buy).
//
// A CTA is 1 + C warpgroups for kBlockM = 64·C query rows of one (batch, head):
//
//   warpgroup 0 (producer)   setmaxnreg.dec; one thread: Q, then K_j and V_j for every visit
//                            j into stage j % kStages, each after the stage's empty barrier
//   warpgroup 1 + c          setmaxnreg.inc; consumer c: rows [64c, 64c + 64), the
//   (consumer c)             FlashAttention loop below, then O and L of its rows
//
// Visits j = 0 … T−1 go over the K/V tiles last to first (tile T − 1 − j: masked ones first,
// as in step 08). A consumer's loop, with its TURNS (sections between waiting for and passing
// on the turn, in which only it issues wgmmas):
//
//   turn 0:      wait full_k[0]; issue S_0 = Q K_0ᵀ                 pass the turn
//                wait S_0 (wait_group 0); arrive empty_k[0]; mask; softmax → P_0
//   turn j       wait full_k[j], full_v[j−1]
//   (1 ≤ j < T): issue S_j = Q K_jᵀ (group 1), O += P_{j−1} V_{j−1} (group 2)   pass the turn
//                wait_group 1: S_j done, P V still running; arrive empty_k[j]
//                mask; softmax of S_j → P_j, α_j (O not touched)
//                wait_group 0: P V done; arrive empty_v[j−1]; O *= α_j
//   turn T:      wait full_v[T−1]; issue O += P_{T−1} V_{T−1}        pass the turn (not the
//                wait_group 0; arrive empty_v[T−1]                    last consumer)
//   O = O / ℓ → 16 bits → this consumer's rows of sQ → 16-byte coalesced stores; L = m + log ℓ
//
// Every consumer of a CTA has the same T (they share the tiles), so each has T + 1 turns.
//
// THE BARRIERS, their arrival counts and phases (T = number of visits; s = j % kStages is the
// stage of visit j, u = j / kStages its use of that stage):
//
//   mbarrier   count                   arrivals per phase               waiters, parity
//   full_q     1                       producer's arrive.expect_tx      consumers, 0
//                                      (+ kQBytes of TMA)               (one phase only)
//   full_k[s]  1                       producer's arrive.expect_tx      consumers, u % 2
//   full_v[s]                          (+ kKVTileBytes of TMA)
//   empty_k[s] kNumConsumerThreads     every consumer thread, once it   producer before it
//   empty_v[s]                         has waited for the wgmmas that   loads visit j into
//                                      read K_j (V_j)                   s, j ≥ kStages:
//                                                                       parity (u − 1) % 2
//
//   Each phase of full_*[s] is one visit; each phase of empty_*[s] is one visit's release.
//   The producer loads visit j only after the release of visit j − kStages completed, so a
//   stage's phases never run more than one ahead of its waiters: the parity is unambiguous.
//   Releases of the last kStages visits complete phases nobody waits for (harmless).
//
//   named barrier     count  bar.sync by            bar.arrive by
//   kBarTurn0 + c     256    consumer c (128),      consumer c − 1 mod C (128) after
//   (4, 5, 6)                once per turn          each of its turns, except that the
//                                                   last consumer (C − 1) skips the arrival
//                                                   after its last turn (turn T) and instead
//                                                   arrives once before turn 0 on kBarTurn0
//                                                   (so consumer 0 goes first)
//   Balance, per barrier: consumer c syncs T + 1 times; consumer c − 1 arrives T + 1 times
//   (c ≥ 1: once per turn; c = 0: consumer C − 1's first arrival + turns 0 … T − 1). The
//   turn goes round: 0, 1, …, C−1, 0, 1, … A consumer's second arrival at a barrier can only
//   come after the turn it granted was taken (it needs its own next turn first, which needs
//   the whole round), so no two generations of a barrier ever mix. With T = 0 (a causal
//   block that sees no key) nobody syncs or arrives.
//   kBarEpilogue0 + c 128    consumer c (128)       —       before its rows of sQ are reused
//
// No deadlock: the producer waits only on empty barriers of visits at least kStages older
// than the one it loads; those are released by consumers in iterations that need only tiles
// loaded earlier. A consumer in turn j waits only for full_k[j] and full_v[j − 1], loaded
// once every consumer has released visit j − kStages ≤ j − 2, which the others did before
// their own turn j − 1 began (they release K in their iteration j − 2 and V at its end).
//
// When it fails or hangs, in this order:
//   1. build/bin/probe_09_warp_specialized. Part 1 failing: the TMA/wgmma layer (as step
//      08's probe). Part 2 failing: the ring or the turns without any arithmetic; a timed-out
//      wait names the consumer, the barrier, the visit and the parity.
//   2. A hang before any wait: setmaxnreg.inc waiting for registers the pool does not have
//      (launch_flash_fwd checks the compiled count is kLaunchRegs; see kernel_traits.cuh).
//   3. Wrong numbers with the probe passing: the order around the waits — α applied before
//      wait_group 0 (O still accumulating), P packed before it (P V still reading it); the
//      suite's causal and ragged-N tests single out the mask on overlapped tiles.
//   4. Slower than step 08: ptxas's "wgmma serialized" warnings (none now), then the turns
//      (KernelTraits' kPingPong = false in FwdConfig: the same kernel without ping-pong; and
//      kOverlap = false: without the softmax under its own P V; bin/variants_09 times both).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "hopper.cuh"
#include "kernel_traits.cuh"
#include "mask.cuh"
#include "online_softmax.cuh"

namespace fa::step09 {

/// \brief Issues the TMA copies of one [kRows][d] tile (d/64 boxes of 64 elements × kRows
/// rows) starting at sequence row `row` of head `head`, batch `b`, into the tile at `dst`
/// ([kDBlocks][kRows][64]); their bytes complete on `bar`. Thread 0 only.
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                          int row, int head, int b, bool heads_inner) {
#pragma unroll
  for (int db = 0; db < Traits::kDBlocks; ++db) {
    const uint32_t to = dst + db * kRows * 128;
    if (heads_inner)  // [B, N, H, d]: dimensions (d, H, N, B)
      tma_load_4d(to, map, bar, 64 * db, head, row, b);
    else  // [B, H, N, d]: dimensions (d, N, H, B)
      tma_load_4d(to, map, bar, 64 * db, row, head, b);
  }
}

/// \brief The mbarriers of one CTA (kernel_traits.cuh's layout): shared addresses.
template <class Traits>
struct Barriers {
  uint32_t q;  // full_q; the ring's follow it
  __device__ __forceinline__ uint32_t full_k(int s) const { return q + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t full_v(int s) const {
    return q + 8 * (1 + Traits::kStages + s);
  }
  __device__ __forceinline__ uint32_t empty_k(int s) const {
    return q + 8 * (1 + 2 * Traits::kStages + s);
  }
  __device__ __forceinline__ uint32_t empty_v(int s) const {
    return q + 8 * (1 + 3 * Traits::kStages + s);
  }
  /// \brief One thread, before the CTA barrier that publishes them (the table above).
  __device__ __forceinline__ void init() const {
    mbarrier_init(q, 1);
    for (int s = 0; s < Traits::kStages; ++s) {
      mbarrier_init(full_k(s), 1);  // the producer's expect_tx arrival
      mbarrier_init(full_v(s), 1);
      mbarrier_init(empty_k(s), Traits::kNumConsumerThreads);  // every consumer thread
      mbarrier_init(empty_v(s), Traits::kNumConsumerThreads);
    }
    fence_barrier_init();
  }
};

/// \brief The producer's work, one thread: Q rows [m0, m0 + kBlockM) into sQ, then K and V
/// of visits 0 … num_tiles − 1 (tile num_tiles − 1 − it) into stage it % kStages, each after
/// the release of the visit kStages earlier. Rows past N_q (Q) and keys past N_kv (K, V) are
/// zero-filled by the TMA unit: their scores are 0 (masked for keys, never stored for rows)
/// and 0 · V adds nothing.
template <class Traits>
__device__ __forceinline__ void produce(const Barriers<Traits>& bars, uint32_t sQ, uint32_t sK,
                                        uint32_t sV, const CUtensorMap* tma_q,
                                        const CUtensorMap* tma_k, const CUtensorMap* tma_v, int m0,
                                        int h, int h_kv, int b, bool heads_inner, int num_tiles) {
  constexpr int kStages = Traits::kStages, kBlockN = Traits::kBlockN;
  constexpr int kKVTileBytes = Traits::kKVTileBytes;
  mbarrier_arrive_expect_tx(bars.q, Traits::kQBytes);
  load_tile<Traits, Traits::kBlockM>(sQ, tma_q, bars.q, m0, h, b, heads_inner);
  for (int it = 0; it < num_tiles; ++it) {
    const int stage = it % kStages;
    const uint32_t release = (it / kStages + 1) % 2;  // parity of use it / kStages − 1
    const int n0 = (num_tiles - 1 - it) * kBlockN;
    if (it >= kStages) mbarrier_wait(bars.empty_k(stage), release);
    mbarrier_arrive_expect_tx(bars.full_k(stage), kKVTileBytes);
    load_tile<Traits, kBlockN>(sK + stage * kKVTileBytes, tma_k, bars.full_k(stage), n0, h_kv, b,
                               heads_inner);
    if (it >= kStages) mbarrier_wait(bars.empty_v(stage), release);
    mbarrier_arrive_expect_tx(bars.full_v(stage), kKVTileBytes);
    load_tile<Traits, kBlockN>(sV + stage * kKVTileBytes, tma_v, bars.full_v(stage), n0, h_kv, b,
                               heads_inner);
  }
}

// ---------------------------------------------------------------------------------------------
// Named barriers with a run-time consumer index: the ids must be immediates (hopper.cuh), so
// switch over the few there are.
// ---------------------------------------------------------------------------------------------

/// \brief bar.sync (kBase + i), kCount for i in 0 … 2.
template <int kBase, int kCount>
__device__ __forceinline__ void named_barrier_sync_at(int i) {
  switch (i) {
    case 0:
      named_barrier_sync<kBase, kCount>();
      break;
    case 1:
      named_barrier_sync<kBase + 1, kCount>();
      break;
    default:
      named_barrier_sync<kBase + 2, kCount>();
      break;
  }
}
/// \brief bar.arrive (kBase + i), kCount for i in 0 … 2.
template <int kBase, int kCount>
__device__ __forceinline__ void named_barrier_arrive_at(int i) {
  switch (i) {
    case 0:
      named_barrier_arrive<kBase, kCount>();
      break;
    case 1:
      named_barrier_arrive<kBase + 1, kCount>();
      break;
    default:
      named_barrier_arrive<kBase + 2, kCount>();
      break;
  }
}

/// \brief Consumer c waits for its turn to issue wgmmas (256 = its 128 + its predecessor's).
template <class Traits>
__device__ __forceinline__ void wait_turn(int c) {
  if constexpr (Traits::kPingPong) named_barrier_sync_at<Traits::kBarTurn0, 256>(c);
}
/// \brief Consumer c passes the turn to consumer c + 1 mod C (arrives, does not wait).
template <class Traits>
__device__ __forceinline__ void pass_turn(int c) {
  if constexpr (Traits::kPingPong)
    named_barrier_arrive_at<Traits::kBarTurn0, 256>(c + 1 == Traits::kNumConsumers ? 0 : c + 1);
}
/// \brief Before turn 0: the last consumer grants consumer 0 its first turn.
template <class Traits>
__device__ __forceinline__ void grant_first_turn(int c) {
  if constexpr (Traits::kPingPong)
    if (c == Traits::kNumConsumers - 1) named_barrier_arrive<Traits::kBarTurn0, 256>();
}

// ---------------------------------------------------------------------------------------------
// The kernel. grid: (⌈N_q / kBlockM⌉, H_q, B), block: kNumThreads (producer warpgroup first),
// dynamic smem: kSmemBytes. __launch_bounds__(kNumThreads, 1) pins the launch register count
// at kLaunchRegs, which setmaxnreg's arithmetic relies on (kernel_traits.cuh).
// ---------------------------------------------------------------------------------------------
template <class Traits, bool IsCausal>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    flash_fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ CUtensorMap tma_q,
                     const __grid_constant__ CUtensorMap tma_k,
                     const __grid_constant__ CUtensorMap tma_v) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim, kDBlocks = Traits::kDBlocks;
  constexpr int kStages = Traits::kStages, kSRegs = Traits::kSRegs;
  constexpr int kKStepsS = Traits::kKStepsS, kKStepsO = Traits::kKStepsO;
  constexpr int kKVTileBytes = Traits::kKVTileBytes;
  constexpr int kNumConsumers = Traits::kNumConsumers;

  // The 128-byte swizzle needs 1024-byte aligned tiles: round the base up (kSmemBytes has
  // the slack).
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base + Traits::kQOffset;  // [kDBlocks][kBlockM][64]
  const uint32_t sK = base + Traits::kKOffset;  // [kStages][kDBlocks][kBlockN][64]
  const uint32_t sV = base + Traits::kVOffset;  // [kStages][kDBlocks][kBlockN][64]
  const Barriers<Traits> bars{base + Traits::kBarOffset};

  const int tid = threadIdx.x;
  const int wg = tid / 128;         // 0: the producer; 1 + c: consumer c
  const int warp = (tid / 32) % 4;  // warp within the warpgroup: 16 of its rows
  const int lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // rows g, g + 8 of the warp's 16; columns 2t, 2t + 1

  // Longest causal blocks first (step 07: the short ones then fill the gaps at the end).
  const int m_block = IsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * kBlockM;
  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // GQA: the K/V head of this query head

  const KvTiles tiles = kv_tiles<IsCausal>(m0, kBlockM, kBlockN, p.n_q, p.n_kv);
  const int num_tiles = tiles.num_tiles;                  // T: visits
  const int num_masked = num_tiles - tiles.num_unmasked;  // visited first

  if (tid == 0) {
    prefetch_tensor_map(&tma_q);
    prefetch_tensor_map(&tma_k);
    prefetch_tensor_map(&tma_v);
    bars.init();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer's idle warps exit below

  // ================================ the producer ==============================================
  if (wg == 0) {
    setmaxnreg_dec<Traits::kProducerRegs>();
    if (warp == 0 && lane == 0 && num_tiles > 0)  // T = 0: nothing to see, nothing loaded
      produce(bars, sQ, sK, sV, &tma_q, &tma_k, &tma_v, m0, h, h_kv, b, p.heads_inner, num_tiles);
    return;  // no CTA-wide barrier follows; the consumers' barriers count consumers only
  }

  // ================================ a consumer ===============================================
  setmaxnreg_inc<Traits::kConsumerRegs>();
  const int c = wg - 1;  // rows [64c, 64c + 64) of the block

  float acc_o[kDBlocks][32];  // O: this thread's part of 64 rows × 64 columns per block
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc_o[db][i] = 0.f;
  OnlineSoftmax softmax;
  softmax.init();

  // This consumer's 64 rows of Q, column block db: sQ + db·kBlockM·128 + c·64·128.
  const uint32_t q_rows = sQ + c * 64 * 128;
  const int row0 = m0 + 64 * c + 16 * warp + g;  // global row of this lane's first row

  // S = Q K_jᵀ (unscaled) for visit `it`: kKStepsS wgmmas, committed as one group.
  const auto issue_s = [&](float(&s)[kSRegs], int it) {
    const uint32_t k_tile = sK + (it % kStages) * kKVTileBytes;
#pragma unroll
    for (int ks = 0; ks < kKStepsS; ++ks) {  // 16 of d per wgmma: column block ks / 4, +32 B
      const uint64_t desc_q = desc_k_major(q_rows + (ks / 4) * kBlockM * 128 + (ks % 4) * 32);
      const uint64_t desc_k = desc_k_major(k_tile + (ks / 4) * kBlockN * 128 + (ks % 4) * 32);
      wgmma_ss<Element, kBlockN>(s, desc_q, desc_k, ks > 0 ? 1 : 0);  // ks = 0: S = Q·K
    }
    wgmma_commit_group();
  };
  // O += P V_j for visit `it`: kKStepsO · kDBlocks wgmmas (P from registers), one group.
  const auto issue_pv = [&](const uint32_t(&pa)[kKStepsO][4], int it) {
    const uint32_t v_tile = sV + (it % kStages) * kKVTileBytes;
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) {
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {  // V rows 16kk …: 16 keys = 2 atoms = 2048 B
        const uint64_t desc_v = desc_mn_major(v_tile + db * kBlockN * 128 + kk * 16 * 128);
        wgmma_rs_n64_trans_b<Element>(acc_o[db], pa[kk], desc_v);
      }
    }
    wgmma_commit_group();
  };
  // Mask (masked visits only) and softmax of S for visit `it`; P → A fragments: n8 blocks 2kk
  // and 2kk + 1 of S are k16 step kk of P. Returns α in `alpha`; O is not touched.
  const auto softmax_to_p = [&](float(&s)[kSRegs], int it, float(&alpha)[2]) {
    if (it < num_masked)
      apply_mask<IsCausal>(s, row0, (num_tiles - 1 - it) * kBlockN + 2 * t, p.n_q, p.n_kv);
    softmax.update(s, p.scale_log2, alpha);
  };
  const auto pack_p = [&](const float(&s)[kSRegs], uint32_t(&pa)[kKStepsO][4]) {
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) {
      pa[kk][0] = pack_pair<Element>(s[8 * kk + 0], s[8 * kk + 1]);  // row g,     keys 2t
      pa[kk][1] = pack_pair<Element>(s[8 * kk + 2], s[8 * kk + 3]);  // row g + 8, keys 2t
      pa[kk][2] = pack_pair<Element>(s[8 * kk + 4], s[8 * kk + 5]);  // row g,     keys 2t + 8
      pa[kk][3] = pack_pair<Element>(s[8 * kk + 6], s[8 * kk + 7]);  // row g + 8, keys 2t + 8
    }
  };
  const auto fence_o = [&] {
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) fence_operands(acc_o[db]);
  };
  const auto fence_p = [&](uint32_t(&pa)[kKStepsO][4]) {
#pragma unroll
    for (int kk = 0; kk < kKStepsO; ++kk) fence_operands(pa[kk]);
  };

  if (num_tiles > 0) {
    grant_first_turn<Traits>(c);  // the barrier table above
    mbarrier_wait(bars.q, 0);

    float s[kSRegs];
    uint32_t pa[kKStepsO][4];
    float alpha[2];

    // ---- turn 0: S_0 alone -------------------------------------------------------------------
    wait_turn<Traits>(c);
    mbarrier_wait(bars.full_k(0), 0);
    fence_operands(s);
    wgmma_fence();
    issue_s(s, 0);
    pass_turn<Traits>(c);  // never the last turn: there are T + 1 ≥ 2
    wgmma_wait_group<0>();
    fence_operands(s);
    mbarrier_arrive(bars.empty_k(0));
    softmax_to_p(s, 0, alpha);  // α = 0 here and O = 0: no rescale
    pack_p(s, pa);

    // ---- turns 1 … T−1: S_j, then P_{j−1} V_{j−1}; softmax of S_j under P V -----------------
    for (int it = 1; it < num_tiles; ++it) {
      const int stage = it % kStages, prev = (it - 1) % kStages;
      wait_turn<Traits>(c);
      // Both tiles before the first wgmma: V_{j−1} was loaded before K_j, so this costs
      // nothing, and no wait loop stands between the fence and the wgmmas (ptxas would
      // otherwise inject a fence of its own before the P V wgmmas).
      mbarrier_wait(bars.full_k(stage), (it / kStages) % 2);
      mbarrier_wait(bars.full_v(prev), ((it - 1) / kStages) % 2);
      fence_operands(s);
      fence_o();
      fence_p(pa);
      wgmma_fence();  // O and P were written by ordinary instructions since the last wgmma
      issue_s(s, it);
      issue_pv(pa, it - 1);
      pass_turn<Traits>(c);
      fence_p(pa);  // P V still reads them: nothing may be moved across the waits below

      // Groups complete in order: S_j is done, P V may still run (without kOverlap: both done).
      wgmma_wait_group<Traits::kOverlap ? 1 : 0>();
      fence_operands(s);
      mbarrier_arrive(bars.empty_k(stage));
      softmax_to_p(s, it, alpha);

      wgmma_wait_group<0>();  // P_{j−1} V_{j−1} is done: O and P may be touched again
      fence_o();
      fence_p(pa);
      mbarrier_arrive(bars.empty_v(prev));
      OnlineSoftmax::rescale(acc_o, alpha);
      pack_p(s, pa);
    }

    // ---- turn T: the last P V ---------------------------------------------------------------
    const int last = num_tiles - 1;
    wait_turn<Traits>(c);
    mbarrier_wait(bars.full_v(last % kStages), (last / kStages) % 2);
    fence_o();
    fence_p(pa);
    wgmma_fence();
    issue_pv(pa, last);
    if (c != kNumConsumers - 1) pass_turn<Traits>(c);  // the last consumer's would go unused
    fence_p(pa);
    wgmma_wait_group<0>();
    fence_o();
    mbarrier_arrive(bars.empty_v(last % kStages));
  }

  // ---- Epilogue: O = O / ℓ, L = m + log ℓ; the only writes to device memory ---------------
  float lse[2];
  softmax.finalize(acc_o, lse);

  // O goes out through this warp's own 16 rows of sQ (same swizzled layout as the Q tile),
  // so that every global store is 16 contiguous bytes. The consumer's barrier: every wgmma of
  // the warpgroup, the readers of these rows, is complete before any warp overwrites them
  // (the other consumers read only their own rows of sQ).
  named_barrier_sync_at<Traits::kBarEpilogue0, 128>(c);
  const int row_base = 64 * c + 16 * warp;  // this warp's first row in the block
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int j = 0; j < 8; ++j)  // columns 64db + 8j + 2t, +1: chunk j of the row, bytes 4t…
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = row_base + 8 * hh + g;
        st_shared_u32(sQ + db * kBlockM * 128 + row * 128 + ((j ^ (row % 8)) * 16) + 4 * t,
                      pack_pair<Element>(acc_o[db][4 * j + 2 * hh], acc_o[db][4 * j + 2 * hh + 1]));
      }
  __syncwarp();
  Element* o_head = static_cast<Element*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of a row of O
#pragma unroll
  for (int pass = 0; pass < 16 * kChunksPerRow / 32; ++pass) {
    const int i = 32 * pass + lane;  // consecutive lanes, consecutive chunks of a row
    const int row = row_base + i / kChunksPerRow, chunk = i % kChunksPerRow;
    const uint4 v = ld_shared_v4(sQ + (chunk / 8) * kBlockM * 128 + row * 128 +
                                 (((chunk % 8) ^ (row % 8)) * 16));
    if (m0 + row < p.n_q)  // the block's rows past N_q are never stored
      st_global_v4(o_head + (m0 + row) * p.o_row_stride + chunk * 8, v);
  }
  if (t == 0) {  // the 4 lanes of a quad agree on their rows' L; one stores it
    float* lse_head = p.lse + (b * p.heads_q + h) * p.n_q;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = m0 + row_base + 8 * hh + g;
      if (i < p.n_q) lse_head[i] = lse[hh];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: one launch per call.
// ---------------------------------------------------------------------------------------------
/// \brief Throws unless `kernel` (a setmaxnreg kernel of Traits) was compiled for exactly
/// kLaunchRegs registers per thread: with fewer, the CTA's pool would be too small for the
/// consumers' setmaxnreg.inc, which would then wait forever — a hang instead of an error.
template <class Traits, class Kernel>
void check_launch_registers(Kernel kernel, const char* what) {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (attr.numRegs != Traits::kLaunchRegs)
    throw CudaError(cudaErrorInvalidConfiguration,
                    std::string(what) + ": compiled for " + std::to_string(attr.numRegs) +
                        " registers per thread, setmaxnreg's arithmetic needs exactly " +
                        std::to_string(Traits::kLaunchRegs) + " (kernel_traits.cuh)");
}

template <class Traits, bool IsCausal>
void launch_flash_fwd(const FwdParams& p, const TensorMaps& maps, cudaStream_t stream) {
  const auto kernel = flash_fwd_kernel<Traits, IsCausal>;
  static const bool checked = [&] {  // once per kernel
    check_launch_registers<Traits>(kernel, "step 09's kernel");
    return true;
  }();
  (void)checked;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Traits::kSmemBytes));
  const dim3 grid((p.n_q + Traits::kBlockM - 1) / Traits::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Traits::kNumThreads, Traits::kSmemBytes, stream>>>(p, maps.q, maps.k, maps.v);
  CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_flash_fwd(const FwdParams& p, const TensorMaps& maps, cudaStream_t stream) {
  using Traits = typename FwdConfig<kHeadDim, Element>::Traits;
  if (p.causal)
    launch_flash_fwd<Traits, true>(p, maps, stream);
  else
    launch_flash_fwd<Traits, false>(p, maps, stream);
}

}  // namespace fa::step09
