// test_going_further.cpp — the tests of the "going further" tasks, hidden until asked for.
//
// Each task extends a step beyond what the chapter builds (docs/instructors.md lists them).
// Its test case is hidden (a tag starting with "[."), so the suite that gates every step
// never runs it; it runs only when the student asks for it by its tag:
//
//   scripts/exercise.sh further 04-d96                    # builds test_04_flash_attention, runs it
//   build/bin/test_04_flash_attention "[04-d96]"          # the same, by hand
//   cmake -DFA_GOING_FURTHER=ON build                     # or: a ctest entry per task,
//   ctest --test-dir build -L going-further               #     going_further/<task>
//
// Every task's test fails until the step accepts the new problem (check_step) and computes it
// correctly: the same judge as test_steps.cpp (compare.h's tolerance policy against the double
// reference), on fresh poisoned outputs, with awkward shapes (tails, N_q ≠ N_kv, causal, GQA).
//
// Replay a failure: FA_SEED=<base seed printed in the failure> test_NN_slug "[tag]".
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention.h"
#include "catch.hpp"
#include "compare.h"
#include "inputs.h"
#include "registry.h"

namespace {

using fa::Distribution;
using fa::DType;
using fa::Problem;
using fa::StepInfo;

std::uint64_t base_seed() {
  static const std::uint64_t base = [] {
    const char* env = std::getenv("FA_SEED");
    const std::uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "going-further seed: FA_SEED=" << s << std::endl;
    return s;
  }();
  return base;
}
std::uint64_t next_seed() {
  static std::uint64_t counter = 0;
  return base_seed() + counter++;
}

/// The step with chapter number `number` in this program, or nullptr. A test program holds
/// one step (test_NN_slug, or the exercise program exercise_NN).
const StepInfo* linked_step(int number) {
  for (const StepInfo* s : fa::steps())
    if (s->number == number) return s;
  return nullptr;
}

/// The step a task extends; fails the test, saying which program to run, when it is absent.
const StepInfo& require_step(int number) {
  const StepInfo* s = linked_step(number);
  INFO("this program does not contain step " << (number < 10 ? "0" : "") << number
       << "; run the task in its test program, e.g. build/bin/test_"
       << (number < 10 ? "0" : "") << number << "_<slug> (steps here: " << fa::step_names()
       << ")");
  REQUIRE(s != nullptr);
  return *s;
}

Problem make_problem(int b, int hq, int hkv, int nq, int nkv, int d, bool causal, DType dtype,
                     fa::Layout layout = fa::Layout::BNHD) {
  Problem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.n_q = nq;
  p.n_kv = nkv;
  p.head_dim = d;
  p.causal = causal;
  p.dtype = dtype;
  p.layout = layout;
  return p;
}

/// Runs `step` on `p` (fresh inputs, poisoned outputs) and judges O and L against the double
/// reference with the tolerance of compare.h for p.dtype.
void check_task_case(const StepInfo& step, const Problem& p,
                     Distribution dist = Distribution::Normal) {
  const std::uint64_t seed = next_seed();
  INFO(step.name << ": " << p.describe() << " dist=" << fa::distribution_name(dist)
                 << " case seed " << seed << ", replay with FA_SEED=" << base_seed());
  const std::string accepted = fa::check_step(step, p);
  INFO("check_step: " << accepted);
  REQUIRE(accepted.empty());  // first the step must accept the problem ...
  const fa::HostInputs in = fa::make_inputs(p, dist, seed);
  const fa::ref::Result ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  std::vector<float> plain_lse;
  const std::vector<float> plain_o =
      fa::ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &plain_lse);
  fa::DeviceProblem dev(in, step.workspace_bytes ? step.workspace_bytes(p) : 0);
  dev.poison();
  fa::run_step(step, p, dev.tensors(), dev.workspace());
  std::vector<float> o, lse;
  dev.download(&o, &lse);
  std::string e = fa::judge(fa::compare_output(p, o, ref.o),
                            fa::compare_output(p, plain_o, ref.o), "O", p.dtype);
  if (e.empty())
    e = fa::judge(fa::compare_lse(p, lse, ref.lse), fa::compare_lse(p, plain_lse, ref.lse), "L",
                  p.dtype);
  INFO(e);
  CHECK(e.empty());  // ... then compute it right
}

/// The shapes every task is checked on, for one head dim and dtype.
void check_task(const StepInfo& step, int d, DType dtype) {
  for (bool causal : {false, true}) {
    if (causal && !step.causal) continue;
    for (int n : {1, 17, 64, 129, 1000})
      check_task_case(step, make_problem(n <= 129 ? 2 : 1, 2, 2, n, n, d, causal, dtype));
    for (auto [nq, nkv] : {std::pair{17, 129}, {129, 17}, {1, 1000}, {200, 64}})
      check_task_case(step, make_problem(1, 2, 2, nq, nkv, d, causal, dtype));
    if (step.gqa) check_task_case(step, make_problem(2, 6, 2, 129, 129, d, causal, dtype));
    check_task_case(step, make_problem(1, 2, 2, 333, 333, d, causal, dtype, fa::Layout::BHND));
    check_task_case(step, make_problem(1, 2, 2, 300, 300, d, causal, dtype),
                    Distribution::Large);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Step 03
// ---------------------------------------------------------------------------------------

TEST_CASE("going further, step 03: fp16 and bf16 inputs, fp32 accumulation",
          "[.going-further][03-half]") {
  // Q, K, V and O in half precision (2 bytes per element: half the HBM traffic of every
  // tensor), S, P, m, ℓ and the accumulator in fp32. Judged by the 2× rule of compare.h.
  const StepInfo& step = require_step(3);
  for (DType t : {DType::F16, DType::BF16}) {
    check_task(step, 64, t);
    check_task(step, 128, t);
  }
}

// ---------------------------------------------------------------------------------------
// Step 04
// ---------------------------------------------------------------------------------------

TEST_CASE("going further, step 04: head dim 96", "[.going-further][04-d96]") {
  // d = 96 is not a power of two: a new tile configuration whose per-thread blocks and tile
  // loaders still divide evenly (or are taught to handle what does not).
  check_task(require_step(4), 96, DType::F32);
}

TEST_CASE("going further, step 04: head dim 256", "[.going-further][04-d256]") {
  // d = 256 doubles every tile along d: twice the shared memory and twice the O registers
  // of d = 128 per block, so the tile sizes must be chosen again.
  check_task(require_step(4), 256, DType::F32);
}

TEST_CASE("going further, step 04: fp16 and bf16 inputs, fp32 accumulation",
          "[.going-further][04-half]") {
  const StepInfo& step = require_step(4);
  for (DType t : {DType::F16, DType::BF16}) {
    check_task(step, 64, t);
    check_task(step, 128, t);
  }
}
