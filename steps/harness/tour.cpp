// tour.cpp — the tour: every registered step on one problem, in one table.
//
//   bin/tour                         # the default problem, every step in a dtype it supports
//   bin/tour --n 4096 --causal       # another problem
//   bin/tour --dtype bf16            # every step in bf16 (those without bf16 say so)
//   bin/04_flash_attention --n 4096  # a step's own program is this tour, for that step
//
// For each step: the dtype it ran in, max |error| against the CPU reference, median time,
// TFLOP/s, the bytes of N×N intermediates it writes to device memory, the extra device
// memory it needs, and the largest N it can run on this GPU. Without --dtype each step runs in
// fp32 when it supports it, else bf16 (the tensor-core steps), so the whole arc is in one
// table; a step that cannot run the problem is listed with the limit it breaks.
//
// Every option is checked before any GPU is looked for: bad input, or a single --step that
// cannot run the problem, is one line on stderr and exit status 2. The reference is computed
// in double for every query row while that costs at most 2^30 operations, otherwise for a
// seeded sample of rows of every head (reference/attention.h states the rule); the output
// says which. Without a CUDA device the CPU part still runs and the GPU part says why it was
// skipped (exit status 0). With one, the exit status is 1 when a step's output has NaN/Inf
// where the reference has none, is grossly wrong (kGrossRel*), or the step fails with an
// error, and when no row at all could be run on this GPU.
#include <algorithm>
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
#include "steps/harness/cli.h"
#include "steps/harness/cublas_baseline.h"

namespace {

// The tour's own check of a step's output: a relative error (‖O − ref‖₂ / ‖ref‖₂) above these
// is no rounding but a wrong kernel (the tests hold the steps to ~1e-5 in fp32, ~1e-3 in
// 16 bits), and fails the tour with "WRONG".
constexpr double kGrossRelF32 = 1e-2;
constexpr double kGrossRel16 = 1e-1;

using fa::cli::human_bytes;

struct Row {
  const fa::StepInfo* step = nullptr;  // null: the cuBLAS baseline
  fa::DType dtype = fa::DType::F32;
  std::string why_not;  // check_step's message when the step cannot run the problem
  std::string name, lesson, err = "-", ms = "-", tflops = "-", nxn = "-", extra = "-", max_n = "-";
  std::string note;  // e.g. fewer timed runs for a slow step
};

// Device memory of one run: Q, K, V, O, L and the step's scratch.
double device_bytes(const fa::Problem& p, std::size_t (*workspace)(const fa::Problem&)) {
  return double(fa::dtype_size(p.dtype)) * (2.0 * p.q_elems() + 2.0 * p.kv_elems()) +
         4.0 * p.lse_elems() + (workspace ? double(workspace(p)) : 0.0);
}

// The largest N (= N_q = N_kv) whose tensors and scratch fit in `budget` bytes of device
// memory, for this problem's B, H and d.
long long largest_n(const fa::Problem& base, std::size_t (*workspace)(const fa::Problem&),
                    double budget) {
  auto fits = [&](long long n) {
    fa::Problem p = base;
    p.n_q = p.n_kv = static_cast<int>(n);
    if (!fa::validate(p).empty()) return false;
    return device_bytes(p, workspace) <= budget;
  };
  long long lo = 0, hi = 1LL << 30;
  while (lo < hi) {
    const long long mid = (lo + hi + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-22s  %-6s  %-52s  %10s  %9s  %8s  %11s  %11s  %9s\n", "step", "dtype",
              "what it teaches", "max|err|", "ms", "TFLOP/s", "NxN bytes", "extra mem", "max N");
  for (const Row& r : rows)
    std::printf("%-22s  %-6s  %-52.52s  %10s  %9s  %8s  %11s  %11s  %9s\n", r.name.c_str(),
                fa::dtype_name(r.dtype), r.lesson.c_str(), r.err.c_str(), r.ms.c_str(),
                r.tflops.c_str(), r.nxn.c_str(), r.extra.c_str(), r.max_n.c_str());
  for (const Row& r : rows) {
    if (!r.why_not.empty()) std::printf("  %s cannot run: %s\n", r.name.c_str(), r.why_not.c_str());
    if (!r.note.empty()) std::printf("  %s: %s\n", r.name.c_str(), r.note.c_str());
  }
}

// The dtype a step runs in when the user names none: fp32 for the CUDA-core steps, bf16 for
// the tensor-core steps.
fa::DType default_dtype(const fa::StepInfo& s) {
  for (fa::DType t : {fa::DType::F32, fa::DType::BF16})
    if (std::find(s.dtypes.begin(), s.dtypes.end(), t) != s.dtypes.end()) return t;
  return s.dtypes.front();
}

std::string baseline_check(const fa::Problem& p) {
  if (std::string e = fa::validate(p); !e.empty()) return e;
  if (p.dtype != fa::DType::F32)
    return std::string("dtype (") + fa::dtype_name(p.dtype) +
           ") is not supported by cublas_baseline (supported: fp32)";
  // Its softmax kernel has one block per row, B·H_q of them along grid y.
  if (const long long bh = static_cast<long long>(p.batch) * p.heads_q; bh > 65535)
    return "batch*heads_q (" + std::to_string(bh) +
           ") exceeds the grid y limit of 65535 of cublas_baseline's softmax kernel";
  return {};
}

// The rows of O the check looks at, as float [rows, d], gathered from O in p's layout.
template <typename T>
std::vector<T> gather_rows(const fa::Problem& p, const std::vector<T>& o,
                           const std::vector<std::int64_t>& rows) {
  const fa::Strides s = p.q_strides();
  std::vector<T> out;
  out.reserve(rows.size() * p.head_dim);
  for (std::int64_t r : rows) {
    const std::int64_t bh = r / p.n_q, i = r % p.n_q, b = bh / p.heads_q, h = bh % p.heads_q;
    const T* row = o.data() + b * s.batch + h * s.head + i * s.row;
    out.insert(out.end(), row, row + p.head_dim);
  }
  return out;
}

// The checked rows as a problem of their own (one head, one row per checked row), so that
// fa::compare_output compares them element by element.
fa::Problem rows_problem(const fa::Problem& p, std::size_t rows) {
  return fa::make_problem(1, 1, 1, static_cast<int>(rows), 1, p.head_dim);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"FlashAttention, step by step: run every step on one problem"};
  fa::Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 4;
  p.n_q = p.n_kv = 1024;
  p.head_dim = 64;
  fa::DType dtype = fa::DType::F32;
  fa::Distribution dist = fa::Distribution::Normal;
  std::string step_key;
  std::uint64_t seed = 42;
  int reps = 20, warmup = 3;
  bool no_check = false, list = false;
  fa::cli::add_problem_options(app, &p);
  fa::cli::add_layout(app, &p.layout);
  CLI::Option* dtype_opt = fa::cli::add_dtype(
      app, "--dtype", &dtype,
      "fp32, fp16 or bf16 for every step (default: each step in fp32 when it supports it, "
      "else bf16)");
  dtype_opt->default_str("");
  fa::cli::add_dist(app, &dist);
  app.add_option("--seed", seed, "random seed (inputs and sampled rows)")
      ->check(fa::cli::uint64_range())
      ->capture_default_str();
  app.add_option("--step", step_key,
                 "run one step only (name, number or slug; cublas_baseline for the baseline)")
      ->check(fa::cli::step_validator(true));
  app.add_flag("--list", list,
               "print each registered step once per head dim it is built for (all of them "
               "when it takes any d: 64), with a dtype it supports, and exit");
  app.add_flag("--no-check", no_check,
               "skip the CPU reference and the error column: each step runs warmup + reps "
               "times, no more (for profilers such as ncu)");
  CLI::Option* reps_opt =
      app.add_option("--reps", reps,
                     "timed repetitions (median reported). Unless --reps or --warmup is given, "
                     "a step whose warm-ups and runs would take over 5 s gets about 5 s of "
                     "timed runs and no warm-up")
          ->check(fa::cli::int_range(1, 100000))
          ->capture_default_str();
  CLI::Option* warmup_opt = app.add_option("--warmup", warmup, "untimed runs first")
                                ->check(fa::cli::int_range(0, 100000))
                                ->capture_default_str();
  FA_CLI_PARSE(app, argc, argv);

  if (list) {
    // One line per compiled head dim, so that a checker going through the list (such as
    // scripts/sanitize.sh) reaches every kernel; the dtypes take turns.
    for (const fa::StepInfo* s : fa::steps()) {
      const std::vector<int> dims = s->head_dims.empty() ? std::vector<int>{64} : s->head_dims;
      for (std::size_t i = 0; i < dims.size(); ++i)
        std::printf("%s %s %d\n", s->name, fa::dtype_name(s->dtypes[i % s->dtypes.size()]),
                    dims[i]);
    }
    return 0;
  }
  const bool explicit_dtype = dtype_opt->count() > 0;
  p.dtype = dtype;
  if (const int status = fa::cli::check_problem(p); status >= 0) return status;

  // The plan: one row per step, in the dtype it runs in, with the limit it breaks if any.
  std::vector<Row> rows;
  const bool baseline_only = step_key == "cublas_baseline";
  for (const fa::StepInfo* s : fa::steps()) {
    if (baseline_only || (!step_key.empty() && fa::find_step(step_key) != s)) continue;
    Row r;
    r.step = s;
    r.name = s->name;
    r.lesson = s->lesson;
    r.dtype = explicit_dtype ? dtype : default_dtype(*s);
    fa::Problem ps = p;
    ps.dtype = r.dtype;
    r.why_not = fa::check_step(*s, ps);
    rows.push_back(r);
  }
  if (step_key.empty() || baseline_only) {
    Row r;
    r.name = "cublas_baseline";
    r.lesson = "standard attention: cuBLAS SGEMM, softmax, SGEMM";
    r.dtype = explicit_dtype ? dtype : fa::DType::F32;
    fa::Problem ps = p;
    ps.dtype = r.dtype;
    r.why_not = baseline_check(ps);
    rows.push_back(r);
  }
  if (!step_key.empty() && !rows.front().why_not.empty())
    return fa::cli::refuse("--step (" + step_key +
                           ") cannot run this problem: " + rows.front().why_not);
  std::vector<fa::DType> dtypes;  // the dtypes that run, in the order of the table
  for (Row& r : rows) {
    if (!r.why_not.empty()) {
      r.err = "cannot run";  // the reason is printed under the table
    } else if (std::find(dtypes.begin(), dtypes.end(), r.dtype) == dtypes.end()) {
      dtypes.push_back(r.dtype);
    }
  }
  // The baseline alone is no tour: when no step can run the problem, that is bad input.
  const bool any_step = std::any_of(rows.begin(), rows.end(),
                                    [](const Row& r) { return r.step && r.why_not.empty(); });
  if (!any_step && !baseline_only) {
    for (const Row& r : rows)
      if (r.step) std::cerr << "  " << r.name << ": " << r.why_not << '\n';
    return fa::cli::refuse("no step can run this problem (the limits each breaks are above)");
  }

  std::string what = p.describe();
  if (!explicit_dtype) {  // the dtype is per step: say so instead of naming one
    const std::string one = std::string(" ") + fa::dtype_name(p.dtype) + " ";
    if (const auto at = what.find(one); at != std::string::npos) what.replace(at, one.size(), " ");
  }
  std::printf("Problem: %s, scale %.4g, inputs %s, seed %llu\n", what.c_str(), p.softmax_scale(),
              fa::distribution_name(dist), static_cast<unsigned long long>(seed));
  std::printf("FLOPs %.3g; one N×N fp32 matrix %s; the fewest bytes any pass must move:",
              fa::attention_flops(p), human_bytes(fa::nxn_matrix_bytes(p)).c_str());
  for (fa::DType t : dtypes) {
    fa::Problem pt = p;
    pt.dtype = t;
    std::printf(" %s %s", fa::dtype_name(t), human_bytes(fa::min_io_bytes(pt)).c_str());
  }
  std::printf("\n");
  if (!explicit_dtype)
    std::printf(
        "Each step runs in fp32 when it supports it, else bf16 (--dtype picks one for "
        "all).\n");
  std::printf("\n");

  // The GPU, looked for only now that the input is known to be good.
  const std::string no_gpu = fa::no_usable_device();
  const bool have_gpu = no_gpu.empty();
  std::size_t free_b = 0, total_b = 0;
  double budget_b = 0;  // what a step may plan to use: the free memory less some headroom
  if (have_gpu) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::printf("GPU: %s (sm_%d%d, %d SMs, %s)\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, human_bytes(double(total_b)).c_str());
    // Headroom for what the count below leaves out: cuBLAS's own workspace, the allocator's
    // rounding of every buffer, the poisoned copies the check downloads into.
    budget_b = std::max(0.0, 0.97 * double(free_b) - 256.0 * (1 << 20));
    std::printf(
        "max N: the largest N_q = N_kv whose tensors and scratch fit in this GPU's free "
        "memory (%s, less %s of headroom) for this B, H and d, and whose tensors stay "
        "under 2^31 elements (32-bit indices)\n\n",
        human_bytes(double(free_b)).c_str(), human_bytes(double(free_b) - budget_b).c_str());
  }

  // The device's own limits (grid size, shared memory) decide too: a step that cannot be
  // launched on this GPU is listed with the limit, as for the host checks above; asked for
  // alone (--step), it is bad input.
  if (have_gpu) {
    const fa::DeviceLimits limits = fa::device_limits(0);
    for (Row& r : rows) {
      if (!r.step || !r.why_not.empty() || !r.step->check_device) continue;
      fa::Problem pr = p;
      pr.dtype = r.dtype;
      if (std::string e = r.step->check_device(pr, limits); !e.empty()) {
        if (!step_key.empty())
          return fa::cli::refuse("--step (" + step_key + ") cannot run this problem: " + e);
        r.why_not = e;
        r.err = "cannot run";
      }
    }
  }

  // Which query rows are checked: all of them, or a seeded sample of every head.
  const int per_head = fa::ref::rows_per_head_to_check(p);
  const std::vector<std::int64_t> check_rows =
      no_check ? std::vector<std::int64_t>{} : fa::ref::sample_rows(p, per_head, seed);
  const bool every_row = per_head >= p.n_q;
  if (!no_check) {
    if (every_row)
      std::printf("Checked: every row (%lld) against the CPU reference (Eigen, double)\n",
                  static_cast<long long>(check_rows.size()));
    else
      std::printf(
          "Checked: %lld of %lld rows, sampled: %d rows of each of the %lld "
          "(batch, head) pairs, its first and last rows included, drawn with seed "
          "%llu; the reference in double for those rows only (every row would cost "
          "%.3g operations, the limit is 2^30)\n",
          static_cast<long long>(check_rows.size()), static_cast<long long>(p.lse_elems()),
          per_head, static_cast<long long>(p.batch) * p.heads_q,
          static_cast<unsigned long long>(seed),
          double(p.lse_elems()) * p.n_kv * std::max(p.head_dim, 16));
  }

  const double flops = fa::attention_flops(p);
  int failures = 0, measured = 0;
  bool streaming_done = false;
  // One pass per dtype: its inputs (rounded to that dtype), its reference rows, its steps.
  for (fa::DType t : dtypes) {
    fa::Problem pt = p;
    pt.dtype = t;
    std::fprintf(stderr, "making %s inputs (%s)...\n", fa::dtype_name(t),
                 human_bytes(4.0 * double(pt.q_elems() + 2 * pt.kv_elems())).c_str());
    const fa::HostInputs in = fa::make_inputs(pt, dist, seed);
    fa::ref::RowsResult ref;
    if (!no_check) {
      std::fprintf(stderr, "computing the double reference for %lld rows (%s inputs)...\n",
                   static_cast<long long>(check_rows.size()), fa::dtype_name(t));
      const auto t0 = std::chrono::steady_clock::now();
      ref = fa::ref::attention_rows(pt, in.q.data(), in.k.data(), in.v.data(), check_rows);
      std::printf("CPU reference (Eigen, double), %s inputs, %lld rows: %.3f s\n",
                  fa::dtype_name(t), static_cast<long long>(check_rows.size()), seconds_since(t0));
      if (!streaming_done) {
        streaming_done = true;
        if (every_row) {
          std::vector<float> so(in.q.size()), sl(static_cast<std::size_t>(pt.lse_elems()));
          fa::ref::streaming_attention(pt, in.q.data(), in.k.data(), in.v.data(), so.data(),
                                       sl.data());
          const fa::Comparison sc = fa::compare_output(rows_problem(pt, check_rows.size()),
                                                       gather_rows(pt, so, check_rows), ref.o);
          std::printf(
              "CPU streaming model (online softmax, 64×64 tiles, float): max|err| "
              "%.2e, rel %.2e — same result, no N×N matrix\n",
              sc.max_abs_err, sc.rel_err);
        } else {
          std::printf("CPU streaming model: skipped at this size (it computes every row)\n");
        }
      }
    }
    if (!have_gpu) continue;

    auto measure = [&](Row& r, auto&& run_once, fa::DeviceProblem& dev) {
      char buf[64];
      int r_reps = reps, r_warmup = warmup;
      if (!no_check) {
        dev.poison();
        const auto t0 = std::chrono::steady_clock::now();
        run_once();
        CUDA_CHECK(cudaDeviceSynchronize());
        const double first_s = seconds_since(t0);
        // A slow step (a naive one at large N) is timed fewer times unless asked otherwise.
        constexpr double kTimeBudgetS = 5.0;
        if (first_s * (reps + warmup) > kTimeBudgetS && reps_opt->count() == 0 &&
            warmup_opt->count() == 0) {
          r_warmup = 0;
          r_reps = std::max(1, std::min(reps, static_cast<int>(kTimeBudgetS / first_s)));
          std::snprintf(buf, sizeof buf, "one run takes %.2f s: timed %d times, no warm-up",
                        first_s, r_reps);
          r.note = buf;
        }
        std::vector<float> o, lse;
        dev.download(&o, &lse);
        const fa::Comparison c = fa::compare_output(rows_problem(pt, check_rows.size()),
                                                    gather_rows(pt, o, check_rows), ref.o);
        std::snprintf(buf, sizeof buf, "%.2e", c.max_abs_err);
        r.err = c.mismatches ? "NaN/Inf!" : buf;
        // Not the tolerance policy (the tests apply it: it needs a same-precision oracle),
        // a gross bound: far beyond what rounding does, so only a wrong kernel crosses it.
        const double gross = pt.dtype == fa::DType::F32 ? kGrossRelF32 : kGrossRel16;
        if (!c.mismatches && !(c.rel_err <= gross)) {
          r.err = "WRONG";
          std::snprintf(buf, sizeof buf, "relative error %.2e, above %.0e", c.rel_err, gross);
          // Before the timing note ("one run takes ..."), if there is one, not instead of it.
          r.note = r.note.empty() ? std::string(buf) : buf + ("; " + r.note);
        }
        if (c.mismatches || !(c.rel_err <= gross)) ++failures;
      }
      ++measured;
      const double ms = fa::time_median_ms(run_once, r_warmup, r_reps);
      std::snprintf(buf, sizeof buf, "%.3f", ms);
      r.ms = buf;
      std::snprintf(buf, sizeof buf, "%.2f", flops / (ms * 1e-3) / 1e12);
      r.tflops = buf;
    };
    for (Row& r : rows) {
      if (r.dtype != t || !r.why_not.empty()) continue;
      std::fprintf(stderr, "running %s (%s)...\n", r.name.c_str(), fa::dtype_name(t));
      try {
        std::size_t (*ws_fn)(const fa::Problem&) =
            r.step ? r.step->workspace_bytes : &fa::baseline::CublasAttention::workspace_bytes;
        if (const double need = device_bytes(pt, ws_fn); need > budget_b) {
          r.err = "too big";
          r.note = "needs " + human_bytes(need) + " of device memory, " +
                   human_bytes(double(free_b)) + " free, " + human_bytes(budget_b) + " usable";
          r.max_n = std::to_string(largest_n(pt, ws_fn, budget_b));
          continue;
        }
        if (r.step) {
          const fa::StepInfo& step = *r.step;
          const std::size_t ws = step.workspace_bytes ? step.workspace_bytes(pt) : 0;
          fa::DeviceProblem dev(in, ws);
          measure(
              r, [&] { fa::run_step(step, pt, dev.tensors(), dev.workspace()); }, dev);
          r.nxn = human_bytes(step.nxn_bytes_written ? double(step.nxn_bytes_written(pt)) : 0.0);
          r.extra = human_bytes(double(ws));
          r.max_n = std::to_string(largest_n(pt, step.workspace_bytes, budget_b));
        } else {
          fa::baseline::CublasAttention base(pt);
          fa::DeviceProblem dev(in, 0);
          measure(
              r, [&] { base.run(dev.tensors()); }, dev);
          r.nxn = human_bytes(double(fa::baseline::CublasAttention::nxn_bytes_written(pt)));
          r.extra = human_bytes(double(fa::baseline::CublasAttention::workspace_bytes(pt)));
          r.max_n = std::to_string(
              largest_n(pt, fa::baseline::CublasAttention::workspace_bytes, budget_b));
        }
      } catch (const std::exception& e) {
        r.err = "error";
        r.note = e.what();
        ++failures;
        cudaGetLastError();  // clear a non-sticky error (an allocation failure) for the next
      }
    }
  }
  std::printf("\n");
  print_table(rows);
  if (!have_gpu) {
    std::printf("\nGPU steps skipped: no usable CUDA device (%s).\n", no_gpu.c_str());
    return 0;
  }
  std::printf(
      "\nmax|err| is against the CPU reference%s; the tests (ctest) judge it with the "
      "tolerance policy. Times are medians of %d runs after %d warm-ups.\n",
      no_check    ? " (not computed: --no-check)"
      : every_row ? ", every row"
                  : ", on the sampled rows",
      reps, warmup);
  if (measured == 0) {
    std::printf("Nothing was run: every row above was ruled out (see why).\n");
    return 1;
  }
  return failures ? 1 : 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
