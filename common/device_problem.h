/// \file device_problem.h
/// \brief Device copies of the inputs (inputs.h), O, L and a step's workspace.
#pragma once

#include <cstddef>
#include <vector>

#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/device_buffer.h"
#include "common/inputs.h"
#include "common/problem.h"

namespace fa {

/// \brief Device copies of the inputs in the problem's dtype, plus O and L, plus a step's
/// workspace. O and L are poisoned with NaN by poison(), so an unwritten element fails.
class DeviceProblem {
 public:
  /// \param in the inputs to upload \param workspace_bytes scratch for the step (may be 0)
  DeviceProblem(const HostInputs& in, std::size_t workspace_bytes);
  /// \brief Fills O and L with NaN.
  void poison();
  /// \return the device pointers of Q, K, V, O and L
  DeviceTensors tensors() const;
  /// \return the step's workspace (null when it needs none)
  void* workspace() const { return workspace_.get(); }
  /// \brief Copies O (converted to float) and L back to the host.
  /// \param o receives O in Q's layout \param lse receives L, [B, H_q, N_q]
  void download(std::vector<float>* o, std::vector<float>* lse) const;
  /// \brief Bytes held on the device (Q, K, V, O, L, workspace).
  /// \return the total
  std::size_t device_bytes() const;

 private:
  Problem p_;
  DeviceBuffer q_, k_, v_, o_, lse_, workspace_;
};

/// \brief Device copies of a backward call's inputs (Q, K, V from `in`; O, L and dO given) in
/// the problem's dtype, its gradient outputs dQ, dK and dV, and a step's backward workspace.
/// The gradients and the workspace are poisoned with NaN by poison(), so an unwritten element
/// fails and a step that counts on a zeroed workspace fails too.
class DeviceBackward {
 public:
  /// \param in Q, K and V \param o O (q_elems() values) \param lse L (lse_elems() values)
  /// \param d_o dO (q_elems() values) \param workspace_bytes scratch for the step (may be 0)
  DeviceBackward(const HostInputs& in, const std::vector<float>& o, const std::vector<float>& lse,
                 const std::vector<float>& d_o, std::size_t workspace_bytes);
  /// \brief Fills dQ, dK, dV and the workspace with NaN.
  void poison();
  /// \return the device pointers of the inputs and the gradients
  BackwardTensors tensors() const;
  /// \return the step's workspace (null when it needs none)
  void* workspace() const { return workspace_.get(); }
  /// \brief Waits for the device, then copies dQ, dK and dV back, converted to float.
  /// \param dq receives dQ (Q's layout) \param dk receives dK \param dv receives dV (K's layout)
  void download(std::vector<float>* dq, std::vector<float>* dk, std::vector<float>* dv) const;

 private:
  Problem p_;
  DeviceBuffer q_, k_, v_, o_, lse_, d_o_, dq_, dk_, dv_, workspace_;
};

/// \brief Uploads float values to `dst` as dtype `t` (dst holds n elements of t).
/// \param t the device type \param src n floats on the host \param n the count
/// \param dst device memory
void upload_as(DType t, const float* src, std::size_t n, void* dst);
/// \brief Downloads n elements of dtype `t` from `src` into float.
/// \param t the device type \param src device memory \param n the count
/// \param dst n floats on the host
void download_as(DType t, const void* src, std::size_t n, float* dst);

/// \brief Device buffers of one decoding step (decode.h): Q, the step's new K and V rows, both
/// caches (contiguous or the pool of pages), O and L, allocated for `p`'s sizes, with the cached
/// lengths and the block table uploaded. Filling Q, the rows and the caches is the caller's
/// (random inputs in the decoding benchmark, a case's values in the decoding tests).
struct DecodeBuffers {
  DeviceBuffer q;        ///< Q [B, q_len, H_q, d]
  DeviceBuffer k_new;    ///< the step's new K rows [B, q_len, H_kv, d]
  DeviceBuffer v_new;    ///< the step's new V rows
  DeviceBuffer k_cache;  ///< the K cache, contiguous or the pool of pages
  DeviceBuffer v_cache;  ///< the V cache, the same layout
  DeviceBuffer lens;     ///< cached lengths [B] (int)
  DeviceBuffer table;    ///< the block table [B, max_pages] (int; empty when contiguous)
  DeviceBuffer o;        ///< O [B, q_len, H_q, d]
  DeviceBuffer lse;      ///< L [B, H_q, q_len] (fp32)
  /// \brief Allocates the buffers of `p` and uploads its lengths and block table.
  /// \param p the problem
  explicit DecodeBuffers(const DecodeProblem& p);
  /// \return the device pointers (block_table null for a contiguous cache)
  DecodeTensors tensors() const;
  /// \brief O and L all ones in every bit (NaN in each dtype), so that an element a call leaves
  /// unwritten is seen.
  void poison();
};

}  // namespace fa
