// api_v2.cu — the candidate next version of step 12's attention kernel, registered as the
// decoding step "12_decode_v2" (DecodeStepInfo::candidate: found by its name, not by the
// chapter's number), so that bin/bench_decode times it beside "12_decode" in one run and the
// decoding GPU tests (tests/test_decode_gpu.cpp) judge it the same way. The append and the
// combine kernel are step 12's; decode_params.cuh gives the design and the prediction.
#include <cstddef>

#include "../decode_step.cuh"
#include "decode_kernel_v2.cuh"

namespace fa::step12 {
namespace {

struct CandidateKernels {
  static constexpr const char* kName = "12_decode_v2";
  static constexpr const char* kLesson =
      "decoding, candidate kernel: every warp its own keys, three cp.async stages, one page "
      "lookup per tile";
  static constexpr bool kCandidate = true;
  static constexpr int kRows = DecodeTraitsV2<64>::kMaxRows;     // 8 rows per block
  static int num_splits(const DecodeProblem& p, int sm_count) {  // one wave (decode_params.cuh)
    return num_splits_for(p, sm_count, kRows, true);
  }
  static std::size_t smem_bytes(int head_dim) {
    return head_dim == 128 ? DecodeTraitsV2<128>::kSmemBytes : DecodeTraitsV2<64>::kSmemBytes;
  }
  template <int kHeadDim, class Element>
  static void launch(const DecodeParams& p, cudaStream_t stream) {
    run_attend_combine_v2<kHeadDim, Element>(p, stream);
  }
};

DecodeStepInfo info() { return DecodeStep<CandidateKernels>::info(); }

FA_REGISTER_DECODE_STEP(info);

}  // namespace
}  // namespace fa::step12
