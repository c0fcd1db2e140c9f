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
