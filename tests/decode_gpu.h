// decode_gpu.h — one decoding case run on the GPU (decode_judge.h makes and judges it), shared
// by the GPU tests of the decoding steps (test_decode_gpu.cpp) and their probes
// (steps/NN_slug/probe/probe.cu): O, L and the workspace poisoned with NaN, the step run through
// fa::run_decode, O, L and both caches read back. run_far_case does the same with the device
// cache of a far problem (decode_cases.h: the rows past element 2^31 and 2^32), reading back
// only the rows the host case holds.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/device_buffer.h"
#include "common/device_problem.h"
#include "common/launch.h"
#include "tests/decode_cases.h"
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
/// \brief The workspace `step` needs for `p` in `splits` splits, poisoned with NaN (0xFF bytes),
/// or an empty buffer when the step needs none.
inline DeviceBuffer poisoned_workspace(const DecodeStepInfo& step, const DecodeProblem& p,
                                       int splits) {
  const std::size_t ws_bytes = step.workspace_bytes ? step.workspace_bytes(p, splits) : 0;
  DeviceBuffer ws(ws_bytes);
  if (ws_bytes > 0) CUDA_CHECK(cudaMemset(ws.get(), 0xFF, ws_bytes));
  return ws;
}

inline DecodeRun run_case(const DecodeStepInfo& step, const DecodeCase& c, int forced_splits = 0,
                          DecodePhases phases = DecodePhases::AppendAndAttend) {
  DecodeDevice dev(c);
  DecodeRun r;
  r.num_splits = decode_splits(step, c.p, forced_splits);
  const DeviceBuffer ws = poisoned_workspace(step, c.p, r.num_splits > 0 ? r.num_splits : 1);
  run_decode(step, c.p, dev.tensors(), r.num_splits, ws.get(), nullptr, phases);
  dev.download(c.p, &r);
  return r;
}

/// \brief Device bytes run_far_case() needs for `far`: both caches, then Q, the new rows, O, L
/// and a workspace of the most splits, rounded up. \param far the far problem
/// \return the bytes
inline std::size_t far_case_bytes(const DecodeProblem& far) {
  const std::size_t es = dtype_size(far.dtype);
  const std::size_t rows = static_cast<std::size_t>(far.batch) * far.heads_q * far.q_len;
  return 2 * static_cast<std::size_t>(far.cache_elems()) * es +
         (2 * static_cast<std::size_t>(far.q_elems()) + 2 * far.new_kv_elems()) * es +
         rows * (far.head_dim + 1) * 4 * 129 + (std::size_t{64} << 20);
}

/// \brief Runs `step` on case c (made for a small problem, decode_judge.h) with the device
/// cache of `far` (far_problem(c.p, &spans), decode_cases.h): Q and the new rows are c's, the
/// far caches are NaN except the rows of the spans, which hold c's cache; O, L and the
/// workspace are poisoned. What comes back is shaped like c: O, L, and c's cache rows read back
/// from where the spans put them, so that judge_case(c, run) judges the step as on c itself.
/// \param step the decoding step \param c the small case \param far its far problem
/// \param spans where c's cache rows lie in far's \param forced_splits 0 or the split count
/// \return what came back
inline DecodeRun run_far_case(const DecodeStepInfo& step, const DecodeCase& c,
                              const DecodeProblem& far, const std::vector<RowSpan>& spans,
                              int forced_splits = 0) {
  const DecodeProblem& p = c.p;
  const std::size_t es = dtype_size(p.dtype);
  const std::int64_t row_elems = std::int64_t{p.heads_kv} * p.head_dim;
  DecodeBuffers dev(far);
  upload_as(p.dtype, c.q.data(), c.q.size(), dev.q.get());
  upload_as(p.dtype, c.k_new.data(), c.k_new.size(), dev.k_new.get());
  upload_as(p.dtype, c.v_new.data(), c.v_new.size(), dev.v_new.get());
  CUDA_CHECK(cudaMemset(dev.k_cache.get(), 0xFF, dev.k_cache.bytes()));  // NaN in every dtype
  CUDA_CHECK(cudaMemset(dev.v_cache.get(), 0xFF, dev.v_cache.bytes()));
  auto far_at = [&](const DeviceBuffer& cache, std::int64_t row) {
    return static_cast<char*>(cache.get()) + static_cast<std::size_t>(row * row_elems) * es;
  };
  for (const RowSpan& s : spans) {
    const auto n = static_cast<std::size_t>(s.rows * row_elems);
    upload_as(p.dtype, c.before.k.data() + s.small * row_elems, n, far_at(dev.k_cache, s.far));
    upload_as(p.dtype, c.before.v.data() + s.small * row_elems, n, far_at(dev.v_cache, s.far));
  }
  dev.poison();
  DecodeRun r;
  r.num_splits = decode_splits(step, far, forced_splits);
  const DeviceBuffer ws = poisoned_workspace(step, far, r.num_splits);
  run_decode(step, far, dev.tensors(), r.num_splits, ws.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  r.o.resize(p.q_elems());
  r.lse.resize(p.lse_elems());
  download_as(p.dtype, dev.o.get(), r.o.size(), r.o.data());
  CUDA_CHECK(cudaMemcpy(r.lse.data(), dev.lse.get(), dev.lse.bytes(), cudaMemcpyDeviceToHost));
  r.k.assign(p.cache_elems(), 0.f);
  r.v.assign(p.cache_elems(), 0.f);
  for (const RowSpan& s : spans) {
    const auto n = static_cast<std::size_t>(s.rows * row_elems);
    download_as(p.dtype, far_at(dev.k_cache, s.far), n, r.k.data() + s.small * row_elems);
    download_as(p.dtype, far_at(dev.v_cache, s.far), n, r.v.data() + s.small * row_elems);
  }
  return r;
}

}  // namespace fa::test
