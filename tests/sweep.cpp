// sweep.cpp — randomized sweep: many random problems (B, H_q, H_kv, N_q, N_kv, d, causal,
// layout, input distribution, dtype) against the reference, for every registered step: the
// forward of the steps that have one, the backward of those that have one (dQ, dK, dV against
// the double backward), and the decoding steps (random lengths, contiguous or paged caches with
// shuffled pages, q_len 1..16, split count from the rule or forced).
//
//   bin/sweep --count 500            # 500 problems per dtype family; prints its seed
//   bin/sweep --seed 1234 --only 12  # replay problem #12 of a failed run
//
// Each problem is drawn from its own seed (base + index), so any failure can be replayed
// alone. A step sees the problems of its dtypes and head dims; a step this GPU refuses outright
// (step 08 off compute capability 9.0) is named and left out, not failed on every problem.
// Exit status 1 if any problem failed.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/decode_registry.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/registry.h"
#include "reference/compare.h"
#include "steps/harness/cli.h"
#include "tests/backward_case.h"
#include "tests/decode_cases.h"
#include "tests/decode_gpu.h"

namespace {

// One random problem of `dtype`, small enough for the CPU reference, awkward on purpose.
fa::Problem draw(std::mt19937_64& g, fa::DType dtype) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  fa::Problem p;
  p.dtype = dtype;
  // Every head dim some step of the dtype supports; a step sees the problems whose d it takes.
  const int dims[] = {32, 64, 128};
  p.head_dim = dims[pick(0, 2)];
  p.batch = pick(1, 3);
  p.heads_kv = pick(1, 3);
  p.heads_q = p.heads_kv * pick(1, 3);
  // Lengths: often tiny or just off a tile boundary, sometimes a few hundred.
  auto length = [&] {
    switch (pick(0, 3)) {
      case 0:
        return pick(1, 16);
      case 1:
        return 64 * pick(1, 4) + pick(-1, 1);
      default:
        return pick(1, 300);
    }
  };
  p.n_q = length();
  p.n_kv = pick(0, 2) == 0 ? p.n_q : length();
  p.causal = pick(0, 1) == 1;
  p.layout = pick(0, 1) ? fa::Layout::BNHD : fa::Layout::BHND;
  return p;
}

// One random decoding problem of `dtype` and head dim `d`: 1..4 sequences of random lengths
// (0, tiny, off a tile or page boundary, or a few hundred), q_len 1..16, MHA/GQA/MQA, a
// contiguous cache with spare rows or a paged one (page size 16..256, pages shuffled).
fa::DecodeProblem draw_decode(std::mt19937_64& g, fa::DType dtype, int d) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
  const int hkv = pick(1, 3), group = std::vector<int>{1, 2, 4, 8}[pick(0, 3)];
  std::vector<int> lens(pick(1, 4));
  for (int& n : lens) {
    switch (pick(0, 3)) {
      case 0:
        n = pick(0, 8);
        break;
      case 1:
        n = 64 * pick(1, 6) + pick(-1, 1);
        break;
      default:
        n = pick(0, 700);
    }
  }
  fa::DecodeProblem p = fa::test::shapes(hkv * group, hkv, d, pick(1, 16), lens);
  p.dtype = dtype;
  if (pick(0, 1)) return fa::test::contiguous(p, p.max_kv_len() + pick(0, 40));
  const int pages[] = {16, 32, 64, 128, 256};
  return fa::test::paged(p, pages[pick(0, 4)], g(), pick(0, 3));
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Randomized sweep of every step against the reference"};
  int count = 500, only = -1;
  std::uint64_t seed = std::random_device{}();
  app.add_option("--count", count,
                 "problems per dtype family (a step sees those whose head dim it supports)")
      ->check(fa::cli::int_range(1, 1000000))
      ->capture_default_str();
  app.add_option("--seed", seed, "base seed (problem i uses seed + i; default: random)")
      ->check(fa::cli::uint64_range());
  CLI::Option* only_opt =
      app.add_option("--only", only, "run problem #i only (replay), 0 <= i < count")
          ->check(fa::cli::int_range(0, 1000000 - 1));
  FA_CLI_PARSE(app, argc, argv);
  if (only_opt->count() && only >= count)
    return fa::cli::refuse("--only: Value " + std::to_string(only) + " not in range 0 to " +
                           std::to_string(count - 1) + " (problems 0 .. --count - 1; --count is " +
                           std::to_string(count) + ")");

  if (!fa::no_usable_device().empty()) {
    std::printf("no usable CUDA device: the sweep needs one\n");
    return 77;
  }
  std::printf("sweep: base seed %llu, %d problems per dtype family\n",
              static_cast<unsigned long long>(seed), count);
  const fa::DeviceLimits limits = fa::device_limits(0);
  std::vector<const fa::StepInfo*> steps;
  for (const fa::StepInfo* s : fa::steps()) {
    if (std::string why = fa::device_refusal(*s, limits); why.empty())
      steps.push_back(s);
    else
      std::printf("%s: not run on this GPU: %s\n", s->name, why.c_str());
  }
  std::vector<const fa::DecodeStepInfo*> decoders;
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) {
    if (std::string why = fa::device_refusal(*s, limits); why.empty())
      decoders.push_back(s);
    else
      std::printf("%s: not run on this GPU: %s\n", s->name, why.c_str());
  }
  std::map<std::string, int> runs, fails;
  // Counts one problem of `name` and prints its failure, if any, with how to replay it.
  auto record = [&](const std::string& name, int i, const std::string& what, const std::string& e) {
    ++runs[name];
    if (e.empty()) return;
    ++fails[name];
    std::printf("FAIL #%d %s %s: %s (replay: --seed %llu --only %d)\n", i, name.c_str(),
                what.c_str(), e.c_str(), static_cast<unsigned long long>(seed), i);
  };
  for (int i = 0; i < count; ++i) {
    if (only >= 0 && i != only) continue;
    // Problem i is fp32 for the CUDA-core steps and fp16/bf16 for the tensor-core steps.
    std::mt19937_64 g(seed + i);
    const fa::DType lowp = i % 2 ? fa::DType::BF16 : fa::DType::F16;
    for (fa::DType dtype : {fa::DType::F32, lowp}) {
      const fa::Problem p = draw(g, dtype);
      const auto dist = static_cast<fa::Distribution>(std::uniform_int_distribution<int>(0, 2)(g));
      std::vector<const fa::StepInfo*> todo, todo_backward;
      for (const fa::StepInfo* s : steps) {
        if (!fa::check_step(*s, p).empty()) continue;
        if (s->run) todo.push_back(s);
        if (s->backward) todo_backward.push_back(s);
      }
      if (todo.empty() && todo_backward.empty()) continue;
      const fa::HostInputs in = fa::make_inputs(p, dist, seed + i);
      const std::string what = p.describe() + " dist=" + fa::distribution_name(dist);
      if (!todo.empty()) {
        const fa::ref::Expected want = fa::ref::expected_for(in);
        for (const fa::StepInfo* s : todo) {
          std::string e;
          try {
            fa::DeviceProblem dev(in, s->workspace_bytes ? s->workspace_bytes(p) : 0);
            fa::run_step(*s, p, dev.tensors(), dev.workspace());
            std::vector<float> o, lse;
            dev.download(&o, &lse);
            e = fa::ref::verdict(p, o, lse, want);
          } catch (const std::exception& ex) {
            e = ex.what();
          }
          record(s->name, i, what, e);
        }
      }
      if (!todo_backward.empty()) {
        const fa::ref::ExpectedBackward want = fa::test::backward_expected(in, seed + i);
        for (const fa::StepInfo* s : todo_backward) {
          std::string e;
          try {
            const fa::test::Grads g = fa::test::run_backward_case(*s, in, want);
            e = fa::ref::verdict_backward(p, g.dq, g.dk, g.dv, want);
          } catch (const std::exception& ex) {
            e = ex.what();
          }
          record(std::string(s->name) + " (backward)", i, what, e);
        }
      }
    }
    for (const fa::DecodeStepInfo* s : decoders) {
      // Problem i's decoding case: the step's dtypes and head dims, split count from the
      // rule or forced to 1..max_splits, seeded from the problem so it replays alone.
      std::mt19937_64 g(seed + i + 0x5bd1e995ull);
      const fa::DType t =
          s->dtypes[std::uniform_int_distribution<std::size_t>(0, s->dtypes.size() - 1)(g)];
      const int d =
          s->head_dims[std::uniform_int_distribution<std::size_t>(0, s->head_dims.size() - 1)(g)];
      const fa::DecodeProblem p = draw_decode(g, t, d);
      const int splits = std::uniform_int_distribution<int>(0, 1)(g)
                             ? 0
                             : std::uniform_int_distribution<int>(1, s->max_splits)(g);
      std::string e = fa::check_decode_step(*s, p);
      std::string what =
          "B=" + std::to_string(p.batch) + " Hq=" + std::to_string(p.heads_q) +
          " Hkv=" + std::to_string(p.heads_kv) + " d=" + std::to_string(d) +
          " q_len=" + std::to_string(p.q_len) + " " + fa::dtype_name(t) +
          (p.cache == fa::CacheKind::Paged ? " paged(" + std::to_string(p.page_size) + ")"
                                           : " contiguous") +
          " splits=" + (splits ? std::to_string(splits) : "rule");
      if (e.empty()) {
        try {
          const fa::test::DecodeCase c = fa::test::make_case(p, seed + i);
          e = fa::test::judge_case(c, fa::test::run_case(*s, c, splits));
        } catch (const std::exception& ex) {
          e = ex.what();
        }
      } else {
        e = "the sweep drew a problem the step refuses: " + e;
      }
      record(std::string(s->name) + " (decode)", i, what, e);
    }
    if ((i + 1) % 50 == 0) std::printf("  %d/%d problems\n", i + 1, count), std::fflush(stdout);
  }
  if (runs.empty()) {  // nothing checked is not a pass
    std::printf("sweep: FAILED, no step ran any problem\n");
    return 1;
  }
  int total_fail = 0;
  for (const auto& [name, n] : runs) {
    std::printf("%-33s %5d problems, %d failed\n", name.c_str(), n, fails[name]);
    total_fail += fails[name];
  }
  std::printf("sweep: %s\n", total_fail ? "FAILED" : "all passed");
  return total_fail ? 1 : 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
