// test_decode_registry.cpp — every registered decoding step (common/decode_registry.h) refuses
// what it cannot run with a message naming the parameter, its value and the limit, and its
// split rule stays within its bounds. CPU only, over the compiled decoding steps.
#include <cstdint>
#include <string>
#include <vector>

#include "common/decode_registry.h"
#include "tests/catch.hpp"
#include "tests/decode_cases.h"
#include "tests/device_limits.h"

namespace {

using fa::DecodeProblem;
using fa::test::mentions;

/// Fake, 16-byte aligned device pointers: check_decode_launch only looks at their values.
fa::DecodeTensors fake_tensors() {
  fa::DecodeTensors t;
  auto at = [](std::uintptr_t x) { return reinterpret_cast<void*>(x); };
  t.q = at(0x1000);
  t.k_new = at(0x2000);
  t.v_new = at(0x3000);
  t.k_cache = at(0x4000);
  t.v_cache = at(0x5000);
  t.cache_lens = static_cast<const int*>(at(0x6000));
  t.block_table = static_cast<const int*>(at(0x7000));
  t.o = at(0x8000);
  t.lse = static_cast<float*>(at(0x9000));
  return t;
}

DecodeProblem ok_problem(const fa::DecodeStepInfo& s) {
  DecodeProblem p = fa::test::paged(fa::test::shapes(8, 2, 64, 2, {100, 7}), 16, 1);
  p.dtype = s.dtypes.front();
  p.head_dim = s.head_dims.front();
  return p;
}

}  // namespace

TEST_CASE("decoding steps are registered and found by name, number or slug", "[registry]") {
  REQUIRE_FALSE(fa::decode_steps().empty());
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) {
    CHECK(fa::find_decode_step(s->name) == s);
    // A candidate next version is found by its name only; the number names the chapter's step.
    if (s->candidate)
      CHECK(fa::find_decode_step(std::to_string(s->number)) != s);
    else
      CHECK(fa::find_decode_step(std::to_string(s->number)) == s);
    CHECK(s->run != nullptr);
    CHECK(s->num_splits != nullptr);
    CHECK(s->workspace_bytes != nullptr);
    CHECK(s->max_splits >= 1);
  }
  CHECK(fa::find_decode_step("no_such_step") == nullptr);
}

TEST_CASE("each decoding step refuses bad problems and launches with a clear message",
          "[registry]") {
  const fa::DeviceLimits h200 = fa::test::h200_limits();
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) {
    INFO(s->name);
    const DecodeProblem p = ok_problem(*s);
    const fa::DecodeTensors t = fake_tensors();
    REQUIRE(fa::check_decode_launch(*s, p, t, 4, h200) == "");

    DecodeProblem bad = p;
    bad.q_len = 0;
    CHECK(mentions(fa::check_decode_launch(*s, bad, t, 4, h200), "q_len (0)"));
    bad = p;
    bad.block_table[0] = -1;
    CHECK(mentions(fa::check_decode_launch(*s, bad, t, 4, h200), "block_table[0][0] (-1)"));
    bad = p;
    bad.dtype = fa::DType::F32;
    CHECK(mentions(fa::check_decode_step(*s, bad), "dtype (fp32) is not supported by step"));
    bad = p;
    bad.head_dim = 80;
    CHECK(mentions(fa::check_decode_step(*s, bad), "head_dim (80) is not supported"));
    CHECK(mentions(fa::check_decode_launch(*s, p, t, 0, h200), "num_splits (0) must be in [1, "));
    CHECK(mentions(fa::check_decode_launch(*s, p, t, s->max_splits + 1, h200),
                   "num_splits (" + std::to_string(s->max_splits + 1) + ")"));

    fa::DecodeTensors u = t;
    u.o = nullptr;
    CHECK(mentions(fa::check_decode_launch(*s, p, u, 4, h200), "pointer o is null"));
    u = t;
    u.v_cache = static_cast<char*>(u.v_cache) + 8;
    CHECK(mentions(fa::check_decode_launch(*s, p, u, 4, h200), "pointer v_cache"));
    u = t;
    u.block_table = nullptr;  // needed by a paged cache only
    CHECK(mentions(fa::check_decode_launch(*s, p, u, 4, h200), "pointer block_table is null"));
    const DecodeProblem flat = fa::test::contiguous(p);
    CHECK(fa::check_decode_launch(*s, flat, u, 4, h200) == "");

    fa::DeviceLimits old = h200;
    old.major = 7;
    CHECK(mentions(fa::check_decode_launch(*s, p, t, 4, old), "compute capability 7.0"));
    CHECK(fa::device_refusal(*s, h200) == "");  // the GPU tests skip where this is not ""
    CHECK(mentions(fa::device_refusal(*s, old), "compute capability 7.0"));
    fa::DeviceLimits small = h200;
    small.sharedMemPerBlockOptin = 1024;
    CHECK(mentions(fa::check_decode_launch(*s, p, t, 4, small), "shared memory per block"));
    small = h200;
    small.maxGridSize[0] = 2;
    CHECK(mentions(fa::check_decode_launch(*s, p, t, 4, small), "num_splits (4)"));
  }
}

TEST_CASE(
    "each decoding step's split rule stays in [1, max_splits] and splits only when the "
    "batch does not fill the GPU",
    "[registry]") {
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) {
    INFO(s->name);
    const int sms = 132;
    // One long sequence on one K/V head: split, but never beyond the bound.
    DecodeProblem one = fa::test::contiguous(fa::test::shapes(8, 1, 128, 1, {100000}));
    one.dtype = s->dtypes.front();
    const int n = s->num_splits(one, sms);
    CHECK(n > 1);
    CHECK(n <= s->max_splits);
    // A batch that fills the GPU many times over: one split.
    DecodeProblem many =
        fa::test::contiguous(fa::test::shapes(32, 8, 128, 1, std::vector<int>(256, 4000)));
    CHECK(s->num_splits(many, sms) == 1);
    // A short sequence: no more splits than it has keys to share out.
    DecodeProblem tiny = fa::test::contiguous(fa::test::shapes(8, 1, 128, 1, {10}));
    CHECK(s->num_splits(tiny, sms) == 1);
    // Any SM count, even 0 (unknown), gives a count in range.
    for (int count : {0, 1, 16, 132, 100000}) {
      const int k = s->num_splits(one, count);
      CHECK(k >= 1);
      CHECK(k <= s->max_splits);
    }
    CHECK(s->workspace_bytes(one, 3) == 3 * s->workspace_bytes(one, 1));
  }
}

TEST_CASE("step 12's split rule leaves no split empty for the longest sequence", "[registry]") {
  const fa::DecodeStepInfo* s = fa::find_decode_step("12_decode");
  if (s == nullptr) return;  // not built in this configuration
  // Its kernel deals ⌈tiles / splits⌉ tiles of 64 keys per split: the last split of the
  // longest sequence must still get one, or its block only writes an empty partial.
  for (int sms : {1, 16, 132}) {
    for (int len = 0; len < 20000; len += 37) {
      DecodeProblem p = fa::test::contiguous(fa::test::shapes(8, 1, 128, 1, {len, len / 3}));
      p.dtype = s->dtypes.front();
      const int n = s->num_splits(p, sms);
      const int tiles = (p.max_kv_len() + 63) / 64, per = (tiles + n - 1) / n;
      INFO(sms << " SMs, kv_len " << p.max_kv_len() << ": " << n << " splits of " << per
               << " tiles");
      REQUIRE(n >= 1);
      REQUIRE((n - 1) * per < tiles);
    }
  }
}

TEST_CASE("the workspace of a decoding launch is set when needed and aligned", "[registry]") {
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) {
    INFO(s->name);
    const DecodeProblem p = ok_problem(*s);
    const std::size_t need = s->workspace_bytes(p, 4);
    REQUIRE(need > 0);  // partial O and L of 4 splits
    const auto at = [](std::uintptr_t x) { return reinterpret_cast<const void*>(x); };
    CHECK(fa::check_decode_workspace(*s, p, 4, at(0x10000)) == "");
    CHECK(fa::check_decode_workspace(*s, p, 4, nullptr) ==
          std::string("workspace is null but step ") + s->name + " needs " + std::to_string(need) +
              " bytes");
    CHECK(mentions(fa::check_decode_workspace(*s, p, 4, at(0x10004)),
                   std::string(") is not aligned to ") + std::to_string(s->alignment) +
                       " bytes as step " + s->name + " requires"));
  }
}
