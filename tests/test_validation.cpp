// test_validation.cpp — the registry's checks on a step described on the host (no step
// compiled, no device): what check_step, check_launch and check_fits reject, and how they say
// it. test_registry.cpp runs the same kinds of checks over every registered GPU step.
#include <string>
#include <vector>

#include "common/registry.h"
#include "tests/catch.hpp"
#include "tests/device_limits.h"

namespace {
using fa::test::mentions;

// A step as a GPU step would describe itself; its device check uses check_fits().
std::string small_step_check(const fa::Problem& p, const fa::DeviceLimits& dev) {
  return fa::check_fits("99_synthetic", dev, p, 48 * 1024,
                        {{0, p.n_q, "n_q (" + std::to_string(p.n_q) + ")"},
                         {1, p.batch * p.heads_q, "batch*heads_q"}});
}
// Entry points that are never called: the checks only look at whether they are set.
void no_run(const fa::Problem&, const fa::DeviceTensors&, void*, fa::Stream) {}
void no_backward(const fa::Problem&, const fa::BackwardTensors&, void*, fa::Stream) {}
fa::StepInfo synthetic() {
  fa::StepInfo s;
  s.number = 99;
  s.name = "99_synthetic";
  s.dtypes = {fa::DType::F16, fa::DType::BF16};
  s.head_dims = {64, 128};
  s.causal = false;
  s.gqa = false;
  s.alignment = 16;
  s.check_device = small_step_check;
  s.run = no_run;
  return s;
}
fa::Problem ok_problem() {
  fa::Problem p = fa::make_problem(2, 4, 4, 100, 100, 64);
  p.dtype = fa::DType::F16;
  return p;
}
fa::DeviceLimits h200() { return fa::test::h200_limits(); }
}  // namespace

TEST_CASE("check_step names the parameter, its value and the step's limit", "[validation]") {
  const fa::StepInfo s = synthetic();
  const fa::Problem p = ok_problem();
  REQUIRE(fa::check_step(s, p).empty());

  fa::Problem bad = p;
  bad.dtype = fa::DType::F32;
  CHECK(fa::check_step(s, bad) ==
        "dtype (fp32) is not supported by step 99_synthetic (supported: fp16, bf16)");
  bad = p;
  bad.head_dim = 96;
  CHECK(fa::check_step(s, bad) ==
        "head_dim (96) is not supported by step 99_synthetic (supported: 64 128)");
  bad = p;
  bad.causal = true;
  CHECK(fa::check_step(s, bad) == "causal (true) is not supported by step 99_synthetic");
  bad = p;
  bad.heads_kv = 2;
  CHECK(mentions(fa::check_step(s, bad), "heads_kv (2) must equal heads_q (4)"));
  bad = p;
  bad.n_kv = 0;  // the problem's own validation comes first
  CHECK(mentions(fa::check_step(s, bad), "n_kv (0)"));

  fa::StepInfo any_d = s;  // no list of head dims: any d up to max_head_dim
  any_d.head_dims.clear();
  any_d.max_head_dim = 128;
  bad = p;
  bad.head_dim = 129;
  CHECK(fa::check_step(any_d, bad) == "head_dim (129) exceeds step 99_synthetic's limit of 128");
  bad.head_dim = 100;
  CHECK(fa::check_step(any_d, bad).empty());
}

TEST_CASE("check_launch catches null and misaligned pointers, then the device limits",
          "[validation]") {
  const fa::StepInfo s = synthetic();
  const fa::Problem p = ok_problem();
  alignas(64) static float dummy[64];
  fa::DeviceTensors t;
  t.q = t.k = t.v = dummy;
  t.o = dummy;
  t.lse = dummy;
  CHECK(fa::check_launch(s, p, t, h200()).empty());

  fa::DeviceTensors null_k = t;
  null_k.k = nullptr;
  CHECK(fa::check_launch(s, p, null_k, h200()) == "pointer k is null");
  fa::DeviceTensors odd = t;
  odd.v = reinterpret_cast<const char*>(dummy) + 8;  // 4-byte aligned, not 16
  const std::string e = fa::check_launch(s, p, odd, h200());
  CHECK(mentions(e, "pointer v"));
  CHECK(mentions(e, "is not aligned to 16 bytes as step 99_synthetic requires"));

  fa::DeviceLimits small = h200();
  small.sharedMemPerBlockOptin = 16 * 1024;
  CHECK(fa::check_launch(s, p, t, small) ==
        "shared memory per block (49152 bytes for head_dim 64) exceeds this device's "
        "sharedMemPerBlockOptin of 16384 bytes for step 99_synthetic");
  fa::Problem invalid = p;  // an invalid problem is reported before the pointers
  invalid.head_dim = 96;
  CHECK(mentions(fa::check_launch(s, invalid, null_k, h200()), "head_dim (96)"));
}

TEST_CASE("check_launch and check_backward_launch refuse a pass the step does not have",
          "[validation]") {
  alignas(64) static float dummy[64];
  fa::DeviceTensors t;
  t.q = t.k = t.v = dummy;
  t.o = dummy;
  t.lse = dummy;
  fa::BackwardTensors b;
  b.q = b.k = b.v = b.o = b.d_o = dummy;
  b.dq = b.dk = b.dv = dummy;
  b.lse = dummy;
  const fa::StepInfo forward_only = synthetic();
  CHECK(fa::check_backward_launch(forward_only, ok_problem(), b, h200()) ==
        "step 99_synthetic has no backward pass");
  fa::StepInfo backward_only = synthetic();
  backward_only.run = nullptr;
  backward_only.backward = no_backward;
  CHECK(fa::check_launch(backward_only, ok_problem(), t, h200()) ==
        "step 99_synthetic has no forward pass");
  CHECK(fa::check_backward_launch(backward_only, ok_problem(), b, h200()).empty());
}

TEST_CASE("check_backward_launch checks the problem, then every pointer, then the device",
          "[validation]") {
  fa::StepInfo s = synthetic();
  s.backward = no_backward;
  s.check_backward_device = small_step_check;
  const fa::Problem p = ok_problem();
  alignas(64) static float dummy[64];
  fa::BackwardTensors b;
  b.q = b.k = b.v = b.o = b.d_o = dummy;
  b.dq = b.dk = b.dv = dummy;
  b.lse = dummy;
  REQUIRE(fa::check_backward_launch(s, p, b, h200()).empty());

  fa::Problem invalid = p;  // an invalid problem is reported before the pointers
  invalid.causal = true;
  fa::BackwardTensors null_q = b;
  null_q.q = nullptr;
  CHECK(fa::check_backward_launch(s, invalid, null_q, h200()) ==
        "causal (true) is not supported by step 99_synthetic");
  CHECK(fa::check_backward_launch(s, p, null_q, h200()) == "pointer q is null");
  // Every gradient and dO is checked, in the step's alignment; L needs 4 bytes only.
  const char* base = reinterpret_cast<const char*>(dummy);
  for (const char* name : {"d_o", "dq", "dk", "dv"}) {
    fa::BackwardTensors odd = b;
    const std::string n = name;
    void* off = const_cast<char*>(base + 8);  // 4-byte aligned, not 16
    if (n == "d_o") odd.d_o = off;
    if (n == "dq") odd.dq = off;
    if (n == "dk") odd.dk = off;
    if (n == "dv") odd.dv = off;
    INFO(name);
    const std::string e = fa::check_backward_launch(s, p, odd, h200());
    CHECK(mentions(e, "pointer " + n + " ("));
    CHECK(mentions(e, "is not aligned to 16 bytes as step 99_synthetic requires"));
  }
  fa::BackwardTensors lse4 = b;
  lse4.lse = dummy + 1;  // 4-byte aligned is enough for L
  CHECK(fa::check_backward_launch(s, p, lse4, h200()).empty());

  fa::DeviceLimits small = h200();
  small.sharedMemPerBlockOptin = 16 * 1024;
  CHECK(mentions(fa::check_backward_launch(s, p, b, small), "sharedMemPerBlockOptin of 16384"));
  s.check_backward_device = nullptr;  // the forward's limits are not the backward's
  CHECK(fa::check_backward_launch(s, p, b, small).empty());
}

TEST_CASE("check_fits names the first grid dimension or the shared memory that does not fit",
          "[validation]") {
  fa::DeviceLimits prop;
  prop.sharedMemPerBlockOptin = 1000;
  prop.maxGridSize[0] = 100;
  prop.maxGridSize[1] = 10;
  prop.maxGridSize[2] = 5;
  fa::Problem p;
  p.head_dim = 64;
  CHECK(fa::check_fits("s", prop, p, 1000, {{0, 100, "x"}, {1, 10, "y"}, {2, 5, "z"}}).empty());
  CHECK(fa::check_fits("s", prop, p, 1001, {}) ==
        "shared memory per block (1001 bytes for head_dim 64) exceeds this device's "
        "sharedMemPerBlockOptin of 1000 bytes for step s");
  CHECK(fa::check_fits("s", prop, p, 0, {{0, 100, "x"}, {1, 11, "n (11)"}, {2, 6, "z"}}) ==
        "n (11) exceeds the grid y limit of 10 for step s");
  CHECK(fa::check_fits("s", prop, p, 0, {{2, 6, "b (6)"}}) ==
        "b (6) exceeds the grid z limit of 5 for step s");
}

TEST_CASE("device_refusal: a device that cannot run even the step's smallest problem",
          "[validation]") {
  fa::StepInfo s = synthetic();
  CHECK(fa::device_refusal(s, h200()).empty());
  fa::DeviceLimits small = h200();
  small.sharedMemPerBlockOptin = 16 * 1024;  // below the 48 KB every problem of the step needs
  CHECK(fa::device_refusal(s, small) ==
        "shared memory per block (49152 bytes for head_dim 64) exceeds this device's "
        "sharedMemPerBlockOptin of 16384 bytes for step 99_synthetic");
  s.check_device = nullptr;  // no device check: runs everywhere
  CHECK(fa::device_refusal(s, small).empty());
}
