// test_variants_12.cpp — the split rule of bin/variants_12's configurations (wave_splits,
// steps/12_decode/variants/variants.h), on the CPU: at 2 blocks per SM it gives the registered
// candidate's split count on the decoding benchmark's shapes (so that the s3w4 row is a
// control of the registered one), at 3 it gives the grids the predictions in variants.cu count
// on, and it always stays within its bounds; the h23s row's choice of kernel (h23s_two_stages)
// and split count (h23s_splits) on those shapes and on forced counts.
#include <string>

#include "common/decode_registry.h"
#include "steps/12_decode/variants/variants.h"
#include "tests/catch.hpp"
#include "tests/decode_cases.h"

namespace {

using fa::DecodeProblem;
using fa::step12::h23s_splits;
using fa::step12::h23s_two_stages;
using fa::step12::wave_splits;

constexpr int kSms = 132;  // the H200's

DecodeProblem bench_shape(int batch, int heads_kv, int n) {
  std::vector<int> lens(batch, n - 1);
  DecodeProblem p = fa::test::contiguous(fa::test::shapes(32, heads_kv, 128, 1, lens));
  p.dtype = fa::DType::BF16;
  return p;
}

}  // namespace

TEST_CASE("wave_splits at 2 blocks per SM is the registered candidate's rule", "[variants_12]") {
  const fa::DecodeStepInfo* v2 = fa::find_decode_step("12_decode_v2");
  REQUIRE(v2 != nullptr);
  for (int batch : {1, 8, 32})
    for (int heads_kv : {32, 8})
      for (int n : {4096, 16384, 32768}) {
        const DecodeProblem p = bench_shape(batch, heads_kv, n);
        INFO(p.describe());
        CHECK(wave_splits(p, kSms, 8, 64, 2) == v2->num_splits(p, kSms));
      }
}

TEST_CASE("wave_splits fills 3 blocks per SM, and 1 of 128-key tiles", "[variants_12]") {
  // s2w4 (variants.cu): B = 8, MHA, 16k in 3 splits of 86 tiles (768 blocks, two waves of
  // 396 places); B = 1, 16k: MHA in 12 splits, GQA 32/8 in 43 of 6 tiles.
  CHECK(wave_splits(bench_shape(8, 32, 16384), kSms, 8, 64, 3) == 3);
  CHECK(wave_splits(bench_shape(1, 32, 16384), kSms, 8, 64, 3) == 12);
  CHECK(wave_splits(bench_shape(1, 8, 16384), kSms, 8, 64, 3) == 43);
  CHECK(wave_splits(bench_shape(8, 8, 16384), kSms, 8, 64, 3) == 6);
  // s2w8 and s3w8: one block per SM, tiles of 128 keys.
  CHECK(wave_splits(bench_shape(8, 32, 16384), kSms, 8, 128, 1) == 1);
  CHECK(wave_splits(bench_shape(1, 32, 16384), kSms, 8, 128, 1) == 4);
  CHECK(wave_splits(bench_shape(1, 8, 16384), kSms, 8, 128, 1) == 16);
}

TEST_CASE("wave_splits stays within 1 .. kMaxSplits, 2 tiles per split at the least",
          "[variants_12]") {
  for (int n : {1, 2, 63, 64, 65, 129, 1000, 16384, 100000})
    for (int slots : {0, 1, 2, 3, 8})
      for (int block_n : {64, 128}) {
        const DecodeProblem p = bench_shape(1, 1, n);
        const int s = wave_splits(p, kSms, 8, block_n, slots);
        const int tiles = (n + block_n - 1) / block_n;
        INFO("n " << n << ", slots " << slots << ", block_n " << block_n << ": " << s);
        CHECK(s >= 1);
        CHECK(s <= 128);
        CHECK((s == 1 || tiles / s >= 2));
      }
}

TEST_CASE("h23s takes m2w4s where its rule gives 8 tiles per split, else m3w4s", "[variants_12]") {
  struct Want {
    int batch, heads_kv, n, splits;
    bool two_stages;
  };
  // variants.cu's h23s: m3w4s at B = 1 MHA 4k (m2w4s's 11 splits would get 6 tiles), GQA 4k
  // (32 of 2) and 16k (43 of 6); m2w4s at B = 1 MHA 16k (12 of 22) and at B = 8.
  const Want wants[] = {{1, 32, 4096, 8, false},  {1, 32, 16384, 12, true}, {1, 8, 4096, 32, false},
                        {1, 8, 16384, 32, false}, {8, 32, 4096, 3, true},   {8, 32, 16384, 3, true},
                        {8, 8, 4096, 6, true},    {8, 8, 16384, 6, true}};
  for (const Want& w : wants) {
    const DecodeProblem p = bench_shape(w.batch, w.heads_kv, w.n);
    INFO(p.describe());
    const int s = h23s_splits(p, kSms);
    CHECK(s == w.splits);
    CHECK(h23s_two_stages(p, kSms, s) == w.two_stages);
    if (!w.two_stages) CHECK(s == wave_splits(p, kSms, 16, 64, 2));
  }
}

TEST_CASE("h23s judges a forced split count by its tiles per split, never below m2w4s's rule",
          "[variants_12]") {
  const DecodeProblem gqa = bench_shape(1, 8, 16384);   // 256 tiles, m2w4s's rule: 43 splits
  CHECK_FALSE(h23s_two_stages(gqa, kSms, 43));          // 6 tiles each
  CHECK_FALSE(h23s_two_stages(gqa, kSms, 32));          // 8 each, but fewer than 43 (m2w4s2)
  const DecodeProblem mha = bench_shape(8, 32, 16384);  // m2w4s's rule: 3 splits
  CHECK_FALSE(h23s_two_stages(mha, kSms, 1));           // m2w4s2's grid
  CHECK_FALSE(h23s_two_stages(mha, kSms, 2));
  CHECK(h23s_two_stages(mha, kSms, 3));
  CHECK(h23s_two_stages(mha, kSms, 33));              // 8 tiles each
  CHECK_FALSE(h23s_two_stages(mha, kSms, 37));        // 7
  const DecodeProblem tiny = bench_shape(1, 1, 150);  // 3 tiles: m2w4s's rule gives 1 split
  CHECK(h23s_two_stages(tiny, kSms, 1));
  CHECK_FALSE(h23s_two_stages(tiny, kSms, 3));
  // Whatever the count, h23s_splits's is one the choice keeps to the kernel it was counted for.
  for (int batch : {1, 2, 8, 32})
    for (int heads_kv : {32, 8, 1})
      for (int n : {1, 100, 1000, 4096, 16384, 65536}) {
        const DecodeProblem p = bench_shape(batch, heads_kv, n);
        INFO(p.describe());
        const int three = wave_splits(p, kSms, 16, 64, 3);
        const bool two = h23s_two_stages(p, kSms, three);
        CHECK(h23s_splits(p, kSms) == (two ? three : wave_splits(p, kSms, 16, 64, 2)));
        CHECK(h23s_two_stages(p, kSms, h23s_splits(p, kSms)) == two);
      }
}
