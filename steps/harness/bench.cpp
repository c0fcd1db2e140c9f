// bench.cpp — Google Benchmark over every registered step and the cuBLAS baseline, on the
// shapes of docs/conventions.md: hidden size 2048 (d = 64 → 32 heads, d = 128 → 16 heads), B·N =
// 16384, N from 512 to 16384, causal off and on.
//
//   bin/bench_all --benchmark_out=bench.json --benchmark_out_format=json
//   bin/bench_04_flash_attention --ns 1024,4096 --dims 64 --causal off
//   bin/bench_all --pass backward --benchmark_out=bench-backward.json --benchmark_out_format=json
//
// Each benchmark times single runs with CUDA events (manual time); the counters carry the
// median time, TFLOP/s by the FlashAttention convention (4·B·H·N²·d, halved when causal),
// the bytes of N×N intermediates written, the extra device memory and the fewest bytes the
// pass must move. The name encodes the record: impl/dtype/dD/causalC/BB/HqH/HkvH/NqN/NkvN/layout
// (scripts/make_results.py reads it).
//
// --pass backward times the backward entry of every step that has one (dQ, dK, dV from Q, K,
// V, O, L and dO) on the same shapes, named impl/backward/dtype/…, counting 2.5 × the
// forward's FLOPs. Q, K, V and dO are random; O and L come from a registered forward step
// that runs the problem (the highest-numbered one; its name is the benchmark's label), run
// once per shape, untimed. The cuBLAS baseline has no backward and is not timed.
// --deterministic (backward only) sets Problem::deterministic: dQ bitwise the same from run to
// run, in the steps that offer it (a step that cannot is listed as not timed). Its records are
// named impl+deterministic/backward/…, a name of their own, so that make_results keeps them
// apart from the default mode's.
#include <benchmark/benchmark.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/perf.h"
#include "common/registry.h"
#include "steps/harness/cli.h"
#include "steps/harness/cublas_baseline.h"
#include "steps/harness/gbench.h"
#include "steps/harness/spin.h"

namespace {

// Inputs are made once per shape and shared by every implementation benchmarked on it
// (registration keeps one shape's benchmarks together). Random, never zeros.
struct InputCache {
  fa::Problem shape;  // with causal ignored
  std::unique_ptr<fa::DeviceProblem> dev;
};

bool same_shape(const fa::Problem& a, const fa::Problem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv &&
         a.n_q == b.n_q && a.n_kv == b.n_kv && a.head_dim == b.head_dim && a.dtype == b.dtype &&
         a.layout == b.layout;
}

fa::DeviceProblem& inputs_for(const fa::Problem& p) {
  static InputCache cache;
  if (!cache.dev || !same_shape(cache.shape, p)) {
    cache.dev.reset();  // free the previous shape first
    cache.dev =
        std::make_unique<fa::DeviceProblem>(fa::make_inputs(p, fa::Distribution::Normal, 2024), 0);
    cache.shape = p;
  }
  return *cache.dev;
}

// The backward's inputs, shared by every backward step timed on one shape: Q, K, V and dO
// random, made once per shape (host copies kept for the other causal setting), and O and L
// from `forward`, made once per shape and causal setting (they depend on it).
struct BackwardCache {
  fa::Problem host_shape;  // of `in` and `d_o` (causal ignored)
  std::unique_ptr<fa::HostInputs> in;
  std::vector<float> d_o;
  fa::Problem shape;  // of `dev`, causal included
  const fa::StepInfo* forward = nullptr;
  std::unique_ptr<fa::DeviceBackward> dev;
};

fa::DeviceBackward& backward_inputs_for(const fa::Problem& p, const fa::StepInfo& forward) {
  static BackwardCache cache;
  if (cache.dev && same_shape(cache.shape, p) && cache.shape.causal == p.causal &&
      cache.forward == &forward)
    return *cache.dev;
  cache.dev.reset();  // free the previous shape first
  if (!cache.in || !same_shape(cache.host_shape, p)) {
    cache.in = std::make_unique<fa::HostInputs>(fa::make_inputs(p, fa::Distribution::Normal, 2024));
    cache.d_o = fa::make_inputs(p, fa::Distribution::Normal, 2025).q;  // random, in Q's shape
    cache.host_shape = p;
  }
  std::vector<float> o, lse;  // the forward, untimed, its buffers freed before the backward's
  fa::forward_for_backward(forward, *cache.in, &o, &lse);
  cache.dev = std::make_unique<fa::DeviceBackward>(*cache.in, o, lse, cache.d_o, 0);
  cache.shape = p;
  cache.forward = &forward;
  return *cache.dev;
}

// The forward step that makes O and L for a backward on `p`: the highest-numbered step with
// a forward pass that can run `p` on this device; null when none can.
const fa::StepInfo* forward_for(const fa::Problem& p, const fa::DeviceLimits& limits) {
  const std::vector<const fa::StepInfo*>& all = fa::steps();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const fa::StepInfo* s = *it;
    if (s->run && fa::check_step(*s, p).empty() &&
        (!s->check_device || s->check_device(p, limits).empty()))
      return s;
  }
  return nullptr;
}

std::string record_name(const std::string& impl, const fa::Problem& p) {
  std::ostringstream os;
  os << impl << '/' << fa::dtype_name(p.dtype) << "/d" << p.head_dim << "/causal" << p.causal
     << "/B" << p.batch << "/Hq" << p.heads_q << "/Hkv" << p.heads_kv << "/Nq" << p.n_q << "/Nkv"
     << p.n_kv << '/' << fa::layout_name(p.layout);
  return os.str();
}

// Benchmarks that stopped with an error (out of memory, a failed launch): main's exit status.
// The benchmarks that stopped with an error, by name: each once, however many repetitions
// (--benchmark_repetitions) ran it.
std::set<std::string> g_failed;

/// Clock cycles of the GPU spin queued before each timed call (--queue-ahead-cycles).
long long g_spin_cycles = 1000000;

// What a benchmark's counters say besides its time.
struct Counts {
  double flops;         // of one call (fa::attention_flops, fa::attention_backward_flops)
  double extra_bytes;   // device memory one call needs beyond its inputs, outputs included
  double min_io_bytes;  // the fewest bytes the pass must move (docs/conventions.md, Bytes)
  double nxn_bytes;     // bytes of N×N intermediates written; < 0: not known, not reported
};

// The forward's counts: the output is O and L, the step's workspace is the rest.
Counts forward_counts(const fa::Problem& p, std::size_t workspace, double nxn_bytes) {
  // Same definition as scripts/peers.py: what a call needs beyond its inputs, output included.
  const double out_bytes = double(fa::dtype_size(p.dtype)) * p.q_elems() + 4.0 * p.lse_elems();
  return {fa::attention_flops(p), double(workspace) + out_bytes, fa::min_io_bytes(p), nxn_bytes};
}

// The timing loop shared by steps and the baseline. `setup` returns the function to time.
void time_it(benchmark::State& state, const std::string& name, const Counts& counts,
             const std::function<std::function<void()>()>& setup) {
  std::vector<double> ms;
  try {
    std::function<void()> fn = setup();
    fn();  // warm-up: module load, first-touch of the workspace
    fn();
    CUDA_CHECK(cudaDeviceSynchronize());
    ms = fa::bench::time_calls(state, fn, g_spin_cycles);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    g_failed.insert(name);
    cudaGetLastError();  // clear a sticky-free error such as an allocation failure
    return;
  }
  const double med = fa::median(ms);
  state.counters["median_ms"] = med;
  state.counters["tflops"] = counts.flops / (med * 1e-3) / 1e12;
  state.counters["extra_device_bytes"] = counts.extra_bytes;
  if (counts.nxn_bytes >= 0) state.counters["nxn_bytes"] = counts.nxn_bytes;
  state.counters["min_io_bytes"] = counts.min_io_bytes;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{
      "Benchmarks of every step and the cuBLAS baseline, forward or backward pass (Google "
      "Benchmark flags, --benchmark_*, pass through)"};
  app.allow_extras();  // Google Benchmark's own flags
  std::vector<int> ns{512, 1024, 2048, 4096, 8192, 16384}, dims{64, 128};
  std::vector<bool> causals{false, true};
  fa::Problem base;
  int tokens = 16384, hidden = 2048;
  std::string only, pass = "forward";
  bool baseline = true, deterministic = false;
  double min_time = 0.3;
  app.add_option("--ns", ns, "sequence lengths N (N_q = N_kv), comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--dims", dims, "head dims d, comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, fa::Limits::kMaxHeadDim))
      ->capture_default_str();
  fa::cli::add_causal_choice(app, &causals);
  fa::cli::add_dtype(app, "--dtype", &base.dtype, "element type: fp32, fp16 or bf16");
  fa::cli::add_layout(app, &base.layout);
  app.add_option("--tokens", tokens, "B·N, kept constant (B = max(1, tokens / N))")
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--hidden", hidden, "H·d, kept constant (H = max(1, hidden / d))")
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--only", only, "one step (name, number or slug)")
      ->check(fa::cli::step_validator(false));
  app.add_option("--pass", pass,
                 "the pass to time: forward, or backward (the steps with a backward entry: dQ, "
                 "dK, dV from Q, K, V, O, L, dO; O and L made by a forward step, untimed)")
      ->check(CLI::IsMember({"forward", "backward"}))
      ->capture_default_str();
  app.add_flag("--deterministic", deterministic,
               "backward only: time the deterministic mode (Problem::deterministic: dQ bitwise "
               "the same from run to run), records named impl+deterministic");
  app.add_option("--baseline", baseline,
                 "also time the cuBLAS baseline (fp32 only, forward pass only)")
      ->check(CLI::IsMember({"true", "false", "on", "off", "1", "0"}, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--queue-ahead-cycles", g_spin_cycles,
                 "before each timed call, a GPU spin of this many clock cycles (1e6 is about "
                 "0.5 ms), as scripts/peers.py does before each peer call; 0 = off")
      ->check(fa::cli::int_range(0))
      ->capture_default_str();
  app.add_option("--min-time", min_time, "seconds of GPU time per benchmark")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  FA_CLI_PARSE(app, argc, argv);
  // What CLI11 left is Google Benchmark's: it takes its flags, anything else is refused.
  if (const int status = fa::bench::init_benchmark(app, argv[0]); status >= 0) return status;

  std::vector<const fa::StepInfo*> chosen = fa::steps();
  if (!only.empty()) chosen = {fa::find_step(only)};  // checked by the validator
  const bool backward = pass == "backward";
  if (deterministic && !backward)
    return fa::cli::refuse(
        "--deterministic: only with --pass backward (the forward passes "
        "are deterministic already)");
  base.deterministic = deterministic;

  // Every shape first, before any GPU is looked for: a shape no tensor limit allows is bad
  // input; a step that cannot run a shape is said once per reason; no step at all is bad input.
  struct Planned {
    const fa::StepInfo* step;  // null: the baseline
    fa::Problem p;
    const fa::StepInfo* forward = nullptr;  // backward: the step that makes O and L
  };
  std::vector<Planned> plan;
  std::vector<std::string> cannot;  // "step: reason", each once
  auto note = [&](const std::string& what) {
    if (std::find(cannot.begin(), cannot.end(), what) == cannot.end()) cannot.push_back(what);
  };
  int step_runs = 0;
  for (int d : dims)
    for (int n : ns) {
      fa::Problem p = base;
      p.head_dim = d;
      p.heads_q = p.heads_kv = std::max(1, hidden / d);
      p.batch = std::max(1, tokens / n);
      p.n_q = p.n_kv = n;
      if (const std::string e = fa::validate(p); !e.empty())
        return fa::cli::refuse("--ns " + std::to_string(n) + " with --dims " + std::to_string(d) +
                               ": " + e);
      for (bool c : causals) {
        p.causal = c;
        for (const fa::StepInfo* step : chosen) {
          if (backward ? !step->backward : !step->run) {  // said only when asked for by name
            if (!only.empty()) note(std::string(step->name) + ": has no " + pass + " pass");
            continue;
          }
          std::string e = fa::check_step(*step, p);
          if (e.empty() && backward) e = fa::check_backward_mode(*step, p);  // --deterministic
          if (!e.empty()) {
            note(std::string(step->name) + ": " + e);
            continue;
          }
          plan.push_back({step, p});
          ++step_runs;
        }
        if (baseline && !backward && p.dtype == fa::DType::F32) plan.push_back({nullptr, p});
      }
    }
  if (baseline && backward && app.count("--baseline") > 0)
    note("cublas_baseline: has no backward pass");
  if (baseline && !backward && base.dtype != fa::DType::F32)
    note(std::string("cublas_baseline: dtype (") + fa::dtype_name(base.dtype) +
         ") is not supported (supported: fp32)");
  for (const std::string& c : cannot) std::fprintf(stderr, "not timed: %s\n", c.c_str());
  if (step_runs == 0) {
    if (backward && cannot.empty())  // no step chosen has a backward pass: nothing was noted
      return fa::cli::refuse(std::string("--pass backward: no step ") +
                             (only.empty() ? "of this program" : "chosen by --only") +
                             " has a backward pass");
    return fa::cli::refuse(std::string(backward ? "no step with a backward pass" : "no step") +
                           " can run the requested shapes (--ns, --dims, --dtype" +
                           (only.empty() ? "" : ", --only") + "): see above");
  }

  if (!fa::no_usable_device().empty()) {
    std::fprintf(stderr, "no usable CUDA device: nothing to benchmark\n");
    return 1;
  }
  // A step this GPU refuses outright (step 08 off compute capability 9.0) is not timed and
  // says why once: that is no benchmark stopped by an error (those make the exit status 1).
  // A backward is asked about each problem (its check_backward_device), and needs a forward
  // step that runs the problem here to make O and L.
  const fa::DeviceLimits limits = fa::device_limits(0);
  cannot.clear();
  std::vector<Planned> runnable;
  for (Planned x : plan) {
    std::string why;
    if (x.step && !backward) {
      why = fa::device_refusal(*x.step, limits);
    } else if (x.step) {
      if (x.step->check_backward_device) why = x.step->check_backward_device(x.p, limits);
      if (why.empty() && !(x.forward = forward_for(x.p, limits)))
        why = "no forward step runs " + x.p.describe() + " on this GPU to make O and L";
    }
    if (!why.empty()) {
      note(std::string(x.step->name) + ": " + why);
      continue;
    }
    runnable.push_back(x);
  }
  plan = std::move(runnable);
  for (const std::string& c : cannot)
    std::fprintf(stderr, "not timed on this GPU: %s\n", c.c_str());
  if (std::none_of(plan.begin(), plan.end(), [](const Planned& x) { return x.step != nullptr; })) {
    std::fprintf(stderr, "no step chosen can run on this GPU: nothing to benchmark\n");
    return 1;
  }

  for (const Planned& x : plan) {
    const fa::Problem p = x.p;
    if (const fa::StepInfo* step = x.step; step && backward) {
      const fa::StepInfo* forward = x.forward;
      const std::string name = record_name(
          std::string(step->name) + (p.deterministic ? "+deterministic" : "") + "/backward", p);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [step, forward, p, name](benchmark::State& st) {
            const std::size_t ws =
                step->backward_workspace_bytes ? step->backward_workspace_bytes(p) : 0;
            // dQ, dK and dV are the outputs: counted as the forward counts O and L.
            const double grads =
                double(fa::dtype_size(p.dtype)) * (p.q_elems() + 2.0 * p.kv_elems());
            auto buffer = std::make_shared<fa::DeviceBuffer>();
            st.SetLabel(std::string("O and L from ") + forward->name);
            time_it(st, name,
                    {fa::attention_backward_flops(p), double(ws) + grads,
                     fa::backward_min_io_bytes(p), -1},
                    [step, forward, p, ws, buffer]() -> std::function<void()> {
                      fa::DeviceBackward& dev = backward_inputs_for(p, *forward);
                      *buffer = fa::DeviceBuffer(ws);
                      return [step, p, &dev, buffer] {
                        fa::run_backward(*step, p, dev.tensors(), buffer->get());
                      };
                    });
          })
          ->UseManualTime()
          ->MinTime(min_time)
          ->Unit(benchmark::kMillisecond);
    } else if (step) {
      const std::string name = record_name(step->name, p);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [step, p, name](benchmark::State& st) {
            const std::size_t ws = step->workspace_bytes ? step->workspace_bytes(p) : 0;
            auto buffer = std::make_shared<fa::DeviceBuffer>();
            time_it(st, name,
                    forward_counts(
                        p, ws, step->nxn_bytes_written ? double(step->nxn_bytes_written(p)) : 0),
                    [step, p, ws, buffer]() -> std::function<void()> {
                      fa::DeviceProblem& dev = inputs_for(p);
                      *buffer = fa::DeviceBuffer(ws);
                      return [step, p, &dev, buffer] {
                        fa::run_step(*step, p, dev.tensors(), buffer->get());
                      };
                    });
          })
          ->UseManualTime()
          ->MinTime(min_time)
          ->Unit(benchmark::kMillisecond);
    } else {
      const std::string name = record_name("cublas_baseline", p);
      benchmark::RegisterBenchmark(
          name.c_str(),
          [p, name](benchmark::State& st) {
            auto base = std::make_shared<std::unique_ptr<fa::baseline::CublasAttention>>();
            time_it(st, name,
                    forward_counts(p, fa::baseline::CublasAttention::workspace_bytes(p),
                                   double(fa::baseline::CublasAttention::nxn_bytes_written(p))),
                    [p, base]() -> std::function<void()> {
                      fa::DeviceProblem& dev = inputs_for(p);
                      *base = std::make_unique<fa::baseline::CublasAttention>(p);
                      return [&dev, base] { (*base)->run(dev.tensors()); };
                    });
          })
          ->UseManualTime()
          ->MinTime(min_time)
          ->Unit(benchmark::kMillisecond);
    }
  }

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return fa::bench::benchmarks_status(g_failed);
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
