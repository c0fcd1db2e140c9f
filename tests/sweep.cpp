// sweep.cpp — randomized sweep: many random problems (B, H_q, H_kv, N_q, N_kv, d, causal,
// layout, input distribution, dtype) against the reference, for every registered step.
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

#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/registry.h"
#include "reference/compare.h"
#include "steps/harness/cli.h"

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
  std::map<std::string, int> runs, fails;
  for (int i = 0; i < count; ++i) {
    if (only >= 0 && i != only) continue;
    // Problem i is fp32 for the CUDA-core steps and fp16/bf16 for the tensor-core steps.
    std::mt19937_64 g(seed + i);
    const fa::DType lowp = i % 2 ? fa::DType::BF16 : fa::DType::F16;
    for (fa::DType dtype : {fa::DType::F32, lowp}) {
      const fa::Problem p = draw(g, dtype);
      const auto dist = static_cast<fa::Distribution>(std::uniform_int_distribution<int>(0, 2)(g));
      std::vector<const fa::StepInfo*> todo;
      for (const fa::StepInfo* s : steps)
        if (fa::check_step(*s, p).empty()) todo.push_back(s);
      if (todo.empty()) continue;
      const fa::HostInputs in = fa::make_inputs(p, dist, seed + i);
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
        ++runs[s->name];
        if (!e.empty()) {
          ++fails[s->name];
          std::printf("FAIL #%d %s %s dist=%s: %s (replay: --seed %llu --only %d)\n", i, s->name,
                      p.describe().c_str(), fa::distribution_name(dist), e.c_str(),
                      static_cast<unsigned long long>(seed), i);
        }
      }
    }
    if ((i + 1) % 50 == 0) std::printf("  %d/%d problems\n", i + 1, count), std::fflush(stdout);
  }
  if (runs.empty()) {  // nothing checked is not a pass
    std::printf("sweep: FAILED, no step ran any problem\n");
    return 1;
  }
  int total_fail = 0;
  for (const auto& [name, n] : runs) {
    std::printf("%-22s %5d problems, %d failed\n", name.c_str(), n, fails[name]);
    total_fail += fails[name];
  }
  std::printf("sweep: %s\n", total_fail ? "FAILED" : "all passed");
  return total_fail ? 1 : 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
