#include "tests/gpu_suite.h"

#include <cstdlib>
#include <iostream>
#include <random>

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
