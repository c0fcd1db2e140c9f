// probe.cu — step 12 on tiny inputs, layer by layer, one PASS or FAIL line each: what to run
// first on a new machine, and what to read when the suite (test_12_decode) fails.
//
//   append      the append kernel alone: the new rows in the cache, nothing else written
//               (contiguous, then paged with shuffled pages)
//   one key     kv_len 1: O must be that key's V row, L its score
//   one tile    40 keys, one split: the attention and combine kernels on a single tile
//   splits      three tiles in 1, 3 and 8 splits (8: empty splits), paged
//   gqa causal  4 query heads on one K/V head, 3 new tokens: packing and the causal mask
//   rule        a long sequence with the split rule's count
// for fp16 and bf16, d = 64 and 128, then the same (but the append) for the candidate next
// version "12_decode_v2", its lines headed by its name. Each is judged like the tests
// (tests/decode_gpu.h).
// Exit status: 0 all pass, 1 a failure, 77 no usable device (skipped).
//
//   build/bin/probe_12_decode
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../decode_params.cuh"
#include "common/launch.h"
#include "tests/decode_cases.h"
#include "tests/decode_gpu.h"

namespace {

using fa::DecodeProblem;
using fa::test::contiguous;
using fa::test::paged;
using fa::test::shapes;

int failures = 0;

void report(const std::string& name, const DecodeProblem& p, const std::string& error) {
  std::printf("%s %-12s %s d=%d  %s%s%s\n", error.empty() ? "PASS" : "FAIL", name.c_str(),
              fa::dtype_name(p.dtype), p.head_dim, p.describe().c_str(), error.empty() ? "" : ": ",
              error.c_str());
  if (!error.empty()) ++failures;
}

/// The append kernel alone.
std::string probe_append(const DecodeProblem& p) {
  const fa::test::DecodeCase c = fa::test::make_case(p, 1);
  fa::test::DecodeDevice dev(c);
  fa::step12::run_append(fa::step12::make_params(p, dev.tensors(), 1, nullptr), nullptr);
  fa::test::DecodeRun r;
  dev.download(p, &r);
  return fa::test::judge_cache(c, r);
}

/// The whole step with `splits` splits (0: the rule's).
std::string probe_step(const fa::DecodeStepInfo& step, const DecodeProblem& p, int splits) {
  const fa::test::DecodeCase c = fa::test::make_case(p, 2);
  return fa::test::judge_case(c, fa::test::run_case(step, c, splits));
}

/// kv_len 1: the output is the one V row, L the one score, whatever else is right or wrong.
std::string probe_one_key(const fa::DecodeStepInfo& step, const DecodeProblem& p) {
  const fa::test::DecodeCase c = fa::test::make_case(p, 3);
  const fa::test::DecodeRun r = fa::test::run_case(step, c, 1);
  const int d = p.head_dim;
  double dot = 0;
  for (int x = 0; x < d; ++x) dot += double(c.q[x]) * c.k_new[x];
  const double want_lse = dot * p.softmax_scale();
  if (std::abs(r.lse[0] - want_lse) > 1e-4 * std::max(1.0, std::abs(want_lse)))
    return "L is " + std::to_string(r.lse[0]) + ", the score is " + std::to_string(want_lse);
  for (int x = 0; x < d; ++x)
    if (r.o[x] != c.v_new[x])
      return "O[" + std::to_string(x) + "] is " + std::to_string(r.o[x]) + ", V's is " +
             std::to_string(c.v_new[x]);
  return {};
}

/// Runs one probe, turning an exception into a FAIL line.
template <class F>
void run(const std::string& name, const DecodeProblem& p, F&& f) {
  try {
    report(name, p, f());
  } catch (const std::exception& e) {
    report(name, p, std::string("threw: ") + e.what());
  }
}

}  // namespace

int main() {
  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  const fa::DecodeStepInfo* chapter = fa::find_decode_step("12_decode");
  if (chapter == nullptr) {
    std::printf("FAIL step 12_decode is not registered\n");
    return 1;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (const std::string why = fa::device_refusal(*chapter, fa::device_limits(device));
      !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  // The chapter's step, then its candidate next version (DecodeStepInfo::candidate), whose
  // lines name it.
  for (const fa::DecodeStepInfo* step : fa::decode_steps()) {
    if (step->number != 12) continue;
    const std::string tag = step->candidate ? std::string(step->name) + ": " : "";
    if (const std::string why = fa::device_refusal(*step, fa::device_limits(device));
        !why.empty()) {
      std::printf("SKIPPED %s%s\n", tag.c_str(), why.c_str());
      continue;
    }
    for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
      for (int d : {64, 128}) {
        auto with = [&](DecodeProblem p) {
          p.dtype = t;
          p.head_dim = d;
          return p;
        };
        if (!step->candidate) {  // the append is the chapter's in both
          const DecodeProblem app = with(shapes(4, 2, 64, 3, {0, 5, 14}));
          run("append", contiguous(app), [&] { return probe_append(contiguous(app)); });
          run("append", paged(app, 16, 4), [&] { return probe_append(paged(app, 16, 4)); });
        }
        const DecodeProblem one = contiguous(with(shapes(1, 1, 64, 1, {0})));
        run(tag + "one key", one, [&] { return probe_one_key(*step, one); });
        const DecodeProblem tile = contiguous(with(shapes(1, 1, 64, 1, {39})));
        run(tag + "one tile", tile, [&] { return probe_step(*step, tile, 1); });
        const DecodeProblem three = paged(with(shapes(2, 2, 64, 1, {150})), 16, 5);
        for (int splits : {1, 3, 8})
          run(tag + "splits " + std::to_string(splits), three,
              [&] { return probe_step(*step, three, splits); });
        const DecodeProblem gqa = paged(with(shapes(4, 1, 64, 3, {0, 70})), 16, 6);
        run(tag + "gqa causal", gqa, [&] { return probe_step(*step, gqa, 2); });
        const DecodeProblem rule = paged(with(shapes(8, 2, 64, 1, {3000})), 64, 7);
        run(tag + "rule", rule, [&] { return probe_step(*step, rule, 0); });
      }
    }
  }
  std::printf("%s: %d failure(s)\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}
