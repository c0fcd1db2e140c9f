// test_problem.cpp — the problem description: layouts, causal alignment, validation messages.
#include <cmath>

#include "common/inputs.h"  // round_to
#include "common/problem.h"
#include "tests/catch.hpp"

using fa::Problem;

namespace {
Problem square(int n, int d) {
  Problem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.n_q = p.n_kv = n;
  p.head_dim = d;
  return p;
}
bool mentions(const std::string& msg, const std::string& what) {
  return msg.find(what) != std::string::npos;
}
}  // namespace

TEST_CASE("strides of both layouts address every element once", "[problem]") {
  Problem p = square(5, 8);
  for (fa::Layout l : {fa::Layout::BNHD, fa::Layout::BHND}) {
    p.layout = l;
    const fa::Strides s = p.q_strides();
    std::vector<int> seen(static_cast<std::size_t>(p.q_elems()), 0);
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h)
        for (int i = 0; i < p.n_q; ++i)
          for (int c = 0; c < p.head_dim; ++c)
            ++seen.at(static_cast<std::size_t>(b * s.batch + h * s.head + i * s.row + c));
    for (int x : seen) REQUIRE(x == 1);
  }
  p.layout = fa::Layout::BNHD;
  CHECK(p.q_strides().row == p.heads_q * p.head_dim);  // [B, N, H, d]
  p.layout = fa::Layout::BHND;
  CHECK(p.q_strides().row == p.head_dim);  // [B, H, N, d]
}

TEST_CASE("causal masks are aligned to the bottom-right corner", "[problem]") {
  Problem p = square(4, 8);
  p.causal = true;
  CHECK(p.kv_end(0) == 1);
  CHECK(p.kv_end(3) == 4);
  p.n_q = 2;  // fewer queries than keys: the last query sees every key
  CHECK(p.kv_end(0) == 3);
  CHECK(p.kv_end(1) == 4);
  p.n_q = 6;  // more queries than keys: the first two see nothing
  CHECK(p.kv_end(0) == 0);
  CHECK(p.kv_end(1) == 0);
  CHECK(p.kv_end(2) == 1);
  CHECK(p.kv_end(5) == 4);
  p.causal = false;
  CHECK(p.kv_end(0) == 4);
}

TEST_CASE("validation names the parameter, its value and the limit", "[problem]") {
  CHECK(fa::validate(square(16, 64)).empty());
  Problem p = square(16, 64);
  p.n_q = 0;
  CHECK(mentions(fa::validate(p), "n_q (0)"));
  p = square(16, 64);
  p.batch = -3;
  CHECK(mentions(fa::validate(p), "batch (-3)"));
  p = square(16, 64);
  p.heads_q = 6;
  p.heads_kv = 4;
  CHECK(mentions(fa::validate(p), "heads_q (6) must be a multiple of heads_kv (4)"));
  p = square(16, 300);
  CHECK(mentions(fa::validate(p), "head_dim (300)"));
  CHECK(mentions(fa::validate(p), "256"));
  p = square(16, 64);
  p.scale = -1.f;
  CHECK(mentions(fa::validate(p), "scale"));
  p = square(1 << 20, 256);  // 2·4·2^20·256 = 2^31 elements: one past the 32-bit limit
  CHECK(mentions(fa::validate(p), "32-bit"));
  p.n_q = p.n_kv = (1 << 20) - 1;
  CHECK(fa::validate(p).empty());
}

TEST_CASE("dtype and layout names round-trip", "[problem]") {
  for (fa::DType t : {fa::DType::F32, fa::DType::F16, fa::DType::BF16}) {
    fa::DType u{};
    REQUIRE(fa::parse_dtype(fa::dtype_name(t), &u));
    CHECK(u == t);
  }
  fa::Layout l{};
  CHECK(fa::parse_layout("bhnd", &l));
  CHECK(l == fa::Layout::BHND);
  CHECK_FALSE(fa::parse_layout("nhd", &l));
  fa::DType t{};
  CHECK_FALSE(fa::parse_dtype("fp8", &t));
}

TEST_CASE("round_to rounds to the nearest fp16 or bf16 value, ties to even", "[problem]") {
  const float u16 = std::ldexp(1.f, -10), u_bf = std::ldexp(1.f, -7);  // ulp at 1
  CHECK(fa::round_to(fa::DType::F32, 1.f + u16 / 4) == 1.f + u16 / 4);
  CHECK(fa::round_to(fa::DType::F16, 1.f + u16 / 2) == 1.f);                // tie: to even
  CHECK(fa::round_to(fa::DType::F16, 1.f + 3 * u16 / 2) == 1.f + 2 * u16);  // tie: to even
  CHECK(fa::round_to(fa::DType::F16, 1.f + 0.6f * u16) == 1.f + u16);
  CHECK(fa::round_to(fa::DType::F16, 65519.f) == 65504.f);  // the largest fp16
  CHECK(std::isinf(fa::round_to(fa::DType::F16, 65520.f)));
  CHECK(fa::round_to(fa::DType::BF16, 1.f + u_bf / 2) == 1.f);
  CHECK(fa::round_to(fa::DType::BF16, 1.f + 3 * u_bf / 2) == 1.f + 2 * u_bf);
  CHECK(fa::round_to(fa::DType::BF16, -3.1415926f) == -3.140625f);
  CHECK(std::isnan(fa::round_to(fa::DType::BF16, std::nanf(""))));
}
