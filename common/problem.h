/// \file problem.h
/// \brief The one description of an attention problem that every step, test,
/// benchmark, the tour and the C API share.
///
/// ```text
///   O[b, h, i, :] = sum_j softmax_j( scale · Q[b, h, i, :] · K[b, g, j, :] ) · V[b, g, j, :]
///   L[b, h, i]    = log sum_j exp( scale · Q[b, h, i, :] · K[b, g, j, :] )   (natural log)
/// ```
///
/// with g = h / (H_q / H_kv) the key/value head shared by a group of query heads (GQA; MQA
/// when H_kv = 1). Causal masking is bottom-right aligned (FlashAttention >= 2.1): query row i
/// may see key j when j <= i + (N_kv - N_q). A row that sees no key at all (possible when
/// N_q > N_kv) has O = 0 and L = -inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

/// \brief Everything the steps share: the problem, the registry, inputs, comparison,
/// FLOP counts and checked CUDA calls.
namespace fa {

/// \brief Element type of Q, K, V and O in device memory. L is always fp32.
enum class DType { F32, F16, BF16 };

/// \brief Memory layout of Q, K, V and O. The head dimension d is always innermost.
enum class Layout {
  BNHD,  ///< [batch, seq, heads, d] — FlashAttention's layout
  BHND,  ///< [batch, heads, seq, d] — PyTorch SDPA's layout
};

/// \brief Size in bytes of one element of \p t.
/// \param t an element type \return 4 for fp32, 2 for fp16 and bf16
std::size_t dtype_size(DType t);
/// \brief "fp32", "fp16" or "bf16".
/// \param t an element type \return its name, a static string
const char* dtype_name(DType t);
/// \brief "bnhd" or "bhnd".
/// \param l a layout \return its name, a static string
const char* layout_name(Layout l);
/// \brief Parses "fp32"/"fp16"/"bf16"; returns false on anything else.
/// \param s the name \param out receives the type \return whether \p s was a known name
bool parse_dtype(const std::string& s, DType* out);
/// \brief Parses "bnhd"/"bhnd"; returns false on anything else.
/// \param s the name \param out receives the layout \return whether \p s was a known name
bool parse_layout(const std::string& s, Layout* out);

/// \brief Element strides of one tensor; d is contiguous (stride 1).
struct Strides {
  std::int64_t batch = 0;  ///< elements between consecutive b
  std::int64_t head = 0;   ///< elements between consecutive heads
  std::int64_t row = 0;    ///< elements between consecutive sequence positions
};

/// \brief An attention problem: shapes, options and the layout of the tensors.
struct Problem {
  int batch = 1;                 ///< B
  int heads_q = 1;               ///< H_q, query (and output) heads
  int heads_kv = 1;              ///< H_kv, key/value heads; H_q must be a multiple of it
  int n_q = 1;                   ///< N_q, query rows
  int n_kv = 1;                  ///< N_kv, key/value rows
  int head_dim = 64;             ///< d
  float scale = 0.f;             ///< softmax scale; 0 means 1/sqrt(d)
  bool causal = false;           ///< causal mask, bottom-right aligned (see kv_end())
  DType dtype = DType::F32;      ///< element type of Q, K, V and O
  Layout layout = Layout::BNHD;  ///< memory layout of Q, K, V and O
  /// Backward only: dQ, dK and dV bitwise the same from run to run. A backward step refuses it
  /// unless it offers it (StepInfo::backward_deterministic_mode, or gradients that are
  /// deterministic anyway); it may cost workspace. The forward passes ignore it (they use no
  /// floating-point atomics).
  bool deterministic = false;

  /// \brief The scale actually used: `scale` if set, else 1/sqrt(d).
  /// \return the softmax scale
  float softmax_scale() const;
  /// \brief H_q / H_kv: how many query heads share one key/value head.
  /// \return the group size, >= 1
  int group_size() const { return heads_q / heads_kv; }
  /// \brief Strides of Q and O (N_q rows, H_q heads) in the chosen layout.
  /// \return element strides of Q and O
  Strides q_strides() const;
  /// \brief Strides of K and V (N_kv rows, H_kv heads) in the chosen layout.
  /// \return element strides of K and V
  Strides kv_strides() const;
  /// \brief Element count of Q (and of O). \return B·N_q·H_q·d
  std::int64_t q_elems() const;
  /// \brief Element count of K (and of V). \return B·N_kv·H_kv·d
  std::int64_t kv_elems() const;
  /// \brief L is [B, H_q, N_q] fp32, contiguous. \return B·H_q·N_q
  std::int64_t lse_elems() const;
  /// \brief Key rows visible from query row i (bottom-right aligned causal): [0, end).
  /// \param i a query row, 0 <= i < N_q \return end, in [0, N_kv]
  int kv_end(int i) const;
  /// \brief One line such as "B=2 Hq=8 Hkv=2 Nq=1000 Nkv=1000 d=64 causal fp32 bnhd".
  /// \return the description
  std::string describe() const;
};

/// \brief A problem from its shapes: fp32, scale 1/sqrt(d).
/// \param batch B \param heads_q H_q \param heads_kv H_kv \param n_q N_q \param n_kv N_kv
/// \param head_dim d \param causal bottom-right aligned causal mask \param layout of Q, K, V, O
/// \return the problem (not validated: see validate())
Problem make_problem(int batch, int heads_q, int heads_kv, int n_q, int n_kv, int head_dim,
                     bool causal = false, Layout layout = Layout::BNHD);

/// \brief Limits every step shares (a step may be stricter, see StepInfo).
struct Limits {
  static constexpr int kMaxHeadDim = 256;  ///< the largest head dim d any step may accept
  /// Every index into Q, K, V, O and L must fit a signed 32-bit int, so kernels may use
  /// int arithmetic for offsets within one tensor.
  static constexpr std::int64_t kMaxElems = (std::int64_t{1} << 31) - 1;
};

/// \brief Device pointers of one attention call. Q, K, V and O are in the problem's dtype
/// and layout; L (the row logsumexp, natural log) is fp32 [B, H_q, N_q].
struct DeviceTensors {
  const void* q = nullptr;  ///< Q [B, N_q, H_q, d] or [B, H_q, N_q, d]
  const void* k = nullptr;  ///< K [B, N_kv, H_kv, d] or [B, H_kv, N_kv, d]
  const void* v = nullptr;  ///< V, shaped like K
  void* o = nullptr;        ///< O (written), shaped like Q
  float* lse = nullptr;     ///< L (written), fp32 [B, H_q, N_q]
};

/// \brief Device pointers of one backward call. Q, K, V, O, dO and the gradients are in the
/// problem's dtype and layout (dQ and dO like Q, dK and dV like K); L is the forward's fp32
/// row logsumexp [B, H_q, N_q] (−inf for a row that sees no key).
struct BackwardTensors {
  const void* q = nullptr;     ///< Q, as in the forward
  const void* k = nullptr;     ///< K, as in the forward
  const void* v = nullptr;     ///< V, as in the forward
  const void* o = nullptr;     ///< O, the forward's output
  const float* lse = nullptr;  ///< L, the forward's row logsumexp
  const void* d_o = nullptr;   ///< dO, the gradient of the loss with respect to O
  void* dq = nullptr;          ///< dQ (written), shaped like Q
  void* dk = nullptr;          ///< dK (written), shaped like K, summed over each group
  void* dv = nullptr;          ///< dV (written), shaped like V, summed over each group
};

/// \brief Checks the shape and options. Returns "" when valid, otherwise one message that
/// names the parameter, its value and the limit, e.g. "heads_q (6) must be a multiple of
/// heads_kv (4)".
/// \param p the problem \return "" or the message
std::string validate(const Problem& p);

}  // namespace fa
