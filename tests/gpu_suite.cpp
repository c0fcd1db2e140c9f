#include "tests/gpu_suite.h"

#include <cstdlib>
#include <iostream>
#include <random>
#include <utility>

namespace fa::test {

std::uint64_t base_seed() {
  static const std::uint64_t base = [] {
    const char* env = std::getenv("FA_SEED");
    const std::uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "test seed: FA_SEED=" << s << std::endl;
    return s;
  }();
  return base;
}

std::uint64_t next_seed() {
  static std::uint64_t counter = 0;
  return base_seed() + counter++;
}

Problem with_dtype(Problem p, DType t) {
  p.dtype = t;
  return p;
}

std::vector<int> dims_for(const StepInfo& s, const std::vector<int>& candidates) {
  std::vector<int> out;
  for (int d : candidates) {
    Problem p;
    p.head_dim = d;
    p.dtype = s.dtypes.front();
    if (check_step(s, p).empty()) out.push_back(d);
  }
  if (out.empty()) out = s.head_dims;
  return out;
}

namespace {
const std::vector<int> kSizes = {1, 17, 64, 127, 128, 129, 1000};
}  // namespace

std::vector<Problem> shape_problems(int d) {
  std::vector<Problem> out;
  for (int n : kSizes) out.push_back(make_problem(n <= 129 ? 2 : 1, 2, 2, n, n, d, false));
  for (auto [nq, nkv] : {std::pair{17, 129}, {128, 1}, {1, 1000}, {200, 64}})
    out.push_back(make_problem(1, 2, 2, nq, nkv, d, false));
  return out;
}

std::vector<Problem> causal_problems(int d) {
  std::vector<Problem> out;
  for (int n : kSizes) out.push_back(make_problem(n <= 129 ? 2 : 1, 2, 2, n, n, d, true));
  // N_q > N_kv leaves the first N_q - N_kv rows without any key.
  for (auto [nq, nkv] : {std::pair{17, 129}, {129, 17}, {1, 1000}, {1000, 1}, {64, 200}, {200, 64}})
    out.push_back(make_problem(1, 2, 2, nq, nkv, d, true));
  return out;
}

std::vector<Problem> gqa_problems(int d, bool causal) {
  return {make_problem(2, 6, 2, 129, 129, d, causal),   // GQA, groups of 3
          make_problem(1, 4, 1, 100, 257, d, causal)};  // MQA
}

std::vector<Problem> layout_problems(int d, bool causal, bool gqa) {
  std::vector<Problem> out = {make_problem(2, 3, 3, 129, 129, d, false, Layout::BHND),
                              make_problem(1, 2, 2, 1000, 1000, d, causal, Layout::BHND)};
  if (gqa) out.push_back(make_problem(2, 4, 2, 77, 200, d, causal, Layout::BHND));
  return out;
}

std::vector<Problem> distribution_problems(int d, bool causal) {
  return {make_problem(2, 2, 2, 129, 129, d, causal), make_problem(1, 2, 2, 1000, 1000, d, causal)};
}

Outputs run_on_device(const StepInfo& step, const HostInputs& in) {
  const Problem& p = in.problem;
  DeviceProblem dev(in, step.workspace_bytes ? step.workspace_bytes(p) : 0);
  dev.poison();
  run_step(step, p, dev.tensors(), dev.workspace());
  Outputs out;
  dev.download(&out.o, &out.lse);
  return out;
}

std::string verdict(const Problem& p, const Outputs& got, const Expected& want) {
  return ref::verdict(p, got.o, got.lse, want);
}

}  // namespace fa::test
