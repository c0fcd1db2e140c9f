// decode_timing.cpp — the decoding programs' inputs and timed loop (decode_timing.h).
#include "steps/harness/decode_timing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/launch.h"
#include "steps/harness/cli.h"
#include "steps/harness/gbench.h"
#include "steps/harness/hbm.h"

namespace fa::bench {

void add_decode_shape_options(CLI::App& app, DecodeShapeOptions& o) {
  app.add_option("--batches", o.batches, "batch sizes B (sequences), comma-separated")
      ->delimiter(',')
      ->check(cli::int_range(1))
      ->capture_default_str();
  app.add_option("--caches", o.caches,
                 "cache lengths N: the keys each sequence attends to (N - q_len cached before "
                 "the step), comma-separated")
      ->delimiter(',')
      ->check(cli::int_range(1))
      ->capture_default_str();
  app.add_option("--heads-q", o.heads_q, "query heads H_q")
      ->check(cli::int_range(1))
      ->capture_default_str();
  app.add_option("--heads-kv", o.heads_kv, "key/value heads H_kv, comma-separated (GQA when < H_q)")
      ->delimiter(',')
      ->check(cli::int_range(1))
      ->capture_default_str();
  app.add_option("--page-sizes", o.page_sizes,
                 "page sizes of the paged cache, comma-separated (the contiguous cache is always "
                 "timed)")
      ->delimiter(',')
      ->check(cli::int_range(DecodeLimits::kMinPageSize, DecodeLimits::kMaxPageSize))
      ->capture_default_str();
}

void add_decode_run_options(CLI::App& app, DecodeRunOptions& o) {
  app.add_option("--reps", o.reps, "timed calls per row (the median is reported)")
      ->check(cli::int_range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed calls per row before the timed ones")
      ->check(cli::int_range(0, 1000))
      ->capture_default_str();
  app.add_option("--hbm-gib", o.hbm_gib, "GiB read by the HBM bandwidth measurement")
      ->check(cli::int_range(1, 64))
      ->capture_default_str();
  app.add_option("--hbm-reps", o.hbm_reps, "timed runs of the HBM bandwidth measurement")
      ->check(cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--max-cache-gib", o.max_cache_gib,
                 "refuse any problem whose K and V caches together exceed this many GiB")
      ->check(cli::int_range(1, 1024))
      ->capture_default_str();
  app.add_option("--queue-ahead-cycles", o.spin_cycles,
                 "before each timed call, a GPU spin of this many clock cycles (1e6 is about "
                 "0.5 ms), as bench_all and scripts/peers.py do; 0 = off")
      ->check(cli::int_range(0))
      ->capture_default_str();
  app.add_flag("--no-hbm-wait", o.no_hbm_wait,
               "time a problem as soon as its inputs are made, without first waiting (at most "
               "5 s) until a read of a 1 GiB buffer kept for it runs at " +
                   std::to_string(std::lround(100 * kDecodeHbmWaitFraction)) +
                   "% of the measured bandwidth again after the previous problem's inputs (or "
                   "the measurement's buffer) were freed");
}

DecodeProblem make_decode(DType dtype, int d, int batch, int heads_q, int heads_kv, int q_len,
                          int n, int page_size) {
  DecodeProblem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = d;
  p.q_len = q_len;
  p.dtype = dtype;
  p.cache_lens.assign(batch, n - q_len);
  if (page_size == 0) {
    p.cache = CacheKind::Contiguous;
    p.n_max = n;
    return p;
  }
  p.cache = CacheKind::Paged;
  p.page_size = page_size;
  p.max_pages = (n - 1) / page_size + 1;  // ⌈n / page_size⌉ without overflow (n >= 1)
  p.num_pages = batch * p.max_pages;
  p.block_table.resize(p.num_pages);
  std::iota(p.block_table.begin(), p.block_table.end(), 0);
  std::shuffle(p.block_table.begin(), p.block_table.end(), std::mt19937_64(kDecodeSeed));
  return p;
}

std::string decode_size_refusal(int d, int batch, int heads_kv, int n, int page_size) {
  // make_decode's pool: batch · ⌈n / page_size⌉ pages of page_size rows, or batch · n rows.
  const std::int64_t pages =
      page_size > 0 ? std::int64_t{batch} * ((std::int64_t{n} + page_size - 1) / page_size) : 0;
  if (pages > std::numeric_limits<int>::max())
    return "the pool's " + std::to_string(pages) + " pages exceed the limit of " +
           std::to_string(std::numeric_limits<int>::max()) + " pages";
  const std::int64_t rows = page_size > 0 ? pages * page_size : std::int64_t{batch} * n;
  // The product of rows and H_kv · d may pass 2^63: compare by dividing first.
  const std::int64_t row_elems = std::int64_t{heads_kv} * d;
  if (rows <= DecodeLimits::kMaxCacheElems / row_elems) {
    if (page_size > 0 && rows > DecodeLimits::kMaxPoolRows)
      return "the pool's rows (num_pages * page_size = " + std::to_string(pages) + " * " +
             std::to_string(page_size) + " = " + std::to_string(rows) + ") exceed the limit of " +
             std::to_string(DecodeLimits::kMaxPoolRows) + " rows";
    return {};
  }
  const bool fits = rows <= std::numeric_limits<std::int64_t>::max() / row_elems;
  return "the K/V cache's " +
         (fits ? std::to_string(rows * row_elems)
               : std::to_string(rows) + " * " + std::to_string(row_elems)) +
         " elements exceed the decoding limit of " + std::to_string(DecodeLimits::kMaxCacheElems) +
         " elements";
}

std::string layout_of(const DecodeProblem& p) {
  return p.cache == CacheKind::Contiguous ? "contiguous" : "page" + std::to_string(p.page_size);
}

double cache_bytes(const DecodeProblem& p) {
  return 2.0 * double(p.cache_elems()) * double(dtype_size(p.dtype));
}

namespace {

bool same_inputs(const DecodeProblem& a, const DecodeProblem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv &&
         a.head_dim == b.head_dim && a.q_len == b.q_len && a.dtype == b.dtype &&
         a.cache == b.cache && a.cache_lens == b.cache_lens && a.n_max == b.n_max &&
         a.page_size == b.page_size && a.num_pages == b.num_pages && a.block_table == b.block_table;
}

}  // namespace

DecodeInputs::DecodeInputs(const DecodeProblem& prob) : DecodeBuffers(prob), p(prob) {
  fill_normal(q.get(), p.q_elems(), p.dtype, kDecodeSeed);
  fill_normal(k_new.get(), p.new_kv_elems(), p.dtype, kDecodeSeed + 1);
  fill_normal(v_new.get(), p.new_kv_elems(), p.dtype, kDecodeSeed + 2);
  fill_normal(k_cache.get(), p.cache_elems(), p.dtype, kDecodeSeed + 3);
  fill_normal(v_cache.get(), p.cache_elems(), p.dtype, kDecodeSeed + 4);
  CUDA_CHECK(cudaDeviceSynchronize());
}

std::string DecodeInputs::finite() const {
  std::vector<std::uint16_t> o_host(p.q_elems());
  std::vector<float> l_host(p.lse_elems());
  CUDA_CHECK(cudaMemcpy(o_host.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(l_host.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));
  // The exponent bits of a 16-bit float: all ones is an infinity or a NaN.
  const std::uint16_t exponent = p.dtype == DType::BF16 ? 0x7F80 : 0x7C00;
  const auto bad_o = std::find_if(o_host.begin(), o_host.end(),
                                  [&](std::uint16_t x) { return (x & exponent) == exponent; });
  if (bad_o != o_host.end())
    return "O[" + std::to_string(bad_o - o_host.begin()) + "] is not finite";
  const auto bad_l =
      std::find_if(l_host.begin(), l_host.end(), [](float x) { return !std::isfinite(x); });
  if (bad_l != l_host.end())
    return "L[" + std::to_string(bad_l - l_host.begin()) + "] is not finite";
  return {};
}

namespace {
double g_hbm_yardstick = 0;  // TB/s; 0: no wait
// The probe of the wait: 1 GiB, made with the yardstick and kept (freeing it would be what we
// wait out), large enough that a read of it runs at 98% of the 4 GiB yardstick when nothing
// else runs.
constexpr std::size_t kProbeBytes = std::size_t{1} << 30;
std::unique_ptr<DeviceBuffer> g_probe;
}  // namespace

void set_decode_hbm_yardstick(double tbps) {
  if (!(tbps >= 0))
    throw std::invalid_argument("set_decode_hbm_yardstick: tbps (" + std::to_string(tbps) +
                                ") must be >= 0 (0: no wait)");
  g_hbm_yardstick = tbps;
  if (tbps > 0 && !g_probe) {
    g_probe = std::make_unique<DeviceBuffer>(kProbeBytes);
    fill_normal(g_probe->get(), kProbeBytes / 2, DType::BF16, kDecodeSeed + 5);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
}

HbmWait wait_for_decode_hbm() {
  if (!(g_hbm_yardstick > 0 && g_probe)) {
    HbmWait none;
    none.at_speed = true;
    return none;
  }
  return wait_for_hbm_read(g_probe->get(), kProbeBytes, g_hbm_yardstick, kDecodeHbmWaitFraction, 10,
                           5000);
}

DecodeInputs& decode_inputs_for(const DecodeProblem& p) {
  static std::unique_ptr<DecodeInputs> cache;
  if (!cache || !same_inputs(cache->p, p)) {
    const double freed_gib = cache ? cache_bytes(cache->p) / double(1 << 30) : 0.0;
    cache.reset();  // free the previous problem's first
    cache = std::make_unique<DecodeInputs>(p);
    // Every new problem waits, the first too: the bandwidth measurement before it freed its
    // own buffer.
    if (g_hbm_yardstick > 0 && g_probe) {
      const HbmWait w = wait_for_decode_hbm();
      const int pct = static_cast<int>(std::lround(100 * kDecodeHbmWaitFraction));
      if (!w.at_speed)
        std::fprintf(stderr,
                     "decode inputs: HBM reads did not reach %d%% of %.2f TB/s within %.0f ms "
                     "(%.1f GiB of K and V freed before %s); timed anyway\n",
                     pct, g_hbm_yardstick, w.ms, freed_gib, p.describe().c_str());
      else if (w.ms > 0)
        std::fprintf(stderr,
                     "decode inputs: waited %.0f ms for HBM reads at %d%% of %.2f TB/s again "
                     "(%.1f GiB of K and V freed before %s)\n",
                     w.ms, pct, g_hbm_yardstick, freed_gib, p.describe().c_str());
    }
  }
  return *cache;
}

std::vector<double> time_decode_attention(benchmark::State& state, const DecodeStepInfo& step,
                                          const DecodeProblem& p, int splits, int warmup,
                                          long long spin_cycles) {
  DecodeInputs& in = decode_inputs_for(p);
  DeviceBuffer workspace(step.workspace_bytes(p, splits));
  const DecodeTensors t = in.tensors();
  // The warm-up goes through run_decode, which checks everything (for a paged cache that
  // includes the whole block table: a fraction of a millisecond of host time at B = 32,
  // N = 32768, pages of 16); the timed calls, the same launch on the same arguments, call
  // the step's entry directly, so no check outlasts the spin queued before them.
  auto checked = [&] {
    run_decode(step, p, t, splits, workspace.get(), nullptr, DecodePhases::AttendOnly);
  };
  auto call = [&] { step.attend(p, t, splits, workspace.get(), nullptr); };
  in.poison();
  for (int i = 0; i < std::max(warmup, 1); ++i) checked();  // module load, first touch
  CUDA_CHECK(cudaDeviceSynchronize());
  if (const std::string bad = in.finite(); !bad.empty())
    throw std::runtime_error(bad + " after the warm-up of " + p.describe() + " with " +
                             std::to_string(splits) + " splits; not timed");
  std::vector<double> ms = time_calls(state, call, spin_cycles);
  CUDA_CHECK_LAUNCH();
  return ms;
}

}  // namespace fa::bench
