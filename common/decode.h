/// \file decode.h
/// \brief A decoding step: a few new query tokens per sequence against that sequence's cache
/// of keys and values, the cache contiguous or paged (host-only, like problem.h).
///
/// ```text
///   Q  [B, q_len, H_q, d]          this step's q_len new tokens of every sequence
///   O  [B, q_len, H_q, d]          like Q
///   L  [B, H_q, q_len]             fp32, the row logsumexp (natural log)
///   contiguous cache  K, V  [B, N_max, H_kv, d]
///   paged cache       K, V  [num_pages, page_size, H_kv, d]  (the pool)
///                     block_table [B, max_pages]: page j of sequence b is pool page
///                     block_table[b · max_pages + j]; pages may lie in any order
/// ```
///
/// Sequence b holds `cache_lens[b]` keys before the step. The step first appends its q_len new
/// keys and values at positions cache_lens[b] .. cache_lens[b] + q_len − 1 (append_kv), then
/// each new query i (0 <= i < q_len) attends to positions [0, cache_lens[b] + i + 1): causal,
/// bottom-right aligned among the new tokens, exactly as fa::Problem with N_q = q_len and
/// N_kv = cache_lens[b] + q_len (dense_problem()). GQA as in problem.h: query head h reads
/// key/value head h / (H_q / H_kv).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"

namespace fa {

/// \brief How the keys and values of every sequence are stored.
enum class CacheKind {
  Contiguous,  ///< [B, N_max, H_kv, d]: one slab of N_max rows per sequence
  Paged,       ///< a pool of pages [num_pages, page_size, H_kv, d] and a block table
};
/// \brief "contiguous" or "paged". \param c a cache kind \return its name, a static string
const char* cache_kind_name(CacheKind c);

/// \brief The limits of a decoding step.
struct DecodeLimits {
  static constexpr int kMinQLen = 1;        ///< fewest new tokens per sequence and step
  static constexpr int kMaxQLen = 16;       ///< most new tokens per sequence and step
  static constexpr int kMinPageSize = 16;   ///< smallest page, in rows (tokens)
  static constexpr int kMaxPageSize = 256;  ///< largest page, in rows (tokens)
  /// The most elements of the K cache (and of the V cache): B·N_max·H_kv·d, or
  /// num_pages·page_size·H_kv·d for a pool. The kernels address the cache with 64-bit element
  /// offsets, computed from a 64-bit row base, so this is not the forward steps' 32-bit
  /// Limits::kMaxElems: 2^40 (2 TiB of fp16 per cache) keeps every offset, and every byte
  /// count the host makes of it, far inside 64 bits, and is above any GPU's memory.
  static constexpr std::int64_t kMaxCacheElems = std::int64_t{1} << 40;
  /// The most rows one sequence can hold (N_max, or max_pages·page_size). Positions within a
  /// sequence stay 32-bit ints in the kernels (tiles, masks, page columns); 2^30 leaves room
  /// past the last position for a tile of up to kMaxPageSize keys without overflow.
  static constexpr int kMaxSequenceRows = 1 << 30;
  /// The most rows of a paged pool (num_pages·page_size): a pool row is a 32-bit int in the
  /// kernels (its element offset 64-bit), the last one 2^31 − 1. At 2 bytes and the smallest
  /// row (H_kv·d = 64) that is 256 GiB per cache, past any GPU's memory: it never binds in use.
  static constexpr std::int64_t kMaxPoolRows = std::int64_t{1} << 31;
};

/// \brief A decoding step: the shapes, the per-sequence cache lengths and the cache.
struct DecodeProblem {
  int batch = 1;                ///< B, sequences
  int heads_q = 1;              ///< H_q, query (and output) heads
  int heads_kv = 1;             ///< H_kv, key/value heads; H_q must be a multiple of it
  int head_dim = 64;            ///< d
  int q_len = 1;                ///< new tokens of every sequence in this step, 1..16
  float scale = 0.f;            ///< softmax scale; 0 means 1/sqrt(d)
  DType dtype = DType::F32;     ///< element type of Q, O and the cache
  std::vector<int> cache_lens;  ///< B entries: keys already in the cache before the step

  CacheKind cache = CacheKind::Contiguous;  ///< which of the two storages below
  int n_max = 0;      ///< contiguous: rows per sequence (the cache's capacity)
  int page_size = 0;  ///< paged: rows per page, 16..256
  int num_pages = 0;  ///< paged: pages in the pool
  int max_pages = 0;  ///< paged: columns of the block table
  /// paged: [B, max_pages] pool page indices. Entries past the pages a sequence uses
  /// (kv_len(b) rows) are never read and may hold anything (e.g. −1). Sequences may share a
  /// page they only read; a page the step appends into must appear once in the table.
  std::vector<int> block_table;

  /// \brief The scale actually used: `scale` if set, else 1/sqrt(d). \return the scale
  float softmax_scale() const;
  /// \brief H_q / H_kv. \return the group size, >= 1
  int group_size() const { return heads_q / heads_kv; }
  /// \brief Keys sequence b attends to in this step. \param b a sequence
  /// \return cache_lens[b] + q_len
  int kv_len(int b) const { return cache_lens[b] + q_len; }
  /// \brief The largest kv_len() over the batch. \return max_b kv_len(b)
  int max_kv_len() const;
  /// \brief Rows one sequence can hold: N_max, or max_pages · page_size.
  /// \return the capacity per sequence
  int capacity() const;
  /// \brief Element count of Q (and of O). \return B·q_len·H_q·d
  std::int64_t q_elems() const;
  /// \brief L is [B, H_q, q_len] fp32. \return B·H_q·q_len
  std::int64_t lse_elems() const;
  /// \brief Element count of the new K (and V) of one step, [B, q_len, H_kv, d].
  /// \return B·q_len·H_kv·d
  std::int64_t new_kv_elems() const;
  /// \brief Element count of the K cache (and of the V cache).
  /// \return B·N_max·H_kv·d or num_pages·page_size·H_kv·d
  std::int64_t cache_elems() const;
  /// \brief Where row `pos` of sequence b, key/value head 0, lies in the K (or V) cache;
  /// head g follows at + g·d. The problem must be valid and pos < capacity() (for a paged
  /// cache, pos within the pages the block table gives the sequence).
  /// \param b a sequence \param pos a position in it \return the element offset
  std::int64_t cache_row_offset(int b, int pos) const;
  /// \brief The bytes a decoding step must read from the cache: every attended K and V row
  /// once, Σ_b kv_len(b) · H_kv · d · 2 · element size. Q, O and L are not counted.
  /// \return the byte count
  double kv_bytes_read() const;
  /// \brief One line such as "B=2 Hq=8 Hkv=2 q_len=1 d=64 lens=[5,300] paged(64 x 20) fp16".
  /// \return the description
  std::string describe() const;
};

/// \brief Checks everything before anything runs. Returns "" when valid, otherwise one message
/// that names the parameter, its value and the limit, e.g. "q_len (17) must be in [1, 16]" or
/// "block_table[1][2] (70) is out of range [0, 64) (num_pages)".
/// \param p the decoding step \return "" or the message
std::string validate(const DecodeProblem& p);

/// \brief The equivalent forward problem of sequence b: one batch, N_q = q_len,
/// N_kv = kv_len(b), causal (bottom-right), BNHD, with p's heads, d, scale and dtype.
/// \param p the decoding step \param b a sequence \return the problem
Problem dense_problem(const DecodeProblem& p, int b);

/// \brief A cache of p's shape on the host, filled with NaN: a row read before it was written
/// turns the outputs that depend on it into NaN instead of passing unnoticed.
struct HostKVCache {
  ///@{
  /// K and V, p.cache_elems() floats each.
  std::vector<float> k, v;
  ///@}
};
/// \brief An empty (NaN-filled) cache for p. \param p a valid step (std::invalid_argument
/// otherwise) \return the cache
HostKVCache make_cache(const DecodeProblem& p);
/// \brief Throws std::invalid_argument (validate()'s message, or the sizes) unless p is valid
/// and `cache` holds p.cache_elems() elements of K and of V.
/// \param p the step \param cache the cache
void check_cache(const DecodeProblem& p, const HostKVCache& cache);

/// \brief What a serving engine does before attending: writes this step's new keys and
/// values, [B, q_len, H_kv, d] each, into the cache at positions cache_lens[b] ..
/// cache_lens[b] + q_len − 1 of every sequence b. Nothing else of the cache changes.
/// \param p the step; validated first (std::invalid_argument with validate()'s message)
/// \param k_new new keys \param v_new new values
/// \param cache receives them (its sizes must be p.cache_elems(), std::invalid_argument
/// otherwise)
void append_kv(const DecodeProblem& p, const float* k_new, const float* v_new, HostKVCache* cache);

/// \brief Copies the first `rows` rows of sequence b out of a K (or V) cache into a dense
/// [rows, H_kv, d] tensor, page by page for a paged cache.
/// \param p a valid step \param b a sequence \param rows rows to copy, <= kv_len(b)
/// \param cache the K or V cache \return the rows
std::vector<float> gather_rows(const DecodeProblem& p, int b, int rows, const float* cache);

}  // namespace fa
