#include "steps/harness/cublas_baseline.h"

#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>

#include <stdexcept>
#include <string>

#include "common/cuda_check.h"

#define CUBLAS_CHECK(expr)                                                              \
  do {                                                                                  \
    const cublasStatus_t st_ = (expr);                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                   \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                               ": " #expr " failed: " + cublasGetStatusString(st_));    \
  } while (0)

namespace fa::baseline {
namespace {

constexpr int kThreads = 256;

// In place: S row → P row, and L. One block per row. Masked scores are set here (the GEMM
// computed them all), bottom-right aligned like every step. The row's max and sum are block
// reductions from CUB (shipped with the CUDA toolkit): the baseline is built from library
// parts, cuBLAS and CUB, and carries no copy of the steps' hand-written reduction (chapter 01
// teaches that one).
__global__ void softmax_rows(float* __restrict__ s, float* __restrict__ lse, int n_q, int n_kv,
                             bool causal) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage scratch;
  __shared__ float row_value;  // a reduction's result, from thread 0 to every thread
  const int i = blockIdx.x;
  const std::size_t row_index = std::size_t(blockIdx.y) * n_q + i;
  float* row = s + row_index * n_kv;
  const int end = causal ? min(max(i + n_kv - n_q + 1, 0), n_kv) : n_kv;
  // CUB leaves the result in thread 0; hand it to all, and free the scratch for the next use.
  auto to_all = [&](float v) {
    if (threadIdx.x == 0) row_value = v;
    __syncthreads();
    v = row_value;
    __syncthreads();
    return v;
  };
  float m = -INFINITY;
  for (int j = threadIdx.x; j < end; j += kThreads) m = fmaxf(m, row[j]);
  m = to_all(BlockReduce(scratch).Reduce(m, [](float a, float b) { return fmaxf(a, b); }));
  float l = 0.f;
  for (int j = threadIdx.x; j < end; j += kThreads) l += expf(row[j] - m);
  l = to_all(BlockReduce(scratch).Sum(l));
  const float inv_l = l != 0.f ? 1.f / l : 0.f;
  for (int j = threadIdx.x; j < n_kv; j += kThreads)
    row[j] = j < end ? expf(row[j] - m) * inv_l : 0.f;
  if (threadIdx.x == 0) lse[row_index] = l != 0.f ? m + logf(l) : -INFINITY;
}

}  // namespace

std::size_t CublasAttention::workspace_bytes(const Problem& p) {
  return sizeof(float) * std::size_t(p.batch) * p.heads_q * p.n_q * p.n_kv;
}

CublasAttention::CublasAttention(const Problem& p) : p_(p), s_(workspace_bytes(p)) {
  if (p.dtype != DType::F32)
    throw std::invalid_argument("dtype (" + std::string(dtype_name(p.dtype)) +
                                ") is not supported by cublas_baseline (fp32 only)");
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));  // plain fp32, no TF32
}

CublasAttention::~CublasAttention() {
  if (handle_) cublasDestroy(handle_);
}

void CublasAttention::run(const DeviceTensors& t, cudaStream_t stream) {
  CUBLAS_CHECK(cublasSetStream(handle_, stream));
  const Problem& p = p_;
  const Strides qs = p.q_strides(), kvs = p.kv_strides();
  const int g = p.group_size();
  const long long nn = static_cast<long long>(p.n_q) * p.n_kv;
  const float* q = static_cast<const float*>(t.q);
  const float* k = static_cast<const float*>(t.k);
  const float* v = static_cast<const float*>(t.v);
  float* o = static_cast<float*>(t.o);
  float* s = s_.as<float>();
  const float scale = p.softmax_scale(), one = 1.f, zero = 0.f;

  // cuBLAS is column-major: a row-major [rows × cols] matrix with row stride ld is its
  // transpose in cuBLAS's eyes. So Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ, batched over the query heads
  // that share one K/V head (stride 0 for K and V).
  const int kv_heads_per_call = g == 1 ? p.heads_kv : 1;
  const int batch_count = g == 1 ? p.heads_q : g;
  for (int b = 0; b < p.batch; ++b)
    for (int hk = 0; hk < p.heads_kv; hk += kv_heads_per_call) {
      const int h0 = hk * g;  // first query head of this call
      const float* qb = q + b * qs.batch + h0 * qs.head;
      const float* kb = k + b * kvs.batch + hk * kvs.head;
      float* sb = s + (static_cast<long long>(b) * p.heads_q + h0) * nn;
      const long long k_stride = g == 1 ? kvs.head : 0;
      CUBLAS_CHECK(cublasSgemmStridedBatched(
          handle_, CUBLAS_OP_T, CUBLAS_OP_N, p.n_kv, p.n_q, p.head_dim, &scale, kb, int(kvs.row),
          k_stride, qb, int(qs.row), qs.head, &zero, sb, p.n_kv, nn, batch_count));
    }
  softmax_rows<<<dim3(p.n_q, p.batch * p.heads_q), kThreads, 0, stream>>>(s, t.lse, p.n_q, p.n_kv,
                                                                          p.causal);
  CUDA_CHECK_LAUNCH();
  for (int b = 0; b < p.batch; ++b)
    for (int hk = 0; hk < p.heads_kv; hk += kv_heads_per_call) {
      const int h0 = hk * g;
      const float* vb = v + b * kvs.batch + hk * kvs.head;
      float* ob = o + b * qs.batch + h0 * qs.head;
      const float* sb = s + (static_cast<long long>(b) * p.heads_q + h0) * nn;
      const long long v_stride = g == 1 ? kvs.head : 0;
      CUBLAS_CHECK(cublasSgemmStridedBatched(handle_, CUBLAS_OP_N, CUBLAS_OP_N, p.head_dim, p.n_q,
                                             p.n_kv, &one, vb, int(kvs.row), v_stride, sb, p.n_kv,
                                             nn, &zero, ob, int(qs.row), qs.head, batch_count));
    }
}

}  // namespace fa::baseline
