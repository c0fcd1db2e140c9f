// Step 09 — FlashAttention forward on Hopper, warp-specialised: a producer and consumers.
//
// What changed since step 08: the algorithm, the tiles, the TMA copies and the wgmmas are the
// same; what changes is who issues them and when (flash_fwd_kernel.cuh draws the schedule,
// kernel_traits.cuh says what each part should buy):
//
//   * warp specialisation: warpgroup 0 is a producer whose one thread only issues TMA copies
//     into the K/V ring; it gives its registers away (setmaxnreg.dec to 24) and the consumer
//     warpgroups take them (setmaxnreg.inc), each owning 64 query rows.
//   * ping-pong: the consumers take turns, on named barriers, to issue their wgmmas, so that
//     one's softmax runs while another's wgmmas keep the tensor cores busy.
//   * overlap inside a consumer: S of tile j is issued before P V of tile j − 1, and
//     wgmma.wait_group 1 lets the softmax of tile j run while that P V still accumulates.
//   * the ring has an empty barrier per K and per V, so K of a later tile can land while V of
//     the current one is still being read.
//
// The kernels (CUDA 13.0, ptxas -v; the same for fp16 and bf16, causal and not):
//
//   d    tile (rows × keys)  warpgroups      stages  smem    registers: launch → consumers  spills
//   64   192 × 128           3 consumers + 1  2       89 KB   128 → 160 (producer 24)        none
//   128  128 × 128           2 consumers + 1  2       161 KB  168 → 240 (producer 24)        none
//
// One CTA per SM either way. Not yet: a persistent tile scheduler (kernel_traits.cuh: why not
// yet), FP8, TMA stores of O, clusters and multicast. Chapter 9 (docs/09-warp-specialized.md)
// explains it. fp16/bf16 only, d = 64 and 128, and only on compute capability 9.0 (H100, H200,
// GH200): sm_90a code.
//
// Files, in reading order:
//   hopper.cuh              mbarrier, TMA, wgmma, setmaxnreg, named barriers
//   kernel_traits.cuh       roles, tiles, registers, shared memory; the arithmetic; FwdParams
//   mask.cuh                which tiles a block visits, the causal mask on wgmma layout
//   online_softmax.cuh      running max / sum / rescale / finalize on wgmma accumulators
//   flash_fwd_kernel.cuh    the kernel: producer, consumers, every barrier's counts; launch
//   probe/probe.cu          its building blocks on one tile (build/bin/probe_09_warp_specialized)
//   flash_fwd_d*_*.cu       one instantiation per (head dim, dtype)
//   api.cu                  this file: tensor maps, dispatch, device check, registration
//
// Build and run (on an H100/H200):
//   cmake --build build --target 09_warp_specialized &&
//     build/bin/09_warp_specialized --n 4096 --d 128 --dtype bf16 [--causal]
#include <cuda.h>
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

namespace fa::step09 {

FwdParams make_fwd_params(const Problem& prob, const DeviceTensors& t) {
  const Strides qs = prob.q_strides();
  FwdParams p{};
  p.o = t.o;
  p.lse = t.lse;
  p.batch = prob.batch;
  p.heads_q = prob.heads_q;
  p.group = prob.group_size();
  p.n_q = prob.n_q;
  p.n_kv = prob.n_kv;
  // validate() keeps every tensor below 2^31 elements, so every stride fits an int.
  p.o_batch_stride = static_cast<int>(qs.batch);
  p.o_head_stride = static_cast<int>(qs.head);
  p.o_row_stride = static_cast<int>(qs.row);
  p.scale_log2 = prob.softmax_scale() * kLog2e;
  p.causal = prob.causal;
  p.heads_inner = prob.layout == Layout::BNHD;
  return p;
}

namespace {

constexpr const char* kStepName = "09_warp_specialized";

// TUTORIAL: the driver's cuTensorMapEncodeTiled builds a tensor map (CUtensorMap, 128 bytes):
// the tensor's address, its dimensions and strides, the box one copy moves, the swizzle
// and what out-of-bounds reads return. It is a driver API function, but we do not link
// libcuda: the runtime hands out the driver's entry point (cudaGetDriverEntryPoint*), the
// way CUTLASS and FlashAttention-3 do it, so the program still starts (and refuses the step
// cleanly) where the driver is old.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                cudaEnableDefault, &found));
#else
    CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &ptr, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || ptr == nullptr)
      throw CudaError(cudaErrorSymbolNotFound,
                      "the CUDA driver does not provide cuTensorMapEncodeTiled (CUDA 12.0 or "
                      "newer is needed) for step " +
                          std::string(kStepName));
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

/// \brief The tensor map of one of Q, K, V: `rows` sequence positions, `heads` heads,
/// boxes of 64 elements × `box_rows` rows of one head, 128-byte swizzle, zeros out of bounds.
///
/// A tensor map is a strided view of up to 5 dimensions, innermost first, each with its
/// extent and (but the first) its stride in bytes. Both layouts are such a view of the same
/// four dimensions, d, N, H and B, in different orders:
///   [B, N, H, d]:  (d, H, N, B), strides (2·d, 2·H·d, 2·N·H·d) bytes
///   [B, H, N, d]:  (d, N, H, B), strides (2·d, 2·N·d, 2·H·N·d) bytes
/// We list the dimensions in increasing stride, as a packed tensor has them; the box is
/// 1 head × box_rows rows either way, so in shared memory it is box_rows rows of 64
/// elements. The sequence dimension has its true extent N: a box that runs past the last
/// row of a head reads zeros, never the next head's rows.
CUtensorMap make_tensor_map(const char* which, const void* ptr, const Problem& prob,
                            const Strides& s, int rows, int heads, int box_rows) {
  const bool heads_inner = prob.layout == Layout::BNHD;
  const cuuint64_t d = static_cast<cuuint64_t>(prob.head_dim);
  const cuuint64_t dims[4] = {d, static_cast<cuuint64_t>(heads_inner ? heads : rows),
                              static_cast<cuuint64_t>(heads_inner ? rows : heads),
                              static_cast<cuuint64_t>(prob.batch)};
  const cuuint64_t el = 2;  // bytes of a 16-bit element
  const cuuint64_t strides[3] = {el * static_cast<cuuint64_t>(heads_inner ? s.head : s.row),
                                 el * static_cast<cuuint64_t>(heads_inner ? s.row : s.head),
                                 el * static_cast<cuuint64_t>(s.batch)};
  const cuuint32_t box[4] = {64, heads_inner ? 1u : static_cast<cuuint32_t>(box_rows),
                             heads_inner ? static_cast<cuuint32_t>(box_rows) : 1u, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = prob.dtype == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap map;
  const CUresult r = encode_tiled()(
      &map, type, 4, const_cast<void*>(ptr), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);  // NONE: out-of-bounds elements read as zeros
  if (r != CUDA_SUCCESS)
    throw CudaError(cudaErrorInvalidValue, std::string("cuTensorMapEncodeTiled failed for ") +
                                               which + " (CUresult " +
                                               std::to_string(static_cast<int>(r)) + ", " +
                                               prob.describe() + ") in step " + kStepName);
  return map;
}

}  // namespace

TensorMaps make_tensor_maps(const Problem& prob, const DeviceTensors& t, int block_m, int block_n) {
  const Strides qs = prob.q_strides(), kvs = prob.kv_strides();
  TensorMaps m;
  m.q = make_tensor_map("Q", t.q, prob, qs, prob.n_q, prob.heads_q, block_m);
  m.k = make_tensor_map("K", t.k, prob, kvs, prob.n_kv, prob.heads_kv, block_n);
  m.v = make_tensor_map("V", t.v, prob, kvs, prob.n_kv, prob.heads_kv, block_n);
  return m;
}

namespace {

/// \brief Calls f(traits) with the tile configuration of `head_dim` (the same for both
/// dtypes, so bf16 stands in); false if there is none.
template <class F>
bool with_traits(int head_dim, F&& f) {
  switch (head_dim) {
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
  // sm_90a code (wgmma, TMA, mbarrier tx counts) runs on compute capability 9.0 alone: not
  // on 8.x, and not on later GPUs either ("a" features are not forward-compatible).
  if (prop.major != 9 || prop.minor != 0)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           ": step " + kStepName +
           " needs compute capability 9.0 (its wgmma and TMA kernels are built for sm_90a only)";
  std::size_t smem = 0;
  long long block_m = 1;
  with_traits(p.head_dim, [&](auto traits) {
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
bool run_head_dim(const Problem& prob, const DeviceTensors& t, const FwdParams& p,
                  cudaStream_t stream) {
  bool known = false;
  with_traits(prob.head_dim, [&](auto traits) {
    using Traits = decltype(traits);
    const TensorMaps maps = make_tensor_maps(prob, t, Traits::kBlockM, Traits::kBlockN);
    if (prob.head_dim == 64)
      run_flash_fwd<64, Element>(p, maps, stream);
    else
      run_flash_fwd<128, Element>(p, maps, stream);
    known = true;
  });
  return known;
}

void run(const Problem& prob, const DeviceTensors& t, void* /*workspace*/, cudaStream_t stream) {
  const FwdParams p = make_fwd_params(prob, t);
  bool supported = false;
  if (prob.dtype == DType::BF16)
    supported = run_head_dim<__nv_bfloat16>(prob, t, p, stream);
  else if (prob.dtype == DType::F16)
    supported = run_head_dim<__half>(prob, t, p, stream);
  if (!supported)  // check_step rejects these before run(); this guards direct calls
    throw std::invalid_argument(std::string("dtype ") + dtype_name(prob.dtype) + " with head_dim " +
                                std::to_string(prob.head_dim) + " is not supported by step " +
                                kStepName);
}

StepInfo info() {
  StepInfo s;
  s.number = 9;
  s.name = kStepName;
  s.lesson = "warp specialisation: TMA producer, consumers in ping-pong, softmax under wgmma";
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {64, 128};
  s.max_head_dim = 128;
  s.causal = true;
  s.gqa = true;
  s.alignment = 16;  // TMA needs 16-byte aligned tensors (strides are multiples of 128 B)
  s.workspace_bytes = workspace_bytes;
  s.nxn_bytes_written = nxn_bytes_written;
  s.check_device = check_device;
  s.run = run;
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step09
