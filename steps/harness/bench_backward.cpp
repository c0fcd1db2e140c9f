// bench_backward.cpp — times the backward pass of the one backward step this program is linked
// with (bin/bench_10_backward, bin/bench_11_backward_tc): all of its kernels, from the first
// launch to the last (D, the main kernel, the dQ conversion), on one shape.
//
//   bin/bench_11_backward_tc                      # bf16, B = 4, H = 16, N = 4096, d = 128, bhnd
//   bin/bench_11_backward_tc -d 64 --heads-q 32 --heads-kv 32 --causal --deterministic
//
// The default shape is the benchmark's (docs/conventions.md: hidden size 2048, B·N = 16384) at
// N = 4096, in PyTorch's [B, H, N, d] layout, so that the time can be set next to PyTorch's
// own backward on the same shape (torch_flash: scaled_dot_product_attention under
// SDPBackend.FLASH_ATTENTION, dQ, dK, dV from backward(dO), the forward's time subtracted).
// FLOPs are the backward's convention, 2.5 × the forward's (docs/conventions.md, Backward).
//
// Only time is measured, not correctness (the step's test suite and probe judge that): Q, K,
// V, O and dO are random, and L is log N_kv for every row, which keeps every P finite. Each
// timed call is preceded by a GPU spin (--queue-ahead-cycles), as in bench_all, so the events
// time the kernels and not the host's launches. Prints one line: the median time and TFLOP/s.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/perf.h"
#include "common/registry.h"
#include "steps/harness/cli.h"
#include "steps/harness/spin.h"

int main(int argc, char** argv) try {
  const fa::StepInfo* step = nullptr;
  for (const fa::StepInfo* s : fa::steps())
    if (s->backward) step = s;
  if (!step) return fa::cli::refuse("this program is linked with no backward step");

  CLI::App app{std::string("Times the backward pass of step ") + step->name +
               " (all its kernels) on one shape; prints the median time and TFLOP/s"};
  fa::Problem p;
  p.batch = 4;
  p.heads_q = p.heads_kv = 16;
  p.n_q = p.n_kv = 4096;
  p.head_dim = 128;
  p.dtype = step->dtypes.back();
  p.layout = fa::Layout::BHND;
  int warmup = 3, reps = 20;
  long long spin_cycles = 1000000;
  fa::cli::add_problem_options(app, &p);
  fa::cli::add_dtype(app, "--dtype", &p.dtype, "element type: fp32, fp16 or bf16");
  fa::cli::add_layout(app, &p.layout);
  app.add_flag("--deterministic", p.deterministic,
               "the step's deterministic mode (Problem::deterministic)");
  app.add_option("--warmup", warmup, "untimed calls first")
      ->check(fa::cli::int_range(0, 1000))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed calls (the median is printed)")
      ->check(fa::cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--queue-ahead-cycles", spin_cycles,
                 "before each timed call, a GPU spin of this many clock cycles; 0 = off")
      ->check(fa::cli::int_range(0))
      ->capture_default_str();
  FA_CLI_PARSE(app, argc, argv);
  if (const int s = fa::cli::check_problem(p); s >= 0) return s;
  if (const std::string e = fa::check_step(*step, p); !e.empty()) return fa::cli::refuse(e);
  if (const std::string e = fa::check_backward_mode(*step, p); !e.empty())
    return fa::cli::refuse(e);

  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::fprintf(stderr, "no usable CUDA device (%s): nothing to time\n", why.c_str());
    return 1;
  }
  const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, 2024);
  const std::vector<float> o = fa::make_inputs(p, fa::Distribution::Normal, 2025).q;
  const std::vector<float> d_o = fa::make_inputs(p, fa::Distribution::Normal, 2026).q;
  const std::vector<float> lse(static_cast<std::size_t>(p.lse_elems()),
                               std::log(static_cast<float>(p.n_kv)));
  const std::size_t ws = step->backward_workspace_bytes ? step->backward_workspace_bytes(p) : 0;
  fa::DeviceBackward dev(in, o, lse, d_o, ws);

  const auto call = [&] { fa::run_backward(*step, p, dev.tensors(), dev.workspace()); };
  for (int i = 0; i < warmup; ++i) call();
  CUDA_CHECK(cudaDeviceSynchronize());
  fa::EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    if (spin_cycles > 0) fa::bench::gpu_spin(spin_cycles);
    timer.start();
    call();
    ms.push_back(timer.stop_ms());
  }
  const double t = fa::median(ms);
  const double flops = 2.5 * fa::attention_flops(p);
  std::printf(
      "%s backward: %s: %.3f ms median of %d, %.1f TFLOP/s (2.5 x forward FLOPs), "
      "workspace %s\n",
      step->name, p.describe().c_str(), t, reps, flops / (t * 1e-3) / 1e12,
      fa::cli::human_bytes(static_cast<double>(ws)).c_str());
  return 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
