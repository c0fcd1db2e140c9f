// variants_table.cpp — see variants_table.h.
#include "variants_table.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/perf.h"
#include "reference/compare.h"
#include "steps/harness/cli.h"
#include "steps/harness/spin.h"

namespace fa::variants {
namespace {

/// The problems a variant is checked on, bf16. The fifth and sixth have more query blocks than
/// a GPU has SMs (300 and more), so that a persistent grid's CTAs each take several: blocks of
/// 3 K/V tiles (an odd count: the next block starts on the other ring stage), then causal
/// blocks that see 0 or 1 tile (N_kv < N_q). A backward table adds a causal problem with
/// N_kv > N_q and many K/V tiles (rows that see no key of a tile, the CTAs' unequal work),
/// and one in the deterministic mode (Problem::deterministic), which every backward step
/// accepts (registry.h).
std::vector<Problem> check_problems(int d, bool backward) {
  std::vector<Problem> out = {
      make_problem(1, 4, 2, 77, 300, d, true),
      make_problem(2, 2, 2, 300, 129, d, false, Layout::BHND),
      make_problem(1, 2, 1, 256, 256, d, true),
      make_problem(1, 2, 2, 129, 1000, d, false),
      make_problem(2, 150, 30, 8, 300, d, false),
      make_problem(1, 96, 12, 400, 40, d, true),
  };
  if (backward) {
    out.push_back(make_problem(1, 3, 1, 200, 1100, d, true));
    out.push_back(make_problem(2, 4, 2, 190, 300, d, true, Layout::BHND));
    out.back().deterministic = true;
  }
  for (Problem& p : out) p.dtype = DType::BF16;
  return out;
}

/// The backward check of one variant: dQ, dK, dV judged as the backward suite judges them
/// (ref::verdict_backward), O and L from the double reference, gradients and workspace
/// poisoned with NaN first.
std::string check_backward_variant(const Variant& v) {
  static std::map<std::string, ref::ExpectedBackward> references;  // once per problem
  std::uint64_t seed = 4321;
  for (const Problem& p : check_problems(v.head_dim, true)) {
    const HostInputs in = make_inputs(p, Distribution::Normal, ++seed);
    const std::string key = p.describe() + " seed " + std::to_string(seed);
    auto it = references.find(key);
    if (it == references.end())
      it = references
               .emplace(key, ref::expected_backward(
                                 in, make_inputs(p, Distribution::Normal, seed ^ 0x5bd1e995u).q))
               .first;
    const ref::ExpectedBackward& want = it->second;
    DeviceBackward dev(in, want.o, want.lse, want.d_o, v.backward_workspace_bytes(p));
    dev.poison();
    v.backward(p, dev.tensors(), dev.workspace());
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> dq, dk, dv;
    dev.download(&dq, &dk, &dv);
    const std::string e = ref::verdict_backward(p, dq, dk, dv, want);
    if (!e.empty()) return p.describe() + ": " + e;
  }
  return {};
}

/// The check of one variant: "" when every problem passes, else the first failure.
std::string check_variant(const Variant& v, bool backward) {
  if (backward) return check_backward_variant(v);
  // The references, computed once per problem for all the variants of a head dim.
  static std::map<std::string, ref::Expected> references;
  std::uint64_t seed = 1234;
  for (const Problem& p : check_problems(v.head_dim, false)) {
    const HostInputs in = make_inputs(p, Distribution::Normal, ++seed);
    DeviceProblem dev(in, 0);  // outputs poisoned (NaN) on upload
    v.run(p, dev.tensors());
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> o, lse;
    dev.download(&o, &lse);
    const std::string key = p.describe() + " seed " + std::to_string(seed);
    auto it = references.find(key);
    if (it == references.end()) it = references.emplace(key, ref::expected_for(in)).first;
    const std::string e = ref::verdict(p, o, lse, it->second);
    if (!e.empty()) return p.describe() + ": " + e;
  }
  return {};
}

/// The median of `reps` timed calls after `warmup` untimed ones, each timed call after a GPU
/// spin of `spin_cycles` (spin.h), as bench_all times the steps.
template <typename Fn>
double time_with_spin(Fn&& fn, int warmup, int reps, long long spin_cycles) {
  return time_median_ms(fn, warmup, reps, nullptr, [spin_cycles] { bench::gpu_spin(spin_cycles); });
}

struct Row {
  const StepInfo* step = nullptr;    // a registered step, run through run_step
  const Variant* variant = nullptr;  // or a variant
  std::string name, change, config;
  int regs = 0, spill = 0, smem = 0;
  std::string check;           // "ok" or why not
  std::vector<double> tflops;  // per (causal, N)
};

/// A backward table's random inputs of one shape: Q, K, V and dO, the same with and without
/// causal masking (drawn once per N: most of the table's host time).
struct HostBackward {
  HostInputs in;
  std::vector<float> d_o;
};

/// A backward table's timed inputs for `p`: `host` (drawn for p's shape, its causal flag set to
/// p's here), O and L from the registered step `forward` (untimed, checked as bench_all checks
/// them), and a workspace of `workspace_bytes`.
std::unique_ptr<DeviceBackward> backward_inputs(const Problem& p, HostBackward& host,
                                                const StepInfo& forward,
                                                std::size_t workspace_bytes) {
  host.in.problem = p;
  std::vector<float> o, lse;
  forward_for_backward(forward, host.in, &o, &lse);
  return std::make_unique<DeviceBackward>(host.in, o, lse, host.d_o, workspace_bytes);
}

}  // namespace

void set_kernel_counts(Variant& v, const void* kernel) {
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  v.regs = attr.numRegs;
  v.spill = static_cast<int>(attr.localSizeBytes);
}

int run_main(const Table& table, int argc, char** argv) try {
  CLI::App app{table.title + " (bf16, the benchmark's shapes)"};
  std::vector<int> dims = table.head_dims, ns{1024, 4096, 16384};
  int reps = 30, warmup = 5;
  std::string out_md, meta;
  app.add_option("--d", dims, "head dims, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(table.head_dims))
      ->capture_default_str();
  const CLI::Range n_range(1, 16384);
  const CLI::Validator divides(
      [n_range](std::string& s) -> std::string {
        if (std::string e = n_range(s); !e.empty()) return e;
        int n = 0;  // read as CLI11 reads it (n_range accepted it: 1 <= n <= 16384)
        if (!CLI::detail::lexical_cast(s, n) || n < 1 || 16384 % n != 0)
          return "Value " + s + " does not divide 16384 (B = 16384 / N)";
        return {};
      },
      "divisors of 16384");
  app.add_option("--ns", ns, "sequence lengths N, comma-separated (B = 16384 / N, H = 2048 / d)")
      ->delimiter(',')
      ->check(divides)
      ->capture_default_str();
  app.add_option("--reps", reps, "timed runs per measurement (median reported)")
      ->check(cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs first")
      ->check(cli::int_range(0, 10000))
      ->capture_default_str();
  long long spin_cycles = 1000000;
  app.add_option("--queue-ahead-cycles", spin_cycles,
                 "before each timed call, a GPU spin of this many clock cycles, as bench_all "
                 "does (docs/conventions.md, Timing); 0 = back to back")
      ->check(cli::int_range(0))
      ->capture_default_str();
  std::vector<std::string> only;
  app.add_option("--variants", only,
                 "only these rows, by name, comma-separated (default: every row; the registered "
                 "step's row is left out when this is given)")
      ->delimiter(',');
  bool check_only = false;
  app.add_flag("--check-only", check_only,
               "check the rows against the double reference and time nothing: exit status 1 if "
               "one fails");
  app.add_option("--out-md", out_md, "also write the tables to this Markdown file");
  app.add_option("--meta", meta, "a line for the top of the Markdown (GPU, driver, commit)");
  FA_CLI_PARSE(app, argc, argv);

  if (!no_usable_device().empty()) {
    std::cerr << "error: no CUDA device: this program times kernels and needs a GPU\n";
    return 77;
  }
  // Every name a row at one of the head dims asked for (the rows are made with the device: each
  // asks it for its kernel's registers, so this comes after the device check).
  for (const std::string& name : only) {
    bool known = false;
    for (int d : dims)
      for (const Variant& v : table.variants_for(d)) known = known || v.name == name;
    if (!known)
      return cli::refuse("--variants: " + name + " is not a row of " + table.program +
                         " at the head dims asked for (--d)");
  }
  const DeviceLimits limits = device_limits(0);
  const bool bwd = table.backward;
  const StepInfo* forward = nullptr;  // backward: makes O and L
  if (bwd) {
    forward = find_step(table.forward_step);
    if (!forward || !forward->run)
      throw std::logic_error(table.program + ": forward step '" + table.forward_step +
                             "' is not linked in or has no forward pass");
  }

  bool any_failed = false;  // --check-only
  std::ostringstream md;
  md << "# " << table.title << " (bf16, B·N = 16384, H·d = 2048, [B, N, H, d])\n\n";
  if (!meta.empty()) md << meta << "\n\n";
  md << (bwd ? "Backward TFLOP/s (2.5 × the forward's 4·B·H·N²·d, halved when causal: dQ, dK and "
               "dV, every kernel of the pass, on O and L from " +
                   table.forward_step + ")"
             : std::string("TFLOP/s (4·B·H·N²·d, halved when causal)"))
     << ", median of " << reps << " runs after " << warmup
     << " warm-ups, every configuration in one process (build/bin/" << table.program << "), "
     << (spin_cycles > 0 ? "each timed call after a GPU spin of " + std::to_string(spin_cycles) +
                               " cycles as in bench_all. "
                         : "timed back to back. ")
     << "Each variant first passes the tests' judge against the double reference on "
     << check_problems(64, bwd).size()
     << " small awkward problems (tails, N_q ≠ N_kv, causal, GQA, both layouts, more query "
        "blocks than SMs"
     << (bwd ? "; gradients judged by the backward suite's verdict, one problem in the "
               "deterministic mode"
             : "")
     << "). regs / spill: registers per thread and local-memory bytes of the non-causal "
     << (bwd ? "main kernel" : "kernel") << ".\n";

  for (int d : dims) {
    const std::vector<Variant> variants = table.variants_for(d);
    std::vector<Row> rows;
    for (const std::string& name : table.steps) {
      if (!only.empty() || check_only) break;  // the registered step: only in a full table
      const StepInfo* s = find_step(name);
      if (!s || (bwd ? !s->backward : !s->run)) continue;
      if (!bwd && !device_refusal(*s, limits).empty()) continue;
      if (bwd && s->check_backward_device) {  // asked about the largest shape it will time
        Problem big = make_problem(16384 / ns.back(), 2048 / d, 2048 / d, ns.back(), ns.back(), d);
        big.dtype = DType::BF16;
        if (!s->check_backward_device(big, limits).empty()) continue;
      }
      Row r;
      r.step = s;
      r.name = name;
      r.change = table.step_change(*s);
      r.config = "-";
      r.check = "tests";
      rows.push_back(r);
    }
    int failed = 0;
    for (const Variant& v : variants) {
      if (!only.empty() && std::find(only.begin(), only.end(), v.name) == only.end()) continue;
      Row r;
      r.variant = &v;
      r.name = v.name;
      r.change = v.change;
      r.config = v.config;
      r.regs = v.regs;
      r.spill = v.spill;
      r.smem = v.smem_bytes;
      const std::string e = check_variant(v, bwd);
      r.check = e.empty() ? "ok" : "FAILS: " + e;
      std::cerr << "d=" << d << " " << v.name << " (" << v.config << "): check " << r.check << "\n";
      failed += e.empty() ? 0 : 1;
      rows.push_back(r);
    }
    if (check_only) {
      std::cout << "d=" << d << ": " << rows.size() << " rows checked, " << failed << " failed\n";
      any_failed = any_failed || failed > 0;
      continue;
    }

    std::map<int, HostBackward> host_bwd;  // backward: the host inputs per N
    for (bool causal : {false, true})
      for (int n : ns) {
        Problem p = make_problem(16384 / n, 2048 / d, 2048 / d, n, n, d, causal);
        p.dtype = DType::BF16;
        // Forward: Q, K, V. Backward: those, O and L from the forward step, dO, and one
        // workspace for every row (the largest any needs; its contents on entry do not matter).
        std::unique_ptr<DeviceProblem> dev;
        std::unique_ptr<DeviceBackward> dev_bwd;
        if (bwd) {
          std::size_t ws = 0;
          for (const Row& r : rows) {
            const std::size_t w =
                r.step
                    ? (r.step->backward_workspace_bytes ? r.step->backward_workspace_bytes(p) : 0)
                    : r.variant->backward_workspace_bytes(p);
            ws = std::max(ws, w);
          }
          auto it = host_bwd.find(n);
          if (it == host_bwd.end())
            it = host_bwd
                     .emplace(n, HostBackward{make_inputs(p, Distribution::Normal, 42),
                                              make_inputs(p, Distribution::Normal, 43).q})
                     .first;
          dev_bwd = backward_inputs(p, it->second, *forward, ws);
        } else {
          dev = std::make_unique<DeviceProblem>(make_inputs(p, Distribution::Normal, 42), 0);
        }
        const double flops = bwd ? attention_backward_flops(p) : attention_flops(p);
        for (Row& r : rows) {
          double ms = 0;
          if (r.step && bwd) {
            ms = time_with_spin(
                [&] { run_backward(*r.step, p, dev_bwd->tensors(), dev_bwd->workspace()); }, warmup,
                reps, spin_cycles);
          } else if (r.step) {
            ms = time_with_spin([&] { run_step(*r.step, p, dev->tensors(), nullptr); }, warmup,
                                reps, spin_cycles);
          } else if (r.check == "ok" && bwd) {
            ms = time_with_spin(
                [&] { r.variant->backward(p, dev_bwd->tensors(), dev_bwd->workspace()); }, warmup,
                reps, spin_cycles);
          } else if (r.check == "ok") {
            ms = time_with_spin([&] { r.variant->run(p, dev->tensors()); }, warmup, reps,
                                spin_cycles);
          } else {  // failed its check: not timed
            r.tflops.push_back(0);
            continue;
          }
          CUDA_CHECK(cudaGetLastError());
          r.tflops.push_back(flops / (ms * 1e-3) / 1e12);
          std::cerr << "  d=" << d << (causal ? " causal " : " full ") << "N=" << n << " " << r.name
                    << ": " << ms << " ms\n";
        }
      }

    md << "\n## d = " << d << "\n\n| version | change | configuration | regs | spill | smem "
       << "| check |";
    for (const char* c : {"", " causal"})
      for (int n : ns) md << " N=" << n << c << " |";
    md << "\n|---|---|---|---|---|---|---|";
    for (std::size_t i = 0; i < 2 * ns.size(); ++i) md << "---|";
    md << "\n";
    for (const Row& r : rows) {
      md << "| " << r.name << " | " << r.change << " | " << r.config << " | "
         << (r.regs ? std::to_string(r.regs) : "-") << " | "
         << (r.regs ? std::to_string(r.spill) + " B" : "-") << " | "
         << (r.smem ? std::to_string(r.smem / 1024) + " KiB" : "-") << " | " << r.check << " |";
      for (double t : r.tflops) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " %.1f |", t);
        md << (t > 0 ? buf : " – |");
      }
      md << "\n";
    }
  }
  if (check_only) return any_failed ? 1 : 0;
  if (cli::print_markdown(md.str(), out_md) != 0) return 1;
  return 0;
} catch (const std::exception& e) {
  return cli::fail(e);
}

}  // namespace fa::variants
