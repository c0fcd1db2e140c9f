// decode_cases.h — the decoding problems the CPU tests of the reference (test_decode.cpp) and
// the GPU tests of the decoding steps (test_decode_gpu.cpp) share: a step's shapes, then a
// contiguous cache or a paged one with shuffled pages; and the same problem with its cache
// rows moved past element 2^31 and 2^32 of a far larger cache (far_problem).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/decode.h"

namespace fa::test {

/// A step's shapes; the cache is chosen by contiguous() or paged().
inline DecodeProblem shapes(int hq, int hkv, int d, int q_len, std::vector<int> lens) {
  DecodeProblem p;
  p.batch = static_cast<int>(lens.size());
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  p.q_len = q_len;
  p.cache_lens = std::move(lens);
  return p;
}

/// A contiguous cache of `n_max` rows per sequence (0: exactly the longest sequence).
inline DecodeProblem contiguous(DecodeProblem p, int n_max = 0) {
  p.cache = CacheKind::Contiguous;
  p.n_max = n_max > 0 ? n_max : p.max_kv_len();
  return p;
}

/// A paged cache: every sequence gets the pages it needs, drawn from a pool with `spare` extra
/// pages, all in shuffled order (seeded); unused table entries hold -1.
inline DecodeProblem paged(DecodeProblem p, int page_size, std::uint64_t seed, int spare = 3) {
  p.cache = CacheKind::Paged;
  p.page_size = page_size;
  std::vector<int> need(p.batch);
  int total = 0;
  for (int b = 0; b < p.batch; ++b) {
    need[b] = (p.kv_len(b) + page_size - 1) / page_size;
    total += need[b];
    p.max_pages = std::max(p.max_pages, need[b]);
  }
  p.num_pages = total + spare;
  std::vector<int> pool(p.num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  p.block_table.assign(std::size_t(p.batch) * p.max_pages, -1);
  int next = 0;
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < need[b]; ++j) p.block_table[b * p.max_pages + j] = pool[next++];
  return p;
}

/// Where rows of a small case's cache lie in a far problem's cache (far_problem()): `rows`
/// consecutive cache rows at row `small` of the one and row `far` of the other.
struct RowSpan {
  std::int64_t small = 0;  ///< the first row in the small cache
  std::int64_t far = 0;    ///< the first row in the far cache
  std::int64_t rows = 0;   ///< how many
};

/// `small` with its cache rows moved past element 2^31 and 2^32 of a much larger cache, so that
/// a step run on it must address the cache with 64-bit offsets, while the host keeps only
/// small's cache (the reference and the judge stay cheap). The same sequences, heads, d, q_len,
/// dtype and cache kind:
///   contiguous  N_max = 2^31 / (H_kv · d) + 1 rows per sequence, so sequence 1 starts past
///               element 2^31 and sequence 2 (batch >= 3) past 2^32;
///   paged       the same page size, a pool past 2^32 elements, and the used pages sent in turn
///               to the first pages past element 2^31, the first past 2^32, and the pool's last
///               pages (small's pool must be exactly the pages its table uses: paged(…, 0)).
/// `spans` receives, for every row of small's cache, where it lies in the far one: every row
/// of small's cache is in exactly one span. std::invalid_argument if small does not qualify.
inline DecodeProblem far_problem(const DecodeProblem& small, std::vector<RowSpan>* spans) {
  const std::string error = validate(small);
  if (!error.empty()) throw std::invalid_argument(error);
  const std::int64_t row_elems = std::int64_t{small.heads_kv} * small.head_dim;
  constexpr std::int64_t k31 = std::int64_t{1} << 31, k32 = std::int64_t{1} << 32;
  DecodeProblem far = small;
  spans->clear();
  if (small.cache == CacheKind::Contiguous) {
    if (small.batch < 2)
      throw std::invalid_argument("far_problem: a contiguous cache needs batch >= 2");
    far.n_max = static_cast<int>(std::max<std::int64_t>(small.n_max, k31 / row_elems + 1));
    for (int b = 0; b < small.batch; ++b)
      spans->push_back({std::int64_t{b} * small.n_max, std::int64_t{b} * far.n_max, small.n_max});
    return far;
  }
  const int ps = small.page_size;
  const std::int64_t page_elems = row_elems * ps;
  std::vector<std::pair<int, int>> used;  // (b, j) of every page a sequence uses
  for (int b = 0; b < small.batch; ++b)
    for (int j = 0; j < (small.kv_len(b) + ps - 1) / ps; ++j) used.emplace_back(b, j);
  const auto n = static_cast<std::int64_t>(used.size());
  const std::int64_t base31 = k31 / page_elems + 1, base32 = k32 / page_elems + 1;
  if (small.num_pages != n || base31 + n >= base32)
    throw std::invalid_argument(
        "far_problem: the small pool must be exactly its used pages, and few of them");
  far.num_pages = static_cast<int>(base32 + n + 2);
  far.block_table.assign(small.block_table.size(), -1);
  std::vector<int> seen(small.num_pages, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t at = std::int64_t{used[i].first} * small.max_pages + used[i].second;
    const std::int64_t k = i / 3;
    const std::int64_t page = i % 3 == 0   ? base31 + k
                              : i % 3 == 1 ? base32 + k
                                           : far.num_pages - 1 - k;
    far.block_table[at] = static_cast<int>(page);
    const int from = small.block_table[at];
    if (seen[from]++ > 0) throw std::invalid_argument("far_problem: a small page is used twice");
    spans->push_back({std::int64_t{from} * ps, page * ps, ps});
  }
  return far;
}

}  // namespace fa::test
