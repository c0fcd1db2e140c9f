// gpu_suite.h — what every GPU test file shares: seeds, problems, running a step on poisoned
// outputs, and the verdict against the reference (compare.h's tolerance policy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/registry.h"
#include "reference/compare.h"

namespace fa::test {

/// \brief One base seed per program run (FA_SEED, or random), printed once.
std::uint64_t base_seed();
/// \brief base_seed() + a counter: each case draws fresh inputs, replayable from the base.
std::uint64_t next_seed();

using fa::make_problem;  // (common/problem.h) an fp32 problem; with_dtype() changes it
/// \brief `p` with its dtype set to `t`.
Problem with_dtype(Problem p, DType t);

/// \brief The head dims among `candidates` that `s` accepts in its first dtype; its own list
/// of head dims when it accepts none of them.
std::vector<int> dims_for(const StepInfo& s, const std::vector<int>& candidates);

/// \name The problems of the test groups, for head dim d (fp32: a suite sets the dtype)
/// Shared by the forward suite (test_steps.cpp) and the backward suite (test_backward.cpp).
///@{
/// [shapes]: N_q = N_kv over awkward sizes, then N_q ≠ N_kv both ways.
std::vector<Problem> shape_problems(int d);
/// [causal]: the same sizes causal, and N_q ≠ N_kv both ways (N_q > N_kv: rows that see no key).
std::vector<Problem> causal_problems(int d);
/// [gqa]: groups of 3, and MQA.
std::vector<Problem> gqa_problems(int d, bool causal);
/// [layout]: [B, H, N, d] (GQA among them when `gqa`).
std::vector<Problem> layout_problems(int d, bool causal, bool gqa);
/// [distributions]: a small and a long problem (the distribution is the suite's to choose).
std::vector<Problem> distribution_problems(int d, bool causal);
///@}

/// \brief What a step wrote: O (as float) and L.
struct Outputs {
  std::vector<float> o, lse;
};

/// \brief Runs `step` on fresh outputs poisoned with NaN and returns what it wrote.
Outputs run_on_device(const StepInfo& step, const HostInputs& in);

/// The double reference, the plain oracle and the judgement (reference/compare.h).
using ref::Expected;
using ref::expected_for;

/// \brief The verdict on `got` against `want`: "" when O and L pass the tolerance policy.
std::string verdict(const Problem& p, const Outputs& got, const Expected& want);

}  // namespace fa::test
