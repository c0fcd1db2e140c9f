// hbm.h — what the decoding benchmark needs on the device besides the step: its caches filled
// with random values in place (a 17 GB cache is not made on the host), and this GPU's HBM
// read bandwidth, measured in the same run as the figures it is compared with.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/problem.h"

namespace fa::bench {

/// \brief Fills `n` elements of a 16-bit dtype (fp16 or bf16; std::invalid_argument for any
/// other) with N(0, 1) values: Box–Muller on a hash of (seed, index), so the same seed gives
/// the same values on every run and device. Never zeros (docs/conventions.md, Timing).
/// \param data device memory, n elements \param n the count \param dtype fp16 or bf16
/// \param seed the seed \param stream the stream
void fill_normal(void* data, std::size_t n, DType dtype, std::uint64_t seed,
                 cudaStream_t stream = nullptr);

/// \brief The measured HBM read bandwidth.
struct HbmRead {
  double bytes = 0;      ///< bytes read by one timed run (the buffer, once)
  double median_ms = 0;  ///< median time of one run
  double tbps = 0;       ///< bytes / median time, in TB/s (10¹² bytes/s)
  int reps = 0;          ///< timed runs
};

/// \brief Times a streaming read of `bytes` of device memory (filled with random values
/// first): every 16-byte piece read once per run by a grid-stride loop of 16-byte loads,
/// nothing written but one word per thread that no run's data can trigger. Counted as bytes
/// read only. After `warmup` untimed runs, `reps` runs timed one by one with CUDA events,
/// each after a GPU spin of `spin_cycles` (spin.h), as the benchmark's calls are.
/// \param bytes the buffer's size, a multiple of 16 \param warmup untimed runs
/// \param reps timed runs \param spin_cycles the spin before each \return the figure
HbmRead measure_hbm_read(std::size_t bytes, int warmup, int reps, long long spin_cycles);

/// \brief The same streaming read and timing as measure_hbm_read, of `bytes` of device memory
/// at `data` (filled, never zeros; 16-byte aligned) instead of a buffer of its own.
/// \param data the memory \param bytes how much, a multiple of 16 \param warmup untimed runs
/// \param reps timed runs \param spin_cycles the spin before each \return the figure
HbmRead time_hbm_read(const void* data, std::size_t bytes, int warmup, int reps,
                      long long spin_cycles);

/// \brief The two layouts of a K/V cache that kv_rows_read reads.
enum class KvLayout {
  kBhnd,  ///< [B, H_kv, N, d]: one head's rows follow each other (PyTorch's)
  kBnhd,  ///< [B, N, H_kv, d]: one position's rows of every head side by side (the step's cache)
};

/// \brief Where each block of kv_rows_read begins its tiles, for a grid of Y head groups × Z
/// sequences (block y, z).
enum class KvStarts {
  kAligned,    ///< at its first: the blocks that run at the same time ask for the same positions
  kSpread,     ///< at tile (y + Y · z) · tiles / (Y · Z): every block at a place of its own
  kSequences,  ///< at tile z · tiles / Z: a sequence's heads together, the sequences spread
};

/// \brief Times reading K and V caches of `batch` · `heads` · `n` rows of 256 bytes each (d =
/// 128 in 16 bits) in `layout`, one block of 128 threads per (head, sequence) copying its head's
/// rows into shared memory as the decoding candidate does (m3w4spa: tiles of 64 rows of K and of
/// V, three stages, 16-byte cp.async, thread t chunk t % 16 of rows t / 16 + 8i, two blocks per
/// SM), with no arithmetic but one 16-byte read per thread and tile: what the HBM gives that
/// kernel's copies in that layout. Timed as time_hbm_read; the bytes are K's and V's, once.
/// \param k \param v the caches (filled, never zeros; 16-byte aligned), each batch · heads · n
/// rows \param batch B \param heads H_kv \param n rows per sequence, a positive multiple of 64
/// With heads_per_block = 2 or 4 a block copies that many neighbouring heads, tiles of
/// 64 / heads_per_block positions of each (in bnhd, heads_per_block · 256 contiguous bytes per
/// position), and each head group's positions are split in heads_per_block runs, so that the
/// grid keeps batch · heads blocks of the same bytes (the decoding variants m3w4spah2/4).
/// `starts` says at which of its `tiles` tiles each block (every run alike) begins, reading to
/// its last and then from its first: KvStarts below.
/// \param layout the order of the rows \param heads_per_block 1, 2 or 4, dividing heads
/// \param warmup untimed runs \param reps timed runs
/// \param spin_cycles the spin before each \param starts as above \return the figure
HbmRead kv_rows_read(const void* k, const void* v, int batch, int heads, int n, KvLayout layout,
                     int heads_per_block, int warmup, int reps, long long spin_cycles,
                     KvStarts starts = KvStarts::kAligned);

/// \brief What wait_for_hbm_read saw.
struct HbmWait {
  double ms = 0;          ///< milliseconds waited (0: at speed at the first probe)
  bool at_speed = false;  ///< the last probe read at the asked speed (false: gave up at max_ms)
};

/// \brief Waits until a streaming read of `data` (`bytes`, as time_hbm_read: a few runs) runs at
/// `fraction` of `tbps` or faster, probing every `interval_ms` milliseconds for at most
/// `max_ms`. What it waits out: work the device does in the background that takes HBM bandwidth
/// from the timed kernels, e.g. the driver clearing memory a program has just freed.
/// \param data the memory \param bytes how much \param tbps the yardstick, > 0
/// \param fraction of it, in (0, 1] \param interval_ms between probes, >= 1
/// \param max_ms the longest wait, >= 0 \return how long, and whether it got there
HbmWait wait_for_hbm_read(const void* data, std::size_t bytes, double tbps, double fraction,
                          int interval_ms, int max_ms);

}  // namespace fa::bench
