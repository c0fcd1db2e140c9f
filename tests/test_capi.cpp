// test_capi.cpp — the C API (libflash_tutorial.so, flash_tutorial.h) refuses every bad
// argument with the code and the message the README documents, before any CUDA call.
// No device needed: every call here is refused before fa_run asks for one, so on a machine
// without a GPU a check done after a CUDA call would show up as FA_ERROR_CUDA, not the
// expected code. The pointers are host addresses: nothing is launched, nothing dereferenced.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

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
alignas(256) unsigned char g_buffer[12][512];
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

// The names of the registered steps that have `pass` (FA_PASS_FORWARD or FA_PASS_BACKWARD).
std::vector<std::string> steps_with(int pass) {
  std::vector<std::string> out;
  for (int i = 0; i < fa_num_steps(); ++i)
    if (fa_step_passes(i) & pass) out.emplace_back(fa_step_name(i));
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The backward's pointers: q, k, v, o, lse as for the forward, then d_o, dq, dk and dv.
struct BackwardPointers {
  const void* q = addr(0);
  const void* k = addr(1);
  const void* v = addr(2);
  const void* o = addr(3);
  const float* lse = lse_addr();
  const void* d_o = addr(6);
  void* dq = addr(7);
  void* dk = addr(8);
  void* dv = addr(9);
  void* workspace = addr(5);
  size_t workspace_bytes = 0;
};

fa_status backward(const char* step, const fa_problem* p, const BackwardPointers& x) {
  return fa_backward(step, p, x.q, x.k, x.v, x.o, x.lse, x.d_o, x.dq, x.dk, x.dv, x.workspace,
                     x.workspace_bytes, nullptr);
}

// Backward workspace enough for `p` on `step` (queried through the API).
BackwardPointers enough_backward_workspace(const char* step, const fa_problem& p) {
  BackwardPointers x;
  REQUIRE(fa_backward_workspace_bytes(step, &p, &x.workspace_bytes) == FA_OK);
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

TEST_CASE("C API: fa_step_passes says which steps run forward and which backward", "[capi]") {
  const int n = fa_num_steps();
  for (int i = 0; i < n; ++i) {
    INFO(fa_step_name(i));
    const int passes = fa_step_passes(i);
    CHECK(passes != 0);  // every step runs something
    CHECK((passes & ~(FA_PASS_FORWARD | FA_PASS_BACKWARD)) == 0);
  }
  CHECK(fa_step_passes(-1) == 0);
  CHECK(fa_step_passes(n) == 0);
  // Steps 01-09 are forward passes, step 10 a backward pass alone (README, Limits and errors).
  const std::vector<std::string> forward = steps_with(FA_PASS_FORWARD);
  const std::vector<std::string> backward = steps_with(FA_PASS_BACKWARD);
  CHECK(std::find(forward.begin(), forward.end(), "04_flash_attention") != forward.end());
  CHECK(std::find(backward.begin(), backward.end(), "04_flash_attention") == backward.end());
  CHECK(std::find(backward.begin(), backward.end(), "10_backward") != backward.end());
  CHECK(std::find(forward.begin(), forward.end(), "10_backward") == forward.end());
}

TEST_CASE("C API: a pass the step does not have is refused, naming the steps that have it",
          "[capi]") {
  const fa_problem p = accepted_problem("10_backward");
  const std::string no_forward = "step (10_backward) has no forward pass; steps with one: " +
                                 joined(steps_with(FA_PASS_FORWARD));
  size_t bytes = 0;
  CHECK(fa_check("10_backward", &p) == FA_OK);  // the problem suits it, for its backward pass
  CHECK(fa_workspace_bytes("10_backward", &p, &bytes) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == no_forward);
  CHECK(run("10", &p, Pointers{}) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == no_forward);

  const fa_problem p4 = accepted_problem("04_flash_attention");
  const std::string no_backward =
      "step (04_flash_attention) has no backward pass; steps with one: " +
      joined(steps_with(FA_PASS_BACKWARD));
  CHECK(fa_backward_workspace_bytes("04_flash_attention", &p4, &bytes) ==
        FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == no_backward);
  CHECK(backward("04", &p4, BackwardPointers{}) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == no_backward);
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
  for (const std::string& name : steps_with(FA_PASS_FORWARD)) {
    const char* step = name.c_str();
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

  // Every forward step: q off by 2 bytes, and lse (fp32) needs 4 bytes.
  for (const std::string& name : steps_with(FA_PASS_FORWARD)) {
    const char* step = name.c_str();
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

TEST_CASE("C API: fa_backward refuses a bad step or problem like fa_run", "[capi]") {
  const char* step = "10_backward";
  fa_problem p = accepted_problem(step);
  size_t bytes = 0;
  const BackwardPointers x;
  CHECK(backward("no_such_step", &p, x) == FA_ERROR_UNKNOWN_STEP);
  CHECK(starts_with(last(), "step (no_such_step) is not a registered step; known: "));
  CHECK(backward(nullptr, &p, x) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "pointer step is null");
  CHECK(fa_backward_workspace_bytes(nullptr, &p, &bytes) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "pointer step is null");

  CHECK(backward(step, nullptr, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer problem is null");
  CHECK(fa_backward_workspace_bytes(step, &p, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer bytes is null");
  p.heads_q = 6, p.heads_kv = 4;
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "heads_q (6) must be a multiple of heads_kv (4)");
  CHECK(fa_backward_workspace_bytes(step, &p, &bytes) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "heads_q (6) must be a multiple of heads_kv (4)");
  p = accepted_problem(step);
  p.layout = 2;
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "layout (2) must be 0 (bnhd) or 1 (bhnd)");
  p = accepted_problem(step);
  p.dtype = 2;  // bf16: step 10 is fp32 only
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "dtype (bf16) is not supported by step 10_backward (supported: fp32)");
}

TEST_CASE("C API: fa_backward refuses each null or misaligned pointer, naming it", "[capi]") {
  for (const std::string& name : steps_with(FA_PASS_BACKWARD)) {
    const char* step = name.c_str();
    INFO(step);
    const fa_problem p = accepted_problem(step);
    const BackwardPointers good = enough_backward_workspace(step, p);
    const struct {
      const char* name;
      void (*clear)(BackwardPointers&);
    } cases[] = {
        {"q", [](BackwardPointers& x) { x.q = nullptr; }},
        {"k", [](BackwardPointers& x) { x.k = nullptr; }},
        {"v", [](BackwardPointers& x) { x.v = nullptr; }},
        {"o", [](BackwardPointers& x) { x.o = nullptr; }},
        {"lse", [](BackwardPointers& x) { x.lse = nullptr; }},
        {"d_o", [](BackwardPointers& x) { x.d_o = nullptr; }},
        {"dq", [](BackwardPointers& x) { x.dq = nullptr; }},
        {"dk", [](BackwardPointers& x) { x.dk = nullptr; }},
        {"dv", [](BackwardPointers& x) { x.dv = nullptr; }},
    };
    for (const auto& c : cases) {
      INFO("null " << c.name);
      BackwardPointers x = good;
      c.clear(x);
      CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
      CHECK(last() == std::string("pointer ") + c.name + " is null");
    }
    // dk off by 2 bytes (every step loads at least 4-byte elements); lse needs 4 bytes.
    BackwardPointers odd = good;
    odd.dk = addr(8, 2);
    CHECK(backward(step, &p, odd) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(starts_with(last(), "pointer dk (0x"));
    CHECK(last().find(std::string(" bytes as step ") + step + " requires") != std::string::npos);
    odd = good;
    odd.lse = lse_addr(2);
    CHECK(backward(step, &p, odd) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last().find(") is not aligned to 4 bytes as step") != std::string::npos);
  }
}

TEST_CASE("C API: fa_backward checks its workspace, after the pointers", "[capi]") {
  const char* step = "10_backward";  // the fp32 dQ accumulator and D: 4·B·H_q·N_q·(d + 1)
  const fa_problem p = accepted_problem(step);
  size_t need = 0;
  REQUIRE(fa_backward_workspace_bytes(step, &p, &need) == FA_OK);
  CHECK(last().empty());
  CHECK(need == size_t{4} * 2 * 4 * 100 * (64 + 1));

  BackwardPointers x;
  x.workspace_bytes = need - 1;
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "workspace_bytes (" + std::to_string(need - 1) + ") is below the " +
                      std::to_string(need) +
                      " bytes the backward pass of step 10_backward needs for this problem");
  x.workspace_bytes = need;
  x.workspace = nullptr;
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer workspace is null; the backward pass of step 10_backward needs " +
                      std::to_string(need) + " bytes of workspace for this problem");
  x.workspace = addr(5, 4);  // 4 bytes past a 256-byte boundary
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  std::ostringstream misaligned;
  misaligned << "workspace (" << addr(5, 4)
             << ") is not aligned to 16 bytes, as fa_backward requires of every step's workspace";
  CHECK(last() == misaligned.str());
  x.dv = nullptr;  // the pointers before the workspace
  CHECK(backward(step, &p, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer dv is null");
}

// ---------------------------------------------------------------------------------------------
// Decoding: fa_decode_splits, fa_decode_workspace_bytes, fa_decode
// ---------------------------------------------------------------------------------------------

namespace {

// Two sequences holding 100 and 7 keys, 2 new tokens each, GQA 8/2, d = 64, fp16; a paged
// pool of 16 pages of 16 rows, the table's pages out of order (12 rows appended after 100 and
// 7 keys: pages 0-6 of sequence 0, page 0 of sequence 1).
struct DecodeCase {
  std::vector<int> lens = {100, 7};
  std::vector<int> table = {9, 3, 14, 0, 7, 11, 5, -1, 2, -1, -1, -1, -1, -1, -1, -1};
  fa_decode_problem p{};
  DecodeCase() {
    p.batch = 2;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.head_dim = 64;
    p.q_len = 2;
    p.dtype = 1;
    p.cache = FA_CACHE_PAGED;
    p.page_size = 16;
    p.num_pages = 16;
    p.max_pages = 8;
    p.cache_lens = lens.data();
    p.block_table = table.data();
  }
};

// The decoding pointers: host addresses, 256-byte aligned (plus an offset for some).
struct DecodePointers {
  const void* q = addr(0);
  const void* k_new = addr(1);
  const void* v_new = addr(2);
  void* k_cache = addr(6);
  void* v_cache = addr(7);
  void* o = addr(3);
  float* lse = lse_addr();
  void* workspace = addr(5);
  size_t workspace_bytes = 0;
};

fa_status decode(const char* step, const fa_decode_problem* p, int splits,
                 const DecodePointers& x) {
  return fa_decode(step, p, splits, x.q, x.k_new, x.v_new, x.k_cache, x.v_cache, x.o, x.lse,
                   x.workspace, x.workspace_bytes, nullptr);
}

const char* decode_step() { return fa_decode_step_name(0); }

}  // namespace

TEST_CASE("C API: decoding steps are listed apart from the forward and backward steps", "[capi]") {
  const int n = fa_num_decode_steps();
  REQUIRE(n > 0);
  for (int i = 0; i < n; ++i) {
    REQUIRE(fa_decode_step_name(i) != nullptr);
    CHECK(fa_decode_step_lesson(i) != nullptr);
    const std::vector<std::string> all = steps_with(FA_PASS_FORWARD | FA_PASS_BACKWARD);
    CHECK(std::find(all.begin(), all.end(), fa_decode_step_name(i)) == all.end());
  }
  CHECK(std::string(fa_decode_step_name(0)) == "12_decode");
  CHECK(fa_decode_step_name(-1) == nullptr);
  CHECK(fa_decode_step_name(n) == nullptr);
  CHECK(fa_decode_step_lesson(n) == nullptr);
}

TEST_CASE("C API: the decoding workspace is the step's splits plus the lengths and the table",
          "[capi]") {
  DecodeCase c;
  size_t one = 0, nine = 0;
  REQUIRE(fa_decode_workspace_bytes("12", &c.p, 1, &one) == FA_OK);
  CHECK(last().empty());
  // Partial O and L per split: 4·splits·B·H_q·q_len·(d + 1) bytes (README, Limits and errors),
  // then B lengths and B·max_pages table entries of 4 bytes.
  const size_t rows = size_t{2} * 8 * 2, copies = (2 + 2 * 8) * 4;
  CHECK(one == 4 * rows * 65 + copies);
  REQUIRE(fa_decode_workspace_bytes("decode", &c.p, 9, &nine) == FA_OK);
  CHECK(nine == 4 * 9 * rows * 65 + copies);
  // Contiguous: no table.
  c.p.cache = FA_CACHE_CONTIGUOUS;
  c.p.n_max = 128;
  c.p.block_table = nullptr;
  REQUIRE(fa_decode_workspace_bytes("12_decode", &c.p, 1, &one) == FA_OK);
  CHECK(one == 4 * rows * 65 + 2 * 4);
  CHECK(fa_decode_workspace_bytes("12_decode", &c.p, 1, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer bytes is null");
}

TEST_CASE("C API: a decoding step, problem or split count is refused before any CUDA call",
          "[capi]") {
  const DecodeCase good;
  size_t bytes = 0;
  int splits = 0;
  const DecodePointers x;
  // Each bad problem through every entry point.
  const auto through_each_entry = [&](const fa_decode_problem* p, const std::string& message) {
    CHECK(fa_decode_splits(decode_step(), p, &splits) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == message);
    CHECK(fa_decode_workspace_bytes(decode_step(), p, 1, &bytes) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == message);
    CHECK(decode(decode_step(), p, 1, x) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == message);
  };
  through_each_entry(nullptr, "pointer problem is null");
  const struct {
    void (*change)(DecodeCase&);
    const char* message;
  } cases[] = {
      {[](DecodeCase& c) { c.p.dtype = 3; }, "dtype (3) must be 0 (fp32), 1 (fp16) or 2 (bf16)"},
      {[](DecodeCase& c) { c.p.cache = 2; }, "cache (2) must be 0 (contiguous) or 1 (paged)"},
      {[](DecodeCase& c) { c.p.cache_lens = nullptr; }, "pointer cache_lens is null"},
      {[](DecodeCase& c) { c.p.block_table = nullptr; },
       "pointer block_table is null (cache 1, paged)"},
      {[](DecodeCase& c) { c.p.q_len = 17; }, "q_len (17) must be in [1, 16]"},
      {[](DecodeCase& c) { c.p.heads_q = 5; }, "heads_q (5) must be a multiple of heads_kv (2)"},
      {[](DecodeCase& c) { c.lens[1] = -1; }, "cache_lens[1] (-1) must be >= 0"},
      {[](DecodeCase& c) { c.table[4] = 16; },
       "block_table[0][4] (16) is out of range [0, 16) (num_pages)"},
      {[](DecodeCase& c) { c.table[8] = 5; },
       "block_table[0][6] (5) is used 2 times in the table, but this step appends into it (a "
       "written page must belong to one sequence)"},
      {[](DecodeCase& c) { c.lens[0] = 127; },
       "cache_lens[0] + q_len (127 + 2 = 129) needs 9 pages of 16 rows, more than max_pages (8)"},
      {[](DecodeCase& c) { c.p.page_size = 8; }, "page_size (8) must be in [16, 256]"},
      {[](DecodeCase& c) {
         c.p.cache = FA_CACHE_CONTIGUOUS;
         c.p.n_max = 101;
       },
       "cache_lens[0] + q_len (100 + 2 = 102) exceeds n_max (101)"},
      {[](DecodeCase& c) { c.p.dtype = 0; },
       "dtype (fp32) is not supported by step 12_decode (supported: fp16, bf16)"},
      {[](DecodeCase& c) { c.p.head_dim = 96; },
       "head_dim (96) is not supported by step 12_decode (supported: 64 128)"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    DecodeCase bad;
    c.change(bad);
    through_each_entry(&bad.p, c.message);
  }
  // Unknown and null step names.
  CHECK(decode("07", &good.p, 1, x) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "step (07) is not a registered decoding step; known: 12_decode, 12_decode_v2");
  CHECK(fa_decode_workspace_bytes(nullptr, &good.p, 1, &bytes) == FA_ERROR_UNKNOWN_STEP);
  CHECK(last() == "pointer step is null");
  CHECK(fa_decode_splits(decode_step(), &good.p, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer num_splits is null");
  // The split count: 0 (the rule) or 1 .. 128.
  for (int bad : {-1, 129}) {
    const std::string message = "num_splits (" + std::to_string(bad) +
                                ") must be 0 (the step's rule) or in [1, 128] for step 12_decode";
    CHECK(fa_decode_workspace_bytes(decode_step(), &good.p, bad, &bytes) ==
          FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == message);
    CHECK(decode(decode_step(), &good.p, bad, x) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == message);
  }
}

TEST_CASE("C API: fa_decode refuses each null or misaligned pointer, then the workspace",
          "[capi]") {
  const DecodeCase c;
  DecodePointers good;
  REQUIRE(fa_decode_workspace_bytes(decode_step(), &c.p, 3, &good.workspace_bytes) == FA_OK);
  const struct {
    const char* name;
    void (*clear)(DecodePointers&);
  } cases[] = {
      {"q", [](DecodePointers& x) { x.q = nullptr; }},
      {"k_new", [](DecodePointers& x) { x.k_new = nullptr; }},
      {"v_new", [](DecodePointers& x) { x.v_new = nullptr; }},
      {"k_cache", [](DecodePointers& x) { x.k_cache = nullptr; }},
      {"v_cache", [](DecodePointers& x) { x.v_cache = nullptr; }},
      {"o", [](DecodePointers& x) { x.o = nullptr; }},
      {"lse", [](DecodePointers& x) { x.lse = nullptr; }},
  };
  for (const auto& k : cases) {
    INFO("null " << k.name);
    DecodePointers x = good;
    k.clear(x);
    x.workspace = nullptr;  // the pointers before the workspace
    CHECK(decode(decode_step(), &c.p, 3, x) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == std::string("pointer ") + k.name + " is null");
  }
  DecodePointers odd = good;
  odd.v_cache = addr(7, 8);  // 16-byte copies
  CHECK(decode(decode_step(), &c.p, 3, odd) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "pointer v_cache (0x"));
  CHECK(last().find(") is not aligned to 16 bytes as step 12_decode requires") !=
        std::string::npos);
  odd = good;
  odd.lse = lse_addr(2);
  CHECK(decode(decode_step(), &c.p, 3, odd) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last().find(") is not aligned to 4 bytes as step 12_decode") != std::string::npos);

  const size_t need = good.workspace_bytes;
  DecodePointers x = good;
  x.workspace_bytes = need - 1;
  CHECK(decode(decode_step(), &c.p, 3, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "workspace_bytes (" + std::to_string(need - 1) + ") is below the " +
                      std::to_string(need) + " bytes step 12_decode needs for this problem");
  x = good;
  x.workspace = nullptr;
  CHECK(decode(decode_step(), &c.p, 3, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer workspace is null; step 12_decode needs " + std::to_string(need) +
                      " bytes of workspace for this problem");
  x = good;
  x.workspace = addr(5, 4);
  CHECK(decode(decode_step(), &c.p, 3, x) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "workspace (0x"));
  CHECK(last().find(") is not aligned to 16 bytes as step 12_decode requires") !=
        std::string::npos);
  // A workspace sized for 3 splits is too small for 4.
  CHECK(decode(decode_step(), &c.p, 4, good) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "workspace_bytes (" + std::to_string(need) + ") is below the "));
}

TEST_CASE("C API: the split rule reads the device: a count in range, or FA_ERROR_CUDA", "[capi]") {
  const DecodeCase c;
  int splits = -7;
  size_t bytes = 0;
  const fa_status st = fa_decode_splits(decode_step(), &c.p, &splits);
  if (st == FA_OK) {  // a GPU: the rule's count, and the workspace for it
    CHECK(splits >= 1);
    CHECK(splits <= 128);
    size_t same = 0;
    REQUIRE(fa_decode_workspace_bytes(decode_step(), &c.p, splits, &same) == FA_OK);
    REQUIRE(fa_decode_workspace_bytes(decode_step(), &c.p, 0, &bytes) == FA_OK);
    CHECK(bytes == same);
  } else {  // no usable device: the runtime's error, and nothing written
    CHECK(st == FA_ERROR_CUDA);
    CHECK(splits == -7);
    CHECK_FALSE(last().empty());
    CHECK(fa_decode_workspace_bytes(decode_step(), &c.p, 0, &bytes) == FA_ERROR_CUDA);
  }
}
// fa_merge: the merge of partial results (step 13's ring, step 12's combine code). Every bad
// argument is refused before any launch, in the documented order: the problem, then the
// pointers.
namespace {

fa_merge_problem merge_problem() {
  fa_merge_problem p{};
  p.parts = 2;
  p.batch = 1;
  p.heads = 4;
  p.rows = 100;
  p.head_dim = 128;
  p.dtype = 2;
  p.layout = 0;
  return p;
}

fa_status merge(const fa_merge_problem* p, const void* o_parts = addr(0),
                const float* lse_parts = lse_addr(), void* o = addr(3),
                float* lse = reinterpret_cast<float*>(addr(6))) {
  return fa_merge(p, o_parts, lse_parts, o, lse, nullptr);
}

}  // namespace

TEST_CASE("C API: fa_merge refuses a bad problem, naming the parameter and its limit", "[capi]") {
  CHECK(merge(nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer problem is null");
  struct Case {
    void (*edit)(fa_merge_problem&);
    const char* message;
  };
  const Case cases[] = {
      {[](fa_merge_problem& p) { p.dtype = 3; },
       "dtype (3) must be 0 (fp32), 1 (fp16) or 2 (bf16)"},
      {[](fa_merge_problem& p) { p.layout = 2; }, "layout (2) must be 0 (bnhd) or 1 (bhnd)"},
      {[](fa_merge_problem& p) { p.parts = 0; }, "parts (0) must be in 1 .. 1024"},
      {[](fa_merge_problem& p) { p.parts = 1025; }, "parts (1025) must be in 1 .. 1024"},
      {[](fa_merge_problem& p) { p.batch = 0; }, "batch (0) must be at least 1"},
      {[](fa_merge_problem& p) { p.heads = -1; }, "heads (-1) must be at least 1"},
      {[](fa_merge_problem& p) { p.rows = 0; }, "rows (0) must be at least 1"},
      {[](fa_merge_problem& p) { p.head_dim = 96; },
       "head_dim (96) is not supported by the merge (supported: 64 128)"},
      {[](fa_merge_problem& p) { p.dtype = 0; },
       "dtype (fp32) is not supported by the merge (supported: fp16, bf16)"},
      {[](fa_merge_problem& p) { p.batch = p.heads = 65536; },
       "batch*heads*rows (429496729600) exceeds the limit of 8589934588 rows (the merge's grid)"},
  };
  for (const Case& c : cases) {
    fa_merge_problem p = merge_problem();
    c.edit(p);
    CHECK(merge(&p) == FA_ERROR_INVALID_ARGUMENT);
    CHECK(last() == c.message);
  }
}

TEST_CASE("C API: fa_merge refuses a null or misaligned pointer, naming it", "[capi]") {
  const fa_merge_problem p = merge_problem();
  float* lse_out = reinterpret_cast<float*>(addr(6));
  CHECK(merge(&p, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer o_parts is null");
  CHECK(merge(&p, addr(0), nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer lse_parts is null");
  CHECK(merge(&p, addr(0), lse_addr(), nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer o is null");
  CHECK(merge(&p, addr(0), lse_addr(), addr(3), nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last() == "pointer lse is null");
  CHECK(merge(&p, addr(0, 8)) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "pointer o_parts (0x"));
  CHECK(last().find(") is not aligned to 16 bytes as the merge requires") != std::string::npos);
  CHECK(merge(&p, addr(0), lse_addr(2)) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(last().find("pointer lse_parts (") == 0);
  CHECK(last().find("is not aligned to 4 bytes") != std::string::npos);
  CHECK(merge(&p, addr(0), lse_addr(), addr(3, 4), lse_out) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "pointer o ("));
  CHECK(merge(&p, addr(0), lse_addr(), addr(3), reinterpret_cast<float*>(addr(6, 1))) ==
        FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "pointer lse ("));
  // The problem is checked before the pointers.
  fa_merge_problem bad = p;
  bad.head_dim = 32;
  CHECK(merge(&bad, nullptr) == FA_ERROR_INVALID_ARGUMENT);
  CHECK(starts_with(last(), "head_dim (32)"));
}
