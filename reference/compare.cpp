#include "reference/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace fa {
namespace {

// Walks two arrays; `where(idx)` names an element for messages.
template <typename Where>
Comparison compare_arrays(const std::vector<float>& out, const std::vector<double>& ref,
                          Where where) {
  Comparison c;
  double diff2 = 0, ref2 = 0;
  std::int64_t worst_idx = -1, first_bad = -1;
  const std::size_t n = std::min(out.size(), ref.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double o = out[i], r = ref[i];
    const bool of = std::isfinite(o), rf = std::isfinite(r);
    if (of != rf || (!of && !(o == r))) {       // NaN == NaN is false: NaN never passes unless
      if (!(std::isnan(o) && std::isnan(r))) {  // the reference is NaN too (propagation)
        if (first_bad < 0) first_bad = static_cast<std::int64_t>(i);
        ++c.mismatches;
      }
      continue;
    }
    if (!of) continue;  // equal infinities
    const double e = std::abs(o - r);
    diff2 += e * e;
    ref2 += r * r;
    c.max_abs_ref = std::max(c.max_abs_ref, std::abs(r));
    if (e > c.max_abs_err || worst_idx < 0) {
      c.max_abs_err = std::max(c.max_abs_err, e);
      worst_idx = static_cast<std::int64_t>(i);
    }
  }
  if (out.size() != ref.size())
    c.mismatches +=
        std::abs(static_cast<long long>(out.size()) - static_cast<long long>(ref.size()));
  c.rel_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const std::int64_t at = first_bad >= 0 ? first_bad : worst_idx;
  if (at >= 0) c.worst = where(at);
  return c;
}

}  // namespace

Comparison compare_output(const Problem& p, const std::vector<float>& out,
                          const std::vector<double>& ref) {
  const Strides s = p.q_strides();
  return compare_arrays(out, ref, [&](std::int64_t idx) {
    const std::int64_t b = idx / s.batch, r1 = idx % s.batch;
    std::int64_t h, i;
    if (p.layout == Layout::BNHD) {
      i = r1 / s.row;
      h = (r1 % s.row) / s.head;
    } else {
      h = r1 / s.head;
      i = (r1 % s.head) / s.row;
    }
    std::ostringstream os;
    os << "(b=" << b << ", h=" << h << ", i=" << i << ", j=" << idx % p.head_dim << ")";
    return os.str();
  });
}

Comparison compare_lse(const Problem& p, const std::vector<float>& out,
                       const std::vector<double>& ref) {
  return compare_arrays(out, ref, [&](std::int64_t idx) {
    std::ostringstream os;
    os << "(b=" << idx / (std::int64_t{p.heads_q} * p.n_q) << ", h=" << (idx / p.n_q) % p.heads_q
       << ", i=" << idx % p.n_q << ")";
    return os.str();
  });
}

double ulp_of(DType t, double x) {
  const int mantissa_bits = t == DType::F16 ? 10 : t == DType::BF16 ? 7 : -1;
  if (mantissa_bits < 0 || !(std::abs(x) > 0) || !std::isfinite(x)) return 0;
  // fp16's smallest normal is 2^-14 (below it the spacing stays 2^-24); bf16 shares fp32's
  // exponent range, far below anything the tests compare.
  const int e = std::max(std::ilogb(x), t == DType::F16 ? -14 : -126);
  return std::ldexp(1.0, e - mantissa_bits);
}

double score_rounding_error(const Problem& p, const float* q, const float* k, const float* v) {
  auto max_row_norm = [&](const float* x, std::int64_t elems) {
    double best = 0;
    for (std::int64_t r = 0; r + p.head_dim <= elems; r += p.head_dim) {  // d is innermost
      double n2 = 0;
      for (int j = 0; j < p.head_dim; ++j) n2 += double(x[r + j]) * x[r + j];
      if (std::isfinite(n2)) best = std::max(best, std::sqrt(n2));
    }
    return best;
  };
  double v_max = 0;
  for (std::int64_t i = 0; i < p.kv_elems(); ++i)
    if (std::isfinite(v[i])) v_max = std::max(v_max, std::abs(double(v[i])));
  return std::ldexp(1.0, -24) * p.softmax_scale() * max_row_norm(q, p.q_elems()) *
         max_row_norm(k, p.kv_elems()) * v_max;
}

FloorAllowance floor_allowance(const std::vector<double>& floor, const std::vector<double>& ref,
                               DType dtype) {
  if (floor.size() != ref.size())
    throw std::invalid_argument("floor holds " + std::to_string(floor.size()) +
                                " values; ref holds " + std::to_string(ref.size()));
  double max_floor = 0, floor2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(floor[i]) || !std::isfinite(ref[i])) continue;  // a NaN key, say
    max_floor = std::max(max_floor, floor[i]);
    floor2 += floor[i] * floor[i];
    ref2 += ref[i] * ref[i];
  }
  const double factor = Tolerance::for_dtype(dtype).factor;
  // The same denominator as compare_arrays' rel_err: ‖ref‖₂, or 1 where it is 0.
  return {factor * max_floor, factor * std::sqrt(ref2 > 0 ? floor2 / ref2 : floor2)};
}

std::string judge(const Comparison& step, const Comparison& plain, const char* what, DType dtype,
                  DType stored_as, double extra_abs, double extra_rel) {
  const Tolerance tol = Tolerance::for_dtype(dtype);
  std::ostringstream os;
  if (step.mismatches > 0) {
    os << what << ": " << step.mismatches << " non-finite mismatches, first at " << step.worst;
    return os.str();
  }
  const double rel_tol = tol.rel_slack + tol.factor * plain.rel_err + extra_rel;
  const double abs_tol = tol.abs_slack + tol.factor * plain.max_abs_err +
                         ulp_of(stored_as, step.max_abs_ref) + extra_abs;
  if (step.rel_err > rel_tol || step.max_abs_err > abs_tol) {
    os << what << ": rel_err " << step.rel_err << " (tol " << rel_tol << "), max_abs_err "
       << step.max_abs_err << " (tol " << abs_tol << ") at " << step.worst;
    return os.str();
  }
  return {};
}

}  // namespace fa

namespace fa::ref {

Expected expected_for(const HostInputs& in) {
  const Problem& p = in.problem;
  Expected e;
  e.ref = attention(p, in.q.data(), in.k.data(), in.v.data());
  e.plain_o = attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &e.plain_lse);
  e.score_rounding = score_rounding_error(p, in.q.data(), in.k.data(), in.v.data());
  return e;
}

std::string verdict(const Problem& p, const std::vector<float>& o, const std::vector<float>& lse,
                    const Expected& want) {
  std::string e =
      judge(compare_output(p, o, want.ref.o), compare_output(p, want.plain_o, want.ref.o), "O",
            p.dtype, p.dtype, want.score_rounding);
  if (e.empty())
    e = judge(compare_lse(p, lse, want.ref.lse), compare_lse(p, want.plain_lse, want.ref.lse), "L",
              p.dtype);
  return e;
}

ExpectedBackward expected_backward(const HostInputs& in, std::vector<float> d_o) {
  const Problem& p = in.problem;
  ExpectedBackward e;
  const Result forward = attention(p, in.q.data(), in.k.data(), in.v.data());
  e.o.assign(forward.o.begin(), forward.o.end());
  e.lse.assign(forward.lse.begin(), forward.lse.end());
  e.d_o = std::move(d_o);
  if (e.d_o.size() != static_cast<std::size_t>(p.q_elems()))
    throw std::invalid_argument("d_o holds " + std::to_string(e.d_o.size()) +
                                " values; the problem's Q holds " + std::to_string(p.q_elems()));
  e.ref = attention_backward(p, in.q.data(), in.k.data(), in.v.data(), e.d_o.data(), &forward);
  e.plain = attention_backward_plain(p, in.q.data(), in.k.data(), in.v.data(), e.d_o.data());
  return e;
}

std::string verdict_backward(const Problem& p, const std::vector<float>& dq,
                             const std::vector<float>& dk, const std::vector<float>& dv,
                             const ExpectedBackward& want) {
  // K and V are laid out like Q of a problem with N_kv rows and H_kv heads.
  Problem kv = p;
  kv.n_q = p.n_kv;
  kv.heads_q = p.heads_kv;
  const FloorAllowance fq = floor_allowance(want.ref.dq_floor, want.ref.dq, p.dtype);
  const FloorAllowance fk = floor_allowance(want.ref.dk_floor, want.ref.dk, p.dtype);
  const FloorAllowance fv = floor_allowance(want.ref.dv_floor, want.ref.dv, p.dtype);
  std::string e =
      judge(compare_output(p, dq, want.ref.dq), compare_output(p, want.plain.dq, want.ref.dq), "dQ",
            p.dtype, p.dtype, fq.abs, fq.rel);
  if (e.empty())
    e = judge(compare_output(kv, dk, want.ref.dk), compare_output(kv, want.plain.dk, want.ref.dk),
              "dK", p.dtype, p.dtype, fk.abs, fk.rel);
  if (e.empty())
    e = judge(compare_output(kv, dv, want.ref.dv), compare_output(kv, want.plain.dv, want.ref.dv),
              "dV", p.dtype, p.dtype, fv.abs, fv.rel);
  return e;
}

}  // namespace fa::ref
