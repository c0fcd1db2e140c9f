// test_capi_decode_gpu.cpp — fa_decode (the C API, libflash_tutorial.so) on the GPU: every
// decoding step the library holds, on contiguous and paged caches (shuffled pages), GQA and
// MQA, several new tokens, the step's split count and forced ones. The lengths and the block
// table go in as host arrays, which fa_decode validates and copies into the workspace; the
// caches and each sequence's O and L are judged as the decoding steps' own tests judge them
// (tests/decode_judge.h: the caches bit for bit against the reference's append, O and L by
// the tolerance policy). The workspace starts as NaN. Exits with 77 (skipped) without a
// usable device.
#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_buffer.h"
#include "steps/harness/flash_tutorial.h"
#include "tests/catch.hpp"
#include "tests/decode_cases.h"
#include "tests/decode_gpu.h"

namespace {

using fa::DecodeProblem;

// The C struct of problem p; its arrays point into p.
fa_decode_problem to_c(const DecodeProblem& p) {
  fa_decode_problem c{};
  c.batch = p.batch;
  c.heads_q = p.heads_q;
  c.heads_kv = p.heads_kv;
  c.head_dim = p.head_dim;
  c.q_len = p.q_len;
  c.scale = p.scale;
  c.dtype = static_cast<int>(p.dtype);
  c.cache = p.cache == fa::CacheKind::Paged ? FA_CACHE_PAGED : FA_CACHE_CONTIGUOUS;
  c.n_max = p.n_max;
  c.page_size = p.page_size;
  c.num_pages = p.num_pages;
  c.max_pages = p.max_pages;
  c.cache_lens = p.cache_lens.data();
  c.block_table = p.block_table.empty() ? nullptr : p.block_table.data();
  return c;
}

// Runs the case through fa_decode with `splits` (0: the step's rule), the workspace sized for
// `sized` (c.p unless given); "" or the C API's message. What the device holds afterwards (O,
// L, the caches) is read back into *r either way once fa_decode was called.
std::string run_capi(const char* step, const fa::test::DecodeCase& c, int splits,
                     fa::test::DecodeRun* r, const DecodeProblem* sized = nullptr) {
  const fa_decode_problem p = to_c(c.p), for_bytes = to_c(sized ? *sized : c.p);
  std::size_t bytes = 0;
  if (fa_decode_workspace_bytes(step, &for_bytes, splits, &bytes) != FA_OK) return fa_last_error();
  fa::DeviceBuffer ws(bytes);
  CUDA_CHECK(cudaMemset(ws.get(), 0xFF, bytes));
  const fa::test::DecodeDevice dev(c);
  const fa::DecodeTensors t = dev.tensors();
  const fa_status st = fa_decode(step, &p, splits, t.q, t.k_new, t.v_new, t.k_cache, t.v_cache, t.o,
                                 t.lse, ws.get(), bytes, nullptr);
  const std::string message = st == FA_OK ? "" : fa_last_error();
  dev.download(c.p, r);
  return message;
}

}  // namespace

TEST_CASE("fa_decode: appends and attends like the decoding steps' own tests", "[capi_gpu]") {
  REQUIRE(fa_num_decode_steps() > 0);
  using fa::test::contiguous;
  using fa::test::paged;
  using fa::test::shapes;
  for (int i = 0; i < fa_num_decode_steps(); ++i) {
    const char* step = fa_decode_step_name(i);
    for (int dtype : {1, 2}) {
      const std::vector<DecodeProblem> problems = {
          contiguous(shapes(4, 4, 64, 1, {1, 37, 255}), 300),
          paged(shapes(8, 2, 128, 1, {0, 17, 300}), 16, 7),
          paged(shapes(8, 1, 64, 5, {1, 63, 129}), 32, 8),
          paged(shapes(16, 1, 64, 16, {5, 700}), 64, 9),
          paged(shapes(32, 8, 128, 2, {4095, 3001}), 256, 10),
      };
      for (DecodeProblem p : problems) {
        p.dtype = static_cast<fa::DType>(dtype);
        const fa::test::DecodeCase c = fa::test::make_case(p, 42);
        for (int splits : {0, 1, 7}) {
          INFO(step << ": " << p.describe() << ", num_splits " << splits);
          fa::test::DecodeRun r;
          REQUIRE(run_capi(step, c, splits, &r) == "");
          CHECK(fa::test::judge_case(c, r) == "");
        }
      }
    }
  }
}

TEST_CASE("fa_decode: a bad table is refused with the cache untouched", "[capi_gpu]") {
  DecodeProblem p = fa::test::paged(fa::test::shapes(8, 2, 64, 1, {20, 3}), 16, 3);
  p.dtype = fa::DType::F16;
  const fa::test::DecodeCase c = fa::test::make_case(p, 7);
  DecodeProblem bad = p;
  bad.block_table[1] = p.num_pages;  // sequence 0's second page, outside the pool
  fa::test::DecodeCase bad_case = c;
  bad_case.p = bad;
  fa::test::DecodeRun r;
  const std::string e = run_capi(fa_decode_step_name(0), bad_case, 1, &r, &p);
  REQUIRE(r.k.size() == c.before.k.size());
  CHECK(e == "block_table[0][1] (" + std::to_string(p.num_pages) + ") is out of range [0, " +
                 std::to_string(p.num_pages) + ") (num_pages)");
  // Nothing was appended: the caches are as uploaded (NaN where they were NaN).
  fa::test::DecodeCase unchanged = c;
  unchanged.after = c.before;
  CHECK(fa::test::judge_cache(unchanged, r) == "");
}
