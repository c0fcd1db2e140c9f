// Step 12 — decoding: split-KV attention (Flash-Decoding) over a paged or contiguous cache.
//
// What changes from the forward steps: a decoding step brings q_len = 1 … 16 new tokens per
// sequence (common/decode.h) and attends over everything the sequence has cached. The forward
// kernels give a block 128 query rows; here a sequence has a handful, so ⌈N_q / 128⌉ · H_q · B
// blocks would leave most of the GPU idle while one block per head walks a long cache alone.
// Flash-Decoding (Dao, Haziza, Massa, Sizov, 2023) cuts the keys instead: each of num_splits
// blocks of a (sequence, head) attends over its own range of the cache, writes a partial O and
// L, and a second kernel merges them with the online-softmax rescale — the same merge the
// forward kernels apply between two K/V tiles, applied once across splits. Three kernels run
// in order on one stream:
//
//   1. append (append.cu): this step's new K/V rows into the cache at cache_lens[b] + i,
//      through the block table for a paged cache;
//   2. split-KV attention (decode_kernel.cuh): grid (num_splits, H_kv · row chunks, B); a block
//      holds every query head of one K/V head's group × the q_len new tokens (GQA packing: a
//      K/V tile is read once per K/V head), streams its split's tiles of 64 keys through two
//      cp.async stages (16-byte copies, pages resolved through the block table), masks
//      causally among the new tokens (bottom-right), keeps the online softmax, and writes
//      O_s and L_s in fp32 to the workspace;
//   3. combine (decode_kernel.cuh): O = Σ_s e^(L_s − L) O_s, L = log Σ_s e^(L_s), O in the
//      dtype.
//
// The split rule (num_splits below). Without splitting, a launch has base = B · H_kv · row
// chunks blocks. Decoding is bound by reading the cache, and a GPU reads at full speed only
// with enough blocks in flight: the rule aims at kTargetBlocksPerSm = 2 blocks per SM,
//
//     splits = ⌈2 · SMs / base⌉,   then at most ⌊tiles of the longest sequence / 2⌋
//              (every split streams at least kMinTilesPerSplit = 2 tiles of 64 keys: a shorter
//              split costs more in its workspace round trip and the combine than it hides),
//              at most kMaxSplits = 128, at least 1; then only as many as the longest
//              sequence's ⌈tiles / splits⌉ tiles per split fill (no split empty for it).
//
// So a batch that already fills the GPU (base >= 2 · SMs) is not split, and one long sequence
// on few heads is split the most. Each sequence's tiles are dealt ⌈tiles / splits⌉ per split;
// splits past a short sequence's end write an empty partial (L_s = −inf). The constants are a
// first choice; docs/results/h200-decode.md times the rule next to every forced count (it
// loses to 8 splits at B = 1, MHA, N >= 16k and to 4 at B = 8, GQA 32/8: chapter 12). Tests
// force the split count (decode_splits(step, p, forced)):
// one split must give what many give, within the tolerance.
//
// Memory traffic: every cached K/V row of a sequence read once per K/V head (once per row
// chunk when group · q_len > 32), the new rows written once, Q and O once, and the workspace,
// num_splits · B · H_q · q_len · (d + 1) · 4 bytes, written and read once.
//
// The kernels (CUDA 13.0, sm_90, nvcc -Xptxas -v; fp16 and bf16 compile to the same counts):
//
//   kernel                 d     threads  smem     registers  spills
//   append                 any   128      0        32         none
//   split-KV attention     64    128      52 KB    116        none
//   split-KV attention     128   128      92 KB    123        none
//   combine                64    128      0        32         none
//   combine                128   128      0        32         none
//
// (compile one alone: nvcc -std=c++17 -O3 --expt-relaxed-constexpr
//  -gencode arch=compute_90,code=sm_90 -I. -Xptxas -v -c steps/12_decode/decode_d128_bf16.cu)
//
// Not yet (later steps): the tensor cores (rows per block are few, the cache's bytes bound the
// kernel; see decode_params.cuh), fp32, head dims other than 64 and 128, skipping the
// workspace when num_splits = 1, and a split rule fitted to the measurements (bin/bench_decode
// times the rule's choice next to every forced split count; docs/results/h200-decode.md shows
// where it loses, and chapter 12 why).
//
// Files, in reading order:
//   decode_params.cuh   tiles, parameters, the split rule's constants, the launchers
//   append.cu           the append kernel
//   decode_kernel.cuh   the split-KV attention kernel and the combine kernel
//   decode_d*_*.cu      one instantiation per (head dim, dtype)
//   api.cu              this file: the split rule, registration
//   decode_step.cuh     dispatch, device limits and the step's DecodeStepInfo (with the
//                       candidate's)
//   probe/probe.cu      tiny cases with PASS/FAIL lines, to run first on a new machine
//   candidate/          a candidate next attention kernel, the decoding step "12_decode_v2"
//                       (decode_params.cuh: its design and prediction)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/decode_registry.h"
#include "decode_params.cuh"
#include "decode_step.cuh"

namespace fa::step12 {

int num_splits(const DecodeProblem& p, int sm_count) {
  return num_splits_for(p, sm_count, DecodeTraits<64>::kMaxRows, false);
}

int num_splits_for(const DecodeProblem& p, int sm_count, int rows_per_block, bool round_down) {
  const long long base =
      static_cast<long long>(p.batch) * p.heads_kv * row_chunks(p, rows_per_block);
  const long long target = static_cast<long long>(kTargetBlocksPerSm) * std::max(sm_count, 1);
  if (base >= target) return 1;
  const int block_n = DecodeTraits<64>::kBlockN;
  const long long tiles = (p.max_kv_len() + block_n - 1) / block_n;
  long long splits = round_down ? target / base : (target + base - 1) / base;
  splits = std::min(splits, std::max(1LL, tiles / kMinTilesPerSplit));
  splits = std::clamp(splits, 1LL, static_cast<long long>(kMaxSplits));
  // The kernel deals ⌈tiles / splits⌉ tiles per split: keep only the splits that get some
  // of the longest sequence (47 tiles in 23 splits are 16 splits of 3, not 7 more empty ones).
  const long long per_split = (tiles + splits - 1) / splits;
  return static_cast<int>(std::max(1LL, (tiles + per_split - 1) / per_split));
}

std::size_t workspace_bytes(const DecodeProblem& p, int splits) {
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.heads_q * p.q_len;
  return static_cast<std::size_t>(std::max(splits, 0)) * rows * (p.head_dim + 1) * sizeof(float);
}

DecodeParams make_params(const DecodeProblem& prob, const DecodeTensors& t, int splits,
                         void* workspace) {
  DecodeParams p{};
  p.q = t.q;
  p.k_new = t.k_new;
  p.v_new = t.v_new;
  p.k_cache = t.k_cache;
  p.v_cache = t.v_cache;
  p.cache_lens = t.cache_lens;
  p.block_table = t.block_table;
  p.o = t.o;
  p.lse = t.lse;
  const std::size_t rows = static_cast<std::size_t>(prob.batch) * prob.heads_q * prob.q_len;
  p.o_part = static_cast<float*>(workspace);
  p.lse_part = p.o_part + static_cast<std::size_t>(splits) * rows * prob.head_dim;
  p.batch = prob.batch;
  p.heads_q = prob.heads_q;
  p.heads_kv = prob.heads_kv;
  p.group = prob.group_size();
  p.head_dim = prob.head_dim;
  p.q_len = prob.q_len;
  p.paged = prob.cache == CacheKind::Paged ? 1 : 0;
  p.n_max = prob.n_max;
  p.page_size = prob.page_size;
  p.num_pages = prob.num_pages;
  p.max_pages = prob.max_pages;
  p.capacity = prob.capacity();
  p.num_splits = splits;
  p.row_chunks = row_chunks(prob);
  p.scale_log2 = prob.softmax_scale() * 1.4426950408889634f;  // log2(e)
  return p;
}

namespace {

// What the registration (decode_step.cuh, shared with the candidate next version) needs of
// this step's kernels.
struct ChapterKernels {
  static constexpr const char* kName = "12_decode";
  static constexpr const char* kLesson =
      "decoding: split-KV attention over a paged or contiguous cache, then a combine";
  static constexpr bool kCandidate = false;
  static constexpr int kRows = DecodeTraits<64>::kMaxRows;
  static int num_splits(const DecodeProblem& p, int sm_count) {
    return step12::num_splits(p, sm_count);
  }
  static std::size_t smem_bytes(int head_dim) {
    return head_dim == 128 ? DecodeTraits<128>::kSmemBytes : DecodeTraits<64>::kSmemBytes;
  }
  template <int kHeadDim, class Element>
  static void launch(const DecodeParams& p, cudaStream_t stream) {
    run_attend_combine<kHeadDim, Element>(p, stream);
  }
};

DecodeStepInfo info() { return DecodeStep<ChapterKernels>::info(); }

FA_REGISTER_DECODE_STEP(info);

}  // namespace
}  // namespace fa::step12
