// variants.cpp — bin/variants_12: step 12's candidate kernels in several configurations
// (variants.cu, where each one's prediction is written), each first checked against the
// double reference on small awkward problems (the decoding tests' judge, tests/decode_gpu.h:
// a configuration that fails is reported and not timed), then timed beside the registered
// candidate "12_decode_v2" on the decoding benchmark's shapes (bf16, d = 128, one new token),
// contiguous and paged, with bin/bench_decode's inputs and timed loop
// (steps/harness/decode_timing.h), in K+V bytes read per second, in one process; the tables go
// to stdout and --out-md, the records to Google Benchmark's flags (--benchmark_out=…).
//
//   build/bin/variants_12 --out-md docs/results/h200-variants-12.md
//
// Exit status: 0, 1 when a configuration failed its check or a timing stopped with an error
// (the tables are written all the same), 2 for bad input, 77 without a usable device.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/decode.h"
#include "common/decode_registry.h"
#include "common/launch.h"
#include "common/perf.h"
#include "steps/harness/cli.h"
#include "steps/harness/decode_timing.h"
#include "steps/harness/gbench.h"
#include "steps/harness/hbm.h"
#include "tests/decode_cases.h"
#include "tests/decode_gpu.h"
#include "variants.h"

namespace {

using fa::DecodeProblem;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A row of the tables: a registered step, or a configuration of the candidate.
struct Row {
  const fa::DecodeStepInfo* step = nullptr;
  std::string change, config, predicted;
  int regs = 0, spill = 0, blocks = 0;  // 0: not known (a registered step)
  std::string check;                    // "ok", or why it is not timed
};

// One timed cell: TB/s and the split count the row's rule chose.
struct Cell {
  double tbps = 0;
  int splits = 0;
};

// The check's problems (bf16, d = 128) and split counts (0: the row's rule): a partial tile,
// empty splits, GQA with causal new tokens, two row chunks, each page size's lookup path,
// a contiguous cache longer than the sequences, K/V heads that do not fill the last group of
// a block of several heads (6 heads: 4 + 2, and 2 + 2 + 2) with pages of 16, and pages of 48,
// which neither hold a tile of 64 nor divide one (every tile by the general cp.async path; the
// TMA rows get no tensor maps there).
std::vector<std::pair<DecodeProblem, int>> check_problems() {
  using fa::test::contiguous;
  using fa::test::paged;
  using fa::test::shapes;
  auto bf16 = [](DecodeProblem p) {
    p.dtype = fa::DType::BF16;
    return p;
  };
  return {{contiguous(bf16(shapes(1, 1, 128, 1, {39}))), 1},
          {paged(bf16(shapes(2, 2, 128, 1, {150})), 16, 5), 1},
          {paged(bf16(shapes(2, 2, 128, 1, {150})), 16, 5), 3},
          {paged(bf16(shapes(2, 2, 128, 1, {150})), 16, 5), 8},
          {paged(bf16(shapes(4, 1, 128, 3, {0, 70})), 16, 6), 2},
          {paged(bf16(shapes(2, 2, 128, 1, {150})), 32, 9), 3},
          {contiguous(bf16(shapes(8, 1, 128, 2, {300, 77}))), 0},
          {paged(bf16(shapes(8, 2, 128, 1, {3000, 1000})), 64, 7), 0},
          {paged(bf16(shapes(32, 8, 128, 1, {5000, 130})), 256, 8), 3},
          {contiguous(bf16(shapes(32, 32, 128, 1, {2000})), 2100), 0},
          {paged(bf16(shapes(12, 6, 128, 2, {300, 45})), 16, 10), 3},
          {paged(bf16(shapes(4, 2, 128, 1, {200, 97})), 48, 11), 0}};
}

// "ok (N problems)", or the first problem it fails and why.
std::string check_step(const fa::DecodeStepInfo& step) {
  const auto problems = check_problems();
  std::uint64_t seed = 12;
  for (const auto& [p, splits] : problems) {
    std::string e;
    try {
      const fa::test::DecodeCase c = fa::test::make_case(p, ++seed);
      e = fa::test::judge_case(c, fa::test::run_case(step, c, splits));
    } catch (const std::exception& ex) {
      e = std::string("threw: ") + ex.what();
      cudaGetLastError();
    }
    if (!e.empty())
      return "FAILED " + p.describe() + ", " +
             (splits > 0 ? std::to_string(splits) + " splits" : "the rule's splits") + ": " + e;
  }
  return "ok (" + std::to_string(problems.size()) + " problems)";
}

// Is p's cache the layout `page` (0: contiguous)?
bool in_layout(const DecodeProblem& p, int page) {
  return page == 0 ? p.cache == fa::CacheKind::Contiguous
                   : p.cache == fa::CacheKind::Paged && p.page_size == page;
}

std::string shape_label(const DecodeProblem& p) {
  std::ostringstream os;
  const int n = p.kv_len(0);
  os << "B=" << p.batch << ' '
     << (p.heads_kv == p.heads_q ? "MHA" : "GQA " + std::to_string(p.group_size())) << ' '
     << (n % 1024 == 0 ? std::to_string(n / 1024) + "k" : std::to_string(n));
  return os.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const std::vector<fa::step12::DecodeVariant> variants = fa::step12::decode_variants();
  std::vector<std::string> variant_names, step_names;
  for (const auto& v : variants) variant_names.push_back(v.info.name);
  for (const fa::DecodeStepInfo* s : fa::decode_steps()) step_names.push_back(s->name);

  CLI::App app{
      "Step 12's candidate decoding kernel in several configurations (stages, warps, tile), "
      "each checked against the reference, then timed beside the registered steps on the "
      "decoding benchmark's shapes (bf16, d = 128, one new token) in K+V bytes read per "
      "second (Google Benchmark flags, --benchmark_*, pass through)"};
  app.allow_extras();
  fa::bench::DecodeShapeOptions shapes;  // the decoding benchmark's, at B = 1 and 8, 4k and 16k
  shapes.batches = {1, 8};
  shapes.caches = {4096, 16384};
  shapes.heads_kv = {32, 8};
  shapes.page_sizes = {64};
  fa::bench::DecodeRunOptions run;
  std::vector<std::string> only = variant_names, steps{"12_decode_v2"};
  std::string out_md, meta;
  app.add_option("--variants", only, "configurations to check and time, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(variant_names))
      ->capture_default_str();
  std::vector<std::string> step_choices = step_names;
  step_choices.push_back("none");
  app.add_option("--steps", steps,
                 "registered decoding steps timed first, on the same inputs, comma-separated "
                 "(none: the configurations alone)")
      ->delimiter(',')
      ->check(CLI::IsMember(step_choices))
      ->capture_default_str();
  fa::bench::add_decode_shape_options(app, shapes);
  fa::bench::add_decode_run_options(app, run);
  app.add_option("--out-md", out_md, "also write the tables to this Markdown file");
  app.add_option("--meta", meta, "a line written under the Markdown heading (GPU, commit, date)");
  FA_CLI_PARSE(app, argc, argv);
  if (const int status = fa::bench::init_benchmark(app, argv[0]); status >= 0) return status;
  steps.erase(std::remove(steps.begin(), steps.end(), std::string("none")), steps.end());
  const int heads_q = shapes.heads_q, reps = run.reps, warmup = run.warmup;
  const long long spin_cycles = run.spin_cycles;

  // Every shape first, before any GPU is looked for: bad input is refused with its options.
  std::vector<int> layouts{0};  // 0: contiguous
  layouts.insert(layouts.end(), shapes.page_sizes.begin(), shapes.page_sizes.end());
  std::sort(layouts.begin(), layouts.end());
  layouts.erase(std::unique(layouts.begin(), layouts.end()), layouts.end());
  std::vector<DecodeProblem> problems;
  for (int page : layouts)
    for (int b : shapes.batches)
      for (int hkv : shapes.heads_kv)
        for (int n : shapes.caches) {
          const std::string where = "--batches " + std::to_string(b) + " --caches " +
                                    std::to_string(n) + " --heads-q " + std::to_string(heads_q) +
                                    " --heads-kv " + std::to_string(hkv);
          if (const std::string e = fa::bench::decode_size_refusal(128, b, hkv, n, page);
              !e.empty())
            return fa::cli::refuse(where + ": " + e);
          const DecodeProblem p =
              fa::bench::make_decode(fa::DType::BF16, 128, b, heads_q, hkv, 1, n, page);
          if (const std::string e = fa::validate(p); !e.empty())
            return fa::cli::refuse(where + ": " + e);
          if (fa::bench::cache_bytes(p) > run.max_cache_gib * kGiB)
            return fa::cli::refuse(where + ": the K and V caches need " +
                                   fa::cli::human_bytes(fa::bench::cache_bytes(p)) +
                                   ", more than --max-cache-gib (" +
                                   std::to_string(run.max_cache_gib) + ")");
          problems.push_back(p);
        }

  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::fprintf(stderr, "SKIPPED: no usable CUDA device (%s): nothing to time\n", why.c_str());
    return 77;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const fa::DeviceLimits limits = fa::device_limits(device);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

  // The rows: the registered steps, then the configurations; each checked first.
  std::vector<Row> rows;
  for (const std::string& name : steps) {
    Row r;
    r.step = fa::find_decode_step(name);
    r.change = "registered step";
    r.config = r.step->lesson;
    r.predicted = "-";
    rows.push_back(r);
  }
  for (const auto& v : variants) {
    if (std::find(only.begin(), only.end(), v.info.name) == only.end()) continue;
    Row r;
    r.step = &v.info;
    r.change = v.change;
    r.config = v.config;
    r.predicted = v.predicted;
    cudaFuncAttributes attr{};
    CUDA_CHECK(cudaFuncGetAttributes(&attr, v.kernel));
    r.regs = attr.numRegs;
    r.spill = static_cast<int>(attr.localSizeBytes);
    rows.push_back(r);
  }
  bool failed = false;
  for (Row& r : rows) {
    if (const std::string why = fa::device_refusal(*r.step, limits); !why.empty()) {
      r.check = "refused: " + why;
    } else {
      for (const auto& v : variants)
        if (&v.info == r.step)
          r.blocks = fa::step12::blocks_per_sm(v.kernel, v.threads, v.smem_bytes);
      r.check = check_step(*r.step);
    }
    if (r.check.rfind("ok", 0) != 0) failed = true;
    std::fprintf(stderr, "check %s: %s\n", r.step->name, r.check.c_str());
  }

  const fa::bench::HbmRead hbm = fa::bench::measure_hbm_read(
      static_cast<std::size_t>(run.hbm_gib) << 30, warmup, run.hbm_reps, spin_cycles);
  std::printf("HBM read bandwidth: %.3f TB/s (a streaming read of %d GiB, median of %d runs)\n",
              hbm.tbps, run.hbm_gib, hbm.reps);
  std::fflush(stdout);
  benchmark::AddCustomContext("hbm_read_tbps", std::to_string(hbm.tbps));
  if (!run.no_hbm_wait) fa::bench::set_decode_hbm_yardstick(hbm.tbps);

  // Timed cells, shape by shape (the inputs are made once per shape), passing rows only.
  std::map<std::pair<std::size_t, std::size_t>, Cell> cells;  // (row, problem)
  std::set<std::string> errors;
  for (std::size_t j = 0; j < problems.size(); ++j)
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].check.rfind("ok", 0) != 0) continue;
      const DecodeProblem& p = problems[j];
      const std::string name = std::string(rows[i].step->name) + "/B" + std::to_string(p.batch) +
                               "/Hkv" + std::to_string(p.heads_kv) + "/N" +
                               std::to_string(p.kv_len(0)) + "/" + fa::bench::layout_of(p);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [&, i, j, name](benchmark::State& st) {
            const fa::DecodeStepInfo& step = *rows[i].step;
            const DecodeProblem& prob = problems[j];
            std::vector<double> ms;
            int splits = 1;
            try {
              splits = step.num_splits(prob, prop.multiProcessorCount);
              ms = fa::bench::time_decode_attention(st, step, prob, splits, warmup, spin_cycles);
            } catch (const std::exception& e) {
              st.SkipWithError(e.what());
              errors.insert(name);
              cudaGetLastError();
              return;
            }
            const double tbps = prob.kv_bytes_read() / (fa::median(ms) * 1e-3) / 1e12;
            st.counters["median_ms"] = fa::median(ms);
            st.counters["tbps"] = tbps;
            st.counters["hbm_fraction"] = hbm.tbps > 0 ? tbps / hbm.tbps : 0;
            st.counters["splits"] = splits;
            cells[{i, j}] = {tbps, splits};
          })
          ->UseManualTime()
          ->Iterations(reps)
          ->Unit(benchmark::kMillisecond);
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::ostringstream md;
  md << "# Step 12's candidate kernel, configuration by configuration (bf16, d = 128, H_q = "
     << heads_q << ", one new token)\n\n";
  if (!meta.empty()) md << meta << "\n\n";
  char hbm_line[160];
  std::snprintf(hbm_line, sizeof hbm_line, "%.2f TB/s (%d GiB, median of %d runs)", hbm.tbps,
                run.hbm_gib, hbm.reps);
  md << "K+V bytes read per second (TB/s, DecodeProblem::kv_bytes_read over the attention's "
        "median time), the split count each row's rule chose in brackets; median of "
     << reps << " calls after " << warmup << " warm-ups, each after a GPU spin of " << spin_cycles
     << " cycles, as bin/bench_decode times them (attention and combine, not the append), "
        "every row in one process (build/bin/variants_12). HBM read bandwidth measured in the "
        "same run: "
     << hbm_line << ". " << prop.name << ", " << prop.multiProcessorCount
     << " SMs. Each row first passes the decoding tests' judge against the double reference "
        "on "
     << check_problems().size()
     << " small problems; one that fails is not timed. regs / spill: the attention kernel's "
        "registers per thread and local-memory bytes; blocks/SM: the occupancy the device "
        "reports (the variants' split rule uses it); predicted: variants.cu, written before "
        "the run.\n";
  for (int page : layouts) {
    md << "\n## " << (page == 0 ? "contiguous" : "pages of " + std::to_string(page)) << "\n\n"
       << "| version | change | configuration | regs | spill | blocks/SM | check | predicted |";
    std::size_t cols = 0;
    for (const DecodeProblem& p : problems)
      if (in_layout(p, page)) {
        md << ' ' << shape_label(p) << " |";
        ++cols;
      }
    md << "\n|---|---|---|---|---|---|---|---|";
    for (std::size_t c = 0; c < cols; ++c) md << "---|";
    md << "\n";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      md << "| " << r.step->name << " | " << r.change << " | " << r.config << " | "
         << (r.regs ? std::to_string(r.regs) : "-") << " | "
         << (r.regs ? std::to_string(r.spill) + " B" : "-") << " | "
         << (r.blocks ? std::to_string(r.blocks) : "-") << " | " << r.check << " | " << r.predicted
         << " |";
      for (std::size_t j = 0; j < problems.size(); ++j) {
        const DecodeProblem& p = problems[j];
        if (!in_layout(p, page)) continue;
        const auto it = cells.find({i, j});
        char buf[48];
        if (it == cells.end())
          std::snprintf(buf, sizeof buf, " – |");
        else
          std::snprintf(buf, sizeof buf, " %.2f (%d) |", it->second.tbps, it->second.splits);
        md << buf;
      }
      md << "\n";
    }
  }
  if (fa::cli::print_markdown(md.str(), out_md) != 0) return 1;
  if (failed) std::fprintf(stderr, "a row failed its check: see the tables' check column\n");
  return failed ? 1 : fa::bench::benchmarks_status(errors);
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
