// decode_step.cuh — the host side a decoding step of this chapter registers: its split rule,
// device check, dispatch over (dtype, head dim) and DecodeStepInfo, written once for the
// chapter's kernel (api.cu) and its candidate next version (candidate/api_v2.cu). `Kernels`
// says what differs:
//
//   kName, kLesson, kCandidate   the step's name, lesson line and DecodeStepInfo::candidate
//   kRows                        query rows per block (the row chunks of a K/V head's group)
//   num_splits(p, sm_count)      the split rule
//   smem_bytes(d)                the attention kernel's shared memory at head dim d
//   launch<d, Element>(p, s)     the attention kernel, then the combine kernel
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/decode_registry.h"
#include "decode_params.cuh"

namespace fa::step12 {

template <class Kernels>
struct DecodeStep {
  static std::string check_device(const DecodeProblem& p, int splits, const DeviceLimits& prop) {
    if (prop.major < 8)
      return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
             " is below the 8.0 needed by cp.async for step " + Kernels::kName;
    const int chunks = row_chunks(p, Kernels::kRows);
    const long long y = static_cast<long long>(p.heads_kv) * chunks;
    return check_fits(Kernels::kName, prop, dense_problem(p, 0), Kernels::smem_bytes(p.head_dim),
                      {{0, splits, "num_splits (" + std::to_string(splits) + ")"},
                       {1, y,
                        "heads_kv * row chunks (" + std::to_string(p.heads_kv) + " * " +
                            std::to_string(chunks) + ")"},
                       {1, p.batch, "batch (" + std::to_string(p.batch) + ") of the append"},
                       {2, p.batch, "batch (" + std::to_string(p.batch) + ")"}});
  }

  static void check_supported(const DecodeProblem& prob) {  // guards direct calls
    if ((prob.dtype != DType::F16 && prob.dtype != DType::BF16) ||
        (prob.head_dim != 64 && prob.head_dim != 128))
      throw std::invalid_argument(std::string("dtype ") + dtype_name(prob.dtype) +
                                  " with head_dim " + std::to_string(prob.head_dim) +
                                  " is not supported by step " + Kernels::kName);
  }

  static DecodeParams params(const DecodeProblem& prob, const DecodeTensors& t, int splits,
                             void* workspace) {
    DecodeParams p = make_params(prob, t, splits, workspace);
    p.row_chunks = row_chunks(prob, Kernels::kRows);
    return p;
  }

  template <class Element>
  static void attend(int head_dim, const DecodeParams& p, cudaStream_t stream) {
    if (head_dim == 128)
      Kernels::template launch<128, Element>(p, stream);
    else
      Kernels::template launch<64, Element>(p, stream);
  }

  static void attend_combine(const DecodeProblem& prob, const DecodeParams& p,
                             cudaStream_t stream) {
    if (prob.dtype == DType::BF16)
      attend<__nv_bfloat16>(prob.head_dim, p, stream);
    else
      attend<__half>(prob.head_dim, p, stream);
  }

  static void run(const DecodeProblem& prob, const DecodeTensors& t, int splits, void* workspace,
                  cudaStream_t stream) {
    check_supported(prob);
    const DecodeParams p = params(prob, t, splits, workspace);
    run_append(p, stream);
    attend_combine(prob, p, stream);
  }

  // Phases 2 and 3 alone, over a cache that already holds the step's rows (the benchmark's).
  static void attend_only(const DecodeProblem& prob, const DecodeTensors& t, int splits,
                          void* workspace, cudaStream_t stream) {
    check_supported(prob);
    attend_combine(prob, params(prob, t, splits, workspace), stream);
  }

  static DecodeStepInfo info() {
    DecodeStepInfo s;
    s.number = 12;
    s.name = Kernels::kName;
    s.lesson = Kernels::kLesson;
    s.candidate = Kernels::kCandidate;
    s.dtypes = {DType::F16, DType::BF16};
    s.head_dims = {64, 128};
    s.alignment = 16;  // cp.async and the append move 16 bytes
    s.max_splits = kMaxSplits;
    s.num_splits = Kernels::num_splits;
    s.workspace_bytes = workspace_bytes;
    s.check_device = check_device;
    s.run = run;
    s.attend = attend_only;
    return s;
  }
};

}  // namespace fa::step12
