// test_baseline.cpp — the cuBLAS baseline every step is raced against computes attention:
// judged like a step (reference/compare.h) on causal and full masks, GQA and MQA, both
// layouts, more queries than keys (rows that see no key) and fewer. GPU.
#include <stdexcept>
#include <string>

#include "common/device_problem.h"
#include "common/inputs.h"
#include "steps/harness/cublas_baseline.h"
#include "tests/catch.hpp"
#include "tests/gpu_suite.h"

namespace {
std::string run_baseline(const fa::Problem& p) {
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, fa::test::next_seed());
  fa::DeviceProblem dev(in, 0);  // O and L poisoned with NaN
  fa::baseline::CublasAttention base(p);
  base.run(dev.tensors());
  fa::test::Outputs got;
  dev.download(&got.o, &got.lse);
  return fa::test::verdict(p, got, fa::test::expected_for(in));
}
}  // namespace

TEST_CASE("the cuBLAS baseline matches the reference", "[baseline]") {
  using fa::Layout;
  struct Case {
    int b, hq, hkv, nq, nkv, d;
    bool causal;
    Layout layout;
  };
  const Case cases[] = {
      {2, 4, 4, 100, 100, 64, false, Layout::BNHD},  // odd N: partial warps in the reduction
      {2, 4, 4, 300, 300, 64, true, Layout::BNHD},   // more keys than one block's 256 threads
      {1, 8, 2, 77, 129, 32, true, Layout::BHND},    // GQA, fewer queries than keys
      {1, 4, 1, 130, 50, 128, true, Layout::BNHD},   // MQA, more queries: rows with no key
      {1, 2, 2, 1, 1000, 64, false, Layout::BHND},   // one query row
  };
  for (const Case& c : cases) {
    const fa::Problem p = fa::make_problem(c.b, c.hq, c.hkv, c.nq, c.nkv, c.d, c.causal, c.layout);
    INFO(p.describe());
    CHECK(run_baseline(p).empty());
  }
}

TEST_CASE("the cuBLAS baseline refuses what it cannot run, naming it", "[baseline]") {
  fa::Problem p = fa::make_problem(1, 1, 1, 16, 16, 64);
  p.dtype = fa::DType::BF16;
  try {
    fa::baseline::CublasAttention base(p);
    FAIL("a bf16 problem was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "dtype (bf16) is not supported by cublas_baseline (fp32 only)");
  }
}
