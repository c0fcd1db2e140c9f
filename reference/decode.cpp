#include "reference/decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "reference/attention.h"
#include "reference/merge.h"

namespace fa::ref {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

DecodeResult empty_result(const DecodeProblem& p) {
  return {std::vector<double>(p.q_elems(), 0.0), std::vector<double>(p.lse_elems(), 0.0)};
}

}  // namespace

DecodeResult decode_attention(const DecodeProblem& p, const float* q, const HostKVCache& cache) {
  check_cache(p, cache);
  DecodeResult r = empty_result(p);
  const std::int64_t q_seq = std::int64_t{p.q_len} * p.heads_q * p.head_dim;  // Q of one b
  const std::int64_t l_seq = std::int64_t{p.heads_q} * p.q_len;               // L of one b
  for (int b = 0; b < p.batch; ++b) {
    const Problem dense = dense_problem(p, b);
    const std::vector<float> k = gather_rows(p, b, p.kv_len(b), cache.k.data());
    const std::vector<float> v = gather_rows(p, b, p.kv_len(b), cache.v.data());
    const Result one = attention(dense, q + b * q_seq, k.data(), v.data());
    std::copy(one.o.begin(), one.o.end(), r.o.begin() + b * q_seq);
    std::copy(one.lse.begin(), one.lse.end(), r.lse.begin() + b * l_seq);
  }
  return r;
}

DecodeResult decode_partial(const DecodeProblem& p, const float* q, const HostKVCache& cache,
                            int key_begin, int key_end) {
  check_cache(p, cache);
  if (key_begin < 0 || key_end < key_begin) {
    std::ostringstream os;
    os << "key range [" << key_begin << ", " << key_end << ") must have 0 <= begin <= end";
    throw std::invalid_argument(os.str());
  }
  DecodeResult r = empty_result(p);
  const int d = p.head_dim;
  const double scale = p.softmax_scale();
  std::vector<double> s, acc(d);
  for (int b = 0; b < p.batch; ++b) {
    const int n = p.kv_len(b);
    const std::vector<float> k = gather_rows(p, b, n, cache.k.data());
    const std::vector<float> v = gather_rows(p, b, n, cache.v.data());
    for (int h = 0; h < p.heads_q; ++h) {
      const int g = h / p.group_size();
      for (int i = 0; i < p.q_len; ++i) {
        // Query i sees positions [0, cache_lens[b] + i + 1); this split, [key_begin, key_end).
        const int lo = key_begin, hi = std::min(key_end, p.cache_lens[b] + i + 1);
        const std::int64_t row = (std::int64_t{b} * p.q_len + i) * p.heads_q + h;
        double& lse = r.lse[(std::int64_t{b} * p.heads_q + h) * p.q_len + i];
        if (hi <= lo) {  // nothing visible here: O = 0, L = -inf
          lse = kNegInf;
          continue;
        }
        const float* qi = q + row * d;
        s.assign(hi - lo, 0.0);
        double m = kNegInf;
        for (int j = lo; j < hi; ++j) {
          const float* kj = k.data() + (std::int64_t{j} * p.heads_kv + g) * d;
          double dot = 0;
          for (int t = 0; t < d; ++t) dot += double(qi[t]) * kj[t];
          s[j - lo] = scale * dot;
          m = std::max(m, s[j - lo]);  // a NaN score is skipped here but poisons l below
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = lo; j < hi; ++j) {
          const double e = std::exp(s[j - lo] - m);
          l += e;
          const float* vj = v.data() + (std::int64_t{j} * p.heads_kv + g) * d;
          for (int t = 0; t < d; ++t) acc[t] += e * vj[t];
        }
        for (int t = 0; t < d; ++t) r.o[row * d + t] = acc[t] / l;
        lse = m + std::log(l);
      }
    }
  }
  return r;
}

DecodeResult merge_splits(const DecodeProblem& p, const std::vector<DecodeResult>& parts) {
  const std::string error = validate(p);
  if (!error.empty()) throw std::invalid_argument(error);
  if (parts.empty()) throw std::invalid_argument("merge_splits: parts is empty (need at least 1)");
  for (std::size_t s = 0; s < parts.size(); ++s) {
    if (static_cast<std::int64_t>(parts[s].o.size()) != p.q_elems() ||
        static_cast<std::int64_t>(parts[s].lse.size()) != p.lse_elems()) {
      std::ostringstream os;
      os << "merge_splits: parts[" << s << "] has " << parts[s].o.size() << " O and "
         << parts[s].lse.size() << " L values; the problem has " << p.q_elems() << " and "
         << p.lse_elems();
      throw std::invalid_argument(os.str());
    }
  }
  DecodeResult r = empty_result(p);
  const int d = p.head_dim;
  std::vector<const double*> o(parts.size());
  std::vector<double> lse(parts.size());
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.q_len; ++i) {
        const std::int64_t row = (std::int64_t{b} * p.q_len + i) * p.heads_q + h;
        const std::int64_t li = (std::int64_t{b} * p.heads_q + h) * p.q_len + i;
        for (std::size_t s = 0; s < parts.size(); ++s) {
          o[s] = parts[s].o.data() + row * d;
          lse[s] = parts[s].lse[li];
        }
        r.lse[li] = merge_row(parts.size(), o.data(), lse.data(), d, r.o.data() + row * d);
      }
    }
  }
  return r;
}

DecodeResult split_kv_attention(const DecodeProblem& p, const float* q, const HostKVCache& cache,
                                int num_splits) {
  if (num_splits < 1) {
    std::ostringstream os;
    os << "num_splits (" << num_splits << ") must be at least 1";
    throw std::invalid_argument(os.str());
  }
  check_cache(p, cache);
  const std::int64_t n = p.max_kv_len();
  std::vector<DecodeResult> parts;
  parts.reserve(num_splits);
  for (int s = 0; s < num_splits; ++s) {
    const int begin = static_cast<int>(s * n / num_splits);
    const int end = static_cast<int>((s + 1) * n / num_splits);
    parts.push_back(decode_partial(p, q, cache, begin, end));
  }
  return merge_splits(p, parts);
}

}  // namespace fa::ref
