/// \file perf.h
/// \brief FLOP and byte counts (the convention of docs/conventions.md) and a CUDA-event
/// timer.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/problem.h"

namespace fa {

/// \brief Forward FLOPs by the FlashAttention convention: 4·B·H_q·N_q·N_kv·d, halved when
/// causal (two matmuls of 2·N_q·N_kv·d each; softmax not counted).
/// \param p the problem \return the FLOP count
inline double attention_flops(const Problem& p) {
  const double f = 4.0 * p.batch * p.heads_q * double(p.n_q) * double(p.n_kv) * p.head_dim;
  return p.causal ? f / 2 : f;
}

/// \brief The fewest bytes any forward pass must move through device memory: read Q, K, V
/// once, write O and L once.
/// \param p the problem \return the byte count
inline double min_io_bytes(const Problem& p) {
  const double e = double(dtype_size(p.dtype));
  return e * (2.0 * p.q_elems() + 2.0 * p.kv_elems()) + 4.0 * p.lse_elems();
}

/// \brief Backward FLOPs: 2.5 × the forward's (attention_flops), the FlashAttention
/// convention: five matrix products of 2·N_q·N_kv·d per query head (S recomputed, dV, dP, dQ,
/// dK) where the forward has two; halved when causal, as the forward.
/// \param p the problem \return the FLOP count
inline double attention_backward_flops(const Problem& p) { return 2.5 * attention_flops(p); }

/// \brief The fewest bytes any backward pass must move through device memory: read Q, K, V,
/// O, dO (the storage type) and L (fp32) once, write dQ, dK and dV once.
/// \param p the problem \return the byte count
inline double backward_min_io_bytes(const Problem& p) {
  const double e = double(dtype_size(p.dtype));
  return e * (4.0 * p.q_elems() + 4.0 * p.kv_elems()) + 4.0 * p.lse_elems();
}

/// \brief Bytes of one N×N matrix (all batches and query heads) in fp32.
/// \param p the problem \return 4·B·H_q·N_q·N_kv
inline double nxn_matrix_bytes(const Problem& p) {
  return 4.0 * p.batch * p.heads_q * double(p.n_q) * double(p.n_kv);
}

/// \brief Times GPU work with CUDA events on one stream.
class EventTimer {
 public:
  EventTimer() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  /// \brief Records the start event. \param s the stream the timed work runs on
  void start(cudaStream_t s = nullptr) { CUDA_CHECK(cudaEventRecord(start_, s)); }
  /// \brief Records the stop event, waits for it, and returns the elapsed milliseconds.
  /// \param s the stream given to start() \return milliseconds since start()
  float stop_ms(cudaStream_t s = nullptr) {
    CUDA_CHECK(cudaEventRecord(stop_, s));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{}, stop_{};
};

/// \brief Median of a list of times.
/// \param v the times (taken by value: sorted) \return the median, 0 for an empty list
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// \brief Does nothing: time_median_ms's default `before`.
struct NothingBefore {
  /// \brief Queues nothing.
  void operator()() const {}
};

/// \brief Runs `fn` `warmup` times, then times `reps` single runs with events; returns the
/// median in milliseconds.
/// \param fn the work to time (launches on `s`) \param warmup untimed runs first
/// \param reps timed runs \param s the stream
/// \param before queued before each timed run's start event, untimed (e.g. the benchmark's
/// GPU spin) \return the median time in milliseconds
template <typename Fn, typename Before = NothingBefore>
double time_median_ms(Fn&& fn, int warmup, int reps, cudaStream_t s = nullptr,
                      Before&& before = Before{}) {
  for (int i = 0; i < warmup; ++i) fn();
  EventTimer t;
  std::vector<double> ms;
  ms.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    before();
    t.start(s);
    fn();
    ms.push_back(t.stop_ms(s));
  }
  return median(ms);
}

}  // namespace fa
