// decode_timing.h — how the decoding programs (bin/bench_decode, bin/variants_12) make a
// decoding step's inputs and time its attention: the shapes of serving (make_decode), random
// device tensors made once per problem (decode_inputs_for) and the timed loop
// (time_decode_attention), so that every decoding figure comes from the same code.
#pragma once

#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/device_buffer.h"
#include "common/device_problem.h"  // DecodeBuffers
#include "steps/harness/hbm.h"      // HbmWait

namespace fa::bench {

/// \brief The shapes the decoding programs time, set by add_decode_shape_options().
struct DecodeShapeOptions {
  std::vector<int> batches;     ///< batch sizes B
  std::vector<int> caches;      ///< cache lengths N (keys each sequence attends to)
  std::vector<int> heads_kv;    ///< K/V heads H_kv
  std::vector<int> page_sizes;  ///< page sizes of the paged cache (contiguous is always timed)
  int heads_q = 32;             ///< query heads H_q
};

/// \brief How they time them, set by add_decode_run_options().
struct DecodeRunOptions {
  int reps = 20;                    ///< timed calls per row
  int warmup = 3;                   ///< untimed calls per row first
  int hbm_gib = 4;                  ///< GiB read by the HBM bandwidth measurement
  int hbm_reps = 20;                ///< its timed runs
  int max_cache_gib = 40;           ///< the largest K and V caches, together
  long long spin_cycles = 1000000;  ///< the GPU spin before each timed call
  bool no_hbm_wait = false;  ///< new inputs do not wait for HBM reads at speed (decode_inputs_for)
};

/// \brief Adds --batches, --caches, --heads-q, --heads-kv and --page-sizes, each with its
/// validator, their defaults o's. \param app the command line \param o the options
void add_decode_shape_options(CLI::App& app, DecodeShapeOptions& o);

/// \brief Adds --reps, --warmup, --hbm-gib, --hbm-reps, --max-cache-gib,
/// --queue-ahead-cycles, each with its validator, and --no-hbm-wait. \param app the command line
/// \param o the options
void add_decode_run_options(CLI::App& app, DecodeRunOptions& o);

/// \brief The seed of the decoding programs' inputs and page shuffles.
constexpr std::uint64_t kDecodeSeed = 2024;

/// \brief A step of B sequences that attend to n keys each (n − q_len cached before the step):
/// contiguous with N_max = n when page_size is 0, else paged, the pool holding exactly the
/// pages the sequences use, in an order shuffled with a fixed seed.
DecodeProblem make_decode(DType dtype, int d, int batch, int heads_q, int heads_kv, int q_len,
                          int n, int page_size);

/// \brief Why make_decode() with these shapes would pass the decoding limits, from the shapes
/// alone (before any block table is made): its K/V cache past DecodeLimits::kMaxCacheElems, or
/// its pool past an int's count of pages or past DecodeLimits::kMaxPoolRows rows; "" when none.
/// \param d head dim \param batch B \param heads_kv H_kv \param n keys per sequence
/// \param page_size 0 (contiguous) or the page size \return "" or the reason
std::string decode_size_refusal(int d, int batch, int heads_kv, int n, int page_size);

/// \brief "contiguous" or "pageP". \param p the problem \return its layout's name
std::string layout_of(const DecodeProblem& p);

/// \brief Bytes of the K and V caches together. \param p the problem \return 2 · elements · size
double cache_bytes(const DecodeProblem& p);

/// \brief The device tensors of one problem, made once and shared by every row timed on it.
/// Random N(0, 1), never zeros.
struct DecodeInputs : DecodeBuffers {
  DecodeProblem p;  ///< the problem the tensors are made for
  /// \brief Allocates and fills the tensors of `prob`. \param prob the problem
  explicit DecodeInputs(const DecodeProblem& prob);
  /// \return "" when every element of O and L is finite (random inputs give finite
  /// results), else which one is not
  std::string finite() const;
};

/// \brief The inputs of `p`: the previous call's when they were made for the same problem,
/// else new ones (the previous problem's are freed first). With a yardstick set
/// (set_decode_hbm_yardstick), new inputs are returned only once a streaming read of a buffer
/// of 1 GiB (made with the yardstick and kept) runs at kDecodeHbmWaitFraction of it again, for
/// at most 5 s: after a large problem is freed the device reads slower for some tens of
/// milliseconds (measured on the H200: 3.80 TB/s against 4.37 for the same kernel on the same
/// inputs, the first row timed after 16 GiB were freed, without and with the wait), and a row
/// timed then would carry the order of the rows. A wait is said on stderr.
/// \param p the problem \return the inputs, valid until the next call with another problem
DecodeInputs& decode_inputs_for(const DecodeProblem& p);

/// \brief The fraction of the yardstick a read of the probe must reach before new inputs are
/// timed (decode_inputs_for).
constexpr double kDecodeHbmWaitFraction = 0.95;

/// \brief The HBM read bandwidth (TB/s, measure_hbm_read) new inputs wait for
/// (decode_inputs_for), and the 1 GiB probe they wait with, made here (device memory beyond
/// --max-cache-gib); 0, the default, waits for nothing. \param tbps the yardstick, >= 0
void set_decode_hbm_yardstick(double tbps);

/// \brief The wait of decode_inputs_for, for a program that makes its own inputs after freeing
/// others (bin/hbm_layouts): with a yardstick set, returns once a streaming read of the kept
/// probe runs at kDecodeHbmWaitFraction of it, or after 5 s; without one, at once (ms 0,
/// at_speed true). Says nothing; the caller reports the wait.
/// \return how long it waited, and whether the reads got there
HbmWait wait_for_decode_hbm();

/// \brief Times the attention of `step` (DecodeStepInfo::attend: the split-KV kernel and the
/// combine) on `p` with `splits` splits: O and L poisoned, `warmup` (at least 1) calls through
/// fa::run_decode, which checks everything, O and L checked finite, then one call per
/// iteration of `state` after the GPU spin (gbench.h, time_calls). Throws when a check fails.
/// \param state the benchmark's state \param step the step \param p the problem
/// \param splits the split count \param warmup untimed calls \param spin_cycles the spin's
/// cycles \return the times in milliseconds, one per iteration
std::vector<double> time_decode_attention(benchmark::State& state, const DecodeStepInfo& step,
                                          const DecodeProblem& p, int splits, int warmup,
                                          long long spin_cycles);

}  // namespace fa::bench
