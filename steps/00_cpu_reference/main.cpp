// Step 00 — attention on the CPU, and the memory wall that motivates FlashAttention.
//
// What this step is: the formula, computed twice on the CPU.
//   reference/attention.cpp  S = scale·QKᵀ, P = softmax(S), O = PV in double, with Eigen. It
//                            materialises S and P: N_q × N_kv numbers per head, each.
//   reference/streaming.cpp  the online softmax: K/V stream through in tiles, each query
//                            row keeps only a running max m, a sum ℓ and an accumulator a.
// This program runs both on one random problem, checks that every row of P sums to 1 and
// that the streaming model gives the same O, then prints what S and P would cost in memory
// for long sequences — N² per head — against the O(N) that the streaming model keeps.
//
// Build and run:
//   cmake --build build --target 00_cpu_reference && build/bin/00_cpu_reference --n 1000 --causal
//
// Not yet: any GPU. Step 01 moves the reference to the GPU as three kernels, S and P included.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/problem.h"
#include "reference/attention.h"
#include "reference/streaming.h"
#include "steps/harness/cli.h"

namespace {

/// Above this many elements of S (B·H·N²) the program skips keeping S and P: two double
/// matrices of 2^26 elements are already 1 GiB. (That, too, is the memory wall.)
constexpr std::int64_t kMaxKeptScores = std::int64_t{1} << 26;
/// The longest sequence this program takes: the reference holds S and P of one head in
/// double, 16·N² bytes (1 GiB at 8192).
constexpr int kMaxN = 8192;
/// Device memory of one NVIDIA H200, for scale.
constexpr double kH200Bytes = 141e9;

std::vector<float> normal_values(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& e : x) e = normal(rng);
  return x;
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Step 00: CPU reference attention, the streaming model, and the N x N wall"};
  fa::Problem p;
  p.heads_q = p.heads_kv = 4;
  p.n_q = p.n_kv = 512;
  int n = p.n_q;
  std::uint64_t seed = 1;
  app.add_option("--batch", p.batch, "batch size B")
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--heads", p.heads_q, "heads H (query and key/value)")
      ->check(fa::cli::int_range(1))
      ->capture_default_str();
  app.add_option("--n", n,
                 "sequence length N (queries and keys); the reference holds one head's S and "
                 "P, 16·N² bytes, so at most 8192 (1 GiB)")
      ->check(fa::cli::int_range(1, kMaxN))
      ->capture_default_str();
  app.add_option("--d", p.head_dim, "head dimension d")
      ->check(fa::cli::int_range(1, fa::Limits::kMaxHeadDim))
      ->capture_default_str();
  app.add_flag("--causal", p.causal, "causal mask");
  app.add_option("--seed", seed, "seed of the random inputs")
      ->check(fa::cli::uint64_range())
      ->capture_default_str();
  FA_CLI_PARSE(app, argc, argv);
  p.heads_kv = p.heads_q;
  p.n_q = p.n_kv = n;
  if (const int status = fa::cli::check_problem(p); status >= 0) return status;

  std::printf("problem: %s, seed %llu\n", p.describe().c_str(),
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const std::vector<float> q = normal_values(p.q_elems(), rng);
  const std::vector<float> k = normal_values(p.kv_elems(), rng);
  const std::vector<float> v = normal_values(p.kv_elems(), rng);

  // 1. The reference, in double. Keep S and P when they fit, to look at P.
  const bool keep = p.lse_elems() * p.n_kv <= kMaxKeptScores;
  const fa::ref::Result ref = fa::ref::attention(p, q.data(), k.data(), v.data(), keep);
  double sum = 0.0, sum_abs = 0.0;
  for (double x : ref.o) {
    sum += x;
    sum_abs += std::abs(x);
  }
  std::printf("reference O checksum: sum %.9g, sum |O| %.9g\n", sum, sum_abs);

  // 2. Softmax is a probability distribution: every row of P that sees a key sums to 1.
  if (keep) {
    double worst = 0.0;
    for (std::int64_t row = 0; row < p.lse_elems(); ++row) {
      if (p.kv_end(static_cast<int>(row % p.n_q)) == 0) continue;  // row sees nothing
      double row_sum = 0.0;
      for (int j = 0; j < p.n_kv; ++j) row_sum += ref.p[row * p.n_kv + j];
      worst = std::max(worst, std::abs(row_sum - 1.0));
    }
    std::printf("rows of P: max |sum - 1| = %.3g over %lld rows\n", worst,
                static_cast<long long>(p.lse_elems()));
  } else {
    std::printf("rows of P: not checked, S and P would take %.1f GiB here\n",
                2.0 * 8.0 * static_cast<double>(p.lse_elems() * p.n_kv) / (1 << 30));
  }

  // 3. The streaming model, in float, with the kernels' usual 64 × 64 tiles.
  std::vector<float> o(p.q_elems()), lse(p.lse_elems());
  fa::ref::streaming_attention(p, q.data(), k.data(), v.data(), o.data(), lse.data(), {64, 64});
  double err_o = 0.0, err_l = 0.0;
  for (std::size_t i = 0; i < o.size(); ++i) err_o = std::max(err_o, std::abs(o[i] - ref.o[i]));
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(ref.lse[i])) err_l = std::max(err_l, std::abs(lse[i] - ref.lse[i]));
  std::printf(
      "streaming model (64 x 64 tiles, fp32): max |O - O_ref| = %.3g, "
      "max |L - L_ref| = %.3g\n\n",
      err_o, err_l);

  // 4. The memory wall. Materialising S and P costs 2·N² fp32 numbers per head; the
  // streaming model writes only O (N·d) and L (N) per head.
  const int kHeads = 32, kBigBatch = 8;
  std::printf("The N x N wall (fp32, H = %d, d = %d):\n", kHeads, p.head_dim);
  std::printf("%8s  %14s  %14s  %14s  %14s\n", "N", "S+P per head", "B=1 total", "B=8 total",
              "O+L, B=1");
  std::int64_t first_too_big = 0;  // first N whose S+P (B=1) exceeds an H200
  for (std::int64_t big_n = 1024; big_n <= 128 * 1024; big_n *= 2) {
    const double per_head = 2.0 * 4.0 * static_cast<double>(big_n) * static_cast<double>(big_n);
    const double o_plus_l = 4.0 * static_cast<double>(big_n) * (p.head_dim + 1) * kHeads;
    if (first_too_big == 0 && per_head * kHeads > kH200Bytes) first_too_big = big_n;
    std::printf("%7lldK  %14s  %14s  %14s  %14s\n", static_cast<long long>(big_n / 1024),
                fa::cli::human_bytes(per_head).c_str(),
                fa::cli::human_bytes(per_head * kHeads).c_str(),
                fa::cli::human_bytes(per_head * kHeads * kBigBatch).c_str(),
                fa::cli::human_bytes(o_plus_l).c_str());
  }
  std::printf(
      "\nAn H200 holds %.0f GB: from N = %lldK on, S and P of one batch element\n"
      "(H = %d) no longer fit. The streaming model's O and L grow only linearly.\n",
      kH200Bytes / 1e9, static_cast<long long>(first_too_big / 1024), kHeads);
  return 0;
} catch (const std::exception& e) {
  return fa::cli::fail(e);
}
