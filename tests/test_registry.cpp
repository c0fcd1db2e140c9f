// test_registry.cpp — every registered step rejects what it cannot run, before any launch,
// with a message that names the parameter, its value and the limit. CPU only, but over the
// compiled GPU steps (test_validation.cpp checks the same functions without any step).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/registry.h"
#include "tests/catch.hpp"
#include "tests/device_limits.h"

namespace {
using fa::test::h200_limits;
using fa::test::mentions;

fa::Problem ok_problem(const fa::StepInfo& s) {
  fa::Problem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = s.gqa ? 2 : 4;
  p.n_q = p.n_kv = 100;
  p.head_dim = s.head_dims.empty() ? 64 : s.head_dims.front();
  p.dtype = s.dtypes.front();
  return p;
}
}  // namespace

TEST_CASE("steps are registered in order and found by name, number or slug", "[registry]") {
  REQUIRE_FALSE(fa::steps().empty());
  int last = -1;
  for (const fa::StepInfo* s : fa::steps()) {
    CHECK(s->number > last);
    last = s->number;
    CHECK(fa::find_step(s->name) == s);
    CHECK(fa::find_step(std::to_string(s->number)) == s);
    const std::string name = s->name;
    CHECK(fa::find_step(name.substr(name.find('_') + 1)) == s);
    CHECK((s->run != nullptr || s->backward != nullptr));  // a forward, a backward, or both
  }
  CHECK(fa::find_step("no_such_step") == nullptr);
  CHECK(fa::find_step("99") == nullptr);
}

TEST_CASE("each step rejects unsupported problems with a clear message", "[registry]") {
  for (const fa::StepInfo* s : fa::steps()) {
    INFO(s->name);
    fa::Problem p = ok_problem(*s);
    REQUIRE(fa::check_step(*s, p).empty());

    fa::Problem bad = p;
    bad.head_dim = s->head_dims.empty() ? s->max_head_dim + 1 : 48;
    CHECK(mentions(fa::check_step(*s, bad), "head_dim (" + std::to_string(bad.head_dim) + ")"));

    bad = p;
    bad.n_kv = 0;
    CHECK(mentions(fa::check_step(*s, bad), "n_kv (0)"));

    bad = p;
    bad.heads_q = 3;
    bad.heads_kv = 2;
    CHECK(mentions(fa::check_step(*s, bad), "heads_q (3) must be a multiple of heads_kv (2)"));

    for (fa::DType t : {fa::DType::F32, fa::DType::F16, fa::DType::BF16}) {
      bad = p;
      bad.dtype = t;
      const bool supported = std::find(s->dtypes.begin(), s->dtypes.end(), t) != s->dtypes.end();
      CHECK(fa::check_step(*s, bad).empty() == supported);
      if (!supported) CHECK(mentions(fa::check_step(*s, bad), "dtype"));
    }
  }
}

TEST_CASE("launch checks catch null and misaligned pointers", "[registry]") {
  for (const fa::StepInfo* s : fa::steps()) {
    INFO(s->name);
    const fa::Problem p = ok_problem(*s);
    alignas(64) static float dummy[64];
    if (s->backward) {
      fa::BackwardTensors b;
      b.q = b.k = b.v = b.o = b.d_o = dummy;
      b.dq = b.dk = b.dv = dummy;
      b.lse = dummy;
      CHECK(fa::check_backward_launch(*s, p, b, h200_limits()).empty());
      fa::BackwardTensors null_do = b;
      null_do.d_o = nullptr;
      CHECK(fa::check_backward_launch(*s, p, null_do, h200_limits()) == "pointer d_o is null");
      fa::BackwardTensors null_dv = b;
      null_dv.dv = nullptr;
      CHECK(fa::check_backward_launch(*s, p, null_dv, h200_limits()) == "pointer dv is null");
      fa::Problem bad = p;
      bad.n_q = 0;  // the problem's own validation first, as for the forward
      CHECK(mentions(fa::check_backward_launch(*s, bad, b, h200_limits()), "n_q (0)"));
      // The deterministic mode: accepted where the step offers it (or is deterministic
      // anyway), otherwise refused by name.
      fa::Problem det = p;
      det.deterministic = true;
      const bool offers = s->backward_deterministic_dkdv &&
                          (s->backward_deterministic_dq || s->backward_deterministic_mode);
      const std::string e = fa::check_backward_launch(*s, det, b, h200_limits());
      CHECK(e.empty() == offers);
      if (!offers) CHECK(mentions(e, "deterministic (true)"));
      // A mode that sums dQ from partials keeps them in the workspace, never in less of it.
      if (s->backward_deterministic_mode && s->backward_workspace_bytes)
        CHECK(s->backward_workspace_bytes(det) >= s->backward_workspace_bytes(p));
    } else {
      CHECK(mentions(fa::check_backward_launch(*s, p, fa::BackwardTensors{}, h200_limits()),
                     "has no backward pass"));
    }
    fa::DeviceTensors t;
    t.q = t.k = t.v = dummy;
    t.o = dummy;
    t.lse = dummy;
    if (!s->run) {
      CHECK(fa::check_launch(*s, p, t, h200_limits()) ==
            std::string("step ") + s->name + " has no forward pass");
      continue;
    }
    fa::DeviceTensors null_k = t;
    null_k.k = nullptr;
    CHECK(mentions(fa::check_launch(*s, p, null_k, h200_limits()), "pointer k is null"));
    fa::DeviceTensors odd = t;
    odd.v = reinterpret_cast<const char*>(dummy) + 2;
    CHECK(mentions(fa::check_launch(*s, p, odd, h200_limits()), "pointer v"));
    CHECK(mentions(fa::check_launch(*s, p, odd, h200_limits()), "aligned"));
  }
}

TEST_CASE("each step's device check accepts an H200-sized launch and rejects an oversized grid",
          "[registry]") {
  const fa::DeviceLimits h200 = h200_limits();
  for (const fa::StepInfo* s : fa::steps())
    for (auto check : {s->check_device, s->check_backward_device}) {
      if (!check) continue;
      INFO(s->name << (check == s->check_device ? " forward" : " backward"));
      fa::Problem p = ok_problem(*s);
      for (int d : s->head_dims.empty() ? std::vector<int>{64} : s->head_dims)
        for (bool causal : {false, true}) {
          p.head_dim = d;
          p.causal = causal;
          CHECK(check(p, h200).empty());
        }
      fa::Problem big = p;  // 70000 in every grid dimension a step may use for B or H
      big.batch = 70000;
      big.heads_q = big.heads_kv = 1;
      const std::string e = check(big, h200);
      CHECK(mentions(e, "(70000)"));
      CHECK(mentions(e, "limit of 65535"));
      CHECK(mentions(e, s->name));
      // A device with 16 KB of opt-in shared memory: the fused steps (04 on) hold tiles of more
      // than that and must say so; steps 01-03 ask for no dynamic shared memory.
      fa::DeviceLimits small = h200;
      small.sharedMemPerBlockOptin = 16 * 1024;
      const std::string smem = check(p, small);
      if (s->number >= 4)
        CHECK(mentions(smem, "sharedMemPerBlockOptin of 16384 bytes"));
      else
        CHECK(smem.empty());
    }
}

TEST_CASE("step 11's causal grid, heavy first, holds the key blocks to the grid's y limit",
          "[registry]") {
  const fa::StepInfo* s = fa::find_step("11_backward_tc");
  if (s == nullptr) return;  // not built (no CUDA compiler)
  REQUIRE(s->check_backward_device);
  const fa::DeviceLimits h200 = h200_limits();
  for (int d : {64, 128}) {
    INFO("d = " << d);
    fa::Problem p = ok_problem(*s);
    p.head_dim = d;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.n_q = 128;
    p.n_kv = 128 * 65536;  // 65536 key blocks
    p.causal = false;      // on x, whose limit is 2^31 - 1
    CHECK(s->check_backward_device(p, h200).empty());
    p.causal = true;  // on y, whose limit is 65535
    const std::string e = s->check_backward_device(p, h200);
    CHECK(mentions(e, "65536 key blocks"));
    CHECK(mentions(e, "grid y limit of 65535"));
  }
}

TEST_CASE("the Hopper steps refuse every device but compute capability 9.0, naming the need",
          "[registry]") {
  for (const char* name : {"08_tma_wgmma", "09_warp_specialized"}) {
    INFO("step " << name);
    const fa::StepInfo* s = fa::find_step(name);
    if (s == nullptr) continue;  // not built: nvcc older than 12.0 cannot target sm_90a
    REQUIRE(s->check_device != nullptr);
    const fa::Problem p = ok_problem(*s);
    CHECK(s->check_device(p, h200_limits()).empty());
    for (const auto& [major, minor] : std::vector<std::pair<int, int>>{{8, 0}, {8, 9}, {10, 0}}) {
      fa::DeviceLimits other = h200_limits();
      other.major = major;
      other.minor = minor;
      INFO("compute capability " << major << "." << minor);
      const std::string e = s->check_device(p, other);
      CHECK(mentions(e, "needs compute capability 9.0"));
      CHECK(mentions(e, std::to_string(major) + "." + std::to_string(minor)));
      CHECK(mentions(e, s->name));
    }
  }
}
