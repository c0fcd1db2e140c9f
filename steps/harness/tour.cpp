// tour.cpp — the tour: every registered step on one problem, in one table.
//
//   bin/tour                         # the default problem, every step
//   bin/tour --n 4096 --causal       # another problem
//   bin/04_flash_attention --n 4096  # a step's own program is this tour, for that step
//
// For each step: max |error| and relative error against the CPU reference, median time,
// TFLOP/s, the bytes of N×N intermediates it writes to device memory, the extra device
// memory it needs, and the largest N it can run on this GPU. Without a CUDA device the
// CPU part still runs and the GPU part says why it was skipped (exit status 0).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/perf.h"
#include "common/registry.h"
#include "reference/attention.h"
#include "reference/compare.h"
#include "reference/streaming.h"
#include "steps/harness/cublas_baseline.h"

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

struct Row {
  std::string name, lesson, err, ms, tflops, nxn, extra, max_n;
};

// The largest N (= N_q = N_kv) whose tensors and scratch fit in `budget` bytes of device
// memory, for this problem's B, H and d.
long long largest_n(const fa::Problem& base, std::size_t (*workspace)(const fa::Problem&),
                    double budget) {
  auto fits = [&](long long n) {
    fa::Problem p = base;
    p.n_q = p.n_kv = static_cast<int>(n);
    if (!fa::validate(p).empty()) return false;
    const double bytes = double(fa::dtype_size(p.dtype)) * (2.0 * p.q_elems() + 2.0 * p.kv_elems()) +
                         4.0 * p.lse_elems() + (workspace ? double(workspace(p)) : 0.0);
    return bytes <= budget;
  };
  long long lo = 0, hi = 1LL << 30;
  while (lo < hi) {
    const long long mid = (lo + hi + 1) / 2;
    if (fits(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-22s %-52s %10s %9s %8s %11s %11s %9s\n", "step", "what it teaches",
              "max|err|", "ms", "TFLOP/s", "NxN bytes", "extra mem", "max N");
  for (const Row& r : rows)
    std::printf("%-22s %-52.52s %10s %9s %8s %11s %11s %9s\n", r.name.c_str(), r.lesson.c_str(),
                r.err.c_str(), r.ms.c_str(), r.tflops.c_str(), r.nxn.c_str(), r.extra.c_str(),
                r.max_n.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FlashAttention, step by step: run every step on one problem"};
  fa::Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 4;
  p.n_q = p.n_kv = 1024;
  p.head_dim = 64;
  int n = 0;
  std::string dtype = "fp32", layout = "bnhd", dist_name = "normal", step_key;
  std::uint64_t seed = 42;
  int reps = 20, warmup = 3;
  bool no_check = false, list = false;
  app.add_option("-b,--batch", p.batch, "batch size B")->capture_default_str();
  app.add_option("--heads-q", p.heads_q, "query heads H_q")->capture_default_str();
  app.add_option("--heads-kv", p.heads_kv, "key/value heads H_kv (GQA when < H_q)")
      ->capture_default_str();
  app.add_option("-n,--n", n, "sequence length: sets both N_q and N_kv");
  app.add_option("--n-q", p.n_q, "query rows N_q")->capture_default_str();
  app.add_option("--n-kv", p.n_kv, "key/value rows N_kv")->capture_default_str();
  app.add_option("-d,--d", p.head_dim, "head dimension d")->capture_default_str();
  app.add_flag("--causal", p.causal, "causal mask (bottom-right aligned)");
  app.add_option("--layout", layout, "bnhd ([B,N,H,d]) or bhnd ([B,H,N,d])")->capture_default_str();
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16")->capture_default_str();
  app.add_option("--dist", dist_name, "inputs: normal, shifted or large")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--step", step_key,
                 "run one step only (name, number or slug; cublas_baseline for the baseline)");
  app.add_flag("--list", list,
               "print each registered step once per head dim it is built for (all of them "
               "when it takes any d: 64), with a dtype it supports, and exit");
  app.add_flag("--no-check", no_check,
               "skip the CPU reference and the error column: each step runs warmup + reps "
               "times, no more (for profilers such as ncu)");
  app.add_option("--reps", reps, "timed repetitions (median reported)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (list) {
    // One line per compiled head dim, so that a checker going through the list (such as
    // scripts/sanitize.sh) reaches every kernel; the dtypes take turns.
    for (const fa::StepInfo* s : fa::steps()) {
      const std::vector<int> dims = s->head_dims.empty() ? std::vector<int>{64} : s->head_dims;
      for (std::size_t i = 0; i < dims.size(); ++i)
        std::printf("%s %s %d\n", s->name,
                    fa::dtype_name(s->dtypes[i % s->dtypes.size()]), dims[i]);
    }
    return 0;
  }
  if (n != 0) p.n_q = p.n_kv = n;
  fa::Distribution dist{};
  if (!fa::parse_dtype(dtype, &p.dtype)) {
    std::cerr << "error: --dtype (" << dtype << ") must be fp32, fp16 or bf16\n";
    return 2;
  }
  if (!fa::parse_layout(layout, &p.layout)) {
    std::cerr << "error: --layout (" << layout << ") must be bnhd or bhnd\n";
    return 2;
  }
  if (!fa::parse_distribution(dist_name, &dist)) {
    std::cerr << "error: --dist (" << dist_name << ") must be normal, shifted or large\n";
    return 2;
  }
  if (reps < 1 || warmup < 0) {
    std::cerr << "error: --reps (" << reps << ") must be >= 1 and --warmup (" << warmup
              << ") >= 0\n";
    return 2;
  }
  if (const std::string e = fa::validate(p); !e.empty()) {
    std::cerr << "error: " << e << '\n';
    return 2;
  }
  std::vector<const fa::StepInfo*> chosen = fa::steps();
  const bool baseline_only = step_key == "cublas_baseline";
  if (baseline_only) {
    chosen.clear();
  } else if (!step_key.empty()) {
    const fa::StepInfo* s = fa::find_step(step_key);
    if (!s) {
      std::cerr << "error: --step (" << step_key << ") is not a registered step; known: "
                << fa::step_names() << '\n';
      return 2;
    }
    chosen = {s};
  }

  std::printf("Problem: %s, scale %.4g, inputs %s, seed %llu\n", p.describe().c_str(),
              p.softmax_scale(), fa::distribution_name(dist),
              static_cast<unsigned long long>(seed));
  std::printf("FLOPs %.3g; the fewest bytes any pass must move %s; one N×N fp32 matrix %s\n\n",
              fa::attention_flops(p), human_bytes(fa::min_io_bytes(p)).c_str(),
              human_bytes(fa::nxn_matrix_bytes(p)).c_str());

  // CPU: the reference (double) and the streaming model (float, online softmax over tiles).
  const fa::HostInputs in = fa::make_inputs(p, dist, seed);
  fa::ref::Result ref;
  if (!no_check) {
    const auto t0 = std::chrono::steady_clock::now();
    ref = fa::ref::attention(p, in.q.data(), in.k.data(), in.v.data());
    const double ref_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<float> so(in.q.size()), sl(static_cast<std::size_t>(p.lse_elems()));
    fa::ref::streaming_attention(p, in.q.data(), in.k.data(), in.v.data(), so.data(), sl.data());
    const fa::Comparison sc = fa::compare_output(p, so, ref.o);
    std::printf("CPU reference (Eigen, double): %.3f s\n", ref_s);
    std::printf("CPU streaming model (online softmax, 64×64 tiles, float): max|err| %.2e, "
                "rel %.2e — same result, no N×N matrix\n\n",
                sc.max_abs_err, sc.rel_err);
  }

  int devices = 0;
  const cudaError_t derr = cudaGetDeviceCount(&devices);
  if (derr != cudaSuccess || devices == 0) {
    std::printf("GPU steps skipped: no usable CUDA device (%s).\n",
                derr != cudaSuccess ? cudaGetErrorString(derr) : "device count is 0");
    std::printf("Registered GPU steps: %s\n", fa::step_names().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("GPU: %s (sm_%d%d, %d SMs, %s)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, human_bytes(double(total_b)).c_str());
  std::printf("max N: the largest N_q = N_kv whose tensors and scratch fit in this GPU's free "
              "memory (%s) for this B, H and d\n\n",
              human_bytes(double(free_b)).c_str());

  const double flops = fa::attention_flops(p);
  std::vector<Row> rows;
  int failures = 0;
  auto measure = [&](Row& r, auto&& run_once, fa::DeviceProblem& dev) {
    char buf[64];
    if (!no_check) {
      dev.poison();
      run_once();
      std::vector<float> o, lse;
      dev.download(&o, &lse);
      const fa::Comparison c = fa::compare_output(p, o, ref.o);
      std::snprintf(buf, sizeof buf, "%.2e", c.max_abs_err);
      r.err = c.mismatches ? "NaN/Inf!" : buf;
      if (c.mismatches) ++failures;
    } else {
      r.err = "-";
    }
    const double ms = fa::time_median_ms(run_once, warmup, reps);
    std::snprintf(buf, sizeof buf, "%.3f", ms);
    r.ms = buf;
    std::snprintf(buf, sizeof buf, "%.2f", flops / (ms * 1e-3) / 1e12);
    r.tflops = buf;
  };

  for (const fa::StepInfo* step : chosen) {
    Row r;
    r.name = step->name;
    r.lesson = step->lesson;
    if (const std::string e = fa::check_step(*step, p); !e.empty()) {
      r.err = "skipped";
      r.lesson = e;
      rows.push_back(r);
      continue;
    }
    try {
      const std::size_t ws = step->workspace_bytes ? step->workspace_bytes(p) : 0;
      fa::DeviceProblem dev(in, ws);
      measure(r, [&] { fa::run_step(*step, p, dev.tensors(), dev.workspace()); }, dev);
      r.nxn = human_bytes(step->nxn_bytes_written ? double(step->nxn_bytes_written(p)) : 0.0);
      r.extra = human_bytes(double(ws));
      r.max_n = std::to_string(largest_n(p, step->workspace_bytes, double(free_b)));
    } catch (const std::exception& e) {
      r.err = "error";
      r.lesson = e.what();
      ++failures;
    }
    rows.push_back(r);
  }
  if ((step_key.empty() || baseline_only) && p.dtype == fa::DType::F32) {
    Row r;
    r.name = "cublas_baseline";
    r.lesson = "standard attention: cuBLAS SGEMM, softmax, SGEMM";
    try {
      fa::baseline::CublasAttention base(p);
      fa::DeviceProblem dev(in, 0);
      measure(r, [&] { base.run(dev.tensors()); }, dev);
      r.nxn = human_bytes(double(fa::baseline::CublasAttention::nxn_bytes_written(p)));
      r.extra = human_bytes(double(fa::baseline::CublasAttention::workspace_bytes(p)));
      r.max_n = std::to_string(
          largest_n(p, fa::baseline::CublasAttention::workspace_bytes, double(free_b)));
    } catch (const std::exception& e) {
      r.err = "error";
      r.lesson = e.what();
      ++failures;
    }
    rows.push_back(r);
  }
  print_table(rows);
  std::printf("\nmax|err| is against the CPU reference; the tests (ctest) judge it with the "
              "tolerance policy. Times are medians of %d runs after %d warm-ups.\n",
              reps, warmup);
  return failures ? 1 : 0;
}
