// decode_gpu.h — one decoding case run on the GPU (decode_judge.h makes and judges it), shared
// by the GPU tests of the decoding steps (test_decode_gpu.cpp) and their probes
// (steps/NN_slug/probe/probe.cu): O, L and the workspace poisoned with NaN, the step run through
// fa::run_decode, O, L and both caches read back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/device_buffer.h"
#include "common/device_problem.h"
#include "common/launch.h"
#include "tests/decode_judge.h"

namespace fa::test {

/// \brief The device copies of a case: inputs, cache, O and L (poisoned), the tables.
struct DecodeDevice : DecodeBuffers {
  /// \brief Uploads c; O and L are filled with NaN (all bits set: NaN in every dtype).
  /// \param c the case
  explicit DecodeDevice(const DecodeCase& c) : DecodeBuffers(c.p) {
    const DecodeProblem& p = c.p;
    upload_as(p.dtype, c.q.data(), c.q.size(), q.get());
    upload_as(p.dtype, c.k_new.data(), c.k_new.size(), k_new.get());
    upload_as(p.dtype, c.v_new.data(), c.v_new.size(), v_new.get());
    upload_as(p.dtype, c.before.k.data(), c.before.k.size(), k_cache.get());
    upload_as(p.dtype, c.before.v.data(), c.before.v.size(), v_cache.get());
    poison();
  }
  /// \brief Waits for the device and reads O, L and the caches back.
  /// \param p the problem \param r receives them
  void download(const DecodeProblem& p, DecodeRun* r) const {
    CUDA_CHECK(cudaDeviceSynchronize());
    r->o.resize(p.q_elems());
    r->lse.resize(p.lse_elems());
    r->k.resize(p.cache_elems());
    r->v.resize(p.cache_elems());
    download_as(p.dtype, o.get(), r->o.size(), r->o.data());
    CUDA_CHECK(cudaMemcpy(r->lse.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));
    download_as(p.dtype, k_cache.get(), r->k.size(), r->k.data());
    download_as(p.dtype, v_cache.get(), r->v.size(), r->v.data());
  }
};

/// \brief Runs `step` on the case: `forced_splits` splits (0: the step's rule), a workspace
/// poisoned with NaN (a step must not count on its contents). Throws what run_decode throws.
/// \param step the decoding step \param c the case \param forced_splits 0 or the split count
/// \param phases the whole step, or its attention alone (over c.before as it is)
/// \return what came back
inline DecodeRun run_case(const DecodeStepInfo& step, const DecodeCase& c, int forced_splits = 0,
                          DecodePhases phases = DecodePhases::AppendAndAttend) {
  DecodeDevice dev(c);
  DecodeRun r;
  r.num_splits = decode_splits(step, c.p, forced_splits);
  const std::size_t ws_bytes =
      step.workspace_bytes ? step.workspace_bytes(c.p, r.num_splits > 0 ? r.num_splits : 1) : 0;
  DeviceBuffer ws(ws_bytes);
  if (ws_bytes > 0) CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws_bytes));
  run_decode(step, c.p, dev.tensors(), r.num_splits, ws.get(), nullptr, phases);
  dev.download(c.p, &r);
  return r;
}

}  // namespace fa::test
