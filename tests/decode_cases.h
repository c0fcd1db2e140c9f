// decode_cases.h — the decoding problems the CPU tests of the reference (test_decode.cpp) and
// the GPU tests of the decoding steps (test_decode_gpu.cpp) share: a step's shapes, then a
// contiguous cache or a paged one with shuffled pages.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
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

}  // namespace fa::test
