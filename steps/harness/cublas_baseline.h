/// \file cublas_baseline.h
/// \brief "Standard attention" with cuBLAS, the baseline every step is raced
/// against: S = scale·QKᵀ (SGEMM) → softmax (one kernel, P over S in place) → O = PV (SGEMM).
/// fp32, TF32 off, so it runs on the same CUDA cores as steps 01–04.
#pragma once

#include <cublas_v2.h>

#include <cstddef>

#include "common/device_buffer.h"
#include "common/problem.h"
#include "common/registry.h"

/// \brief The cuBLAS baseline (standard attention, S and P in device memory).
namespace fa::baseline {

/// \brief cuBLAS standard attention for one problem (fp32; any layout, causal, GQA).
class CublasAttention {
 public:
  /// \brief Allocates the N×N scratch for `p`; throws std::invalid_argument if p is not fp32.
  /// \param p the problem every later run() computes
  explicit CublasAttention(const Problem& p);
  ~CublasAttention();
  CublasAttention(const CublasAttention&) = delete;
  CublasAttention& operator=(const CublasAttention&) = delete;

  /// \brief O and L for the tensors in `t`, on `stream`.
  /// \param t the device pointers \param stream the CUDA stream
  void run(const DeviceTensors& t, cudaStream_t stream = nullptr);
  /// \brief Device bytes beyond Q, K, V, O, L: one fp32 N_q × N_kv matrix per (b, h).
  /// \param p the problem \return the byte count
  static std::size_t workspace_bytes(const Problem& p);
  /// \brief N×N bytes written to device memory: S by the GEMM, then P by the softmax.
  /// \param p the problem \return the byte count
  static std::size_t nxn_bytes_written(const Problem& p) { return 2 * workspace_bytes(p); }

 private:
  Problem p_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer s_;
};

}  // namespace fa::baseline
