#include "gpu_suite.h"

#include <cstdlib>
#include <iostream>
#include <random>

#include "compare.h"

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

Expected expected_for(const HostInputs& in) {
  const Problem& p = in.problem;
  Expected e;
  e.ref = ref::attention(p, in.q.data(), in.k.data(), in.v.data());
  e.plain_o = ref::attention_plain(p, in.q.data(), in.k.data(), in.v.data(), &e.plain_lse);
  e.score_rounding = score_rounding_error(p, in.q.data(), in.k.data(), in.v.data());
  return e;
}

std::string verdict(const Problem& p, const Outputs& got, const Expected& want) {
  std::string e = judge(compare_output(p, got.o, want.ref.o),
                        compare_output(p, want.plain_o, want.ref.o), "O", p.dtype, p.dtype,
                        want.score_rounding);
  if (e.empty())
    e = judge(compare_lse(p, got.lse, want.ref.lse), compare_lse(p, want.plain_lse, want.ref.lse),
              "L", p.dtype);
  return e;
}

}  // namespace fa::test
