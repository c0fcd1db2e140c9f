// merge.cu — step 13's merge of the ring's partial results (merge.h).
//
// A rank of the ring computes, at each of its P steps, a partial (O_s, L_s) of its query rows
// against the K/V slice visiting at that step (steps/13_ring_attention/ring_attention.py).
// This kernel merges the P partials of each row once, at the end, with the same rescale as
// step 12's combine of its splits: combine_row() (steps/12_decode/combine.cuh), one warp per
// row, fp32 sums; only the addressing differs. Here the partials are the forward step's O, in
// fp16 or bf16 and in the problem's layout, one partial after another, and their L
// [B, H, rows] in fp32; a step at which a row sees no key (a causal pair skipped) leaves
// L_s = −inf for it and an O_s that is never read.
//
//   grid ⌈B·H·rows / 4⌉, block 128 threads (a warp per row, rows in [B, H, rows] order)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "../12_decode/combine.cuh"
#include "common/cuda_check.h"
#include "merge.h"

namespace fa::step13 {
namespace {

constexpr int kRowsPerBlock = 4;  // a warp per row, as step 12's combine

struct MergeParams {
  const void* o_parts;     // [parts][B, rows, H, d] or [parts][B, H, rows, d], Element
  const float* lse_parts;  // [parts][B, H, rows]
  void* o;                 // one partial's shape, Element
  float* lse;              // [B, H, rows]
  int parts, heads, rows;
  int bnhd;          // 1: [B, rows, H, d], 0: [B, H, rows, d]
  int64_t rows_all;  // B·H·rows
};

template <int kHeadDim, class Element>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    merge_kernel(const __grid_constant__ MergeParams p) {
  constexpr int kCols = kHeadDim / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + warp;  // (b·H + h)·rows + i
  if (row >= p.rows_all) return;
  int64_t at = row * kHeadDim;  // the row's O in one partial: [B, H, rows, d] …
  if (p.bnhd) {                 // … or [B, rows, H, d]
    const int64_t i = row % p.rows, bh = row / p.rows;
    const int64_t h = bh % p.heads, b = bh / p.heads;
    at = ((b * p.rows + i) * p.heads + h) * kHeadDim;
  }
  const Element* parts = static_cast<const Element*>(p.o_parts) + at;
  float acc[kCols];
  const float lse = step12::combine_row<kHeadDim, Element>(p.parts, p.lse_parts + row, p.rows_all,
                                                           parts, p.rows_all * kHeadDim, acc);
  step12::store_cols<Element, kCols>(static_cast<Element*>(p.o) + at + lane * kCols, acc);
  if (lane == 0) p.lse[row] = lse;
}

template <int kHeadDim, class Element>
void launch(const MergeParams& p, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.rows_all + kRowsPerBlock - 1) / kRowsPerBlock);
  merge_kernel<kHeadDim, Element><<<blocks, 32 * kRowsPerBlock, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string check_merge(const MergeProblem& p) {
  auto at_least_1 = [](const char* name, long long v) {
    return v >= 1 ? std::string()
                  : std::string(name) + " (" + std::to_string(v) + ") must be at least 1";
  };
  if (p.parts < 1 || p.parts > kMaxParts)
    return "parts (" + std::to_string(p.parts) + ") must be in 1 .. " + std::to_string(kMaxParts);
  for (const auto& [name, v] :
       {std::pair<const char*, int>{"batch", p.batch}, {"heads", p.heads}, {"rows", p.rows}})
    if (std::string e = at_least_1(name, v); !e.empty()) return e;
  if (p.head_dim != 64 && p.head_dim != 128)
    return "head_dim (" + std::to_string(p.head_dim) +
           ") is not supported by the merge "
           "(supported: 64 128)";
  if (p.dtype != DType::F16 && p.dtype != DType::BF16)
    return std::string("dtype (") + dtype_name(p.dtype) +
           ") is not supported by the merge (supported: fp16, bf16)";
  const long long rows_all = static_cast<long long>(p.batch) * p.heads * p.rows;
  const long long most = static_cast<long long>(std::numeric_limits<int>::max()) * kRowsPerBlock;
  if (rows_all > most)
    return "batch*heads*rows (" + std::to_string(rows_all) + ") exceeds the limit of " +
           std::to_string(most) + " rows (the merge's grid)";
  return "";
}

void run_merge(const MergeProblem& prob, const void* o_parts, const float* lse_parts, void* o,
               float* lse, cudaStream_t stream) {
  MergeParams p{};
  p.o_parts = o_parts;
  p.lse_parts = lse_parts;
  p.o = o;
  p.lse = lse;
  p.parts = prob.parts;
  p.heads = prob.heads;
  p.rows = prob.rows;
  p.bnhd = prob.layout == Layout::BNHD ? 1 : 0;
  p.rows_all = static_cast<int64_t>(prob.batch) * prob.heads * prob.rows;
  const bool bf16 = prob.dtype == DType::BF16;
  if (prob.head_dim == 64)
    bf16 ? launch<64, __nv_bfloat16>(p, stream) : launch<64, __half>(p, stream);
  else
    bf16 ? launch<128, __nv_bfloat16>(p, stream) : launch<128, __half>(p, stream);
}

}  // namespace fa::step13
