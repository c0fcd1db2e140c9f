// api_v2.cu — the candidate next version of step 12's attention kernel, registered as the
// decoding step "12_decode_v2" (DecodeStepInfo::candidate: found by its name, not by the
// chapter's number), so that bin/bench_decode times it beside "12_decode" in one run and the
// decoding GPU tests (tests/test_decode_gpu.cpp) judge it the same way. The append is step
// 12's; the attention kernel (tensor cores) and its combine kernel are in
// decode_kernel_mma.cuh, the scalar kernel it replaced in decode_kernel_v2.cuh (timed by
// bin/variants_12); decode_params.cuh and docs/12-decode.md give the designs and predictions.
#include <cstddef>

#include "../decode_step.cuh"
#include "decode_kernel_mma.cuh"

namespace fa::step12 {
namespace {

struct CandidateKernels {
  static constexpr const char* kName = "12_decode_v2";
  static constexpr const char* kLesson =
      "decoding, candidate kernel: S = Q K^T and O += P V on tensor cores, every warp its own "
      "keys, three cp.async stages into swizzled rows, a tile's block-table entries read once, "
      "a whole tile's copies from one base address, a combine block per row";
  static constexpr bool kCandidate = true;
  template <int kHeadDim>
  using Traits = DecodeTraitsMma<kHeadDim, /*kStages_=*/3, /*kWarps_=*/4, /*kBlockN_=*/64,
                                 /*kSplitP_=*/true, /*kBulk_=*/false, /*kPrefetch_=*/0,
                                 /*kEarlyTrigger_=*/false, /*kSwizzle_=*/true,
                                 /*kTileTable_=*/true, /*kL2Bytes_=*/0, /*kTileBase_=*/true>;
  static constexpr int kRows = Traits<64>::kMaxRows;             // 16 rows per block
  static int num_splits(const DecodeProblem& p, int sm_count) {  // one wave (decode_params.cuh)
    return num_splits_for(p, sm_count, kRows, true);
  }
  static std::size_t smem_bytes(int head_dim) {
    return head_dim == 128 ? Traits<128>::kSmemBytes : Traits<64>::kSmemBytes;
  }
  template <int kHeadDim, class Element>
  static void launch(const DecodeParams& p, cudaStream_t stream) {
    using T = Traits<kHeadDim>;
    launch_attend_combine_mma<T, Element>(decode_attention_mma_kernel<T, Element>, p, stream);
  }
};

DecodeStepInfo info() { return DecodeStep<CandidateKernels>::info(); }

FA_REGISTER_DECODE_STEP(info);

}  // namespace
}  // namespace fa::step12
