// Step 06 — mma.sync: S and P stay in registers, ldmatrix, quad reductions.
//
// What changed since step 05: the algorithm is the same — one fused kernel, a block owns
// query rows, K/V tiles stream past, online softmax, only O and L written, fp16/bf16 on the
// tensor cores with fp32 sums — but the work is now laid out the way FlashAttention-2 (Dao,
// 2023, arXiv:2307.08691) lays it out, on tensor-core instructions whose register layout is
// known:
//
//   * WMMA → mma.sync.m16n8k16 in inline PTX, whose register layout is documented (mma.cuh
//     draws who holds what). So the softmax runs on the S accumulators where the mma left
//     them: row max and sum are two quad shuffles, and P, converted to 16 bits, is the A
//     operand of P V straight from registers. Step 05's round trip of S and P through shared
//     memory (40% of its shared-memory bytes at d = 64) disappears.
//   * 32 query rows per warp instead of 16 (kernel_traits.cuh): each K/V fragment a warp
//     loads now feeds two mmas, halving the K/V bytes read from shared memory per FLOP.
//   * Fragments are loaded with ldmatrix (ldmatrix.trans for V) from row-major tiles padded
//     by 16 bytes per row, as step 05's were: no bank conflicts (kernel_traits.cuh).
//   * The memory side stays simple: every thread copies its share of a K/V tile with 16-byte
//     loads and stores, between two barriers, and only then do the warps compute on it.
//   * As before: causal blocks skip the tiles above the diagonal and mask only the tiles
//     that cross it (mask.cuh); the softmax scale is folded into exp2.
//
// What it costs in memory traffic: the minimum, as in steps 04–05 — Q, K, V read and O
// written once from the point of view of a query block, L written once, no N×N bytes, no
// workspace.
// K and V are read once per query block (⌈N_q / 128⌉ times per query head, and again for
// each query head of a GQA group); the blocks of a head run side by side, so after the first
// these are L2 hits: 4·128·kBlockN·d FLOPs per 2·2·kBlockN·d bytes of a K/V tile, 128 FLOPs
// per byte from L2. For the benchmark shape B = 4, N = 4096, H = 16, d = 128, bf16:
// 5.5·10¹¹ FLOPs (0.69 ms at the 797 TFLOP/s matmul ceiling) against 268 MB of Q, K, V, O
// (0.063 ms at 4.26 TB/s) — the arithmetic floor binds, by 11×.
//
// The kernels (kernel_traits.cuh says why these tiles; CUDA 13.0, docs/results/h200-kernels.md):
//
//   d    mask        tile (rows × keys)  warps  smem   registers  spills
//   64   non-causal  128 × 64            4      36 KB  211        none
//   64   causal      128 × 64            4      36 KB  214        none
//   128  non-causal  128 × 32            4      51 KB  234        none
//   128  causal      128 × 32            4      51 KB  235        none
//
// 2 CTAs per SM. Both fp16 and bf16 compile to the same counts.
//
// Build and run:
//   cmake --build build --target 06_mma_sync &&
//     build/bin/06_mma_sync --n 4096 --d 128 --dtype bf16 [--causal]
//   (compile one kernel alone, with its register count:
//     nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90
//          -Icommon -Xptxas -v -c steps/06_mma_sync/flash_fwd_d128_bf16.cu)
//
// Files, in reading order:
//   mma.cuh                 ldmatrix, mma.sync and the fragment layouts
//   kernel_traits.cuh       tiles, warps, shared memory; FwdParams
//   mask.cuh                which tiles a block visits and which need a mask
//   online_softmax.cuh      running max / sum / rescale / finalize on accumulator fragments
//   flash_fwd_kernel.cuh    the kernel and its launch
//   flash_fwd_d*_*.cu       one instantiation per (head dim, dtype)
//   api.cu                  this file: dispatch, device limits, registration
//
// Not yet (step 07): the memory pipeline — cp.async copies of the next K/V tiles in flight
// while one is computed, one barrier per tile, XOR-swizzled tiles instead of padded ones,
// skipping the rescale of O when no max moved, and tiles measured per head dim and mask.
// Not yet: fp32 (use step 04) and head dims other than 64 and 128; no backward pass. The
// Hopper-only machinery of FlashAttention-3 — wgmma, TMA, warp specialisation, overlapping
// the softmax of one tile with the matmuls of another — is not used: this is the Ampere-
// style design, which on an H200 leaves roughly half of the tensor cores' speed on the table.
// No split-KV for problems with too few query blocks to fill the GPU (decoding).
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

namespace fa::step06 {
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

constexpr const char* kStepName = "06_mma_sync";

/// \brief Calls f(traits) with the tile configuration of `head_dim` (the same for both
/// dtypes, so bf16 stands in); false if there is none.
template <class F>
bool with_traits(const Problem& p, F&& f) {
  switch (p.head_dim) {
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

std::size_t nxn_bytes_written(const Problem&) { return 0; }  // S and P stay in registers

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  if (prop.major < 8)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " is below the 8.0 needed by mma.sync bf16 "
           "and ldmatrix for step " +
           kStepName;
  std::size_t smem = 0;
  long long block_m = 1;
  with_traits(p, [&](auto traits) {
    smem = decltype(traits)::kSmemBytes;
    block_m = decltype(traits)::kBlockM;
  });
  const long long m_blocks = (p.n_q + block_m - 1) / block_m;
  return check_fits(
      kStepName, prop, p, smem,
      {{0, m_blocks,
        "n_q (" + std::to_string(p.n_q) + ") needs " + std::to_string(m_blocks) + " query blocks"},
       {1, p.heads_q, "heads_q (" + std::to_string(p.heads_q) + ")"},
       {2, p.batch, "batch (" + std::to_string(p.batch) + ")"}});
}

template <class Element>
bool run_head_dim(int head_dim, const FwdParams& p, cudaStream_t stream) {
  switch (head_dim) {
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
    throw std::invalid_argument(std::string("dtype ") + dtype_name(prob.dtype) + " with head_dim " +
                                std::to_string(prob.head_dim) + " is not supported by step " +
                                kStepName);
}

StepInfo info() {
  StepInfo s;
  s.number = 6;
  s.name = kStepName;
  s.lesson = "mma.sync: S and P stay in registers, ldmatrix, quad reductions";
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {64, 128};
  s.max_head_dim = 128;
  s.causal = true;
  s.gqa = true;
  s.alignment = 16;  // the tile loads and the O stores move 16 bytes; rows are multiples of 128 B
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step06
