#include "common/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace fa {

const char* cache_kind_name(CacheKind c) {
  return c == CacheKind::Contiguous ? "contiguous" : "paged";
}

float DecodeProblem::softmax_scale() const {
  return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(head_dim));
}

int DecodeProblem::max_kv_len() const {
  int m = 0;
  for (int b = 0; b < batch; ++b) m = std::max(m, kv_len(b));
  return m;
}

int DecodeProblem::capacity() const {
  return cache == CacheKind::Contiguous ? n_max : max_pages * page_size;
}

std::int64_t DecodeProblem::q_elems() const {
  return std::int64_t{batch} * q_len * heads_q * head_dim;
}
std::int64_t DecodeProblem::lse_elems() const { return std::int64_t{batch} * heads_q * q_len; }
std::int64_t DecodeProblem::new_kv_elems() const {
  return std::int64_t{batch} * q_len * heads_kv * head_dim;
}
std::int64_t DecodeProblem::cache_elems() const {
  const std::int64_t rows = cache == CacheKind::Contiguous ? std::int64_t{batch} * n_max
                                                           : std::int64_t{num_pages} * page_size;
  return rows * heads_kv * head_dim;
}

std::int64_t DecodeProblem::cache_row_offset(int b, int pos) const {
  const std::int64_t row_elems = std::int64_t{heads_kv} * head_dim;
  if (cache == CacheKind::Contiguous) return (std::int64_t{b} * n_max + pos) * row_elems;
  const int page = block_table[std::int64_t{b} * max_pages + pos / page_size];
  return (std::int64_t{page} * page_size + pos % page_size) * row_elems;
}

double DecodeProblem::kv_bytes_read() const {
  double rows = 0;
  for (int b = 0; b < batch; ++b) rows += kv_len(b);
  return rows * heads_kv * head_dim * 2.0 * double(dtype_size(dtype));
}

std::string DecodeProblem::describe() const {
  std::ostringstream os;
  os << "B=" << batch << " Hq=" << heads_q << " Hkv=" << heads_kv << " q_len=" << q_len
     << " d=" << head_dim << " lens=[";
  for (std::size_t b = 0; b < cache_lens.size(); ++b) os << (b ? "," : "") << cache_lens[b];
  os << "] ";
  if (cache == CacheKind::Contiguous)
    os << "contiguous(N_max " << n_max << ")";
  else
    os << "paged(" << page_size << " x " << num_pages << ")";
  os << ' ' << dtype_name(dtype);
  return os.str();
}

namespace {

/// Pages a sequence of `rows` rows occupies (in 64 bits: rows may be near INT_MAX).
int pages_for(int rows, int page_size) {
  return static_cast<int>((std::int64_t{rows} + page_size - 1) / page_size);
}

std::string validate_cache(const DecodeProblem& p) {
  std::ostringstream os;
  if (p.cache == CacheKind::Contiguous) {
    if (p.n_max < 1) {
      os << "n_max (" << p.n_max << ") must be at least 1";
      return os.str();
    }
    if (p.n_max > DecodeLimits::kMaxSequenceRows) {
      os << "n_max (" << p.n_max << ") exceeds the limit of " << DecodeLimits::kMaxSequenceRows
         << " rows per sequence";
      return os.str();
    }
    for (int b = 0; b < p.batch; ++b) {
      if (p.kv_len(b) > p.n_max) {
        os << "cache_lens[" << b << "] + q_len (" << p.cache_lens[b] << " + " << p.q_len << " = "
           << p.kv_len(b) << ") exceeds n_max (" << p.n_max << ")";
        return os.str();
      }
    }
    return {};
  }
  if (p.page_size < DecodeLimits::kMinPageSize || p.page_size > DecodeLimits::kMaxPageSize) {
    os << "page_size (" << p.page_size << ") must be in [" << DecodeLimits::kMinPageSize << ", "
       << DecodeLimits::kMaxPageSize << "]";
    return os.str();
  }
  if (p.num_pages < 1) {
    os << "num_pages (" << p.num_pages << ") must be at least 1";
    return os.str();
  }
  if (p.max_pages < 1) {
    os << "max_pages (" << p.max_pages << ") must be at least 1";
    return os.str();
  }
  if (const std::int64_t rows = std::int64_t{p.max_pages} * p.page_size;
      rows > DecodeLimits::kMaxSequenceRows) {
    os << "max_pages * page_size (" << p.max_pages << " * " << p.page_size << " = " << rows
       << ") exceeds the limit of " << DecodeLimits::kMaxSequenceRows << " rows per sequence";
    return os.str();
  }
  return {};
}

// The sizes of Q/O (the forward steps' 32-bit limit: q_len <= 16 keeps them small) and of the
// cache (its own, 64-bit limit), each named with the product it is.
std::string validate_sizes(const DecodeProblem& p) {
  std::ostringstream os;
  if (const std::int64_t q = p.q_elems(); q > Limits::kMaxElems) {
    os << "Q/O size (batch * q_len * heads_q * head_dim = " << p.batch << " * " << p.q_len << " * "
       << p.heads_q << " * " << p.head_dim << " = " << q << " elements) exceeds the "
       << "limit of " << Limits::kMaxElems << " elements";
    return os.str();
  }
  if (const std::int64_t kv = p.cache_elems(); kv > DecodeLimits::kMaxCacheElems) {
    if (p.cache == CacheKind::Contiguous)
      os << "K/V cache size (batch * n_max * heads_kv * head_dim = " << p.batch << " * " << p.n_max;
    else
      os << "K/V cache size (num_pages * page_size * heads_kv * head_dim = " << p.num_pages << " * "
         << p.page_size;
    os << " * " << p.heads_kv << " * " << p.head_dim << " = " << kv << " elements) exceeds the "
       << "decoding limit of " << DecodeLimits::kMaxCacheElems << " elements";
    return os.str();
  }
  // A pool row is a 32-bit int in the kernels (DecodeLimits::kMaxPoolRows).
  if (p.cache == CacheKind::Paged) {
    if (const std::int64_t rows = std::int64_t{p.num_pages} * p.page_size;
        rows > DecodeLimits::kMaxPoolRows) {
      os << "pool rows (num_pages * page_size = " << p.num_pages << " * " << p.page_size << " = "
         << rows << ") exceed the limit of " << DecodeLimits::kMaxPoolRows << " rows";
      return os.str();
    }
  }
  return {};
}

// The block table of a paged cache (its scalars and the tensor sizes already checked).
std::string validate_block_table(const DecodeProblem& p) {
  std::ostringstream os;
  const std::int64_t entries = std::int64_t{p.batch} * p.max_pages;
  if (static_cast<std::int64_t>(p.block_table.size()) != entries) {
    os << "block_table has " << p.block_table.size() << " entries; batch * max_pages is "
       << entries;
    return os.str();
  }
  for (int b = 0; b < p.batch; ++b) {
    const int need = pages_for(p.kv_len(b), p.page_size);
    if (need > p.max_pages) {
      os << "cache_lens[" << b << "] + q_len (" << p.cache_lens[b] << " + " << p.q_len << " = "
         << p.kv_len(b) << ") needs " << need << " pages of " << p.page_size
         << " rows, more than max_pages (" << p.max_pages << ")";
      return os.str();
    }
    for (int j = 0; j < need; ++j) {
      const int page = p.block_table[std::int64_t{b} * p.max_pages + j];
      if (page < 0 || page >= p.num_pages) {
        os << "block_table[" << b << "][" << j << "] (" << page << ") is out of range [0, "
           << p.num_pages << ") (num_pages)";
        return os.str();
      }
    }
  }
  // Two sequences may share a page they only read (a common prefix), but a page this step
  // appends into must belong to one sequence alone, or one append overwrites another's rows.
  // The used entries, sorted, count each page's uses: memory in the table's size, not the
  // pool's (a pool may hold up to DecodeLimits::kMaxCacheElems elements).
  std::vector<int> used;
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < pages_for(p.kv_len(b), p.page_size); ++j)
      used.push_back(p.block_table[std::int64_t{b} * p.max_pages + j]);
  std::sort(used.begin(), used.end());
  for (int b = 0; b < p.batch; ++b) {
    for (int j = p.cache_lens[b] / p.page_size; j < pages_for(p.kv_len(b), p.page_size); ++j) {
      const int page = p.block_table[std::int64_t{b} * p.max_pages + j];
      const auto uses = std::upper_bound(used.begin(), used.end(), page) -
                        std::lower_bound(used.begin(), used.end(), page);
      if (uses > 1) {
        os << "block_table[" << b << "][" << j << "] (" << page << ") is used " << uses
           << " times in the table, but this step appends into it (a written page must belong "
           << "to one sequence)";
        return os.str();
      }
    }
  }
  return {};
}

void check(const DecodeProblem& p) {
  const std::string error = validate(p);
  if (!error.empty()) throw std::invalid_argument(error);
}

}  // namespace

std::string validate(const DecodeProblem& p) {
  // The shapes a forward problem shares with it: batch, heads, head_dim, scale.
  Problem shapes = make_problem(p.batch, p.heads_q, p.heads_kv, 1, 1, p.head_dim);
  shapes.scale = p.scale;
  if (std::string error = validate(shapes); !error.empty()) return error;
  std::ostringstream os;
  if (p.q_len < DecodeLimits::kMinQLen || p.q_len > DecodeLimits::kMaxQLen) {
    os << "q_len (" << p.q_len << ") must be in [" << DecodeLimits::kMinQLen << ", "
       << DecodeLimits::kMaxQLen << "]";
    return os.str();
  }
  if (static_cast<std::int64_t>(p.cache_lens.size()) != p.batch) {
    os << "cache_lens has " << p.cache_lens.size() << " entries; batch is " << p.batch;
    return os.str();
  }
  for (int b = 0; b < p.batch; ++b) {
    if (p.cache_lens[b] < 0) {
      os << "cache_lens[" << b << "] (" << p.cache_lens[b] << ") must be >= 0";
      return os.str();
    }
    if (p.cache_lens[b] > std::numeric_limits<int>::max() - p.q_len) {
      os << "cache_lens[" << b << "] (" << p.cache_lens[b] << ") + q_len exceeds "
         << std::numeric_limits<int>::max();
      return os.str();
    }
  }
  if (std::string cache = validate_cache(p); !cache.empty()) return cache;
  if (std::string sizes = validate_sizes(p); !sizes.empty()) return sizes;
  return p.cache == CacheKind::Paged ? validate_block_table(p) : std::string();
}

Problem dense_problem(const DecodeProblem& p, int b) {
  Problem d = make_problem(1, p.heads_q, p.heads_kv, p.q_len, p.kv_len(b), p.head_dim,
                           /*causal=*/true, Layout::BNHD);
  d.scale = p.scale;
  d.dtype = p.dtype;
  return d;
}

HostKVCache make_cache(const DecodeProblem& p) {
  check(p);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {std::vector<float>(p.cache_elems(), nan), std::vector<float>(p.cache_elems(), nan)};
}

void check_cache(const DecodeProblem& p, const HostKVCache& cache) {
  check(p);
  const std::int64_t want = p.cache_elems();
  if (static_cast<std::int64_t>(cache.k.size()) != want ||
      static_cast<std::int64_t>(cache.v.size()) != want) {
    std::ostringstream os;
    os << "cache holds " << cache.k.size() << " K and " << cache.v.size()
       << " V elements; the problem needs " << want << " each";
    throw std::invalid_argument(os.str());
  }
}

void append_kv(const DecodeProblem& p, const float* k_new, const float* v_new, HostKVCache* cache) {
  check_cache(p, *cache);
  const std::int64_t row = std::int64_t{p.heads_kv} * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int i = 0; i < p.q_len; ++i) {
      const std::int64_t src = (std::int64_t{b} * p.q_len + i) * row;
      const std::int64_t dst = p.cache_row_offset(b, p.cache_lens[b] + i);
      std::copy(k_new + src, k_new + src + row, cache->k.begin() + dst);
      std::copy(v_new + src, v_new + src + row, cache->v.begin() + dst);
    }
  }
}

std::vector<float> gather_rows(const DecodeProblem& p, int b, int rows, const float* cache) {
  check(p);
  if (b < 0 || b >= p.batch || rows < 0 || rows > p.kv_len(b)) {
    std::ostringstream os;
    os << "gather_rows: sequence " << b << " (batch " << p.batch << "), rows " << rows
       << " (kv_len " << (b >= 0 && b < p.batch ? p.kv_len(b) : 0) << ") out of range";
    throw std::invalid_argument(os.str());
  }
  const std::int64_t row = std::int64_t{p.heads_kv} * p.head_dim;
  std::vector<float> out(rows * row);
  for (int pos = 0; pos < rows; ++pos) {
    const float* src = cache + p.cache_row_offset(b, pos);
    std::copy(src, src + row, out.begin() + pos * row);
  }
  return out;
}

}  // namespace fa
