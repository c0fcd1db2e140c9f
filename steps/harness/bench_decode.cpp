// bench_decode.cpp — Google Benchmark over every registered decoding step
// (common/decode_registry.h) on the shapes of serving: one decoding step of B sequences, each with
// a cache of N keys (N − q_len held before the step, q_len new), H_q query heads over H_kv
// key/value heads, contiguous or paged, the pages shuffled in the pool.
//
//   bin/bench_decode --benchmark_out=decode.json --benchmark_out_format=json
//   bin/bench_decode --batches 1 --caches 16384 --heads-kv 8 --page-sizes 64 --splits 1,4,16
//
// What is timed: the attention of one decoding step, the split-KV kernel and the combine
// (DecodeStepInfo::attend: checked by fa::run_decode with DecodePhases::AttendOnly in the
// warm-up, then called directly), over a cache that already holds the step's rows; the append of
// the new K/V rows is not timed (PyTorch's peers have none), each call after the same GPU spin as
// bench_all's (docs/conventions.md, Timing). The median of --reps timed calls after --warmup
// untimed ones. Inputs are N(0, 1), made on the device (steps/harness/hbm.h) once per shape and
// layout; O and L are poisoned before the warm-up and checked finite after it, so a broken kernel
// is refused, not timed.
//
// Rows, per shape: the split rule's choice in every layout (contiguous, and paged with each
// --page-sizes), then, contiguous, every forced split count of --splits. Each record's name is
// impl/dtype/dD/BB/HqH/HkvH/qQ/NN/layout/splits, e.g.
//   12_decode/bf16/d128/B8/Hq32/Hkv8/q1/N16384/page64/rule4      the rule's choice, 4 splits
//   12_decode/bf16/d128/B8/Hq32/Hkv8/q1/N16384/contiguous/splits16   forced to 16
// and its counters are median_ms, kv_bytes (the K and V bytes the step must read,
// DecodeProblem::kv_bytes_read), tbps (kv_bytes per second, 10¹² bytes/s), hbm_fraction (tbps
// over the HBM read bandwidth measured at the start of the run), splits and rule_splits.
//
// The HBM read bandwidth: a streaming read kernel over --hbm-gib GiB (steps/harness/hbm.h),
// counted as bytes read, timed like the rows; printed, and recorded in the JSON's context
// (hbm_read_tbps, hbm_read_bytes, hbm_read_median_ms). scripts/make_results.py --pass decode
// reads all of it.
#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/device_buffer.h"
#include "common/launch.h"
#include "common/perf.h"
#include "steps/harness/cli.h"
#include "steps/harness/gbench.h"
#include "steps/harness/hbm.h"
#include "steps/harness/spin.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::uint64_t kSeed = 2024;

// One row: a step, a problem (its layout included) and a split count.
struct Row {
  const fa::DecodeStepInfo* step;
  fa::DecodeProblem p;
  int splits;    // the launch's
  bool forced;   // by --splits, or the rule's choice
  int rule = 0;  // the rule's choice for p, filled in once a device is there
};

std::string layout_of(const fa::DecodeProblem& p) {
  return p.cache == fa::CacheKind::Contiguous ? "contiguous" : "page" + std::to_string(p.page_size);
}

std::string record_name(const Row& r) {
  const fa::DecodeProblem& p = r.p;
  std::ostringstream os;
  os << r.step->name << '/' << fa::dtype_name(p.dtype) << "/d" << p.head_dim << "/B" << p.batch
     << "/Hq" << p.heads_q << "/Hkv" << p.heads_kv << "/q" << p.q_len << "/N" << p.kv_len(0) << '/'
     << layout_of(p) << '/' << (r.forced ? "splits" : "rule") << r.splits;
  return os.str();
}

// A step of B sequences that attend to n keys each (n − q_len cached before the step):
// contiguous with N_max = n when page_size is 0, else paged, the pool holding exactly the
// pages the sequences use, in an order shuffled with a fixed seed.
fa::DecodeProblem make_decode(fa::DType dtype, int d, int batch, int heads_q, int heads_kv,
                              int q_len, int n, int page_size) {
  fa::DecodeProblem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = d;
  p.q_len = q_len;
  p.dtype = dtype;
  p.cache_lens.assign(batch, n - q_len);
  if (page_size == 0) {
    p.cache = fa::CacheKind::Contiguous;
    p.n_max = n;
    return p;
  }
  p.cache = fa::CacheKind::Paged;
  p.page_size = page_size;
  p.max_pages = (n + page_size - 1) / page_size;
  p.num_pages = batch * p.max_pages;
  p.block_table.resize(p.num_pages);
  std::iota(p.block_table.begin(), p.block_table.end(), 0);
  std::shuffle(p.block_table.begin(), p.block_table.end(), std::mt19937_64(kSeed));
  return p;
}

double cache_bytes(const fa::DecodeProblem& p) {
  return 2.0 * double(p.cache_elems()) * double(fa::dtype_size(p.dtype));
}

bool same_inputs(const fa::DecodeProblem& a, const fa::DecodeProblem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv &&
         a.head_dim == b.head_dim && a.q_len == b.q_len && a.dtype == b.dtype &&
         a.cache == b.cache && a.cache_lens == b.cache_lens && a.n_max == b.n_max &&
         a.page_size == b.page_size && a.num_pages == b.num_pages && a.block_table == b.block_table;
}

// The device tensors of one problem, made once and shared by every row timed on it
// (registration keeps a problem's rows together). Random, never zeros.
struct DecodeInputs {
  fa::DecodeProblem p;
  fa::DeviceBuffer q, k_new, v_new, k_cache, v_cache, lens, table, o, lse;

  explicit DecodeInputs(const fa::DecodeProblem& prob) : p(prob) {
    const std::size_t es = fa::dtype_size(p.dtype);
    q = fa::DeviceBuffer(p.q_elems() * es);
    k_new = fa::DeviceBuffer(p.new_kv_elems() * es);
    v_new = fa::DeviceBuffer(p.new_kv_elems() * es);
    k_cache = fa::DeviceBuffer(p.cache_elems() * es);
    v_cache = fa::DeviceBuffer(p.cache_elems() * es);
    lens = fa::DeviceBuffer(p.cache_lens.size() * sizeof(int));
    table = fa::DeviceBuffer(p.block_table.size() * sizeof(int));
    o = fa::DeviceBuffer(p.q_elems() * es);
    lse = fa::DeviceBuffer(p.lse_elems() * sizeof(float));
    fa::bench::fill_normal(q.get(), p.q_elems(), p.dtype, kSeed);
    fa::bench::fill_normal(k_new.get(), p.new_kv_elems(), p.dtype, kSeed + 1);
    fa::bench::fill_normal(v_new.get(), p.new_kv_elems(), p.dtype, kSeed + 2);
    fa::bench::fill_normal(k_cache.get(), p.cache_elems(), p.dtype, kSeed + 3);
    fa::bench::fill_normal(v_cache.get(), p.cache_elems(), p.dtype, kSeed + 4);
    CUDA_CHECK(cudaMemcpy(lens.get(), p.cache_lens.data(), lens.bytes(), cudaMemcpyHostToDevice));
    if (table.bytes() > 0)
      CUDA_CHECK(
          cudaMemcpy(table.get(), p.block_table.data(), table.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  fa::DecodeTensors tensors() const {
    fa::DecodeTensors t;
    t.q = q.get();
    t.k_new = k_new.get();
    t.v_new = v_new.get();
    t.k_cache = k_cache.get();
    t.v_cache = v_cache.get();
    t.cache_lens = lens.as<int>();
    t.block_table = table.bytes() > 0 ? table.as<int>() : nullptr;
    t.o = o.get();
    t.lse = lse.as<float>();
    return t;
  }

  // O and L all ones in every bit (NaN in each dtype), so an element a call leaves unwritten
  // fails finite().
  void poison() {
    CUDA_CHECK(cudaMemset(o.get(), 0xFF, o.bytes()));
    CUDA_CHECK(cudaMemset(lse.get(), 0xFF, lse.bytes()));
  }

  // "" when every element of O and L is finite (random inputs give finite results), else why.
  std::string finite() const {
    std::vector<std::uint16_t> o_host(p.q_elems());
    std::vector<float> l_host(p.lse_elems());
    CUDA_CHECK(cudaMemcpy(o_host.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(l_host.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));
    // The exponent bits of a 16-bit float: all ones is an infinity or a NaN.
    const std::uint16_t exponent = p.dtype == fa::DType::BF16 ? 0x7F80 : 0x7C00;
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
};

DecodeInputs& inputs_for(const fa::DecodeProblem& p) {
  static std::unique_ptr<DecodeInputs> cache;
  if (!cache || !same_inputs(cache->p, p)) {
    cache.reset();  // free the previous problem's first
    cache = std::make_unique<DecodeInputs>(p);
  }
  return *cache;
}

// Benchmarks that stopped with an error, by name: main's exit status.
std::set<std::string> g_failed;
long long g_spin_cycles = 1000000;
int g_warmup = 3;
double g_hbm_tbps = 0;

void time_row(benchmark::State& state, const Row& row, const std::string& name) {
  std::vector<double> ms;
  try {
    DecodeInputs& in = inputs_for(row.p);
    fa::DeviceBuffer workspace(row.step->workspace_bytes(row.p, row.splits));
    const fa::DecodeTensors t = in.tensors();
    // The warm-up goes through run_decode, which checks everything (for a paged cache that
    // includes the whole block table: a fraction of a millisecond of host time at B = 32,
    // N = 32768, pages of 16); the timed calls, the same launch on the same arguments, call
    // the step's entry directly, so no check outlasts the spin queued before them.
    auto checked = [&] {
      fa::run_decode(*row.step, row.p, t, row.splits, workspace.get(), nullptr,
                     fa::DecodePhases::AttendOnly);
    };
    auto call = [&] { row.step->attend(row.p, t, row.splits, workspace.get(), nullptr); };
    in.poison();
    for (int i = 0; i < std::max(g_warmup, 1); ++i) checked();  // module load, first touch
    CUDA_CHECK(cudaDeviceSynchronize());
    if (const std::string bad = in.finite(); !bad.empty())
      throw std::runtime_error(bad + " after the warm-up of " + row.p.describe() + " with " +
                               std::to_string(row.splits) + " splits; not timed");
    ms = fa::bench::time_calls(state, call, g_spin_cycles);
    CUDA_CHECK_LAUNCH();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    g_failed.insert(name);
    cudaGetLastError();  // clear a sticky-free error such as an allocation failure
    return;
  }
  const double med = fa::median(ms), bytes = row.p.kv_bytes_read();
  const double tbps = bytes / (med * 1e-3) / 1e12;
  state.counters["median_ms"] = med;
  state.counters["kv_bytes"] = bytes;
  state.counters["tbps"] = tbps;
  state.counters["hbm_fraction"] = g_hbm_tbps > 0 ? tbps / g_hbm_tbps : 0;
  state.counters["splits"] = row.splits;
  state.counters["rule_splits"] = row.rule;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{
      "Benchmarks of every decoding step: the attention of one decoding step over a contiguous "
      "or paged cache, in K+V bytes read per second next to the HBM read bandwidth measured in "
      "the same run (Google Benchmark flags, --benchmark_*, pass through)"};
  app.allow_extras();  // Google Benchmark's own flags
  std::vector<int> batches{1, 8, 32}, caches{4096, 16384, 32768}, heads_kv{32, 8}, dims{128};
  std::vector<int> page_sizes{16, 64, 256}, splits;
  int heads_q = 32, q_len = 1, reps = 20, hbm_gib = 4, hbm_reps = 20, max_cache_gib = 40;
  fa::DType dtype = fa::DType::BF16;
  bool sweep = true;
  int max_splits = 1;
  for (const fa::DecodeStepInfo* s : fa::decode_steps())
    max_splits = std::max(max_splits, s->max_splits);
  app.add_option("--batches", batches, "batch sizes B (sequences), comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--caches", caches,
                 "cache lengths N: the keys each sequence attends to (N - q_len cached before "
                 "the step), comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--heads-q", heads_q, "query heads H_q")
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--heads-kv", heads_kv, "key/value heads H_kv, comma-separated (GQA when < H_q)")
      ->delimiter(',')
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--dims", dims, "head dims d, comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, fa::Limits::kMaxHeadDim))
      ->capture_default_str();
  fa::cli::add_dtype(app, "--dtype", &dtype, "element type of Q, O and the cache");
  app.add_option("--q-len", q_len, "new tokens per sequence in the step")
      ->check(fa::cli::int_range(fa::DecodeLimits::kMinQLen, fa::DecodeLimits::kMaxQLen))
      ->capture_default_str();
  app.add_option("--page-sizes", page_sizes,
                 "page sizes of the paged cache, comma-separated (the contiguous cache is always "
                 "timed)")
      ->delimiter(',')
      ->check(fa::cli::int_range(fa::DecodeLimits::kMinPageSize, fa::DecodeLimits::kMaxPageSize))
      ->capture_default_str();
  app.add_option("--splits", splits,
                 "forced split counts timed next to the rule's choice, contiguous cache "
                 "(default: 1, 2, 4, ... up to the step's most, " +
                     std::to_string(max_splits) + ")")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, max_splits));
  app.add_option("--split-sweep", sweep, "time the forced split counts of --splits")
      ->check(CLI::IsMember({"true", "false", "on", "off", "1", "0"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed calls per row (the median is reported)")
      ->check(fa::cli::int_range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", g_warmup, "untimed calls per row before the timed ones")
      ->check(fa::cli::int_range(0, 1000))
      ->capture_default_str();
  app.add_option("--hbm-gib", hbm_gib, "GiB read by the HBM bandwidth measurement")
      ->check(fa::cli::int_range(1, 64))
      ->capture_default_str();
  app.add_option("--hbm-reps", hbm_reps, "timed runs of the HBM bandwidth measurement")
      ->check(fa::cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--max-cache-gib", max_cache_gib,
                 "refuse any problem whose K and V caches together exceed this many GiB")
      ->check(fa::cli::int_range(1, 1024))
      ->capture_default_str();
  app.add_option("--queue-ahead-cycles", g_spin_cycles,
                 "before each timed call, a GPU spin of this many clock cycles (1e6 is about "
                 "0.5 ms), as bench_all and scripts/peers.py do; 0 = off")
      ->check(fa::cli::int_range(0))
      ->capture_default_str();
  FA_CLI_PARSE(app, argc, argv);
  if (const int status = fa::bench::init_benchmark(app, argv[0]); status >= 0) return status;
  if (app.count("--splits") == 0)
    for (int s = 1; s <= max_splits; s *= 2) splits.push_back(s);

  // Every problem first, before any GPU is looked for: a shape no limit allows is bad input;
  // a step that cannot run a problem is said once per reason; no row at all is bad input.
  std::vector<Row> plan;
  std::vector<std::string> cannot;
  auto note = [&](const std::string& what) {
    if (std::find(cannot.begin(), cannot.end(), what) == cannot.end()) cannot.push_back(what);
  };
  std::vector<int> layouts{0};  // 0: contiguous
  layouts.insert(layouts.end(), page_sizes.begin(), page_sizes.end());
  for (int n : caches)
    if (n < q_len)
      return fa::cli::refuse("--caches (" + std::to_string(n) + ") must be at least --q-len (" +
                             std::to_string(q_len) + "): the step's new keys are in the cache");
  for (const fa::DecodeStepInfo* step : fa::decode_steps())
    for (int d : dims)
      for (int b : batches)
        for (int hkv : heads_kv)
          for (int n : caches)
            for (int page : layouts) {
              const fa::DecodeProblem p = make_decode(dtype, d, b, heads_q, hkv, q_len, n, page);
              const std::string where = "--batches " + std::to_string(b) + " --caches " +
                                        std::to_string(n) + " --heads-q " +
                                        std::to_string(heads_q) + " --heads-kv " +
                                        std::to_string(hkv) + " --dims " + std::to_string(d);
              // Past the decoding problem's 32-bit index limit (common/decode.h) a shape is
              // not timed, said once, so that the default grid runs what it can.
              if (p.cache_elems() > fa::Limits::kMaxElems) {
                note(where + ": the K/V cache's " + std::to_string(p.cache_elems()) +
                     " elements exceed the 32-bit index limit of " +
                     std::to_string(fa::Limits::kMaxElems) + " elements");
                continue;
              }
              if (const std::string e = fa::validate(p); !e.empty())
                return fa::cli::refuse(where + ": " + e);
              if (cache_bytes(p) > max_cache_gib * kGiB)
                return fa::cli::refuse(
                    where + ": the K and V caches need " + fa::cli::human_bytes(cache_bytes(p)) +
                    ", more than --max-cache-gib (" + std::to_string(max_cache_gib) + ")");
              if (const std::string e = fa::check_decode_step(*step, p); !e.empty()) {
                note(std::string(step->name) + ": " + e);
                continue;
              }
              plan.push_back({step, p, 0, false});
              if (page == 0 && sweep)
                for (int s : splits) {
                  if (s > step->max_splits) {
                    note(std::string(step->name) + ": --splits " + std::to_string(s) +
                         " exceeds its most, " + std::to_string(step->max_splits));
                    continue;
                  }
                  plan.push_back({step, p, s, true});
                }
            }
  for (const std::string& c : cannot) std::fprintf(stderr, "not timed: %s\n", c.c_str());
  if (plan.empty())
    return fa::cli::refuse(
        "no decoding step can run the requested shapes (--batches, --caches, --heads-q, "
        "--heads-kv, --dims, --dtype): see above");

  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::fprintf(stderr, "no usable CUDA device (%s): nothing to benchmark\n", why.c_str());
    return 1;
  }
  const fa::DeviceLimits limits = fa::device_limits(0);
  cannot.clear();
  std::vector<Row> runnable;
  for (Row r : plan) {
    if (const std::string why = fa::device_refusal(*r.step, limits); !why.empty()) {
      note(std::string(r.step->name) + ": " + why);
      continue;
    }
    r.rule = r.step->num_splits ? r.step->num_splits(r.p, limits.multiProcessorCount) : 1;
    if (!r.forced) r.splits = r.rule;
    runnable.push_back(r);
  }
  for (const std::string& c : cannot)
    std::fprintf(stderr, "not timed on this GPU: %s\n", c.c_str());
  if (runnable.empty()) {
    std::fprintf(stderr, "no decoding step can run on this GPU: nothing to benchmark\n");
    return 1;
  }

  // The HBM read bandwidth, before any cache is allocated: the yardstick of every row.
  const fa::bench::HbmRead hbm = fa::bench::measure_hbm_read(
      static_cast<std::size_t>(hbm_gib) << 30, g_warmup, hbm_reps, g_spin_cycles);
  g_hbm_tbps = hbm.tbps;
  std::printf(
      "HBM read bandwidth: %.3f TB/s (a streaming read of %d GiB, bytes read only, "
      "median of %d runs: %.3f ms)\n",
      hbm.tbps, hbm_gib, hbm.reps, hbm.median_ms);
  std::fflush(stdout);
  benchmark::AddCustomContext("hbm_read_tbps", std::to_string(hbm.tbps));
  benchmark::AddCustomContext("hbm_read_bytes", std::to_string(std::llround(hbm.bytes)));
  benchmark::AddCustomContext("hbm_read_median_ms", std::to_string(hbm.median_ms));
  benchmark::AddCustomContext("hbm_read_method",
                              "streaming read kernel, 16-byte loads, bytes read only");
  benchmark::AddCustomContext("decode_timed",
                              "attention only (split-KV kernel and combine); "
                              "the append is not timed");
  benchmark::AddCustomContext("decode_splits_swept", join(splits));

  for (const Row& r : runnable) {
    const std::string name = record_name(r);
    benchmark::RegisterBenchmark(
        name.c_str(),
        [r, name](benchmark::State& st) {
          st.SetLabel(std::to_string(r.splits) + " splits (rule: " + std::to_string(r.rule) + ")");
          time_row(st, r, name);
        })
        ->UseManualTime()
        ->Iterations(reps)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return fa::bench::benchmarks_status(g_failed);
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
