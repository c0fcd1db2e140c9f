// variants.cu — the measured table of versions of chapter 07.
//
// Runs step 07's kernel in several configurations (variants_d64.cu, variants_d128.cu): first
// each is checked against the double reference on small awkward problems (the tests' judge,
// compare.h), then timed on the benchmark shapes of docs/conventions.md (B·N = 16384, H·d = 2048,
// bf16, [B, N, H, d]) next to the registered steps 05 and 07, in one process. A variant that fails
// its check is reported and not timed.
//
//   build/bin/variants_07 --d 128 --ns 1024,4096,16384 --out-md docs/results/h200-variants.md
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_problem.h"
#include "common/inputs.h"
#include "common/launch.h"
#include "common/perf.h"
#include "common/problem.h"
#include "common/registry.h"
#include "reference/compare.h"
#include "steps/harness/cli.h"
#include "variants.h"

namespace {

using fa::step07::Variant;

/// The check of one variant: "" when every problem passes, else the first failure.
std::string check_variant(const Variant& v) {
  const fa::Problem problems[] = {
      fa::make_problem(1, 4, 2, 77, 300, v.head_dim, true),
      fa::make_problem(2, 2, 2, 300, 129, v.head_dim, false, fa::Layout::BHND),
      fa::make_problem(1, 2, 1, 256, 256, v.head_dim, true),
      fa::make_problem(1, 2, 2, 129, 1000, v.head_dim, false),
  };
  std::uint64_t seed = 1234;
  for (fa::Problem p : problems) {
    p.dtype = fa::DType::BF16;
    const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, ++seed);
    fa::DeviceProblem dev(in, 0);  // outputs poisoned (NaN) on upload
    v.launch(fa::step07::make_fwd_params(p, dev.tensors()), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> o, lse;
    dev.download(&o, &lse);
    const std::string e = fa::ref::verdict(p, o, lse, fa::ref::expected_for(in));
    if (!e.empty()) return p.describe() + ": " + e;
  }
  return {};
}

struct Row {
  const fa::StepInfo* step = nullptr;  // a registered step, run through run_step
  const Variant* variant = nullptr;    // or a variant, launched directly
  std::string name, change, config;
  int regs = 0, spill = 0, smem = 0;
  std::string check;           // "ok" or why not
  std::vector<double> tflops;  // per (causal, N)
};

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Step 07's kernel in the configurations of chapter 07's table of versions"};
  std::vector<int> dims{64, 128}, ns{1024, 4096, 16384};
  int reps = 30, warmup = 5;
  std::string out_md, meta;
  // The head dims the variants are compiled for (variants_d64.cu, variants_d128.cu).
  const std::vector<int> compiled_dims{64, 128};
  app.add_option("--d", dims, "head dims, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(compiled_dims))
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
      ->check(fa::cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs first")
      ->check(fa::cli::int_range(0, 10000))
      ->capture_default_str();
  app.add_option("--out-md", out_md, "also write the tables to this Markdown file");
  app.add_option("--meta", meta, "a line for the top of the Markdown (GPU, driver, commit)");
  FA_CLI_PARSE(app, argc, argv);

  if (!fa::no_usable_device().empty()) {
    std::cerr << "error: no CUDA device: this program times kernels and needs a GPU\n";
    return 77;
  }

  std::ostringstream md;
  md << "# Step 07, version by version (bf16, B·N = 16384, H·d = 2048, [B, N, H, d])\n\n";
  if (!meta.empty()) md << meta << "\n\n";
  md << "TFLOP/s (4·B·H·N²·d, halved when causal), median of " << reps << " runs after " << warmup
     << " warm-ups, every configuration in one process (build/bin/variants_07). "
     << "Each variant first passes the tests' judge against the double reference on four "
        "small awkward problems (tails, N_q ≠ N_kv, causal, GQA, both layouts). regs / spill: "
        "registers per thread and local-memory bytes of the non-causal kernel.\n";

  for (int d : dims) {
    std::vector<Variant> variants;
    if (d == 64)
      fa::step07::add_d64_variants(variants);
    else if (d == 128)
      fa::step07::add_d128_variants(variants);
    else  // unreachable: --d is checked against compiled_dims
      return fa::cli::refuse("--d: head dim " + std::to_string(d) + " has no variants");
    std::vector<Row> rows;
    // The registered steps 05 and 07 first, on the same inputs.
    for (const char* name : {"05_tensor_cores", "07_flash_attention_2"}) {
      const fa::StepInfo* s = fa::find_step(name);
      if (!s) continue;
      Row r;
      r.step = s;
      r.name = name;
      r.change = s->number == 5 ? "step 05: WMMA, S and P through shared memory"
                                : "step 07 as registered (FwdConfig)";
      r.config = "-";
      r.check = "tests";
      rows.push_back(r);
    }
    for (const Variant& v : variants) {
      Row r;
      r.variant = &v;
      r.name = v.name;
      r.change = v.change;
      r.config = v.config;
      r.regs = v.attr.numRegs;
      r.spill = static_cast<int>(v.attr.localSizeBytes);
      r.smem = v.smem_bytes;
      const std::string e = check_variant(v);
      r.check = e.empty() ? "ok" : "FAILS: " + e;
      std::cerr << "d=" << d << " " << v.name << " (" << v.config << "): check " << r.check << "\n";
      rows.push_back(r);
    }

    for (bool causal : {false, true})
      for (int n : ns) {
        fa::Problem p = fa::make_problem(16384 / n, 2048 / d, 2048 / d, n, n, d, causal);
        p.dtype = fa::DType::BF16;
        const fa::HostInputs in = fa::make_inputs(p, fa::Distribution::Normal, 42);
        fa::DeviceProblem dev(in, 0);
        const double flops = fa::attention_flops(p);
        for (Row& r : rows) {
          double ms = 0;
          if (r.step) {
            ms = fa::time_median_ms([&] { fa::run_step(*r.step, p, dev.tensors(), nullptr); },
                                    warmup, reps);
          } else if (r.check == "ok") {
            const fa::step07::FwdParams params = fa::step07::make_fwd_params(p, dev.tensors());
            ms = fa::time_median_ms([&] { r.variant->launch(params, nullptr); }, warmup, reps);
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
  std::cout << md.str();
  if (!out_md.empty()) {
    std::ofstream f(out_md);
    f << md.str();
    if (!f) {
      std::cerr << "error: --out-md: cannot write " << out_md << "\n";
      return 1;
    }
  }
  return 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
