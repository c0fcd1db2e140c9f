#include "common/problem.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fa {

std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::F16:
      return "fp16";
    case DType::BF16:
      return "bf16";
  }
  return "?";
}

const char* layout_name(Layout l) { return l == Layout::BNHD ? "bnhd" : "bhnd"; }

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "fp32" || s == "f32" || s == "float32") {
    *out = DType::F32;
    return true;
  }
  if (s == "fp16" || s == "f16" || s == "float16") {
    *out = DType::F16;
    return true;
  }
  if (s == "bf16" || s == "bfloat16") {
    *out = DType::BF16;
    return true;
  }
  return false;
}

bool parse_layout(const std::string& s, Layout* out) {
  if (s == "bnhd") {
    *out = Layout::BNHD;
    return true;
  }
  if (s == "bhnd") {
    *out = Layout::BHND;
    return true;
  }
  return false;
}

float Problem::softmax_scale() const {
  return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(head_dim));
}

namespace {
Strides make_strides(Layout l, int n, int h, int d) {
  Strides s;
  if (l == Layout::BNHD) {
    s.head = d;
    s.row = std::int64_t{h} * d;
    s.batch = std::int64_t{n} * h * d;
  } else {
    s.row = d;
    s.head = std::int64_t{n} * d;
    s.batch = std::int64_t{h} * n * d;
  }
  return s;
}
}  // namespace

Strides Problem::q_strides() const { return make_strides(layout, n_q, heads_q, head_dim); }
Strides Problem::kv_strides() const { return make_strides(layout, n_kv, heads_kv, head_dim); }
std::int64_t Problem::q_elems() const { return std::int64_t{batch} * heads_q * n_q * head_dim; }
std::int64_t Problem::kv_elems() const { return std::int64_t{batch} * heads_kv * n_kv * head_dim; }
std::int64_t Problem::lse_elems() const { return std::int64_t{batch} * heads_q * n_q; }

int Problem::kv_end(int i) const {
  if (!causal) return n_kv;
  // Bottom-right alignment: the last query row sees every key.
  const long long end = static_cast<long long>(i) + (n_kv - n_q) + 1;
  return static_cast<int>(std::clamp<long long>(end, 0, n_kv));
}

Problem make_problem(int batch, int heads_q, int heads_kv, int n_q, int n_kv, int head_dim,
                     bool causal, Layout layout) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.n_q = n_q;
  p.n_kv = n_kv;
  p.head_dim = head_dim;
  p.causal = causal;
  p.layout = layout;
  return p;
}

std::string Problem::describe() const {
  std::ostringstream os;
  os << "B=" << batch << " Hq=" << heads_q << " Hkv=" << heads_kv << " Nq=" << n_q
     << " Nkv=" << n_kv << " d=" << head_dim << (causal ? " causal " : " full ")
     << dtype_name(dtype) << ' ' << layout_name(layout);
  if (deterministic) os << " deterministic";
  return os.str();
}

std::string validate(const Problem& p) {
  std::ostringstream os;
  auto positive = [&](const char* name, long long v) {
    if (v <= 0 && os.tellp() == 0) os << name << " (" << v << ") must be at least 1";
  };
  positive("batch", p.batch);
  positive("heads_q", p.heads_q);
  positive("heads_kv", p.heads_kv);
  positive("n_q", p.n_q);
  positive("n_kv", p.n_kv);
  positive("head_dim", p.head_dim);
  if (os.tellp() != 0) return os.str();
  if (p.heads_q % p.heads_kv != 0) {
    os << "heads_q (" << p.heads_q << ") must be a multiple of heads_kv (" << p.heads_kv << ")";
    return os.str();
  }
  if (p.head_dim > Limits::kMaxHeadDim) {
    os << "head_dim (" << p.head_dim << ") exceeds the limit of " << Limits::kMaxHeadDim;
    return os.str();
  }
  if (!std::isfinite(p.scale) || p.scale < 0.f) {
    os << "scale (" << p.scale << ") must be finite and >= 0 (0 selects 1/sqrt(head_dim))";
    return os.str();
  }
  const std::int64_t q = p.q_elems(), kv = p.kv_elems(), lse = p.lse_elems();
  if (q > Limits::kMaxElems || kv > Limits::kMaxElems || lse > Limits::kMaxElems) {
    os << "tensor size (Q/O " << q << ", K/V " << kv << " elements) exceeds the 32-bit index "
       << "limit of " << Limits::kMaxElems << " elements";
    return os.str();
  }
  return {};
}

}  // namespace fa
