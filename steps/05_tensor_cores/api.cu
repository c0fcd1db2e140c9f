// Step 05 — tensor cores: step 04's flash kernel with fp16/bf16 inputs, both matrix products on
// the tensor cores through WMMA, every sum in fp32.
//
// What changed since step 04: the algorithm is the same (one fused kernel, S never leaves the
// chip, online softmax). What computes it is not. Step 04 spent its instructions on FFMAs on
// the CUDA cores, whose fp32 peak on an H200 is ~67 TFLOP/s. A tensor core multiplies a
// 16 × 16 by a 16 × 16 matrix of 16-bit numbers, adding to fp32, in a handful of cycles: an
// order of magnitude more FLOPs per SM, but only for 16-bit inputs (or TF32) and only through
// warp-wide instructions whose operands are spread over the 32 lanes of a warp. So:
//   * Q, K, V and O are fp16 or bf16 (half the bytes of step 04); S, the softmax state and the
//     O accumulator stay fp32, and P is rounded to 16 bits because it is a tensor-core input.
//   * S = Q Kᵀ and O += P V are WMMA calls (nvcuda::wmma, <mma.h>) on 16 × 16 fragments.
//   * WMMA does not tell us which lane holds which element of a fragment, and the softmax
//     needs whole rows. So each warp stores its S fragments to shared memory
//     (store_matrix_sync), does the softmax there with a plain row-per-lane-pair layout,
//     writes P back in 16 bits, and loads P as fragments for P V. That round trip is the
//     price of WMMA's hidden layout (the profile shows it; the next step removes it).
//   * Each warp owns 16 whole query rows (one fragment row) of S, P and O, so between the two
//     products a warp only synchronises with itself (__syncwarp), never with the block.
//   * The tiles are loaded as in step 04, 16 bytes per thread and instruction, into padded
//     rows (kernel_traits.cuh) that the fragment loads read without bank conflicts.
//
// What it costs in memory traffic: as step 04, in 2-byte elements: half the bytes. Q is read
// once, O and L written once, K and V read once per query block (⌈N_q / 64⌉ times per head,
// mostly L2 hits): for N = 4096, B·H = 16, d = 64 that is 8 MiB each for Q, K, V and O in
// device memory and 64 × 16 MiB of K and V from L2. No N×N bytes, no workspace.
// The traffic that now matters is on chip. Per warp and K/V tile (16 rows × 64 keys), shared
// memory serves, at d = 64 (d = 128):
//   Q fragments 2 KB (4), K fragments 8 KB (16), V fragments 8 KB (16)    the products' inputs
//   S stored and read back 4 + 4 KB, P stored and read back 2 + 2 KB       the round trip
// 30 KB (48 KB) for 262 K (524 K) FLOPs: ~9 (11) FLOPs per shared byte, and 40% (25%) of the
// bytes are the round trip. At 128 bytes per clock per SM that caps the kernel near 300 TFLOP/s
// before the softmax's own instructions are counted — far below the tensor cores' peak, which
// is why the next step keeps S and P in registers.
//
// Build and run:
//   cmake --build build --target 05_tensor_cores && build/bin/05_tensor_cores --n 4096 --dtype bf16
//   (compile one kernel alone, with its register count:
//     nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90
//          -Icommon -Xptxas -v -c steps/05_tensor_cores/flash_fwd_d64_bf16.cu)
//
// Files, in reading order:
//   mma.cuh                 the WMMA fragments, their loads, the row map, 16-bit pairs
//   kernel_traits.cuh       tiles, warps, shared memory and its padding; FwdParams
//   mask.cuh                which tiles a block visits and which need a mask
//   online_softmax.cuh      running max / sum / finalize of a row; the rescale of O
//   flash_fwd_kernel.cuh    the kernel and its launch
//   flash_fwd_d*_*.cu       one instantiation per (head dim, dtype)
//   api.cu                  this file: dispatch, device limits, registration
//
// Not yet: S and P still make a round trip through shared memory, because WMMA hides the
// fragment layout (the next step uses mma.sync with its documented register layout, so the
// softmax runs on the accumulators themselves, FlashAttention-2 style); overlapping loads
// with compute (step 07); no Hopper-specific wgmma/TMA; no fp32 inputs (see step 04) and
// head dims {32, 64, 128} only; no backward pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "kernel_traits.cuh"
#include "online_softmax.cuh"

namespace fa::step05 {
FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t) {
  const Strides qs = prob.q_strides(), kvs = prob.kv_strides();
  FwdParams p{};
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.o = t.o;
  p.lse = t.lse;
  p.batch = prob.batch;
  p.heads_q = prob.heads_q;
  p.group = prob.group_size();
  p.n_q = prob.n_q;
  p.n_kv = prob.n_kv;
  // validate() keeps every tensor below 2^31 elements, so every stride fits an int.
  p.q_batch_stride = static_cast<int>(qs.batch);
  p.q_head_stride = static_cast<int>(qs.head);
  p.q_row_stride = static_cast<int>(qs.row);
  p.kv_batch_stride = static_cast<int>(kvs.batch);
  p.kv_head_stride = static_cast<int>(kvs.head);
  p.kv_row_stride = static_cast<int>(kvs.row);
  p.scale_log2 = prob.softmax_scale() * kLog2e;
  p.causal = prob.causal;
  return p;
}

namespace {

constexpr const char* kStepName = "05_tensor_cores";

/// \brief Calls f(traits) with the tile configuration of `head_dim` (the same for both
/// dtypes, so bf16 stands in); false if there is none.
template <class F>
bool with_traits(int head_dim, F&& f) {
  switch (head_dim) {
    case 32:
      f(typename FwdConfig<32, __nv_bfloat16>::Traits{});
      return true;
    case 64:
      f(typename FwdConfig<64, __nv_bfloat16>::Traits{});
      return true;
    case 128:
      f(typename FwdConfig<128, __nv_bfloat16>::Traits{});
      return true;
    default:
      return false;
  }
}

std::size_t workspace_bytes(const Problem&) { return 0; }

std::size_t nxn_bytes_written(const Problem&) { return 0; }  // S and P stay on chip

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  if (prop.major < 8)  // bf16 WMMA arrived with Ampere (sm_80)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " is below the 8.0 that step " + kStepName + " needs";
  std::size_t smem = 0;
  long long block_m = 1;
  with_traits(p.head_dim, [&](auto traits) {
    smem = decltype(traits)::kSmemBytes;
    block_m = decltype(traits)::kBlockM;
  });
  const long long bh = static_cast<long long>(p.batch) * p.heads_q;
  const long long m_blocks = (p.n_q + block_m - 1) / block_m;
  return check_fits(kStepName, prop, p, smem,
                    {{1, bh, "batch*heads_q (" + std::to_string(bh) + ")"},
                     {0, m_blocks,
                      "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(m_blocks) +
                          " query blocks"}});
}

template <class Element>
bool run_head_dim(int head_dim, const FwdParams& p, cudaStream_t stream) {
  switch (head_dim) {
    case 32:
      run_flash_fwd<32, Element>(p, stream);
      return true;
    case 64:
      run_flash_fwd<64, Element>(p, stream);
      return true;
    case 128:
      run_flash_fwd<128, Element>(p, stream);
      return true;
    default:
      return false;
  }
}

void run(const Problem& prob, const DeviceTensors& t, void* /*workspace*/, cudaStream_t stream) {
  const FwdParams p = make_fwd_params(prob, t);
  bool supported = false;
  if (prob.dtype == DType::BF16)
    supported = run_head_dim<__nv_bfloat16>(prob.head_dim, p, stream);
  else if (prob.dtype == DType::F16)
    supported = run_head_dim<__half>(prob.head_dim, p, stream);
  if (!supported)  // check_step rejects these before run(); this guards direct calls
    throw std::invalid_argument("dtype " + std::string(dtype_name(prob.dtype)) +
                                " with head_dim (" + std::to_string(prob.head_dim) +
                                ") is not supported by step " + kStepName);
}

StepInfo info() {
  StepInfo s;
  s.number = 5;
  s.name = kStepName;
  s.lesson = "tensor cores through WMMA: fp16/bf16 inputs, fp32 accumulation";
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {32, 64, 128};
  s.max_head_dim = 128;
  s.alignment = 16;  // 16-byte loads and stores; rows are multiples of d ≥ 32 elements
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step05
