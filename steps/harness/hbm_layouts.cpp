// hbm_layouts.cpp — bin/hbm_layouts: how fast the HBM gives a K/V cache's rows to blocks that
// each read one head of one sequence, as the decoding kernels' blocks do, when the cache is laid
// out [B, H_kv, N, d] (one head's rows follow each other: PyTorch's layout) and when it is
// [B, N, H_kv, d] (one position's rows of every head side by side: the decoding step's cache).
// The same kernel reads both (fa::bench::kv_rows_read, steps/harness/hbm.h): nothing is
// computed, and only the rows' addresses differ, so the ratio of the two is the layout's own
// cost to the DRAM. Chapter 12 (The peers in the cache's layout) reads it beside the decoding
// benchmark, whose peers it explains.
//
//   build/bin/hbm_layouts                                   # B = 8, 32; H_kv = 32, 8; 16k, 32k
//   build/bin/hbm_layouts --batches 8 --caches 16384 --out-md out/layouts.md
//
// By default one block per (head, sequence) and no split of the keys: where the decoding rule
// splits (few heads and sequences, e.g. B = 8 with 8 K/V heads: 64 blocks), the program's grid
// is smaller than the kernels' and does not fill the GPU, and its figures there are not the
// kernels'. --heads-per-block 1,2,4 also times blocks that copy 2 or 4 neighbouring heads (in
// bnhd, 512 or 1024 contiguous bytes per position), each head group's positions split in as many
// runs so that the grid keeps batch · H_kv blocks of the same bytes whatever the heads per
// block (the decoding variants m3w4spah2, m3w4spah4 split by their own rule instead, e.g. once
// at B = 32 with 32 K/V heads). --starts aligned,spread,sequences also times blocks that begin
// elsewhere than at their first tile and wrap round to it (aligned: every block begins at its
// first position, and the blocks that run at the same time ask for the same positions, in step;
// spread: each block at a tile of its own, in grid order; sequences: the heads of a sequence
// together, each sequence at a tile of its own).
// Rows of 256 bytes (d = 128 in 16 bits), filled with N(0, 1) values on the device. Each layout
// is timed twice, in the order bhnd, bnhd for each heads-per-block value and starts, then all
// again (one
// head per block alone: bhnd, bnhd, bhnd, bnhd), each time the median of --reps runs after
// --warmup, a GPU spin before each run; the table shows their mean and how far apart they were. A
// streaming read of the K cache alone (the decoding benchmark's HBM yardstick, a grid-stride loop)
// is timed at every shape beside them. New inputs made after a freed shape's wait until a streaming
// read of a kept 1 GiB buffer runs at 95% of the figure measured at the start (bin/bench_decode's
// wait, fa::bench::wait_for_decode_hbm). Without a usable CUDA device it says so and exits with
// status 77.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/device_buffer.h"
#include "common/launch.h"
#include "steps/harness/cli.h"
#include "steps/harness/decode_timing.h"  // the decoding programs' wait for HBM reads at speed
#include "steps/harness/hbm.h"

namespace {

struct Row {
  int batch, heads, n, per_block;
  std::string starts;
  double stream, bhnd[2], bnhd[2];
};

fa::bench::KvStarts starts_of(const std::string& name) {
  using fa::bench::KvStarts;
  return name == "spread"      ? KvStarts::kSpread
         : name == "sequences" ? KvStarts::kSequences
                               : KvStarts::kAligned;
}

std::string fixed(double x, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Time reading a K/V cache's rows, one block per head and sequence as the decoding "
      "kernels read them, in the layouts bhnd ([B, H_kv, N, d]) and bnhd ([B, N, H_kv, d]) (d = "
      "128, 16-bit elements: rows of 256 bytes), beside a streaming read of the K cache; TB/s "
      "of the bytes read"};
  std::vector<int> batches{8, 32}, caches{16384, 32768}, heads{32, 8}, per_block{1};
  std::vector<std::string> starts{"aligned"};
  int reps = 20, warmup = 3, max_cache_gib = 40, hbm_gib = 4;
  long long spin_cycles = 1000000;
  std::string out_md, meta;
  app.add_option("--batches", batches, "batch sizes B, comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, 65535))
      ->capture_default_str();
  app.add_option("--caches", caches, "rows per sequence N, comma-separated (multiples of 64)")
      ->delimiter(',')
      ->check(fa::cli::int_range(64))
      ->capture_default_str();
  app.add_option("--heads-kv", heads, "K/V heads H_kv, comma-separated")
      ->delimiter(',')
      ->check(fa::cli::int_range(1, 65535))
      ->capture_default_str();
  app.add_option("--heads-per-block", per_block,
                 "K/V heads one block copies, comma-separated (1, 2, 4; each dividing every "
                 "--heads-kv)")
      ->delimiter(',')
      ->check(CLI::IsMember({1, 2, 4}))
      ->capture_default_str();
  app.add_option("--starts", starts,
                 "where each block begins, comma-separated: aligned (its first position), spread "
                 "(a tile of its own, in grid order over the sequence) or sequences (a tile of "
                 "its sequence's own, the same for the sequence's heads)")
      ->delimiter(',')
      ->check(CLI::IsMember({"aligned", "spread", "sequences"}))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed runs per figure (the median is reported)")
      ->check(fa::cli::int_range(1, 10000))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs before each figure")
      ->check(fa::cli::int_range(0, 1000))
      ->capture_default_str();
  app.add_option("--queue-ahead-cycles", spin_cycles, "GPU spin before each timed run, cycles")
      ->check(fa::cli::int_range(0, 1000000000))
      ->capture_default_str();
  app.add_option("--hbm-gib", hbm_gib, "GiB read by the HBM bandwidth measurement at the start")
      ->check(fa::cli::int_range(1, 64))
      ->capture_default_str();
  app.add_option("--max-cache-gib", max_cache_gib, "refuse a shape whose K and V exceed this")
      ->check(fa::cli::int_range(1, 1024))
      ->capture_default_str();
  app.add_option("--out-md", out_md, "also write the table to this Markdown file");
  app.add_option("--meta", meta, "a line written under the Markdown heading (GPU, commit, date)");
  FA_CLI_PARSE(app, argc, argv);

  // Every shape checked before any GPU is looked for.
  for (int n : caches)
    if (n % 64 != 0)
      return fa::cli::refuse("--caches: " + std::to_string(n) +
                             " must be a multiple of 64 (a block copies 64 rows at a time)");
  for (int g : per_block)
    for (int h : heads)
      if (h % g != 0)
        return fa::cli::refuse("--heads-per-block " + std::to_string(g) +
                               ": must divide every --heads-kv (" + std::to_string(h) + ")");
  for (int b : batches)
    for (int h : heads)
      for (int n : caches) {
        const double gib = 2.0 * b * h * double(n) * 256 / (1 << 30);
        if (gib > max_cache_gib)
          return fa::cli::refuse(
              "--batches " + std::to_string(b) + " --heads-kv " + std::to_string(h) + " --caches " +
              std::to_string(n) + ": K and V need " + fixed(gib, 1) +
              " GiB, more than --max-cache-gib (" + std::to_string(max_cache_gib) + ")");
      }
  if (const std::string why = fa::no_usable_device(); !why.empty()) {
    std::printf("hbm_layouts: no usable CUDA device (%s); nothing measured\n", why.c_str());
    return 77;
  }

  try {
    const fa::bench::HbmRead yardstick =
        fa::bench::measure_hbm_read(std::size_t(hbm_gib) << 30, warmup, reps, spin_cycles);
    std::printf("HBM read bandwidth: %.3f TB/s (%d GiB streaming read, median of %d)\n",
                yardstick.tbps, hbm_gib, reps);
    fa::bench::set_decode_hbm_yardstick(yardstick.tbps);  // and its 1 GiB probe
    std::vector<Row> rows;
    for (int b : batches)
      for (int h : heads)
        for (int n : caches) {
          const std::size_t bytes = std::size_t(b) * h * n * 256;
          fa::DeviceBuffer k(bytes), v(bytes);
          fa::bench::fill_normal(k.get(), bytes / 2, fa::DType::BF16, 1);
          fa::bench::fill_normal(v.get(), bytes / 2, fa::DType::BF16, 2);
          CUDA_CHECK(cudaDeviceSynchronize());
          const fa::bench::HbmWait w = fa::bench::wait_for_decode_hbm();
          if (w.ms > 0)
            std::fprintf(stderr, "B=%d H_kv=%d N=%d: %s %.0f ms for HBM reads at 95%%\n", b, h, n,
                         w.at_speed ? "waited" : "gave up after", w.ms);
          std::vector<Row> shape;
          for (int g : per_block)
            for (const std::string& st : starts)
              shape.push_back(Row{b, h, n, g, st, 0, {0, 0}, {0, 0}});
          for (int round = 0; round < 2; ++round)
            for (Row& r : shape) {
              using fa::bench::KvLayout;
              r.bhnd[round] =
                  fa::bench::kv_rows_read(k.get(), v.get(), b, h, n, KvLayout::kBhnd, r.per_block,
                                          warmup, reps, spin_cycles, starts_of(r.starts))
                      .tbps;
              r.bnhd[round] =
                  fa::bench::kv_rows_read(k.get(), v.get(), b, h, n, KvLayout::kBnhd, r.per_block,
                                          warmup, reps, spin_cycles, starts_of(r.starts))
                      .tbps;
            }
          const double stream =
              fa::bench::time_hbm_read(k.get(), bytes, warmup, reps, spin_cycles).tbps;
          for (Row& r : shape) {
            r.stream = stream;
            std::printf(
                "B=%d H_kv=%d N=%d, %d head(s) per block, %s starts: stream (K) %.3f, bhnd %.3f "
                "%.3f, bnhd %.3f %.3f TB/s\n",
                b, h, n, r.per_block, r.starts.c_str(), r.stream, r.bhnd[0], r.bhnd[1], r.bnhd[0],
                r.bnhd[1]);
            rows.push_back(r);
          }
        }
    std::string md = "# Reading a K/V cache's rows in its two layouts (d = 128, 16-bit rows)\n\n";
    if (!meta.empty()) md += meta + "\n\n";
    md += "K+V bytes read per second (TB/s, 10^12 bytes/s), each the median of " +
          std::to_string(reps) + " runs after " + std::to_string(warmup) +
          " warm-ups, a GPU spin of " + std::to_string(spin_cycles) +
          " cycles before each run (build/bin/hbm_layouts). One block of 128 threads per (head, "
          "sequence) copies its head's rows of K and V into shared memory as the decoding "
          "candidate does (tiles of 64 rows of each, three stages, 16-byte cp.async, thread t "
          "chunk t % 16 of rows t / 16 + 8i, two blocks per SM; with h heads per block, chunk "
          "t % 16h of a position's h rows, positions t / 16h + (8 / h)i), nothing computed "
          "(fa::bench::kv_rows_read), the cache laid out bhnd ([B, H_kv, N, d], one head's rows "
          "one after the other: PyTorch's layout) or bnhd ([B, N, H_kv, d], a position's rows of "
          "every head side by side: the decoding step's cache); each layout timed twice, in the "
          "order bhnd, bnhd for each heads-per-block value and starts, then all again, each "
          "layout's column "
          "the mean of its two runs, *runs apart* "
          "the larger difference between a layout's two runs. *heads per block*: 1, or a block "
          "copies that many neighbouring heads (tiles of 64 / heads positions of each; in bnhd "
          "heads · 256 contiguous bytes per position), each head group's positions split in as "
          "many runs, grid (runs, head groups, sequences): as many blocks of as many bytes. "
          "*starts*: aligned, every block starts at its first position, so that the blocks "
          "running at the same time ask for the same positions in step; spread, block y + "
          "grid_y · z starts at tile (y + grid_y · z) · tiles / (grid_y · grid_z) of its run, "
          "every block at a place of its own; sequences, block (y, z) starts at tile "
          "z · tiles / grid_z, a sequence's heads together and the sequences spread; either "
          "wraps round to its first. *bnhd / bhnd, 1 head*: bnhd over the same shape's bhnd with "
          "one head per block and aligned starts (the same baseline for every row of a shape). "
          "*stream*: the K cache read by a grid-stride streaming "
          "loop (the decoding benchmark's HBM yardstick). HBM read bandwidth measured at the "
          "start: " +
          fixed(yardstick.tbps, 2) + " TB/s (" + std::to_string(hbm_gib) + " GiB).\n\n";
    md +=
        "| B | H_kv | N | heads per block | starts | stream | bhnd | bnhd | bnhd / bhnd | bnhd / "
        "bhnd, 1 head | runs apart |\n"
        "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n";
    auto mean = [](const double(&x)[2]) { return (x[0] + x[1]) / 2; };
    for (const Row& r : rows) {
      const double a = mean(r.bhnd), c = mean(r.bnhd);
      const double apart =
          std::max(std::abs(r.bhnd[0] - r.bhnd[1]) / a, std::abs(r.bnhd[0] - r.bnhd[1]) / c);
      std::string one_head = "–";  // the same shape's bhnd with one head per block
      for (const Row& o : rows)
        if (o.batch == r.batch && o.heads == r.heads && o.n == r.n && o.per_block == 1 &&
            o.starts == "aligned")
          one_head = fixed(c / mean(o.bhnd), 3);
      md += "| " + std::to_string(r.batch) + " | " + std::to_string(r.heads) + " | " +
            std::to_string(r.n) + " | " + std::to_string(r.per_block) + " | " + r.starts + " | " +
            fixed(r.stream, 2) + " | " + fixed(a, 2) + " | " + fixed(c, 2) + " | " +
            fixed(c / a, 3) + " | " + one_head + " | " + fixed(100 * apart, 1) + "% |\n";
    }
    return fa::cli::print_markdown(md, out_md);
  } catch (const std::exception& e) {
    return fa::cli::fail(e);
  }
}
