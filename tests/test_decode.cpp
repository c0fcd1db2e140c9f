// test_decode.cpp — the decoding reference, before any GPU step is judged by it.
//
//   1. The address map: a cache filled here with its own arithmetic (not cache_row_offset) in a
//      NaN-filled pool reads back through gather_rows; a paged cache with shuffled pages gives
//      exactly the contiguous cache's answer.
//   2. decode_attention equals the forward reference on the equivalent dense problem, and the
//      independent double loop of decode_partial over all keys: lengths 1, odd, not a page
//      multiple, the maximum; MHA, GQA and MQA; q_len 1, 3 and 16 (causal among the new).
//   3. Split-KV: one split equals 2, 7, one key per split and more splits than keys (empty
//      splits), also with scores of magnitude ~1e3; the merge on a case worked by hand.
//   4. Every validation error, with its message; the cache's own limit (2^40 elements, past the
//      forward's 2^31) at its edges, with 64-bit row offsets; append, then attend, equals
//      attending over a cache that held the longer sequences already.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/decode.h"
#include "reference/attention.h"
#include "reference/decode.h"
#include "tests/catch.hpp"
#include "tests/decode_cases.h"
#include "tests/decode_judge.h"

namespace {

using fa::CacheKind;
using fa::DecodeProblem;
using fa::HostKVCache;
using fa::ref::DecodeResult;
using fa::test::contiguous;
using fa::test::paged;
using fa::test::shapes;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
/// Split-KV against one split, both in double: only the order of the sums differs, so the
/// results agree to a few units of double rounding. Relative to max(1, |value|).
constexpr double kSplitTol = 1e-12;

/// Every sequence's keys and values in dense form, [kv_len(b), H_kv, d] each, and Q.
struct DecodeData {
  std::vector<std::vector<float>> k, v;  // one per sequence
  std::vector<float> q;                  // [B, q_len, H_q, d]
};

DecodeData random_decode_data(const DecodeProblem& p, std::uint64_t seed, float qk_scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  DecodeData data;
  const int row = p.heads_kv * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    data.k.emplace_back(std::size_t(p.kv_len(b)) * row);
    data.v.emplace_back(std::size_t(p.kv_len(b)) * row);
    for (float& x : data.k.back()) x = qk_scale * normal(rng);
    for (float& x : data.v.back()) x = normal(rng);
  }
  data.q.resize(p.q_elems());
  for (float& x : data.q) x = qk_scale * normal(rng);
  return data;
}

/// Writes rows [0, rows(b)) of every sequence into a fresh (NaN) cache, with this test's own
/// arithmetic for where a row goes.
template <typename Rows>
HostKVCache fill_cache(const DecodeProblem& p, const DecodeData& data, Rows rows) {
  HostKVCache c = fa::make_cache(p);
  const int row = p.heads_kv * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int pos = 0; pos < rows(b); ++pos) {
      std::int64_t at = 0;
      if (p.cache == CacheKind::Contiguous) {
        at = (std::int64_t{b} * p.n_max + pos) * row;
      } else {
        const int page = p.block_table[b * p.max_pages + pos / p.page_size];
        at = (std::int64_t{page} * p.page_size + pos % p.page_size) * row;
      }
      std::copy_n(data.k[b].begin() + std::int64_t{pos} * row, row, c.k.begin() + at);
      std::copy_n(data.v[b].begin() + std::int64_t{pos} * row, row, c.v.begin() + at);
    }
  }
  return c;
}
HostKVCache full_cache(const DecodeProblem& p, const DecodeData& data) {
  return fill_cache(p, data, [&](int b) { return p.kv_len(b); });
}

/// Whether a and b hold the same values, NaN where the other has NaN.
template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    if (!std::isnan(a[i]) && a[i] != b[i]) return false;
  }
  return true;
}

/// |a − b| <= rel · max(1, |b|).
bool close(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max(1.0, std::abs(b));
}

bool all_finite(const std::vector<double>& x) {
  return std::all_of(x.begin(), x.end(), [](double v) { return std::isfinite(v); });
}

/// max |a − b| / max(1, |b|) over all elements; -inf must meet -inf.
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i]));
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

/// The forward reference on each sequence's dense problem, assembled like decode_attention.
DecodeResult forward_reference(const DecodeProblem& p, const DecodeData& data) {
  DecodeResult r;
  const std::int64_t q_seq = std::int64_t{p.q_len} * p.heads_q * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    const fa::Problem dense = fa::dense_problem(p, b);
    REQUIRE(dense.causal);
    REQUIRE(dense.n_q == p.q_len);
    REQUIRE(dense.n_kv == p.kv_len(b));
    const fa::ref::Result one =
        fa::ref::attention(dense, data.q.data() + b * q_seq, data.k[b].data(), data.v[b].data());
    r.o.insert(r.o.end(), one.o.begin(), one.o.end());
    r.lse.insert(r.lse.end(), one.lse.begin(), one.lse.end());
  }
  return r;
}

/// The problems most tests run on: per-sequence lengths 1 (an empty cache and one new token),
/// odd, not a page multiple, and exactly a page multiple; MHA, GQA and MQA; q_len 1, 3, 16.
struct Case {
  int hq, hkv, d, q_len;
  std::vector<int> lens;  // cache_lens: keys before the step
};
const Case kCases[] = {
    {4, 4, 32, 1, {0, 16, 77, 255}},  // MHA: kv_len 1, 17, 78, 256
    {8, 2, 64, 1, {130, 5, 63}},      // GQA 8/2
    {4, 1, 32, 3, {0, 61, 200}},      // MQA, q_len 3: causal among the new tokens
    {6, 3, 16, 16, {0, 48, 101}},     // q_len 16, the most: kv_len 16, 64, 117
    {2, 1, 128, 2, {255, 1}},         // d = 128, MQA
};

}  // namespace

TEST_CASE("decode: a cache filled row by row reads back through gather_rows", "[decode]") {
  for (const Case& c : kCases) {
    for (int page_size : {16, 64, 256}) {
      CAPTURE(page_size, c.q_len, c.hq, c.hkv);
      const DecodeProblem p = paged(shapes(c.hq, c.hkv, c.d, c.q_len, c.lens), page_size, 11);
      REQUIRE(fa::validate(p).empty());
      const DecodeData data = random_decode_data(p, 5);
      const HostKVCache cache = full_cache(p, data);
      for (int b = 0; b < p.batch; ++b) {
        CHECK(same(fa::gather_rows(p, b, p.kv_len(b), cache.k.data()), data.k[b]));
        CHECK(same(fa::gather_rows(p, b, p.kv_len(b), cache.v.data()), data.v[b]));
      }
    }
  }
  // The offsets of a small table, by hand: page_size 16, H_kv·d = 2·8 = 16 elements per row.
  DecodeProblem p = shapes(2, 2, 8, 1, {20, 0});
  p.cache = CacheKind::Paged;
  p.page_size = 16;
  p.num_pages = 4;
  p.max_pages = 2;
  p.block_table = {3, 1, 0, -1};
  REQUIRE(fa::validate(p).empty());
  CHECK(p.cache_row_offset(0, 0) == 3 * 16 * 16);
  CHECK(p.cache_row_offset(0, 17) == (1 * 16 + 1) * 16);
  CHECK(p.cache_row_offset(1, 0) == 0);
  p = contiguous(p, 32);
  CHECK(p.cache_row_offset(1, 5) == (32 + 5) * 16);
}

TEST_CASE("decode: paged and contiguous caches give identical answers, pages shuffled",
          "[decode]") {
  for (const Case& c : kCases) {
    const DecodeProblem base = shapes(c.hq, c.hkv, c.d, c.q_len, c.lens);
    const DecodeProblem cp = contiguous(base, base.max_kv_len() + 9);  // room to spare
    const DecodeData data = random_decode_data(cp, 21);
    const DecodeResult want = fa::ref::decode_attention(cp, data.q.data(), full_cache(cp, data));
    REQUIRE(all_finite(want.o));
    for (int page_size : {16, 32, 64, 256}) {
      CAPTURE(page_size, c.q_len, c.hq, c.hkv, c.d);
      const DecodeProblem pp = paged(base, page_size, 100 + page_size);
      REQUIRE(fa::validate(pp).empty());
      if (pp.num_pages > 4) {  // the pool really is out of order
        std::vector<int> sorted(pp.block_table);
        CHECK_FALSE(std::is_sorted(sorted.begin(), sorted.end()));
      }
      const DecodeResult got = fa::ref::decode_attention(pp, data.q.data(), full_cache(pp, data));
      CHECK(same(got.o, want.o));
      CHECK(same(got.lse, want.lse));
    }
  }
}

TEST_CASE("decode: equals the forward reference on the equivalent dense problem", "[decode]") {
  for (const Case& c : kCases) {
    for (bool is_paged : {false, true}) {
      CAPTURE(is_paged, c.q_len, c.hq, c.hkv, c.d);
      const DecodeProblem base = shapes(c.hq, c.hkv, c.d, c.q_len, c.lens);
      // The maximum: the longest sequence fills the contiguous cache, or its last page.
      const DecodeProblem p = is_paged ? paged(base, 16, 7) : contiguous(base);
      const DecodeData data = random_decode_data(p, 33);
      const HostKVCache cache = full_cache(p, data);
      const DecodeResult got = fa::ref::decode_attention(p, data.q.data(), cache);
      const DecodeResult dense = forward_reference(p, data);
      CHECK(same(got.o, dense.o));
      CHECK(same(got.lse, dense.lse));
      // An independent implementation (plain double loops, positions not masks) agrees.
      const DecodeResult loops =
          fa::ref::decode_partial(p, data.q.data(), cache, 0, p.max_kv_len());
      CHECK(max_rel_diff(loops.o, got.o) < kSplitTol);
      CHECK(max_rel_diff(loops.lse, got.lse) < kSplitTol);
    }
  }
}

TEST_CASE("decode: causal among the new tokens, GQA heads share their key/value head", "[decode]") {
  // q_len 3 over an empty cache: query i sees keys [0, i]. With V = the position and Q = 0
  // (all scores equal), O of query i is the mean of 0..i and L = log(i + 1).
  DecodeProblem p = contiguous(shapes(4, 2, 8, 3, {0}), 3);
  DecodeData data;
  data.q.assign(p.q_elems(), 0.f);
  data.k.emplace_back(3 * 2 * 8, 1.f);
  data.v.emplace_back(3 * 2 * 8);
  for (int j = 0; j < 3; ++j)
    for (int g = 0; g < 2; ++g)
      for (int t = 0; t < 8; ++t) data.v[0][(j * 2 + g) * 8 + t] = float(j + 10 * g);
  const DecodeResult r = fa::ref::decode_attention(p, data.q.data(), full_cache(p, data));
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 4; ++h) {
      CAPTURE(i, h);
      const int g = h / 2;  // heads 0, 1 read KV head 0; heads 2, 3 read KV head 1
      CHECK(close(r.o[(i * 4 + h) * 8 + 5], i / 2.0 + 10 * g, 1e-14));
      CHECK(close(r.lse[h * 3 + i], std::log(i + 1.0), 1e-14));
    }
  }
}

TEST_CASE("decode: one split equals many splits", "[decode]") {
  for (const Case& c : kCases) {
    for (float qk_scale : {1.f, 6.f}) {  // 6: scores ~ 36·sqrt(d), the rescale matters
      const DecodeProblem p = paged(shapes(c.hq, c.hkv, c.d, c.q_len, c.lens), 32, 9);
      const DecodeData data = random_decode_data(p, 77, qk_scale);
      const HostKVCache cache = full_cache(p, data);
      const DecodeResult one = fa::ref::decode_attention(p, data.q.data(), cache);
      REQUIRE(all_finite(one.o));
      const int n = p.max_kv_len();
      // 1, 2, 7, one key per split, and more splits than keys (some ranges empty).
      for (int splits : {1, 2, 7, n, n + 5}) {
        CAPTURE(qk_scale, splits, c.q_len, c.hq, c.hkv, c.d);
        const DecodeResult many = fa::ref::split_kv_attention(p, data.q.data(), cache, splits);
        CHECK(max_rel_diff(many.o, one.o) < kSplitTol);
        CHECK(max_rel_diff(many.lse, one.lse) < kSplitTol);
      }
    }
  }
}

TEST_CASE("decode: the merge, by hand, with empty splits and NaN", "[decode]") {
  DecodeProblem p = contiguous(shapes(1, 1, 2, 1, {0, 0}), 1);  // two rows of d = 2
  // Row 0: L = log 2 and log 6 and an empty split: L = log 8, O = (2·O_1 + 6·O_2) / 8.
  // Row 1: every split empty: O = 0, L = -inf.
  const DecodeResult a{{1.0, 2.0, 0.0, 0.0}, {std::log(2.0), kNegInf}};
  const DecodeResult b{{5.0, -2.0, 0.0, 0.0}, {std::log(6.0), kNegInf}};
  const DecodeResult empty{{0.0, 0.0, 0.0, 0.0}, {kNegInf, kNegInf}};
  const DecodeResult m = fa::ref::merge_splits(p, {a, empty, b});
  CHECK(close(m.o[0], (2 * 1.0 + 6 * 5.0) / 8, 1e-15));
  CHECK(close(m.o[1], (2 * 2.0 - 6 * 2.0) / 8, 1e-15));
  CHECK(close(m.lse[0], std::log(8.0), 1e-15));
  CHECK(m.o[2] == 0.0);
  CHECK(m.o[3] == 0.0);
  CHECK(m.lse[1] == kNegInf);
  // Huge L: exp(L) overflows, the rescale does not.
  const DecodeResult big1{{1.0, 0.0, 0.0, 0.0}, {1000.0, kNegInf}};
  const DecodeResult big2{{0.0, 1.0, 0.0, 0.0}, {1000.0, kNegInf}};
  const DecodeResult mb = fa::ref::merge_splits(p, {big1, big2});
  CHECK(close(mb.lse[0], 1000.0 + std::log(2.0), 1e-15));  // exp(L_s − L) carries |L|·2⁻⁵³:
  CHECK(close(mb.o[0], 0.5, 1e-12));                       // ~1e-13 at |L| = 1000
  // A NaN partial poisons its row only.
  DecodeResult bad = a;
  bad.lse[0] = std::numeric_limits<double>::quiet_NaN();
  const DecodeResult mn = fa::ref::merge_splits(p, {bad, b});
  CHECK(std::isnan(mn.lse[0]));
  CHECK(std::isnan(mn.o[0]));
  CHECK(mn.lse[1] == kNegInf);
  // A split whose weight underflows to 0 (L 800 below the other's) still carries a NaN in
  // its O to the row, as attention() does; with a finite O it adds nothing.
  const DecodeResult tiny_nan{{std::numeric_limits<double>::quiet_NaN(), 0.0, 0.0, 0.0},
                              {std::log(6.0) - 800.0, kNegInf}};
  const DecodeResult mt = fa::ref::merge_splits(p, {tiny_nan, b});
  CHECK(std::isnan(mt.o[0]));
  CHECK(close(mt.o[1], -2.0, 1e-15));
  CHECK(close(mt.lse[0], std::log(6.0), 1e-15));
  DecodeResult tiny = tiny_nan;
  tiny.o[0] = 1e300;
  const DecodeResult mf = fa::ref::merge_splits(p, {tiny, b});
  CHECK(close(mf.o[0], 5.0, 1e-15));
  // Wrong shapes and no parts are refused.
  CHECK_THROWS_WITH(fa::ref::merge_splits(p, {}), "merge_splits: parts is empty (need at least 1)");
  const DecodeResult short_part{{1.0}, {0.0}};
  CHECK_THROWS_WITH(fa::ref::merge_splits(p, {a, short_part}),
                    "merge_splits: parts[1] has 1 O and 1 L values; the problem has 4 and 2");
  const HostKVCache cache = fa::make_cache(p);
  CHECK_THROWS_WITH(fa::ref::split_kv_attention(p, nullptr, cache, 0),
                    "num_splits (0) must be at least 1");
  CHECK_THROWS_WITH(fa::ref::decode_partial(p, nullptr, cache, 3, 2),
                    "key range [3, 2) must have 0 <= begin <= end");
}

TEST_CASE("decode: every validation error names the parameter, its value and the limit",
          "[decode]") {
  const DecodeProblem good_c = contiguous(shapes(8, 2, 64, 2, {10, 30}), 40);
  DecodeProblem good_p = shapes(8, 2, 64, 2, {10, 30});
  good_p.cache = CacheKind::Paged;
  good_p.page_size = 16;
  good_p.num_pages = 4;
  good_p.max_pages = 2;
  good_p.block_table = {2, -1, 0, 3};  // sequence 0 uses 1 page, sequence 1 uses 2
  REQUIRE(fa::validate(good_c).empty());
  REQUIRE(fa::validate(good_p).empty());

  auto error = [](DecodeProblem p, auto change) {
    change(p);
    return fa::validate(p);
  };
  using P = DecodeProblem&;
  // Shapes shared with the forward problem.
  CHECK(error(good_c, [](P p) { p.batch = 0; }) == "batch (0) must be at least 1");
  CHECK(error(good_c, [](P p) { p.heads_kv = 3; }) ==
        "heads_q (8) must be a multiple of heads_kv (3)");
  CHECK(error(good_c, [](P p) { p.head_dim = 512; }) == "head_dim (512) exceeds the limit of 256");
  CHECK(error(good_c, [](P p) { p.scale = -1.f; }) ==
        "scale (-1) must be finite and >= 0 (0 selects 1/sqrt(head_dim))");
  // q_len and the lengths.
  CHECK(error(good_c, [](P p) { p.q_len = 0; }) == "q_len (0) must be in [1, 16]");
  CHECK(error(good_c, [](P p) { p.q_len = 17; }) == "q_len (17) must be in [1, 16]");
  CHECK(error(good_c, [](P p) { p.cache_lens = {10}; }) == "cache_lens has 1 entries; batch is 2");
  CHECK(error(good_c, [](P p) { p.cache_lens[1] = -1; }) == "cache_lens[1] (-1) must be >= 0");
  CHECK(error(good_c, [](P p) { p.cache_lens[1] = std::numeric_limits<int>::max(); }) ==
        "cache_lens[1] (2147483647) + q_len exceeds 2147483647");
  // Contiguous: a length above N_max (exactly N_max is fine).
  CHECK(error(good_c, [](P p) { p.cache_lens[1] = 38; }).empty());
  CHECK(error(good_c, [](P p) { p.cache_lens[1] = 39; }) ==
        "cache_lens[1] + q_len (39 + 2 = 41) exceeds n_max (40)");
  CHECK(error(good_c, [](P p) { p.n_max = 0; }) == "n_max (0) must be at least 1");
  // Paged: the page size, the pool, the table.
  CHECK(error(good_p, [](P p) { p.page_size = 8; }) == "page_size (8) must be in [16, 256]");
  CHECK(error(good_p, [](P p) { p.page_size = 512; }) == "page_size (512) must be in [16, 256]");
  CHECK(error(good_p, [](P p) { p.num_pages = 0; }) == "num_pages (0) must be at least 1");
  CHECK(error(good_p, [](P p) { p.max_pages = 0; }) == "max_pages (0) must be at least 1");
  CHECK(error(good_p, [](P p) { p.block_table.pop_back(); }) ==
        "block_table has 3 entries; batch * max_pages is 4");
  // A sequence longer than its pages (exactly two full pages is fine).
  CHECK(error(good_p, [](P p) { p.cache_lens[1] = 30; }).empty());
  CHECK(error(good_p, [](P p) { p.cache_lens[1] = 31; }) ==
        "cache_lens[1] + q_len (31 + 2 = 33) needs 3 pages of 16 rows, more than max_pages (2)");
  // The page count of the longest length an int allows, without overflow.
  CHECK(error(good_p, [](P p) { p.cache_lens[1] = std::numeric_limits<int>::max() - 2; }) ==
        "cache_lens[1] + q_len (2147483645 + 2 = 2147483647) needs 134217728 pages of 16 rows, "
        "more than max_pages (2)");
  // A block-table entry out of range, either side; an unused entry is never looked at.
  CHECK(error(good_p, [](P p) { p.block_table[3] = 4; }) ==
        "block_table[1][1] (4) is out of range [0, 4) (num_pages)");
  CHECK(error(good_p, [](P p) { p.block_table[0] = -1; }) ==
        "block_table[0][0] (-1) is out of range [0, 4) (num_pages)");
  CHECK(error(good_p, [](P p) { p.block_table[1] = 99; }).empty());
  // A page shared by two sequences may be read by both, never appended into.
  CHECK(error(good_p, [](P p) { p.block_table[0] = 0; }) ==
        "block_table[0][0] (0) is used 2 times in the table, but this step appends into it (a "
        "written page must belong to one sequence)");
  CHECK(error(good_p,
              [](P p) {  // sequence 0's full page 2 is also sequence 1's first page
                p.cache_lens = {16, 30};
                p.max_pages = 3;
                p.num_pages = 5;
                p.block_table = {2, 4, -1, 2, 3, -1};
              })
            .empty());
  // The cache's own limit (DecodeLimits::kMaxCacheElems, 2^40; the next test case walks its
  // edges): 2^32 elements pass, where the forward steps stop below 2^31.
  CHECK(error(good_c, [](P p) { p.n_max = 1 << 24; }).empty());
  // The pool's size is refused before the table is read, whatever the table holds.
  CHECK(error(good_p,
              [](P p) {
                p.num_pages = 1 << 30;
                p.block_table[0] = -1;
              }) ==
        "K/V cache size (num_pages * page_size * heads_kv * head_dim = 1073741824 * 16 * 2 * 64 "
        "= 2199023255552 elements) exceeds the decoding limit of 1099511627776 elements");

  // Everything that takes a problem refuses an invalid one with that message, before it reads.
  DecodeProblem bad = good_p;
  bad.block_table[2] = 7;
  const std::string why = "block_table[1][0] (7) is out of range [0, 4) (num_pages)";
  CHECK_THROWS_WITH(fa::make_cache(bad), why);
  HostKVCache cache = fa::make_cache(good_p);
  const std::vector<float> q(good_p.q_elems()), kv(good_p.new_kv_elems());
  CHECK_THROWS_WITH(fa::append_kv(bad, kv.data(), kv.data(), &cache), why);
  CHECK_THROWS_WITH(fa::ref::decode_attention(bad, q.data(), cache), why);
  CHECK_THROWS_WITH(fa::ref::split_kv_attention(bad, q.data(), cache, 2), why);
  // A cache of the wrong size.
  HostKVCache small = fa::make_cache(good_p);
  small.v.pop_back();
  CHECK_THROWS_WITH(fa::append_kv(good_p, kv.data(), kv.data(), &small),
                    "cache holds 8192 K and 8191 V elements; the problem needs 8192 each");
  CHECK_THROWS_WITH(fa::ref::decode_attention(good_p, q.data(), small),
                    "cache holds 8192 K and 8191 V elements; the problem needs 8192 each");
  CHECK_THROWS_AS(fa::gather_rows(good_p, 0, 13, cache.k.data()), std::invalid_argument);
}

TEST_CASE("decode: caches up to 2^40 elements are accepted, past it refused, with 64-bit offsets",
          "[decode]") {
  using fa::DecodeLimits;
  STATIC_REQUIRE(DecodeLimits::kMaxCacheElems == std::int64_t{1} << 40);
  STATIC_REQUIRE(DecodeLimits::kMaxCacheElems > fa::Limits::kMaxElems);  // the forward's 2^31 − 1
  STATIC_REQUIRE(DecodeLimits::kMaxSequenceRows == 1 << 30);

  // Contiguous, B · H_kv · d = 4 · 8 · 64 = 2^11 elements per position: N_max = 2^29 is the
  // limit exactly, one row more passes it.
  DecodeProblem c = contiguous(shapes(8, 8, 64, 1, {100, 0, 7, 3}), 1 << 29);
  CHECK(c.cache_elems() == DecodeLimits::kMaxCacheElems);
  CHECK(fa::validate(c).empty());
  // Row 5 of sequence 3 starts past 2^39 elements: its offset is exact in 64 bits.
  CHECK(c.cache_row_offset(3, 5) == (std::int64_t{3} * (1 << 29) + 5) * 8 * 64);
  c.n_max += 1;
  CHECK(fa::validate(c) ==
        "K/V cache size (batch * n_max * heads_kv * head_dim = 4 * 536870913 * 8 * 64 = "
        "1099511629824 elements) exceeds the decoding limit of 1099511627776 elements");

  // Paged, pages of 256 rows · 8 heads · 64 = 2^17 elements: 2^23 pages is the limit exactly.
  // The table points at the pool's last page and at pages past 2^31 and 2^32 elements.
  DecodeProblem g = shapes(8, 8, 64, 2, {300, 20});
  g.cache = CacheKind::Paged;
  g.page_size = 256;
  g.num_pages = 1 << 23;
  g.max_pages = 2;
  g.block_table = {(1 << 23) - 1, 1 << 14, (1 << 15) + 3, -1};
  CHECK(g.cache_elems() == DecodeLimits::kMaxCacheElems);
  CHECK(fa::validate(g).empty());
  CHECK(g.cache_row_offset(0, 257) == (std::int64_t{1 << 14} * 256 + 1) * 512);  // 2^31 + 512
  CHECK(g.cache_row_offset(0, 255) == (std::int64_t{(1 << 23) - 1} * 256 + 255) * 512);
  CHECK(g.cache_row_offset(1, 21) == (std::int64_t{(1 << 15) + 3} * 256 + 21) * 512);
  g.num_pages += 1;
  CHECK(fa::validate(g) ==
        "K/V cache size (num_pages * page_size * heads_kv * head_dim = 8388609 * 256 * 8 * 64 = "
        "1099511758848 elements) exceeds the decoding limit of 1099511627776 elements");

  // A pool row is a 32-bit int in the kernels: 2^31 rows at most (DecodeLimits::kMaxPoolRows),
  // here with H_kv · d = 64 so that the element limit does not bind first (2^37 elements).
  STATIC_REQUIRE(DecodeLimits::kMaxPoolRows == std::int64_t{1} << 31);
  DecodeProblem pool = shapes(8, 1, 64, 1, {40});
  pool.cache = CacheKind::Paged;
  pool.page_size = 16;
  pool.num_pages = 1 << 27;
  pool.max_pages = 3;
  pool.block_table = {(1 << 27) - 1, 0, 5};
  CHECK(fa::validate(pool).empty());
  CHECK(pool.cache_row_offset(0, 15) == (std::int64_t{(1 << 27) - 1} * 16 + 15) * 64);
  pool.num_pages += 1;
  CHECK(fa::validate(pool) ==
        "pool rows (num_pages * page_size = 134217729 * 16 = 2147483664) exceed the limit of "
        "2147483648 rows");

  // Q and O keep the forward steps' limit, 2^31 − 1 (q_len <= 16 keeps them small).
  DecodeProblem q = contiguous(shapes(1 << 20, 1, 128, 15, {0}), 16);
  CHECK(fa::validate(q).empty());  // 15 · 2^20 · 128 = 2013265920
  q.q_len = 16;
  CHECK(fa::validate(q) ==
        "Q/O size (batch * q_len * heads_q * head_dim = 1 * 16 * 1048576 * 128 = 2147483648 "
        "elements) exceeds the limit of 2147483647 elements");

  // Rows per sequence: positions stay 32-bit ints in the kernels, at most 2^30.
  DecodeProblem n = contiguous(shapes(2, 1, 64, 1, {5}), 1 << 30);
  CHECK(fa::validate(n).empty());
  n.n_max += 1;
  CHECK(fa::validate(n) == "n_max (1073741825) exceeds the limit of 1073741824 rows per sequence");
  DecodeProblem r = shapes(2, 1, 64, 1, {5});
  r.cache = CacheKind::Paged;
  r.page_size = 256;
  r.num_pages = 1;
  r.max_pages = 1 << 22;
  r.block_table.assign(std::size_t{1} << 22, -1);
  r.block_table[0] = 0;
  CHECK(fa::validate(r).empty());  // 2^22 pages of 256: 2^30 rows
  r.max_pages += 1;                // refused before the table's size is looked at
  CHECK(fa::validate(r) ==
        "max_pages * page_size (4194305 * 256 = 1073742080) exceeds the limit of 1073741824 rows "
        "per sequence");
  r.max_pages = std::numeric_limits<int>::max();  // the product in 64 bits, not wrapped
  CHECK(fa::validate(r) ==
        "max_pages * page_size (2147483647 * 256 = 549755813632) exceeds the limit of "
        "1073741824 rows per sequence");
}

TEST_CASE("decode: a far problem holds the small case's rows past element 2^31 and 2^32",
          "[decode]") {
  // What the GPU test [offsets] relies on (tests/decode_cases.h, far_problem): the far cache
  // is valid, every row of the small cache is in one span, each span's rows are where the far
  // problem's address map puts the same (sequence, position), and they lie past 2^31 and 2^32.
  constexpr std::int64_t k31 = std::int64_t{1} << 31, k32 = std::int64_t{1} << 32;
  for (int d : {64, 128}) {
    for (DecodeProblem small : {paged(shapes(8, 2, 64, 1, {300, 1000, 37}), 256, 51, 0),
                                paged(shapes(4, 4, 64, 3, {200, 65}), 16, 52, 0),
                                paged(shapes(8, 1, 64, 2, {129, 500}), 64, 53, 0),
                                contiguous(shapes(8, 2, 64, 2, {100, 700, 33}))}) {
      small.head_dim = d;
      INFO(small.describe());
      std::vector<fa::test::RowSpan> spans;
      const DecodeProblem far = fa::test::far_problem(small, &spans);
      REQUIRE(fa::validate(far).empty());
      const std::int64_t row = std::int64_t{small.heads_kv} * d;
      CHECK(far.cache_elems() > k32);
      // Every small row in exactly one span.
      std::vector<int> covered(small.cache_elems() / row, 0);
      for (const fa::test::RowSpan& sp : spans)
        for (std::int64_t r = 0; r < sp.rows; ++r) ++covered[sp.small + r];
      CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
      // Each sequence's rows, through both address maps, meet in a span.
      std::int64_t past31 = 0, past32 = 0;
      for (int b = 0; b < small.batch; ++b) {
        for (int pos = 0; pos < small.kv_len(b); ++pos) {
          const std::int64_t from = small.cache_row_offset(b, pos) / row;
          const std::int64_t to = far.cache_row_offset(b, pos) / row;
          const auto sp = std::find_if(spans.begin(), spans.end(), [&](const auto& x) {
            return from >= x.small && from < x.small + x.rows;
          });
          REQUIRE(sp != spans.end());
          CHECK(to == sp->far + (from - sp->small));
          past31 += to * row >= k31 && to * row < k32;
          past32 += to * row >= k32;
        }
      }
      CHECK(past31 > 0);
      CHECK(past32 > 0);
    }
  }
  // A small problem it cannot move: spare pages in the pool, or a single contiguous sequence.
  std::vector<fa::test::RowSpan> spans;
  CHECK_THROWS_AS(fa::test::far_problem(paged(shapes(2, 2, 64, 1, {40}), 16, 1, 3), &spans),
                  std::invalid_argument);
  CHECK_THROWS_AS(fa::test::far_problem(contiguous(shapes(2, 2, 64, 1, {40})), &spans),
                  std::invalid_argument);
}

TEST_CASE("decode: append, then attend, equals attending over the longer cache", "[decode]") {
  for (const Case& c : kCases) {
    for (bool is_paged : {false, true}) {
      CAPTURE(is_paged, c.q_len, c.hq, c.hkv, c.d);
      const DecodeProblem base = shapes(c.hq, c.hkv, c.d, c.q_len, c.lens);
      const DecodeProblem p = is_paged ? paged(base, 64, 3) : contiguous(base, 300);
      const DecodeData data = random_decode_data(p, 55);
      // The cache as it was before the step: cache_lens[b] rows; the rest NaN.
      HostKVCache cache = fill_cache(p, data, [&](int b) { return p.cache_lens[b]; });
      // This step's new K and V, [B, q_len, H_kv, d]: the last q_len rows of each sequence.
      const int row = p.heads_kv * p.head_dim;
      std::vector<float> k_new, v_new;
      for (int b = 0; b < p.batch; ++b) {
        const std::int64_t from = std::int64_t{p.cache_lens[b]} * row;
        k_new.insert(k_new.end(), data.k[b].begin() + from, data.k[b].end());
        v_new.insert(v_new.end(), data.v[b].begin() + from, data.v[b].end());
      }
      REQUIRE(static_cast<std::int64_t>(k_new.size()) == p.new_kv_elems());
      fa::append_kv(p, k_new.data(), v_new.data(), &cache);
      // Every row is where a cache filled with all rows has it, and nothing else changed.
      const HostKVCache longer = full_cache(p, data);
      CHECK(same(cache.k, longer.k));
      CHECK(same(cache.v, longer.v));
      const DecodeResult got = fa::ref::decode_attention(p, data.q.data(), cache);
      const DecodeResult want = forward_reference(p, data);
      REQUIRE(all_finite(got.o));
      CHECK(same(got.o, want.o));
      CHECK(same(got.lse, want.lse));
    }
  }
}

TEST_CASE("decode: a generation loop appends one token at a time", "[decode]") {
  // Three sequences grow from their prompts by 40 steps of q_len 1 through one paged cache of
  // page size 16 (pages crossed on the way); every step equals the forward reference.
  const std::vector<int> prompts = {0, 15, 33};
  DecodeProblem final_p = paged(shapes(4, 2, 16, 1, {40, 55, 73}), 16, 8);
  const DecodeData data = random_decode_data(final_p, 99);
  DecodeProblem p = final_p;
  p.cache_lens = prompts;
  HostKVCache cache = fill_cache(p, data, [&](int b) { return prompts[b]; });
  const int row = p.heads_kv * p.head_dim;
  for (int step = 0; step <= 40; ++step) {
    CAPTURE(step);
    std::vector<float> k_new, v_new;
    DecodeData seen;  // what each sequence holds after this step's append
    for (int b = 0; b < p.batch; ++b) {
      const std::int64_t at = std::int64_t{p.cache_lens[b]} * row;
      k_new.insert(k_new.end(), data.k[b].begin() + at, data.k[b].begin() + at + row);
      v_new.insert(v_new.end(), data.v[b].begin() + at, data.v[b].begin() + at + row);
      seen.k.emplace_back(data.k[b].begin(), data.k[b].begin() + at + row);
      seen.v.emplace_back(data.v[b].begin(), data.v[b].begin() + at + row);
    }
    seen.q.assign(data.q.begin(), data.q.end());
    fa::append_kv(p, k_new.data(), v_new.data(), &cache);
    const DecodeResult got = fa::ref::decode_attention(p, seen.q.data(), cache);
    const DecodeResult want = forward_reference(p, seen);
    CHECK(same(got.o, want.o));
    CHECK(same(got.lse, want.lse));
    if (step == 40) break;
    for (int& len : p.cache_lens) ++len;
  }
}

TEST_CASE("decode: bytes read count every attended K and V row once", "[decode]") {
  DecodeProblem p = contiguous(shapes(8, 2, 128, 3, {10, 100}), 200);
  p.dtype = fa::DType::BF16;
  // (13 + 103) rows · 2 heads · 128 · 2 (K and V) · 2 bytes
  CHECK(p.kv_bytes_read() == 116.0 * 2 * 128 * 2 * 2);
  CHECK(p.describe() == "B=2 Hq=8 Hkv=2 q_len=3 d=128 lens=[10,100] contiguous(N_max 200) bf16");
}

TEST_CASE(
    "decode: the GPU tests' case and verdict (decode_judge.h) pass the reference, fail errors",
    "[decode]") {
  for (fa::DType t : {fa::DType::F16, fa::DType::BF16}) {
    DecodeProblem p = paged(shapes(4, 2, 64, 3, {0, 70, 129}), 16, 51);
    p.dtype = t;
    INFO(p.describe());
    const fa::test::DecodeCase c = fa::test::make_case(p, 52);
    // The cache holds cache_lens[b] rows before the step, kv_len(b) after; NaN elsewhere.
    auto written = [](const std::vector<float>& x) {
      return std::count_if(x.begin(), x.end(), [](float v) { return !std::isnan(v); });
    };
    const std::int64_t row = std::int64_t{p.heads_kv} * p.head_dim;
    CHECK(written(c.before.k) == (0 + 70 + 129) * row);
    CHECK(written(c.after.v) == (3 + 73 + 132) * row);
    for (float x : c.q) CHECK(x == fa::round_to(t, x));

    // The reference's own answer, stored as a step stores it, passes.
    const DecodeResult ref = fa::ref::decode_attention(p, c.q.data(), c.after);
    fa::test::DecodeRun good;
    good.num_splits = 1;
    for (double x : ref.o) good.o.push_back(fa::round_to(t, static_cast<float>(x)));
    for (double x : ref.lse) good.lse.push_back(static_cast<float>(x));
    good.k = c.after.k;
    good.v = c.after.v;
    CHECK(fa::test::judge_case(c, good) == "");

    // Wrong answers fail, each with what is wrong.
    fa::test::DecodeRun bad = good;
    bad.o[bad.o.size() / 2] += 0.25f;
    CHECK(fa::test::judge_case(c, bad).find("sequence 1") != std::string::npos);
    bad = good;
    bad.o.back() = std::numeric_limits<float>::quiet_NaN();  // an element never written
    CHECK(fa::test::judge_case(c, bad).find("sequence 2") != std::string::npos);
    bad = good;
    bad.lse[0] += 0.01f;
    CHECK(fa::test::judge_case(c, bad).find("sequence 0") != std::string::npos);
    bad = good;
    bad.k = c.before.k;  // nothing appended
    CHECK(fa::test::judge_case(c, bad).find("K cache element") != std::string::npos);
    bad = good;
    const auto nan_at =
        std::find_if(c.after.v.begin(), c.after.v.end(), [](float v) { return std::isnan(v); });
    REQUIRE(nan_at != c.after.v.end());
    bad.v[nan_at - c.after.v.begin()] = 0.f;  // a row outside the step's written
    CHECK(fa::test::judge_case(c, bad).find("V cache element") != std::string::npos);
  }
}
