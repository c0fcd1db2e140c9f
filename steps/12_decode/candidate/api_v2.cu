// api_v2.cu — the candidate next version of step 12's attention kernel, registered as the
// decoding step "12_decode_v2" (DecodeStepInfo::candidate: found by its name, not by the
// chapter's number), so that bin/bench_decode times it beside "12_decode" in one run and the
// decoding GPU tests (tests/test_decode_gpu.cpp) judge it the same way. The append and the
// combine kernel are step 12's; decode_params.cuh gives the design and the prediction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/decode_registry.h"
#include "decode_kernel_v2.cuh"

namespace fa::step12 {
namespace {

constexpr const char* kStepName = "12_decode_v2";
constexpr int kRows = DecodeTraitsV2<64>::kMaxRows;

int num_splits_v2(const DecodeProblem& p, int sm_count) {
  return num_splits_for(p, sm_count, kRows, true);
}

std::size_t smem_bytes(int head_dim) {
  return head_dim == 128 ? DecodeTraitsV2<128>::kSmemBytes : DecodeTraitsV2<64>::kSmemBytes;
}

std::string check_device(const DecodeProblem& p, int splits, const DeviceLimits& prop) {
  if (prop.major < 8)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " is below the 8.0 needed by cp.async for step " + kStepName;
  const long long y = static_cast<long long>(p.heads_kv) * row_chunks(p, kRows);
  return check_fits(kStepName, prop, dense_problem(p, 0), smem_bytes(p.head_dim),
                    {{0, splits, "num_splits (" + std::to_string(splits) + ")"},
                     {1, y,
                      "heads_kv * row chunks (" + std::to_string(p.heads_kv) + " * " +
                          std::to_string(row_chunks(p, kRows)) + ")"},
                     {1, p.batch, "batch (" + std::to_string(p.batch) + ") of the append"},
                     {2, p.batch, "batch (" + std::to_string(p.batch) + ")"}});
}

void check_supported(const DecodeProblem& prob) {  // guards direct calls
  if ((prob.dtype != DType::F16 && prob.dtype != DType::BF16) ||
      (prob.head_dim != 64 && prob.head_dim != 128))
    throw std::invalid_argument(std::string("dtype ") + dtype_name(prob.dtype) + " with head_dim " +
                                std::to_string(prob.head_dim) + " is not supported by step " +
                                kStepName);
}

DecodeParams params_v2(const DecodeProblem& prob, const DecodeTensors& t, int splits,
                       void* workspace) {
  DecodeParams p = make_params(prob, t, splits, workspace);
  p.row_chunks = row_chunks(prob, kRows);  // blocks of 8 rows
  return p;
}

template <class Element>
void attend(int head_dim, const DecodeParams& p, cudaStream_t stream) {
  if (head_dim == 128)
    run_attend_combine_v2<128, Element>(p, stream);
  else
    run_attend_combine_v2<64, Element>(p, stream);
}

void attend_combine(const DecodeProblem& prob, const DecodeParams& p, cudaStream_t stream) {
  if (prob.dtype == DType::BF16)
    attend<__nv_bfloat16>(prob.head_dim, p, stream);
  else
    attend<__half>(prob.head_dim, p, stream);
}

void run(const DecodeProblem& prob, const DecodeTensors& t, int splits, void* workspace,
         cudaStream_t stream) {
  check_supported(prob);
  const DecodeParams p = params_v2(prob, t, splits, workspace);
  run_append(p, stream);
  attend_combine(prob, p, stream);
}

void attend_only(const DecodeProblem& prob, const DecodeTensors& t, int splits, void* workspace,
                 cudaStream_t stream) {
  check_supported(prob);
  attend_combine(prob, params_v2(prob, t, splits, workspace), stream);
}

DecodeStepInfo info() {
  DecodeStepInfo s;
  s.number = 12;
  s.name = kStepName;
  s.lesson =
      "decoding, candidate kernel: every warp its own keys, three cp.async stages, one page "
      "lookup per tile";
  s.candidate = true;
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {64, 128};
  s.alignment = 16;
  s.max_splits = kMaxSplits;
  s.num_splits = num_splits_v2;
  s.workspace_bytes = workspace_bytes;
  s.check_device = check_device;
  s.run = run;
  s.attend = attend_only;
  return s;
}

FA_REGISTER_DECODE_STEP(info);

}  // namespace
}  // namespace fa::step12
