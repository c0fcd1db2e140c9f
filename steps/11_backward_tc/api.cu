// Step 11 — The backward pass on tensor cores: FlashAttention-2's backward on mma.sync.
//
// Step 10 computed the backward by recomputation on CUDA cores in fp32: D = rowsum(dO ∘ O),
// one block per K/V tile owning dK and dV, P rebuilt from L tile by tile, dQ summed across
// blocks with fp32 atomics. This step keeps that algorithm and that division of work
// (FlashAttention-2's, Dao 2023, arXiv:2307.08691, Algorithm 2) and moves its five matrix
// products onto the tensor cores with step 07's machinery:
//
//   * bf16 and fp16 inputs, fp32 accumulation; mma.sync m16n8k16, ldmatrix from step 07's
//     XOR-swizzled tiles, cp.async (mma.cuh, copied from step 07).
//   * The warps split the keys, so the warp computes Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, and Pᵀ and dSᵀ,
//     converted to 16 bits, are the A operands of dV += Pᵀ dO and dK += dSᵀ Q straight from
//     registers; only dSᵀ goes to shared memory, for dQ = dS K (kernel_traits.cuh).
//   * Q, dO, L and D are double-buffered: the next Q tile's copies fly while this one is
//     computed (flash_bwd_kernel.cuh).
//   * dQ: fp32 atomics (red.global.add.f32) into a workspace accumulator, converted to the
//     problem's dtype (times the softmax scale) by a last kernel. dK and dV: written once.
//   * The step runs a second main kernel where a block may have its shared memory (197 KB at
//     d = 128, 200 KB at d = 64) on an sm_90 device: FlashAttention-2's 2-D warp layouts, a
//     layout per product, P and dS both through shared memory, Q and dO copied by the TMA
//     (flash_bwd_2d.cuh); the one above, which chapter 11 builds, elsewhere.
//
// GQA and MQA: as step 10, the CTA that owns a K/V tile loops over every query head of its
// group, so dK and dV are summed over the group in its registers, in a fixed order: no atomics
// on dK and dV, no fp32 accumulator for them, bitwise the same from run to run. The price is
// parallelism (MQA with few K/V heads gives fewer, longer CTAs); FlashAttention-2 instead runs
// one CTA per query head and sums dK, dV of a group through an fp32 accumulator afterwards,
// which costs 2 · B · H_q · N_kv · d floats and makes them depend on nothing but a second
// reduction kernel.
//
// Masking: selects, never multiplications by a masked 0, where an inf or NaN could leak;
// tiles on the causal diagonal that hold one take an exact path on the CUDA cores
// (flash_bwd_kernel.cuh, top). Rows that see no key get dQ = 0 and add nothing.
//
// Memory: workspace = the fp32 dQ accumulator (B · H_q · N_q · d floats) and D (B · H_q · N_q
// floats): 4 · B · H_q · N_q · (d + 1) bytes, as step 10. Nothing N × N.
//
// Deterministic mode (Problem::deterministic, off by default): dQ bitwise the same from run to
// run. Each CTA along the keys writes its part of dQ into a slab of its own with plain stores
// (every element of a Q tile it visits, once), and the convert kernel sums the slabs of the
// CTAs that visited a row in the order n = 0, 1, … The price is memory: ⌈N_kv / 128⌉ slabs of
// B · H_q · N_q · d floats instead of one, i.e. 4 · B · H_q · N_q · d · ⌈N_kv / 128⌉ bytes
// (B = 4, H = 16, N = 4096, d = 128: 32 slabs of 128 MiB, 4 GiB), and the convert kernel's
// reads of them. The alternative that costs no memory (FlashAttention-3's) makes CTA n wait
// for CTA n − 1 on each Q tile before adding to dQ in place, serialising the additions and
// leaning on the order in which CTAs start; the slabs keep every CTA independent and are
// the simpler thing to teach. dK and dV are deterministic in both modes.
//
// The kernels (CUDA 13.0, sm_90, nvcc -Xptxas -v; kernel_traits.cuh has the arithmetic behind
// them; fp16 and bf16 compile to the same counts but where said):
//
//   d    kernel, tile (rows × keys)   switches                smem      registers        stack
//                                                                       non-causal /     (spills)
//                                                                       causal, and
//                                                                       deterministic
//   64   2-D, 128 × 128               fa2d64cq: m, c, f,      200 KB    253 / 255,       none
//                                     unr., dQ by tensor                252 / 252
//                                     reductions, TMA
//   64   1-D, 64 × 128 (fallback)     1 barrier, v2, m, c, f  119 KB    236 / 246,       none
//                                                                       237 / 243
//   128  2-D, 64 × 128                fa2ufzucq: m, c, f,     197 KB    249 / 254,       none
//                                     unr., dQ unr., dQ by              252 / 255
//                                     tensor reductions,
//                                     TMA
//   128  1-D, 32 × 128 (fallback)     1 barrier, v2           126.5 KB  245 / 255        none
//
// (m: no selects on mask-free tiles; c: the deterministic mode compiled, a kernel per mode;
// f: P's exp2 flushing subnormals, kFastExp2; unr.: the S/dP k loop unrolled; dQ unr.: the dQ
// k loop unrolled; dQ by tensor reductions: flash_bwd_2d.cuh's kDqBulk = 3, sm_90, its staging
// areas counted in the shared memory; TMA: Q and dO copied by the TMA, kQTma, sm_90.
// kernel_traits.cuh, BwdConfig: the fallbacks run where a block cannot have the 2-D kernel's shared
// memory; kTunedBwd = false gives back the configuration first measured, the 1-D kernel at 64 × 128
// and 32 × 128 with no switch, 101 and 116.5 KB, 240 / 245 and 244 / 255 registers), and the D and
// convert kernels 30 and 28 registers. One CTA per SM. Both main kernels are at the edge at d =
// 128: kernel_traits.cuh (the 1-D kernel) and variants/variants_d128_2d.cu (rows fa2uf, fa2ufz,
// fa2ufzu) say what it took to keep them free of spills (the causal deterministic kernel at d = 128
// spilled 8 bytes before Q's and dO's copies moved to the TMA; none does now).
//
// Compile one file alone, with its register counts:
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -I.
//        -Xptxas -v -c steps/11_backward_tc/flash_bwd_d128_bf16.cu
//
// Build and test:
//   cmake --build build --target test_11_backward_tc probe_11_backward_tc &&
//     build/bin/probe_11_backward_tc && ctest --test-dir build -L 11_backward_tc
//
// Measured against torch_flash: kernel_traits.cuh (the configuration first measured, 0.6–0.8 ×
// torch_flash); chapter 11 has the step's; bin/variants_11 times the tiles, switches and the
// 2-D kernel (the step's own time: bin/bench_11_backward_tc). Not yet: the deterministic
// mode's memory not bounded (no chunking of the slabs).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/registry.h"
#include "kernel_traits.cuh"

namespace fa::step11 {

/// The main kernel's CTAs along the keys: ⌈N_kv / kBlockN⌉ (kBlockN is 128 for every d and
/// for both of its configurations, BwdConfig's Traits and Fallback: run_flash_bwd asserts
/// that Traits has its Fallback's, which the 2-D kernel's Traits is not defined here to show).
static long long kv_blocks(const Problem& prob) {
  static_assert(
      BwdConfig<64, __half>::Fallback::kBlockN == BwdConfig<128, __half>::Fallback::kBlockN,
      "one kBlockN for every head dim and configuration");
  constexpr int kBlockN = BwdConfig<64, __half>::Fallback::kBlockN;
  return (prob.n_kv + kBlockN - 1) / kBlockN;
}

BwdParams make_bwd_params(const Problem& prob, const BackwardTensors& t, void* workspace) {
  const Strides qs = prob.q_strides(), kvs = prob.kv_strides();
  BwdParams p{};
  p.q = t.q;
  p.k = t.k;
  p.v = t.v;
  p.o = t.o;
  p.d_o = t.d_o;
  p.lse = t.lse;
  p.dq = t.dq;
  p.dk = t.dk;
  p.dv = t.dv;
  p.dq_acc = static_cast<float*>(workspace);
  p.batch = prob.batch;
  p.heads_q = prob.heads_q;
  p.heads_kv = prob.heads_kv;
  p.group = prob.group_size();
  p.n_q = prob.n_q;
  p.n_kv = prob.n_kv;
  p.head_dim = prob.head_dim;
  // validate() keeps every tensor below 2^31 elements, so every stride fits an int.
  p.q_batch_stride = static_cast<int>(qs.batch);
  p.q_head_stride = static_cast<int>(qs.head);
  p.q_row_stride = static_cast<int>(qs.row);
  p.kv_batch_stride = static_cast<int>(kvs.batch);
  p.kv_head_stride = static_cast<int>(kvs.head);
  p.kv_row_stride = static_cast<int>(kvs.row);
  p.scale = prob.softmax_scale();
  p.scale_log2 = p.scale * kLog2e;
  p.causal = prob.causal;
  p.deterministic = prob.deterministic;
  p.q_elems = prob.q_elems();
  p.delta = p.dq_acc + p.q_elems * (prob.deterministic ? kv_blocks(prob) : 1);
  return p;
}

namespace {

constexpr const char* kStepName = "11_backward_tc";

/// The fp32 dQ accumulator (deterministic: one slab of it per CTA along the keys), then D.
std::size_t workspace_bytes(const Problem& p) {
  const long long slabs = p.deterministic ? kv_blocks(p) : 1;
  return sizeof(float) * static_cast<std::size_t>(p.q_elems() * slabs + p.lse_elems());
}

/// The main kernel's smallest tiles for head dim d, the ones every device the step accepts can
/// run (BwdConfig's Fallback; both dtypes use the same, bf16 stands in).
template <class F>
bool with_traits(int head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      f(typename BwdConfig<64, __nv_bfloat16>::Fallback{});
      return true;
    case 128:
      f(typename BwdConfig<128, __nv_bfloat16>::Fallback{});
      return true;
    default:
      return false;
  }
}

/// \brief Whether the main kernel of BwdConfig<kHeadDim> may launch its grid as (key blocks,
/// B · H_kv) (first) and as (B · H_kv, key blocks) (second) for this mask: its Traits or its
/// Fallback runs, as the device's shared memory decides (run_flash_bwd), each with its order.
template <int kHeadDim>
std::pair<bool, bool> grid_orders(bool causal) {
  using Config = BwdConfig<kHeadDim, __nv_bfloat16>;
  const bool t = causal ? heavy_first_grid<typename Config::Traits, true>()
                        : heavy_first_grid<typename Config::Traits, false>();
  const bool f = causal ? heavy_first_grid<typename Config::Fallback, true>()
                        : heavy_first_grid<typename Config::Fallback, false>();
  return {!t || !f, t || f};
}

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  if (prop.major < 8)
    return "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
           " is below the 8.0 needed by mma.sync bf16, ldmatrix and cp.async for step " + kStepName;
  std::size_t smem = 0;
  long long block_n = 1;
  with_traits(p.head_dim, [&](auto traits) {
    smem = decltype(traits)::kSmemBytes;
    block_n = decltype(traits)::kBlockN;
  });
  const long long bh = static_cast<long long>(p.batch) * p.heads_kv;
  const long long n_blocks = (p.n_kv + block_n - 1) / block_n;
  // The key blocks on y where a kernel that may run launches heavy first, B · H_kv on y where
  // one may launch in the other order: both held to y's limit when the two orders may run.
  const auto [key_blocks_on_x, key_blocks_on_y] =
      p.head_dim == 64 ? grid_orders<64>(p.causal) : grid_orders<128>(p.causal);
  return check_fits(
      kStepName, prop, p, smem,
      {{key_blocks_on_y ? 1 : 0, n_blocks,
        "n_kv (" + std::to_string(p.n_kv) + ") needs " + std::to_string(n_blocks) + " key blocks"},
       {key_blocks_on_x ? 1 : 0, bh, "batch*heads_kv (" + std::to_string(bh) + ")"}});
}

template <class Element>
bool run_head_dim(int head_dim, const BwdParams& p, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      run_flash_bwd<64, Element>(p, stream);
      return true;
    case 128:
      run_flash_bwd<128, Element>(p, stream);
      return true;
    default:
      return false;
  }
}

void backward(const Problem& prob, const BackwardTensors& t, void* workspace, cudaStream_t stream) {
  const BwdParams p = make_bwd_params(prob, t, workspace);
  bool supported = false;
  if (prob.dtype == DType::BF16)
    supported = run_head_dim<__nv_bfloat16>(prob.head_dim, p, stream);
  else if (prob.dtype == DType::F16)
    supported = run_head_dim<__half>(prob.head_dim, p, stream);
  if (!supported)  // check_step rejects these before backward(); this guards direct calls
    throw std::invalid_argument(std::string("dtype ") + dtype_name(prob.dtype) + " with head_dim " +
                                std::to_string(prob.head_dim) + " is not supported by step " +
                                kStepName);
}

StepInfo info() {
  StepInfo s;
  s.number = 11;
  s.name = kStepName;
  s.lesson = "the backward pass on tensor cores: P and dS as A fragments in registers";
  s.dtypes = {DType::F16, DType::BF16};
  s.head_dims = {64, 128};
  s.max_head_dim = 128;
  s.causal = true;
  s.gqa = true;
  s.alignment = 16;  // cp.async moves 16 bytes; rows are multiples of 128 B
  s.backward_workspace_bytes = workspace_bytes;
  s.check_backward_device = check_device;
  s.backward = backward;
  s.backward_deterministic_dkdv = true;  // one CTA per K/V tile sums its whole group
  s.backward_deterministic_dq = false;   // fp32 atomics: the order of the sum varies
  s.backward_deterministic_mode = true;  // Problem::deterministic: slabs summed in order
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step11
