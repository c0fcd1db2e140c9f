// Step 10 — The backward pass: gradients by recomputation (fp32, CUDA cores).
//
// One idea: the forward kept only O and the row logsumexp L, never S or P. The backward needs
// P for every gradient, so it recomputes it, tile by tile, from Q, K and L:
//
//   P = exp(scale · Q Kᵀ − L)            (L subtracted from every entry of its row)
//
// and consumes each tile where it is made, as the forward did. With D = rowsum(dO ∘ O)
// (reference/backward.h says why this is the softmax's Σ_j P_ij dP_ij) every gradient is then
// a sum over tiles:
//
//   dV = Pᵀ dO     dP = dO Vᵀ     dS = P ∘ (dP − D)     dK = scale · dSᵀ Q     dQ = scale · dS K
//
// Three kernels, in order on one stream:
//
//   1. delta_kernel      D[b, h, i] = dO_i · O_i            one warp per query row
//   2. backward_kernel   one block per (K/V tile of kBlockN keys, batch, K/V head):
//        K, V tile → shared memory                           (once)
//        for each query head h of the K/V head's group:       (GQA: the group summed here)
//          for each Q tile of kBlockM rows that can see some key of the tile:
//            Q, dO, L, D tile → shared memory
//            S, P, dP, dS  kBlockM × kBlockN, in shared memory (never in device memory)
//            dV += Pᵀ dO,  dK += dSᵀ Q                        in registers, this block's alone
//            dQ_acc += dS K                                   fp32 atomics into the workspace
//        dK = scale · dK, dV → device memory                 (written once, no atomics)
//   3. convert_dq_kernel dQ = scale · dQ_acc, in Q's layout
//
// Why the loop runs over K/V tiles and not over Q tiles: dK and dV of one key sum over every
// query row that sees it, dQ of one row over every key it sees. One of the two must be summed
// across blocks. Owning the K/V tile keeps dK and dV (two tensors) in registers and makes dQ
// (one tensor) the shared sum; FlashAttention-2 does the same. dQ's sum uses atomicAdd on an
// fp32 accumulator, so its order, and dQ's last bits, change from run to run; dK and dV do not.
//
// GQA and MQA: the query heads of one group all add to the same K/V head's dK and dV. Here the
// block that owns a K/V tile loops over the group's query heads itself, so the sum is made in
// its registers, in a fixed order, with no atomics and no dK/dV per query head in memory. The
// price is parallelism: MQA with few K/V heads gives fewer, longer blocks. (The alternative,
// atomics on dK and dV, would make them nondeterministic too and need an fp32 accumulator for
// each.)
//
// Masking: an entry that is masked (causal, or a key or row past the end of the tile) gets
// P = 0 and dS = 0 without computing its score, and a zero weight is skipped rather than
// multiplied, so a masked key's K and V, even NaN, never reach a row's dQ, and a row's Q and
// dO never reach a key it cannot see. A row that sees no key (L = −inf) has only masked
// entries: its dQ stays 0, its D is 0 (its O is 0), it adds nothing to dK and dV. With causal
// masking a K/V tile starts at the first Q tile that can see any of its keys.
//
// Memory: nothing N × N. The workspace holds the fp32 dQ accumulator, B·H_q·N_q·d floats (the
// size of Q in fp32), and D, B·H_q·N_q floats: O(N · d) and O(N). Shared memory per block:
// the K, V, Q and dO tiles (rows padded to d + 1 floats), P and dS (kBlockM × (kBlockN + 1))
// and L and D for the tile's rows: 74,752 bytes at d = 128.
//
// The forward pass is not part of this step: the step has a backward entry only (run is
// null), and its tests take O and L from the reference, so a backward error is never a forward
// error in disguise. Any forward step's O and L (step 04's, in fp32) are valid inputs.
//
// Build and test:
//   cmake --build build --target test_10_backward && ctest --test-dir build -L 10_backward
//
// Not yet: speed. Every product here is a plain loop over shared memory, two shared-memory
// loads per FFMA; register blocking (step 04) and tensor cores (steps 05-08) are the next
// backward step's work. Only fp32. Zero weights are skipped by a branch (add_weighted), which
// costs time in the inner loops and is kept for the masking guarantee above.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa::step10 {
namespace {

constexpr int kBlockM = 32;            // query rows per Q tile
constexpr int kBlockN = 32;            // keys per K/V tile (one block's dK, dV rows)
constexpr int kThreads = 256;          // threads per block of backward_kernel
constexpr int kPStride = kBlockN + 1;  // row stride of the P and dS tiles, padded

/// Shapes and strides the kernels need, by value (a kernel argument).
struct Params {
  int batch, heads_q, heads_kv, group;  // group = H_q / H_kv query heads per K/V head
  int n_q, n_kv, head_dim;
  Strides qs, kvs;  // element strides of Q, O, dO, dQ and of K, V, dK, dV
  float scale;      // the softmax scale
};

/// Row r of the [B, H_q, N_q] row space (L's order): its element offset in Q's layout.
__device__ std::int64_t q_row_offset(const Params& p, std::int64_t r) {
  const std::int64_t i = r % p.n_q;
  const std::int64_t bh = r / p.n_q;
  return (bh / p.heads_q) * p.qs.batch + (bh % p.heads_q) * p.qs.head + i * p.qs.row;
}

// ---------------------------------------------------------------------------------------------
// 1. D = rowsum(dO ∘ O): one warp per query row, each lane a strided part of the d products,
//    then a butterfly sum over the warp.
// ---------------------------------------------------------------------------------------------
__global__ void delta_kernel(Params p, const float* __restrict__ o, const float* __restrict__ d_o,
                             float* __restrict__ delta) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.heads_q * p.n_q;
  const std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // a whole warp leaves together: r is the same for its 32 lanes
  const std::int64_t base = q_row_offset(p, r);
  float sum = 0.f;
  // TODO(exercise): D_i = dO_i · O_i, the dot product of this row's dO and O (both at element
  // offset `base`, p.head_dim floats each). The 32 lanes share it: lane `lane` adds the
  // products of dims lane, lane + 32, lane + 64, … to its own sum; the butterfly below adds
  // the 32 sums. As given, every lane's sum stays 0, so D = 0 for every row.
  (void)o, (void)d_o, (void)base;  // as given, unused (this line only keeps the compiler quiet)
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[r] = sum;
}

/// acc + a · b, except that a zero weight a adds nothing at all: 0 · NaN would be NaN, and a
/// masked entry must not carry a NaN of the key or row it hides.
__device__ __forceinline__ float add_weighted(float a, float b, float acc) {
  return a == 0.f ? acc : fmaf(a, b, acc);
}

// ---------------------------------------------------------------------------------------------
// 2. The main kernel. kMaxD bounds the head dim (32, 64, 128 or 256): it sizes the dK and dV
//    accumulators each thread keeps in registers, kBlockN · kMaxD / kThreads of each. Thread t
//    owns elements e = t + a · kThreads of the kBlockN × kMaxD tile, key e / kMaxD and dim
//    e % kMaxD, so the lanes of a warp own consecutive dims of one key (conflict-free reads of
//    the Q and dO rows); dims ≥ d are idle. The head dim itself is a run-time value, so any
//    d from 1 to 256 runs (rows of d floats, read one float at a time: any alignment).
// ---------------------------------------------------------------------------------------------
template <int kMaxD, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(Params p, const float* __restrict__ q, const float* __restrict__ k,
                    const float* __restrict__ v, const float* __restrict__ lse,
                    const float* __restrict__ d_o, const float* __restrict__ delta,
                    float* __restrict__ dq_acc, float* __restrict__ dk, float* __restrict__ dv) {
  constexpr int kAcc = kBlockN * kMaxD / kThreads;
  static_assert(kAcc * kThreads == kBlockN * kMaxD, "the dK/dV tile must split evenly");

  const int d = p.head_dim;
  const int ld = d + 1;  // padded row: lanes reading one dim of consecutive rows hit distinct banks
  extern __shared__ float smem[];
  float* sK = smem;                      // [kBlockN][ld]
  float* sV = sK + kBlockN * ld;         // [kBlockN][ld]
  float* sQ = sV + kBlockN * ld;         // [kBlockM][ld]
  float* sdO = sQ + kBlockM * ld;        // [kBlockM][ld]
  float* sP = sdO + kBlockM * ld;        // [kBlockM][kPStride]
  float* sdS = sP + kBlockM * kPStride;  // [kBlockM][kPStride]
  float* sL = sdS + kBlockM * kPStride;  // [kBlockM]
  float* sD = sL + kBlockM;              // [kBlockM]

  const int tid = threadIdx.x;
  const int j0 = blockIdx.x * kBlockN;  // first key of this block's tile
  const int b = blockIdx.y / p.heads_kv;
  const int g = blockIdx.y % p.heads_kv;  // the K/V head
  const std::int64_t kv_base = b * p.kvs.batch + g * p.kvs.head;

  // The K and V tile, once; keys past N_kv are zeros (and masked below).
  for (int e = tid; e < kBlockN * d; e += kThreads) {
    const int c = e / d, x = e % d, j = j0 + c;
    sK[c * ld + x] = j < p.n_kv ? k[kv_base + j * p.kvs.row + x] : 0.f;
    sV[c * ld + x] = j < p.n_kv ? v[kv_base + j * p.kvs.row + x] : 0.f;
  }

  float dk_reg[kAcc], dv_reg[kAcc];
  for (int a = 0; a < kAcc; ++a) dk_reg[a] = dv_reg[a] = 0.f;

  // Causal, bottom-right aligned: row i sees key j when j <= i + offset. Rows below
  // j0 − offset see no key of this tile, so the first Q tile worth loading starts at the tile
  // that holds row j0 − offset.
  const int offset = p.n_kv - p.n_q;
  const int i_first = kCausal ? max(0, j0 - offset) / kBlockM * kBlockM : 0;

  for (int hh = 0; hh < p.group; ++hh) {
    const int h = g * p.group + hh;  // a query head of the K/V head's group
    const std::int64_t q_base = b * p.qs.batch + h * p.qs.head;
    const std::int64_t row_base = (static_cast<std::int64_t>(b) * p.heads_q + h) * p.n_q;

    for (int i0 = i_first; i0 < p.n_q; i0 += kBlockM) {
      __syncthreads();  // the previous tile's readers are done (and K, V are in place)
      for (int e = tid; e < kBlockM * d; e += kThreads) {
        const int r = e / d, x = e % d, i = i0 + r;
        sQ[r * ld + x] = i < p.n_q ? q[q_base + i * p.qs.row + x] : 0.f;
        sdO[r * ld + x] = i < p.n_q ? d_o[q_base + i * p.qs.row + x] : 0.f;
      }
      if (tid < kBlockM) {
        const int i = i0 + tid;
        sL[tid] = i < p.n_q ? lse[row_base + i] : 0.f;
        sD[tid] = i < p.n_q ? delta[row_base + i] : 0.f;
      }
      __syncthreads();

      // P and dS, recomputed: S_ij = scale · q_i · k_j, P_ij = exp(S_ij − L_i),
      // dP_ij = dO_i · v_j, dS_ij = P_ij (dP_ij − D_i). Masked entries are 0, not computed.
      for (int e = tid; e < kBlockM * kBlockN; e += kThreads) {
        const int r = e / kBlockN, c = e % kBlockN, i = i0 + r, j = j0 + c;
        const bool visible = i < p.n_q && j < p.n_kv && (!kCausal || j <= i + offset);
        float prob = 0.f, ds = 0.f;
        if (visible) {
          float s = 0.f, dp = 0.f;
          for (int x = 0; x < d; ++x) {
            s = fmaf(sQ[r * ld + x], sK[c * ld + x], s);
            dp = fmaf(sdO[r * ld + x], sV[c * ld + x], dp);
          }
          prob = expf(s * p.scale - sL[r]);
          // TODO(exercise): ds, the gradient of the score S_ij, from prob (P_ij), dp (dP_ij)
          // and this row's D_i (sD[r]): the softmax's Jacobian applied to the row's dP, in one
          // line. As given, ds stays 0, so dQ and dK get nothing.
          (void)dp;  // as given, unused (this line only keeps the compiler quiet)
        }
        sP[r * kPStride + c] = prob;
        sdS[r * kPStride + c] = ds;
      }
      __syncthreads();

      // dV += Pᵀ dO and dK += dSᵀ Q for this thread's elements (scale applied at the end).
#pragma unroll
      for (int a = 0; a < kAcc; ++a) {
        const int e = tid + a * kThreads, c = e / kMaxD, x = e % kMaxD;
        if (x >= d) continue;
        for (int r = 0; r < kBlockM; ++r) {
          // TODO(exercise): row r of this Q tile's share of dV = Pᵀ dO and dK = dSᵀ Q for the
          // element (key c, dim x) this thread owns: add P_rc · dO_rx to dv_reg[a] and
          // dS_rc · Q_rx to dk_reg[a]. Go through add_weighted (above), as the dQ loop below
          // does: a masked entry's weight 0 must add nothing, not 0 · NaN. As given, dV and
          // dK stay 0.
          (void)c;  // as given, unused (this line only keeps the compiler quiet)
        }
      }

      // dQ_acc += dS K: this tile's share of each row's sum over all keys, added atomically
      // because the blocks of the other K/V tiles add to the same rows.
      for (int e = tid; e < kBlockM * d; e += kThreads) {
        const int r = e / d, x = e % d, i = i0 + r;
        if (i >= p.n_q) break;  // e only grows, and so does r
        float acc = 0.f;
        for (int c = 0; c < kBlockN; ++c)
          acc = add_weighted(sdS[r * kPStride + c], sK[c * ld + x], acc);
        atomicAdd(dq_acc + (row_base + i) * d + x, acc);
      }
    }
  }

  // This block alone owns dK and dV of its keys (the group summed above): one plain store.
#pragma unroll
  for (int a = 0; a < kAcc; ++a) {
    const int e = tid + a * kThreads, c = e / kMaxD, x = e % kMaxD, j = j0 + c;
    if (x >= d || j >= p.n_kv) continue;
    dk[kv_base + j * p.kvs.row + x] = p.scale * dk_reg[a];
    dv[kv_base + j * p.kvs.row + x] = dv_reg[a];
  }
}

// ---------------------------------------------------------------------------------------------
// 3. dQ = scale · dQ_acc, from the accumulator's [B, H_q, N_q, d] order to Q's layout.
// ---------------------------------------------------------------------------------------------
__global__ void convert_dq_kernel(Params p, const float* __restrict__ dq_acc,
                                  float* __restrict__ dq) {
  const std::int64_t n = static_cast<std::int64_t>(p.batch) * p.heads_q * p.n_q * p.head_dim;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dq[q_row_offset(p, e / p.head_dim) + e % p.head_dim] = p.scale * dq_acc[e];
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------

/// Dynamic shared memory of backward_kernel for head dim d (see the tile list in the kernel).
std::size_t smem_bytes(int d) {
  const std::size_t ld = static_cast<std::size_t>(d) + 1;
  return sizeof(float) *
         (2 * kBlockN * ld + 2 * kBlockM * ld + 2 * kBlockM * kPStride + 2 * kBlockM);
}

/// The fp32 dQ accumulator, then D.
std::size_t workspace_bytes(const Problem& p) {
  return sizeof(float) * static_cast<std::size_t>(p.q_elems() + p.lse_elems());
}

std::string check_device(const Problem& p, const DeviceLimits& prop) {
  const long long bh = static_cast<long long>(p.batch) * p.heads_kv;
  const long long n_blocks = (p.n_kv + kBlockN - 1) / kBlockN;
  return check_fits("10_backward", prop, p, smem_bytes(p.head_dim),
                    {{1, bh, "batch*heads_kv (" + std::to_string(bh) + ")"},
                     {0, n_blocks,
                      "n_kv (" + std::to_string(p.n_kv) + ") needs " + std::to_string(n_blocks) +
                          " key blocks"}});
}

template <int kMaxD, bool kCausal>
void launch_main(const Params& p, const BackwardTensors& t, const float* delta, float* dq_acc,
                 cudaStream_t stream) {
  const auto kernel = backward_kernel<kMaxD, kCausal>;
  const std::size_t smem = smem_bytes(p.head_dim);
  // Above 48 KB of dynamic shared memory a kernel must opt in.
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const dim3 grid((p.n_kv + kBlockN - 1) / kBlockN, p.batch * p.heads_kv);
  kernel<<<grid, kThreads, smem, stream>>>(
      p, static_cast<const float*>(t.q), static_cast<const float*>(t.k),
      static_cast<const float*>(t.v), t.lse, static_cast<const float*>(t.d_o), delta, dq_acc,
      static_cast<float*>(t.dk), static_cast<float*>(t.dv));
  CUDA_CHECK_LAUNCH();
}

template <int kMaxD>
void launch_main(const Params& p, bool causal, const BackwardTensors& t, const float* delta,
                 float* dq_acc, cudaStream_t stream) {
  if (causal)
    launch_main<kMaxD, true>(p, t, delta, dq_acc, stream);
  else
    launch_main<kMaxD, false>(p, t, delta, dq_acc, stream);
}

void backward(const Problem& prob, const BackwardTensors& t, void* workspace, cudaStream_t stream) {
  const Params p{prob.batch,        prob.heads_q,        prob.heads_kv, prob.group_size(),
                 prob.n_q,          prob.n_kv,           prob.head_dim, prob.q_strides(),
                 prob.kv_strides(), prob.softmax_scale()};
  float* dq_acc = static_cast<float*>(workspace);
  float* delta = dq_acc + prob.q_elems();

  // The accumulator starts at zero: rows no key reaches (fully masked) keep dQ = 0.
  CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, sizeof(float) * prob.q_elems(), stream));

  const std::int64_t rows = prob.lse_elems();
  constexpr int kDeltaThreads = 256;  // 8 warps, 8 rows per block
  delta_kernel<<<static_cast<unsigned>((rows * 32 + kDeltaThreads - 1) / kDeltaThreads),
                 kDeltaThreads, 0, stream>>>(p, static_cast<const float*>(t.o),
                                             static_cast<const float*>(t.d_o), delta);
  CUDA_CHECK_LAUNCH();

  if (prob.head_dim <= 32)
    launch_main<32>(p, prob.causal, t, delta, dq_acc, stream);
  else if (prob.head_dim <= 64)
    launch_main<64>(p, prob.causal, t, delta, dq_acc, stream);
  else if (prob.head_dim <= 128)
    launch_main<128>(p, prob.causal, t, delta, dq_acc, stream);
  else if (prob.head_dim <= 256)
    launch_main<256>(p, prob.causal, t, delta, dq_acc, stream);
  else  // check_step rejects these before backward(); this guards direct calls
    throw std::invalid_argument("head_dim (" + std::to_string(prob.head_dim) +
                                ") exceeds step 10_backward's limit of 256");

  constexpr int kConvertThreads = 256;
  const std::int64_t blocks =
      std::min<std::int64_t>((prob.q_elems() + kConvertThreads - 1) / kConvertThreads, 65536);
  convert_dq_kernel<<<static_cast<unsigned>(blocks), kConvertThreads, 0, stream>>>(
      p, dq_acc, static_cast<float*>(t.dq));
  CUDA_CHECK_LAUNCH();
}

StepInfo info() {
  StepInfo s;
  s.number = 10;
  s.name = "10_backward";
  s.lesson = "the backward pass: P recomputed tile by tile from L, nothing N x N stored";
  s.dtypes = {DType::F32};
  s.max_head_dim = 256;  // any d from 1 to 256 (head_dims empty)
  s.alignment = 4;       // scalar loads: rows of any d
  s.backward_workspace_bytes = workspace_bytes;
  s.check_backward_device = check_device;
  s.backward = backward;
  s.backward_deterministic_dkdv = true;  // one block per K/V tile sums its whole group
  s.backward_deterministic_dq = false;   // fp32 atomics: the order of the sum varies
  return s;
}

FA_REGISTER_STEP(info);

}  // namespace
}  // namespace fa::step10
