// decode_judge.h — one decoding case on the host and the verdict on what a step gave back,
// shared by the GPU tests of the decoding steps (test_decode_gpu.cpp, through decode_gpu.h),
// their probes, and the CPU test of this verdict itself (test_decode.cpp). No CUDA.
//
//   make_case()    random Q, new K/V and a cache holding cache_lens[b] rows of every sequence,
//                  NaN everywhere else (a row read before it is written poisons the output),
//                  all rounded to the dtype; the reference's append (fa::append_kv) of it
//   judge_case()   the cache against the reference's append (bit for bit, NaN where NaN), then
//                  each sequence's O and L by the forward tests' tolerance policy
//                  (fa::ref::verdict on the equivalent dense problem, fa::dense_problem)
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/decode.h"
#include "common/inputs.h"
#include "reference/compare.h"

namespace fa::test {

/// \brief A decoding step's inputs on the host (values of the problem's dtype, as float) and
/// the cache after the reference's append.
struct DecodeCase {
  DecodeProblem p;                  ///< the problem
  std::vector<float> q;             ///< [B, q_len, H_q, d]
  std::vector<float> k_new, v_new;  ///< [B, q_len, H_kv, d]
  HostKVCache before;               ///< the cache the step starts from
  HostKVCache after;                ///< fa::append_kv of before: what the step must leave
};

/// \brief Random inputs for p: Q and K scaled by `qk_scale` (5 gives scores of ~100), V
/// normal. \param p a valid problem \param seed the seed \param qk_scale Q and K's scale
/// \return the case
inline DecodeCase make_case(const DecodeProblem& p, std::uint64_t seed, float qk_scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto draw = [&](std::vector<float>& x, std::int64_t n, float scale) {
    x.resize(n);
    for (float& v : x) v = round_to(p.dtype, scale * normal(rng));
  };
  DecodeCase c;
  c.p = p;
  draw(c.q, p.q_elems(), qk_scale);
  draw(c.k_new, p.new_kv_elems(), qk_scale);
  draw(c.v_new, p.new_kv_elems(), 1.f);
  c.before = make_cache(p);
  const int row = p.heads_kv * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int pos = 0; pos < p.cache_lens[b]; ++pos) {
      const std::int64_t at = p.cache_row_offset(b, pos);
      for (int x = 0; x < row; ++x) {
        c.before.k[at + x] = round_to(p.dtype, qk_scale * normal(rng));
        c.before.v[at + x] = round_to(p.dtype, normal(rng));
      }
    }
  }
  c.after = c.before;
  append_kv(p, c.k_new.data(), c.v_new.data(), &c.after);
  return c;
}

/// \brief What a launch gave back.
struct DecodeRun {
  int num_splits = 0;         ///< the split count it ran with
  std::vector<float> o, lse;  ///< O [B, q_len, H_q, d] and L [B, H_q, q_len]
  std::vector<float> k, v;    ///< both caches after the step
};

/// \brief "" when the caches equal the reference's append (NaN where it has NaN, so no row
/// outside this step's new ones was written), otherwise where they first differ.
/// \param c the case \param r what the step gave back \return "" or the reason
inline std::string judge_cache(const DecodeCase& c, const DecodeRun& r) {
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : a == b; };
  const char* names[2] = {"K", "V"};
  const std::vector<float>* want[2] = {&c.after.k, &c.after.v};
  const std::vector<float>* got[2] = {&r.k, &r.v};
  for (int t = 0; t < 2; ++t) {
    for (std::size_t x = 0; x < want[t]->size(); ++x) {
      if (!same((*got[t])[x], (*want[t])[x]))
        return std::string(names[t]) + " cache element " + std::to_string(x) + " is " +
               std::to_string((*got[t])[x]) + ", the reference's append gives " +
               std::to_string((*want[t])[x]);
    }
  }
  return {};
}

/// \brief "" when the caches are right and every sequence's O and L pass the tolerance policy
/// against the double reference, otherwise why not (naming the sequence).
/// \param c the case \param r what the step gave back \return "" or the reason
inline std::string judge_case(const DecodeCase& c, const DecodeRun& r) {
  if (std::string e = judge_cache(c, r); !e.empty()) return e;
  const DecodeProblem& p = c.p;
  const std::int64_t q_seq = std::int64_t{p.q_len} * p.heads_q * p.head_dim;
  const std::int64_t l_seq = std::int64_t{p.heads_q} * p.q_len;
  for (int b = 0; b < p.batch; ++b) {
    HostInputs in;
    in.problem = dense_problem(p, b);
    in.q.assign(c.q.begin() + b * q_seq, c.q.begin() + (b + 1) * q_seq);
    in.k = gather_rows(p, b, p.kv_len(b), c.after.k.data());
    in.v = gather_rows(p, b, p.kv_len(b), c.after.v.data());
    const ref::Expected want = ref::expected_for(in);
    const std::vector<float> o(r.o.begin() + b * q_seq, r.o.begin() + (b + 1) * q_seq);
    const std::vector<float> lse(r.lse.begin() + b * l_seq, r.lse.begin() + (b + 1) * l_seq);
    if (std::string e = ref::verdict(in.problem, o, lse, want); !e.empty())
      return "sequence " + std::to_string(b) + " (kv_len " + std::to_string(p.kv_len(b)) + ", " +
             std::to_string(r.num_splits) + " splits): " + e;
  }
  return {};
}

}  // namespace fa::test
