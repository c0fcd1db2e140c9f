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
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/launch.h"
#include "common/perf.h"
#include "steps/harness/cli.h"
#include "steps/harness/decode_timing.h"
#include "steps/harness/gbench.h"
#include "steps/harness/hbm.h"
#include "steps/harness/spin.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One row: a step, a problem (its layout included) and a split count.
struct Row {
  const fa::DecodeStepInfo* step;
  fa::DecodeProblem p;
  int splits;    // the launch's
  bool forced;   // by --splits, or the rule's choice
  int rule = 0;  // the rule's choice for p, filled in once a device is there
};

std::string record_name(const Row& r) {
  const fa::DecodeProblem& p = r.p;
  std::ostringstream os;
  os << r.step->name << '/' << fa::dtype_name(p.dtype) << "/d" << p.head_dim << "/B" << p.batch
     << "/Hq" << p.heads_q << "/Hkv" << p.heads_kv << "/q" << p.q_len << "/N" << p.kv_len(0) << '/'
     << fa::bench::layout_of(p) << '/' << (r.forced ? "splits" : "rule") << r.splits;
  return os.str();
}

// Benchmarks that stopped with an error, by name: main's exit status.
std::set<std::string> g_failed;
fa::bench::DecodeRunOptions g_run;  // --reps, --warmup, the spin, the HBM measurement
double g_hbm_tbps = 0;

void time_row(benchmark::State& state, const Row& row, const std::string& name) {
  std::vector<double> ms;
  try {
    ms = fa::bench::time_decode_attention(state, *row.step, row.p, row.splits, g_run.warmup,
                                          g_run.spin_cycles);
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
  fa::bench::DecodeShapeOptions shapes;
  shapes.batches = {1, 8, 32};
  shapes.caches = {4096, 16384, 32768};
  shapes.heads_kv = {32, 8};
  shapes.page_sizes = {16, 64, 256};
  const std::vector<int>&batches = shapes.batches, &caches = shapes.caches,
        &heads_kv = shapes.heads_kv, &page_sizes = shapes.page_sizes;
  const int& heads_q = shapes.heads_q;
  std::vector<int> dims{128}, splits;
  int q_len = 1;
  fa::DType dtype = fa::DType::BF16;
  bool sweep = true;
  int max_splits = 1;
  for (const fa::DecodeStepInfo* s : fa::decode_steps())
    max_splits = std::max(max_splits, s->max_splits);
  fa::bench::add_decode_shape_options(app, shapes);
  app.add_option("--dims", dims, "head dims d, comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, fa::Limits::kMaxHeadDim))
      ->capture_default_str();
  fa::cli::add_dtype(app, "--dtype", &dtype, "element type of Q, O and the cache");
  app.add_option("--q-len", q_len, "new tokens per sequence in the step")
      ->check(fa::cli::int_range(fa::DecodeLimits::kMinQLen, fa::DecodeLimits::kMaxQLen))
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
  fa::bench::add_decode_run_options(app, g_run);
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
              const std::string where = "--batches " + std::to_string(b) + " --caches " +
                                        std::to_string(n) + " --heads-q " +
                                        std::to_string(heads_q) + " --heads-kv " +
                                        std::to_string(hkv) + " --dims " + std::to_string(d);
              // Past the decoding problem's cache limit (DecodeLimits::kMaxCacheElems,
              // common/decode.h) a shape is not timed, said once, so that the rest of the grid
              // runs; judged from the shapes before any block table is made.
              if (const std::string e = fa::bench::decode_size_refusal(d, b, hkv, n, page);
                  !e.empty()) {
                note(where + ": " + e);
                continue;
              }
              const fa::DecodeProblem p =
                  fa::bench::make_decode(dtype, d, b, heads_q, hkv, q_len, n, page);
              if (const std::string e = fa::validate(p); !e.empty())
                return fa::cli::refuse(where + ": " + e);
              if (fa::bench::cache_bytes(p) > g_run.max_cache_gib * kGiB)
                return fa::cli::refuse(where + ": the K and V caches need " +
                                       fa::cli::human_bytes(fa::bench::cache_bytes(p)) +
                                       ", more than --max-cache-gib (" +
                                       std::to_string(g_run.max_cache_gib) + ")");
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
  const fa::bench::HbmRead hbm =
      fa::bench::measure_hbm_read(static_cast<std::size_t>(g_run.hbm_gib) << 30, g_run.warmup,
                                  g_run.hbm_reps, g_run.spin_cycles);
  g_hbm_tbps = hbm.tbps;
  if (!g_run.no_hbm_wait) fa::bench::set_decode_hbm_yardstick(hbm.tbps);
  std::printf(
      "HBM read bandwidth: %.3f TB/s (a streaming read of %d GiB, bytes read only, "
      "median of %d runs: %.3f ms)\n",
      hbm.tbps, g_run.hbm_gib, hbm.reps, hbm.median_ms);
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
        ->Iterations(g_run.reps)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return fa::bench::benchmarks_status(g_failed);
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
