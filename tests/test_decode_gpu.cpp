// test_decode_gpu.cpp — every registered decoding step (common/decode_registry.h) against the
// decoding reference, on the GPU. The program exits with 77 (skipped) without a usable device.
//
// Every case: random inputs rounded to the dtype, a cache that is NaN outside the rows each
// sequence holds (a row read before it is written turns the output NaN), O, L and the
// workspace poisoned with NaN before the launch (an unwritten element fails), then
//   the caches: equal to the reference's append, bit for bit (tests/decode_gpu.h)
//   O and L:    each sequence by the forward tests' tolerance policy on its dense problem
// for every dtype and head dim the step supports, both cache kinds.
//
//   [append]    the new rows land where the reference puts them, contiguous and paged; the
//               attention alone (DecodePhases::AttendOnly, what bench_decode times) over the
//               cache the whole step left gives its O and L bit for bit and writes no cache row
//   [shapes]    kv_len 1, odd, not a page or tile multiple, exactly the capacity; page sizes
//               16, 64 and 256 with shuffled pages; several sequences of different lengths
//   [gqa]       MHA, GQA 8/2, MQA 8/1, and a group × q_len above one block's rows
//   [causal]    q_len 2, 5 and 16: causal among the new tokens (bottom-right)
//   [splits]    1 split, a few, more splits than tiles (empty splits), the most allowed, the
//               rule's choice; one split equals many; scores of magnitude ~100
//   [offsets]   the cache rows past element 2^31 and 2^32 of a paged pool (pages of 16, 64 and
//               256) and of a contiguous cache, short sequences; skipped (exit status 77) when
//               the device lacks the ~17–26 GB of free memory the far caches need
//   [refusals]  bad problems and launches throw with the parameter named, before any launch
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/decode_registry.h"
#include "reference/compare.h"
#include "tests/catch.hpp"
#include "tests/decode_cases.h"
#include "tests/decode_gpu.h"

namespace {

using fa::CacheKind;
using fa::DecodeProblem;
using fa::DecodeStepInfo;
using fa::test::contiguous;
using fa::test::paged;
using fa::test::shapes;

/// Calls f(step, p) for every registered step and every (dtype, head dim) it supports, p being
/// `base` with them set.
template <class F>
void for_each_config(const DecodeProblem& base, F&& f) {
  REQUIRE_FALSE(fa::decode_steps().empty());
  for (const DecodeStepInfo* step : fa::decode_steps()) {
    for (fa::DType t : step->dtypes) {
      for (int d : step->head_dims) {
        DecodeProblem p = base;
        p.dtype = t;
        p.head_dim = d;
        INFO(step->name << ": " << p.describe());
        f(*step, p);
      }
    }
  }
}

/// One case in both cache kinds (paged with pages of `page_size`, shuffled), judged.
void check_both_caches(DecodeProblem base, int page_size, std::uint64_t seed, int forced = 0) {
  for (const DecodeProblem& p : {contiguous(base), paged(base, page_size, seed)}) {
    for_each_config(p, [&](const DecodeStepInfo& step, DecodeProblem q) {
      REQUIRE(fa::check_decode_step(step, q).empty());
      const fa::test::DecodeCase c = fa::test::make_case(q, seed);
      const fa::test::DecodeRun r = fa::test::run_case(step, c, forced);
      INFO("splits " << r.num_splits);
      CHECK(fa::test::judge_case(c, r) == "");
    });
  }
}

}  // namespace

TEST_CASE("decode: the new rows are appended where the reference puts them", "[append]") {
  // judge_case compares the whole cache first: the new rows, and NaN everywhere else.
  check_both_caches(shapes(4, 2, 64, 3, {0, 13, 16, 40}), 16, 1);
  check_both_caches(shapes(2, 2, 64, 16, {5, 250}), 64, 2);
}

TEST_CASE("decode: the attention alone gives the whole step's O and L", "[append]") {
  const DecodeProblem base = shapes(4, 2, 64, 2, {0, 70, 200});
  for (const DecodeProblem& p : {contiguous(base), paged(base, 16, 4)}) {
    for_each_config(p, [&](const DecodeStepInfo& step, DecodeProblem q) {
      const fa::test::DecodeCase c = fa::test::make_case(q, 5);
      const fa::test::DecodeRun whole = fa::test::run_case(step, c);
      // The cache the whole step left, and new rows of NaN: an append would write them.
      fa::test::DecodeCase held = c;
      held.before.k = whole.k;
      held.before.v = whole.v;
      std::fill(held.k_new.begin(), held.k_new.end(), std::nanf(""));
      std::fill(held.v_new.begin(), held.v_new.end(), std::nanf(""));
      if (step.attend == nullptr) {
        CHECK_THROWS_AS(
            fa::test::run_case(step, held, whole.num_splits, fa::DecodePhases::AttendOnly),
            std::invalid_argument);
        return;
      }
      const fa::test::DecodeRun alone =
          fa::test::run_case(step, held, whole.num_splits, fa::DecodePhases::AttendOnly);
      CHECK(alone.o == whole.o);  // NaN anywhere fails: NaN != NaN
      CHECK(alone.lse == whole.lse);
      // The caches hold NaN outside the sequences' rows (NaN != NaN): equal value for value,
      // NaN where the whole step left NaN, so the attention alone wrote nothing into them.
      auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](float x, float y) {
          return x == y || (std::isnan(x) && std::isnan(y));
        });
      };
      CHECK(same(alone.k, whole.k));
      CHECK(same(alone.v, whole.v));
    });
  }
}

TEST_CASE("decode: lengths 1, odd, not a page or tile multiple, the capacity", "[shapes]") {
  check_both_caches(shapes(2, 2, 64, 1, {0}), 16, 3);                // kv_len 1
  check_both_caches(shapes(2, 1, 64, 1, {36, 99, 128, 63}), 16, 4);  // 37, 100, 129, 64
  check_both_caches(shapes(4, 2, 64, 1, {255, 1000, 7}), 64, 5);     // 256, 1001, 8
  check_both_caches(shapes(2, 2, 64, 4, {252, 509}), 256, 6);        // 256, 513
  // A contiguous cache larger than the longest sequence (the rows past it are NaN).
  for_each_config(contiguous(shapes(4, 2, 64, 2, {30, 70}), 300), [](const auto& step, auto p) {
    const auto c = fa::test::make_case(p, 7);
    CHECK(fa::test::judge_case(c, fa::test::run_case(step, c)) == "");
  });
}

TEST_CASE("decode: MHA, GQA, MQA, and more rows than one block holds", "[gqa]") {
  check_both_caches(shapes(4, 4, 64, 1, {100, 3}), 16, 11);    // MHA
  check_both_caches(shapes(8, 2, 64, 1, {300, 77}), 32, 12);   // GQA 8/2
  check_both_caches(shapes(8, 1, 64, 2, {129, 64}), 64, 13);   // MQA 8/1
  check_both_caches(shapes(16, 1, 64, 3, {90, 200}), 16, 14);  // 48 rows per K/V head: 2 chunks
  check_both_caches(shapes(12, 3, 64, 16, {70}), 16, 15);      // 64 rows per K/V head: 2 chunks
}

TEST_CASE("decode: several new tokens, causal among themselves", "[causal]") {
  check_both_caches(shapes(4, 2, 64, 2, {0, 62, 127}), 16, 21);
  check_both_caches(shapes(4, 1, 64, 5, {0, 59, 300}), 64, 22);
  check_both_caches(shapes(2, 2, 64, 16, {0, 48, 1000}), 16, 23);
}

TEST_CASE("decode: one split, many, empty splits; one equals many", "[splits]") {
  const DecodeProblem base = shapes(4, 2, 64, 3, {1200, 40, 513});
  for (int forced : {1, 2, 7, 19, 64, 128}) {  // 19 tiles at most: 64 and 128 leave empty splits
    INFO("forced splits " << forced);
    check_both_caches(base, 16, 31, forced);
  }
  check_both_caches(base, 64, 32, 0);  // the rule's choice

  // The same inputs in 1 and in 9 splits: O within two units in the last place of the dtype
  // (only the order of the fp32 sums differs, then one rounding to 16 bits; 1e-5 for the fp32
  // noise where O is near 0), L within 1e-4 relative.
  for_each_config(paged(base, 16, 33), [](const DecodeStepInfo& step, DecodeProblem p) {
    const auto c = fa::test::make_case(p, 34);
    const auto one = fa::test::run_case(step, c, 1), many = fa::test::run_case(step, c, 9);
    REQUIRE(one.num_splits == 1);
    REQUIRE(many.num_splits == 9);
    for (std::size_t x = 0; x < one.o.size(); ++x) {
      const double mag = std::max(std::abs(one.o[x]), std::abs(many.o[x]));
      INFO("O element " << x << ": " << one.o[x] << " vs " << many.o[x]);
      REQUIRE(std::abs(one.o[x] - many.o[x]) <= 2 * fa::ulp_of(p.dtype, mag) + 1e-5);
    }
    for (std::size_t x = 0; x < one.lse.size(); ++x) {
      INFO("L element " << x << ": " << one.lse[x] << " vs " << many.lse[x]);
      REQUIRE(std::abs(one.lse[x] - many.lse[x]) <= 1e-4 * std::max(1.f, std::abs(one.lse[x])));
    }
  });

  // Scores of magnitude ~100: the max must be carried through the splits and the combine.
  for_each_config(paged(base, 64, 35), [](const DecodeStepInfo& step, DecodeProblem p) {
    const auto c = fa::test::make_case(p, 36, 5.f);
    for (int forced : {1, 5})
      CHECK(fa::test::judge_case(c, fa::test::run_case(step, c, forced)) == "");
  });
}

TEST_CASE("decode: caches past element 2^31 and 2^32, paged and contiguous", "[offsets]") {
  // Short sequences (the double reference stays cheap) whose cache rows lie far out:
  // far_problem (tests/decode_cases.h) moves every row of the small case's cache past element
  // 2^31, past 2^32, or to the end of a pool past 2^32 (paged); past 2^31 for sequence 1 and
  // 2^32 for sequence 2 (contiguous, N_max · H_kv · d > 2^31). A 32-bit offset anywhere, in
  // the append or in a read, lands elsewhere: the row judged is then NaN or stale.
  std::vector<DecodeProblem> smalls = {
      paged(shapes(8, 2, 64, 1, {300, 1000, 37}), 256, 51, 0),  // GQA: a tile within a page
      paged(shapes(4, 4, 64, 3, {200, 65}), 16, 52, 0),         // MHA: 4 pages per tile
      paged(shapes(8, 1, 64, 2, {129, 500}), 64, 53, 0),        // MQA
      contiguous(shapes(8, 2, 64, 2, {100, 700, 33})),          // 3 sequences
  };
  // Every configuration's far caches, against the device's free memory (the largest case
  // alone is allocated at a time): skipped, not failed, when they do not fit.
  std::size_t need = 0;
  for (const DecodeStepInfo* step : fa::decode_steps())
    for (fa::DType t : step->dtypes)
      for (int d : step->head_dims)
        for (DecodeProblem p : smalls) {
          p.dtype = t;
          p.head_dim = d;
          std::vector<fa::test::RowSpan> spans;
          need = std::max(need, fa::test::far_case_bytes(fa::test::far_problem(p, &spans)));
        }
  std::size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need)
    FA_SKIP("the far caches need " << need << " bytes of device memory, " << free_bytes
                                   << " are free");

  int n = 0;
  for (const DecodeProblem& small : smalls) {
    for_each_config(small, [&](const DecodeStepInfo& step, DecodeProblem p) {
      std::vector<fa::test::RowSpan> spans;
      const DecodeProblem far = fa::test::far_problem(p, &spans);
      REQUIRE(fa::check_decode_step(step, far).empty());
      INFO("far cache: " << far.describe() << ", " << far.cache_elems() << " elements");
      const fa::test::DecodeCase c = fa::test::make_case(p, 60 + n++);
      for (int forced : {0, 5}) {  // the rule's split count, and 5
        const fa::test::DecodeRun r = fa::test::run_far_case(step, c, far, spans, forced);
        INFO("splits " << r.num_splits);
        CHECK(fa::test::judge_case(c, r) == "");
      }
    });
  }
}

TEST_CASE("decode: bad problems and launches are refused before any launch", "[refusals]") {
  for (const DecodeStepInfo* step : fa::decode_steps()) {
    INFO(step->name);
    DecodeProblem ok = paged(shapes(4, 2, 64, 2, {30, 70}), 16, 41);
    ok.dtype = step->dtypes.front();
    const fa::test::DecodeCase c = fa::test::make_case(ok, 42);
    fa::test::DecodeDevice dev(c);
    fa::DeviceBuffer ws(step->workspace_bytes(ok, 4));
    // Each refusal names what was wrong; O stays poisoned (nothing ran).
    auto refused = [&](const DecodeProblem& p, const fa::DecodeTensors& t, int splits,
                       const std::string& what) {
      try {
        fa::run_decode(*step, p, t, splits, ws.get());
        FAIL("not refused: " << what);
      } catch (const std::invalid_argument& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).find(what) != std::string::npos);
      }
    };
    DecodeProblem bad = ok;
    bad.q_len = 17;
    refused(bad, dev.tensors(), 4, "q_len (17)");
    bad = ok;
    bad.block_table[1] = ok.num_pages;  // sequence 0's second page
    refused(bad, dev.tensors(), 4, "block_table[0][1] (" + std::to_string(ok.num_pages) + ")");
    bad = ok;
    bad.cache_lens[1] = ok.max_pages * ok.page_size;  // longer than its pages
    refused(bad, dev.tensors(), 4, "more than max_pages");
    DecodeProblem small = contiguous(shapes(4, 2, 64, 2, {30, 70}), 72);
    small.dtype = ok.dtype;
    small.cache_lens[1] = 71;  // 71 + 2 > n_max
    refused(small, dev.tensors(), 4, "exceeds n_max (72)");
    bad = ok;
    bad.dtype = fa::DType::F32;
    refused(bad, dev.tensors(), 4, "dtype (fp32)");
    bad = ok;
    bad.head_dim = 96;
    refused(bad, dev.tensors(), 4, "head_dim (96)");
    refused(ok, dev.tensors(), 0, "num_splits (0)");
    refused(ok, dev.tensors(), step->max_splits + 1,
            "num_splits (" + std::to_string(step->max_splits + 1) + ")");
    fa::DecodeTensors t = dev.tensors();
    t.block_table = nullptr;
    refused(ok, t, 4, "pointer block_table is null");
    t = dev.tensors();
    t.k_cache = static_cast<char*>(dev.k_cache.get()) + 2;
    refused(ok, t, 4, "pointer k_cache");
    // A workspace off the step's alignment (its partials are stored 16 bytes at a time).
    fa::DeviceBuffer big(step->workspace_bytes(ok, 4) + 16);
    try {
      fa::run_decode(*step, ok, dev.tensors(), 4, static_cast<char*>(big.get()) + 4);
      FAIL("not refused: a workspace 4 bytes off its alignment");
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find("workspace (") != std::string::npos);
    }

    fa::test::DecodeRun r;
    dev.download(ok, &r);
    CHECK(std::all_of(r.o.begin(), r.o.end(), [](float x) { return std::isnan(x); }));
    CHECK(fa::test::judge_cache(fa::test::DecodeCase{ok, {}, {}, {}, c.before, c.before}, r) == "");
  }
}
