// test_capi.cpp — the C API (libflash_tutorial.so, flash_tutorial.h) refuses every bad
// argument with the code and the message the README documents, before any CUDA call.
// No device needed: every call here is refused before fa_run asks for one, so on a machine
// without a GPU a check done after a CUDA call would show up as FA_ERROR_CUDA, not the
// expected code. The pointers are host addresses: nothing is launched, nothing dereferenced.
#include <cstdint>
#include <string>

#include "steps/harness/flash_tutorial.h"
#include "tests/catch.hpp"

namespace {

std::string last() { return fa_last_error(); }

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

fa_problem base_problem() {
  fa_problem p{};
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.n_q = p.n_kv = 100;
  p.head_dim = 64;
  p.layout = 1;
  return p;
}

// A problem `step` accepts: the first dtype (fp32, fp16, bf16) it supports at head_dim 64.
fa_problem accepted_problem(const char* step) {
  fa_problem p = base_problem();
  for (p.dtype = 0; p.dtype <= 2; ++p.dtype)
    if (fa_check(step, &p) == FA_OK) return p;
  FAIL("step " << step << " accepts no dtype at head_dim 64: " << last());
  return p;
}

// Host addresses standing in for device pointers, aligned to 256 bytes (plus `offset`).
alignas(256) unsigned char g_buffer[8][512];
void* addr(int i, int offset = 0) { return &g_buffer[i][offset]; }
float* lse_addr(int offset = 0) { return reinterpret_cast<float*>(addr(4, offset)); }

struct Pointers {
  const void* q = addr(0);
  const void* k = addr(1);
  const void* v = addr(2);
  void* o = addr(3);
  float* lse = lse_addr();
  void* workspace = addr(5);
  size_t workspace_bytes = 0;
};

fa_status run(const char* step, const fa_problem* p, const Pointers& x) {
  return fa_run(step, p, x.q, x.k, x.v, x.o, x.lse, x.workspace, x.workspace_bytes, nullptr);
}

// Workspace enough for `p` on `step` (queried through the API).
Pointers enough_workspace(const char* step, const fa_problem& p) {
  Pointers x;
  REQUIRE(fa_workspace_bytes(step, &p, &x.workspace_bytes) == FA_OK);
  return x;
}

}  // namespace

TEST_CASE("C API: steps are listed, an index out of range gives NULL", "[capi]") {
  const int n = fa_num_steps();
  REQUIRE(n > 0);
  for (int i = 0; i < n; ++i) {
    REQUIRE(fa_step_name(i) != nullptr);
    CHECK(fa_step_lesson(i) != nullptr);
  }
  CHECK(fa_step_name(-1) == nullptr);
  CHECK(fa_step_name(n) == nullptr);
  CHECK(fa_step_lesson(-1) == nullptr);
  CHECK(fa_step_lesson(n) == nullptr);
}

TEST_CASE("C API: an unknown or null step name is FA_ERROR_UNKNOWN_STEP", "[capi]") {
  const fa_problem p = base_problem();
  size_t bytes = 0;
  Pointers x;
  CHECK(fa_check("no_such_step", &p) == FA_ERROR_UNKNOWN_STEP);
  const std::string known = std::string("; known: ") + fa_step_name(0);
  CHECK(starts_with(last(), "step (no_such_step) is not a registered step" + known));
  CHECK(fa_workspace_bytes("99", &p, &bytes) == FA_ERROR_UNKNOWN_STEP);
  CHECK(starts_with(last(), "step (99) is not a registered step" + known));
  CHECK(run("99", &p, x) == FA_ERROR_UNKNOWN_STEP);
  CHECK(starts_with(last(), "step (99) is not a registered step" + known));

  CHECK(fa_check(nullptr, &p) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "pointer step is null");
  CHECK(run(nullptr, &p, x) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "pointer step is null");
}

TEST_CASE("C API: a null or invalid problem is FA_ERROR_INVALID_ARGUMENT", "[capi]") {
  // Each bad problem through every entry point: fa_check, fa_workspace_bytes and fa_run.
  const char* step = fa_step_name(0);
  const auto through_each_entry = [&](const fa_problem* p, const std::string& message) {
    size_t bytes = 0;
    const Pointers x;
    CHECK(fa_check(step, p) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(starts_with(last(), message));
    CHECK(fa_workspace_bytes(step, p, &bytes) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(starts_with(last(), message));
    CHECK(run(step, p, x) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(starts_with(last(), message));
  };
  through_each_entry(nullptr, "pointer problem is null");

  // The C enums out of range, then the README's examples of fa::validate's messages.
  const struct {
    void (*change)(fa_problem&);
    const char* message;  // the whole message, or (tensor size) its start
  } cases[] = {
      {[](fa_problem& p) { p.dtype = 7; }, "dtype (7) must be 0 (fp32), 1 (fp16) or 2 (bf16)"},
      {[](fa_problem& p) { p.layout = -1; }, "layout (-1) must be 0 (bnhd) or 1 (bhnd)"},
      {[](fa_problem& p) { p.n_kv = 0; }, "n_kv (0) must be at least 1"},
      {[](fa_problem& p) { p.heads_q = 6, p.heads_kv = 4; },
       "heads_q (6) must be a multiple of heads_kv (4)"},
      {[](fa_problem& p) { p.head_dim = 300; }, "head_dim (300) exceeds the limit of 256"},
      {[](fa_problem& p) { p.scale = -1.f; },
       "scale (-1) must be finite and >= 0 (0 selects 1/sqrt(head_dim))"},
      {[](fa_problem& p) { p.batch = p.n_q = p.n_kv = 1 << 20; }, "tensor size (Q/O "},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    fa_problem p = base_problem();
    c.change(p);
    through_each_entry(&p, c.message);
    if (starts_with(c.message, "tensor size"))
      CHECK(last().find("exceeds the 32-bit index limit of 2147483647 elements") !=
            std::string::npos);
    else
      CHECK(last() == c.message);
  }
}

TEST_CASE("C API: what a step does not support names the step and its limit", "[capi]") {
  fa_problem p = base_problem();
  p.dtype = 2;  // bf16
  CHECK(fa_check("01_naive_attention", &p) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "dtype (bf16) is not supported by step 01_naive_attention (supported: fp32)");
  p = base_problem();
  p.head_dim = 48;
  Pointers x;
  CHECK(run("04", &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() ==
        "head_dim (48) is not supported by step 04_flash_attention (supported: 16 32 64 128)");
}

TEST_CASE("C API: a null q, k, v, o or lse is refused, naming the pointer", "[capi]") {
  for (int i = 0; i < fa_num_steps(); ++i) {
    const char* step = fa_step_name(i);
    INFO(step);
    const fa_problem p = accepted_problem(step);
    const Pointers good = enough_workspace(step, p);
    const struct {
      const char* name;
      Pointers x;
    } cases[] = {
        {"q",
         [&] {
           Pointers x = good;
           x.q = nullptr;
           return x;
         }()},
        {"k",
         [&] {
           Pointers x = good;
           x.k = nullptr;
           return x;
         }()},
        {"v",
         [&] {
           Pointers x = good;
           x.v = nullptr;
           return x;
         }()},
        {"o",
         [&] {
           Pointers x = good;
           x.o = nullptr;
           return x;
         }()},
        {"lse",
         [&] {
           Pointers x = good;
           x.lse = nullptr;
           return x;
         }()},
    };
    for (const auto& c : cases) {
      INFO("null " << c.name);
      CHECK(run(step, &p, c.x) == FA_ERROR_INVALID_ARGUMENT);
      CHECK(last() == std::string("pointer ") + c.name + " is null");
    }
  }
}

TEST_CASE("C API: a misaligned pointer is refused with the step's alignment", "[capi]") {
  // Step 04 loads Q, K and V with 16-byte vector copies (README, Limits and errors).
  const fa_problem p = accepted_problem("04_flash_attention");
  Pointers x = enough_workspace("04_flash_attention", p);
  x.v = addr(2, 4);
  CHECK(run("04_flash_attention", &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "pointer v (0x"));
  CHECK(last().find(") is not aligned to 16 bytes as step 04_flash_attention requires") !=
        std::string::npos);

  // Every step: q off by 2 bytes, and lse (fp32) needs 4 bytes.
  for (int i = 0; i < fa_num_steps(); ++i) {
    const char* step = fa_step_name(i);
    INFO(step);
    const fa_problem pi = accepted_problem(step);
    Pointers y = enough_workspace(step, pi);
    y.q = addr(0, 2);
    CHECK(run(step, &pi, y) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(starts_with(last(), "pointer q (0x"));
    CHECK(last().find(std::string("as step ") + step + " requires") != std::string::npos);
    y = enough_workspace(step, pi);
    y.lse = lse_addr(2);
    CHECK(run(step, &pi, y) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last().find(") is not aligned to 4 bytes as step") != std::string::npos);
  }
}

TEST_CASE("C API: the workspace is checked (size, and null when one is needed)", "[capi]") {
  const char* step = "01_naive_attention";  // S and P: 8·B·H_q·N_q·N_kv bytes
  const fa_problem p = accepted_problem(step);
  size_t need = 0;
  REQUIRE(fa_workspace_bytes(step, &p, &need) == FA_OK);
  CHECK(last().empty());
  CHECK(need == size_t{8} * 2 * 4 * 100 * 100);

  CHECK(fa_workspace_bytes(step, &p, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer bytes is null");

  Pointers x;
  x.workspace_bytes = need - 1;
  CHECK(run(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "workspace_bytes (" + std::to_string(need - 1) + ") is below the " +
                      std::to_string(need) +
                      " bytes step 01_naive_attention needs for this problem");
  x.workspace_bytes = need;
  x.workspace = nullptr;
  CHECK(run(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer workspace is null; step 01_naive_attention needs " +
                      std::to_string(need) + " bytes of workspace for this problem");

  // A step that needs none accepts a null workspace of 0 bytes: only the pointers are wrong.
  const fa_problem p4 = accepted_problem("04_flash_attention");
  size_t none = 1;
  REQUIRE(fa_workspace_bytes("04_flash_attention", &p4, &none) == FA_OK);
  CHECK(none == 0);
  Pointers y;
  y.workspace = nullptr;
  y.k = nullptr;
  CHECK(run("04_flash_attention", &p4, y) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer k is null");
}

TEST_CASE("C API: checks run in the documented order; success clears the message", "[capi]") {
  const char* step = "01_naive_attention";
  fa_problem p = accepted_problem(step);
  Pointers x;  // workspace_bytes 0: too small for step 01
  x.k = nullptr;
  CHECK(run(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer k is null");  // pointers before the workspace
  p.n_q = 0;
  CHECK(run(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "n_q (0) must be at least 1");  // the problem before the pointers
  CHECK(run("no_such_step", nullptr, x) == FA_ERROR_UNKNOWN_STEP);  // the step first

  p.n_q = 100;
  CHECK(fa_check(step, &p) == FA_OK);
  CHECK(last().empty());
}
