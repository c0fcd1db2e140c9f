// variants.cu — the configurations of step 12's candidate kernel that bin/variants_12 times
// beside the registered "12_decode_v2", and what each should give, written before it runs.
// The rows s3w4 … s3w8 were predicted while the first design (CUDA cores) was the registered
// candidate: "the registered candidate" in their predictions is that kernel, today's row s3w4.
//
// What the first design measured when it was the registered candidate (docs/12-decode.md,
// "The next kernel, measured";
// docs/results/h200-ncu-decode-v2.txt; B = 8, 16k keys, d = 128, bf16, pages of 64): it is
// bound by instruction issue, not by HBM. 977 (MHA) and 1 724 (GQA 32/8) instructions per warp
// and 64-key tile, 4 warps a tile: 3 908 and 6 896 instructions per 32 KiB of K and V, i.e.
// 8.4 and 4.75 bytes per instruction. Two blocks of 4 warps per SM (shared memory, 108.5 KB
// each, is the limit) are 2 warps per scheduler, each issuing every ≈ 4.65 (MHA) and ≈ 5.1
// (GQA) cycles: 0.43 and 0.39 instructions per scheduler and cycle, as measured.
//
// The model behind every prediction below: a warp issues every c cycles (c = 4.65 MHA, 5.1
// GQA, its dependent latencies, unchanged by the configuration while a scheduler is below one
// instruction per cycle), so a scheduler with w warps issues min(1, w / c) per cycle. At
// 1.97 GHz on 132 SMs, 4.5 TB/s is 17.3 bytes per cycle and SM: 2.07 instructions per cycle
// and SM at MHA (0.52 per scheduler) and 3.64 at GQA (0.91 per scheduler) are needed. The
// split rule of every variant is wave_splits(), with the occupancy the device reports (m2w4s2:
// 2 per SM, kRuleSlots), so that a configuration that fits 3 blocks per SM gets a grid that
// fills them (the registered rule counts 2 per SM). Bytes in flight per SM, against Little's ≈ 34
// KB (decode_params.cuh).
//
//   s3w4   3 stages, 4 warps, tiles of 64 (the registered configuration, 108.5 KB, 144
//          registers): 2 blocks, 8 warps per SM, 2 per scheduler: 0.43 / 0.39 issued, needed
//          0.52 / 0.91; 128 KiB in flight. The control: the registered candidate's figures
//          within noise (B = 8, 16k: MHA ≈ 3.5 TB/s, GQA ≈ 1.8): at 2 blocks per SM the
//          wave-aware rule picks the registered rule's split count on every shape timed.
//   s2w4   2 stages, 4 warps, tiles of 64: 72 KiB, 3 blocks per SM by shared memory (216 of
//          227 KiB), registers allow 3 (144 × 128 × 3 = 55 296 of 65 536): 12 warps, 3 per
//          scheduler: 0.65 (MHA) / 0.59 (GQA) issued, 1.5× today's; 96 KiB in flight (one
//          tile per block while one is computed), ≈ 3× Little's: enough. MHA, B = 8: 1.5 ×
//          3.6 = 5.4 TB/s of issue, so HBM-bound: ≥ 4.0 TB/s (≥ 88% of the read bandwidth;
//          3 splits, 768 blocks in two waves of 396 places, 86 tiles each, at 16k).
//          GQA, B = 8: still issue-bound, 0.59 < 0.91: 1.5 × 1.8 ≈ 2.7 TB/s. B = 1, 16k: MHA
//          ≈ 3.4 TB/s (12 splits of 22 tiles: the fixed costs, a fifth of today's time, stay),
//          GQA ≈ 1.35 TB/s (43 splits of 6 tiles at today's ≈ 4.7 µs a tile, plus ≈ 20 µs of
//          fixed costs, on 67 MB). 4k keys: MHA B = 8 ≈ 3.9, GQA B = 8 ≈ 2.2, B = 1 within 10%
//          of today's (fixed costs). Paged (64) within 5% of contiguous, as today.
//   s2w8   2 stages, 8 warps, tiles of 128 (16 keys per warp, as today): 140 KiB, 1 block of
//          8 warps per SM: the same 2 warps per scheduler and the same instructions per warp
//          and key as today, one barrier per 128 keys instead of per 64, 64 KiB in flight
//          (≈ 2× Little's). Predicted: today's figures within ±10% on every shape. Faster would
//          say the barriers cost; slower, that one 64 KiB tile in flight per SM is too little.
//   s3w8   3 stages, 8 warps, tiles of 128: 208 KiB, 1 block per SM, 128 KiB in flight: the
//          same as s2w8 but the bytes in flight: within ±10% of today's, and of s2w8.
// A configuration with more warps per SM than s2w4's 12 needs fewer registers (14 warps at
// 144 per thread) or a QK loop of 4 lanes per key (8 warps over 64 keys): not built here.
//
// The tensor-core kernel (candidate/decode_kernel_mma.cuh), 4 warps over 64-key tiles, 150
// registers as first written (165–166 as measured later, with the two-part P), no spills. Per warp
// and tile at d = 128 (P rounded once; the two-part P adds 16 mma): 16 ldmatrix + 32 mma + ≈ 60 for
// the softmax and the rescale of O (64 FMUL) + 16 cp.async with ≈ 40 addressing + ≈ 20 loop and
// barrier ≈ 190, whatever the rows (≤ 16): ≈ 760 per 32 KiB, 43 bytes per instruction
// (8.4 and 4.75 for the scalar kernel): 17.3 bytes per cycle and SM need 0.1 instructions
// per scheduler and cycle. No longer bound by issue but by the bytes:
//   m2w4   2 stages, 72 KiB, 3 blocks per SM (150 registers: 3 × 19 456 of 65 536): 96 KiB in
//          flight, as s2w4. B = 8, 16k: MHA ≥ 4.2 TB/s (≥ 93% of the read bandwidth), GQA
//          32/8 ≥ 4.0 (two row chunks of 16 no longer: one block per K/V head reads its tiles
//          once); B = 1, 16k: MHA ≥ 3.4, GQA ≥ 2.0 (fixed costs: launch, prologue, combine).
//   m3w4   3 stages, 106 KiB, 2 blocks per SM, 128 KiB in flight: m2w4's figures within 5%.
// Measured (docs/results/h200-variants-12.md, 46a0462): m3w4 4.09 TB/s at B = 8, MHA, 16k,
// 89% of the read bandwidth, where cuDNN reads 99%. Not the cache's layout: the same bytes as
// one head per sequence (each head's rows contiguous) read the same, 4.04 against 4.05
// (docs/results/h200-decode-layouts.txt). Nsight Compute (docs/results/h200-ncu-decode-mma.txt):
// L2 throughput 88% of its peak for DRAM at 71.5% (ncu's locked clocks), 0.45 instructions per
// scheduler and cycle, 55% of cycles with no eligible warp. The L2 sees one request per 16
// bytes (cp.async, 2 048 per 32 KiB tile, each with its address arithmetic):
//   m3w4b  m3w4 with every row of K and V (256 bytes) brought by one cp.async.bulk, issued by
//          one thread per row (128 per tile), completed on a per-stage mbarrier: 16 times
//          fewer L2 requests and copy instructions. Predicted: B = 8, 16k, at least 4.3 TB/s
//          for MHA and GQA; B = 1 as m3w4 (fixed costs).
//   m2w4b  the same at 2 stages (3 blocks per SM): m3w4b's figures within 5%.
//   m4w4b  4 stages, 140 KiB: one block of 4 warps per SM, three tiles in flight: below
//          m3w4b, the four warps alone cannot hide the softmax and the barrier.
// Measured (docs/results/h200-variants-12-72df2a0.md): m3w4b 3.97 TB/s against m3w4's 4.06,
// m2w4b 4.16, m4w4b 2.15 (B = 8, MHA, 16k): not the number of L2 requests, then. What is left
// of the profile: 55% of the cycles with no eligible warp at 8 warps per SM, a block with one
// or two tiles (32 or 64 KiB) on their way from HBM at any time, and a barrier per tile at
// which they all wait for the slowest copy. More bytes on their way without more shared
// memory: ask L2 for the rows of a tile further ahead (cp.async.bulk.prefetch.L2, a row per
// thread), so that when its cp.async comes the rows are in L2 (a hit: ~0.6 µs less per tile):
//   m3w4p1 the tile after the last in flight: 96 KiB per block on their way, 192 per SM.
//          Predicted: B = 8, 16k: MHA >= 4.3 TB/s, GQA >= 4.1; B = 1 as m3w4 (fixed costs).
//   m3w4p2 two tiles ahead: m3w4p1's figures within 3% (already enough in flight).
//   m2w4p2 2 stages, 3 blocks per SM, two tiles ahead: m3w4p2's within 3%.
// Measured (docs/results/h200-variants-12-9ed0861.md): m3w4p1 2.80 TB/s, m3w4p2 2.81, m2w4p2
// 3.37, against m3w4's 4.02 (B = 8, MHA, 16k): the prefetches cost far more than they hid.
// The registered candidate stays m3w4 (cp.async, no prefetch).
//
// At B = 1 the time is ~10 µs above the bytes at the B = 8 rate (both shapes, 16k), some of
// it the combine, launched after the attention's last block. Letting it be scheduled at the
// attention's start (griddepcontrol.launch_dependents first thing; its blocks then wait at
// griddepcontrol.wait):
//   m3w4e  predicted: B = 1, GQA, 16k: 2 to 4 µs saved of ~27 (>= 2.6 TB/s); B = 8 MHA (one
//          split, no combine) as m3w4.
// Measured (docs/results/h200-variants-12-5192ee8.md): 2.53 TB/s against m3w4's 2.57 (B = 1,
// GQA, 16k, contiguous), 2.43 against 2.48 paged: nothing saved. m3w4 stays.
//
// Nsight Compute on m3w4 and on cuDNN's decoding kernel, same problem (B = 8, MHA, 16k), same
// grid (256 blocks of 4 warps), both reading 2.15 GB from HBM: cuDNN's 16-byte cp.async
// (LDGSTS) asks L2 for the 16 sectors a warp's 512 bytes need; ours for 24 (101 M sectors
// against 67 M in all, 46 M of them L2 hits), and L2 is 94% busy in both. Ours are the zero-
// fill form (a source size operand: LDGSTS...ZFILL), theirs predicated. Not that: rows m3w4z
// and m2w4z (cp.async without a source size, a missing row zeroed by stores; commit e701c17)
// asked for the same 101 M sectors and read the same TB/s (docs/results/h200-variants-12-
// e701c17.md, h200-ncu-decode-sectors.txt), and were removed. What differs is where the 512
// bytes land: our rows are padded to 272 bytes, so a 256-byte row of the cache lands across
// three 128-byte lines of shared memory; the backward's kernels, whose rows are unpadded and
// swizzled (step 07's c ^ row % 8), ask for exactly their sectors (same profile):
//   m3w4s  unpadded rows, 16-byte chunk c of row r at c ^ (r % 8), for Q, K and V (ldmatrix
//          addresses XOR the k step, as step 07's). Predicted: L2 sectors / 1.5; B = 8, 16k:
//          MHA >= 4.3 TB/s, GQA >= 4.1; B = 1 a few % better.
//   m2w4s  the same at 2 stages: m3w4s's figures within 3%.
// Measured (docs/results/h200-variants-12-ce43d7c.md, h200-ncu-decode-sectors.txt): the
// sectors are now the 67 M the bytes need, no L2 hits; B = 8, MHA, 16k: 4.38 TB/s against
// m3w4's 3.95, GQA 3.99 against 3.74 (GQA's 4.1 missed); B = 1, 16k: MHA 3.80 against 3.49,
// GQA 2.62 against 2.56; m2w4s within 3% at B = 8, not at B = 1 (GQA 16k 2.39: its 43
// splits). But not with pages of 64: 4.07 against m3w4's 4.09, 0.93 of the contiguous cache,
// where the goal is 0.95. Two guesses at what a paged tile waits for, each a row measured and
// removed since:
//   m3w4sa each tile's block-table entry read a tile ahead, right after this tile's copies
//          (predicted: pages of 64 within 5% of contiguous). Measured at 99b9239
//          (docs/results/h200-variants-12-99b9239.md): within 3% of m3w4s everywhere, pages of
//          64 still 0.91 at B = 8, MHA, 16k. Not the table's latency.
//   m3w4st m3w4sa with two lanes asking L2 for one line of the next tile's K and V
//          (prefetch.global.L2), so that a new page's address translation starts a tile early
//          (predicted the same). Measured at 5e4a635 (h200-variants-12-5e4a635.md): 2-4%
//          slower than m3w4s, paged and contiguous alike.
// m2w4s (2 stages, 3 blocks per SM) keeps pages of 64 at 0.97 (4.40 against 4.52 at B = 8,
// MHA, 16k, h200-variants-12-99b9239.md) and reads the most at B = 8, but its rule's 43 splits
// at B = 1, GQA, 16k read 2.43 (m3w4s's 32: 2.59):
//   m2w4s2 m2w4s with its splits counted for 2 blocks per SM (the registered rule's counts on
//          the shapes timed: 1 split at B = 8, MHA; 32 at B = 1, GQA, 16k). Predicted: B = 8
//          within 5% of m2w4s; B = 1, GQA, 16k at least m2w4s's.
// Measured (docs/results/h200-variants-12-3e0114e.md): m2w4s2 3.52 TB/s at B = 8, MHA, 16k
// (m2w4s 4.43), 2.37 at B = 1, GQA, 16k (m2w4s 2.40): both predictions missed; two stages need
// the third block per SM. The step registers m3w4s: the B = 1 goals met, pages of 64 at
// 0.91–0.93 of the contiguous cache (0.92 at ffd1e10, B = 8, MHA, 16k).
// What the 3-stage kernel's paged tiles wait for is open; m2w4s's more blocks per SM hide it.
// At ffd1e10 (h200-variants-12-ffd1e10.md) m2w4s reads as much as m3w4s or more at B = 8
// (16k: MHA 4.38 against 4.39, GQA 4.01 against 3.99; pages of 64: 4.24 against 4.06, 3.84
// against 3.71) and less at B = 1, where its 3-slot rule cuts the keys finer (GQA 16k: 43
// splits of 6 tiles, 2.41 against 2.63 in 32 of 8; MHA 4k: 11 of 6, 2.57 against 2.71):
//   h23s   per problem, m2w4s's kernel and 3-slot rule where that rule gives each split at least
//          8 tiles of 64 keys (or 1 split), m3w4s's kernel and the 2-slot count elsewhere
//          (h23s_two_stages, h23s_splits). A forced split count is judged by its tiles per
//          split and by not being below the 3-slot count: the 2-slot count can give 8 tiles
//          (B = 1, GQA, 16k: 32 splits of 8), and m2w4s on fewer splits than its rule is
//          m2w4s2, slower. On the shapes timed: m3w4s at B = 1 MHA 4k (8 splits), GQA 4k and
//          16k (32); m2w4s at B = 1 MHA 16k (12 splits of 22 tiles) and at B = 8 (3 splits
//          MHA, 6 GQA). Predicted: the chosen kernel's ffd1e10 figures within 3%, contiguous
//          2.71 / 3.73 / 1.38 / 2.63 / 3.94 / 4.38 / 3.22 / 4.01 TB/s and pages of 64 2.57 /
//          3.59 / 1.34 / 2.50 / 3.78 / 4.24 / 3.09 / 3.84 (B = 1 MHA 4k, 16k, GQA 4k, 16k, then
//          B = 8 the same): m3w4s's B = 1 GQA 16k, pages of 64 at 0.97 of contiguous (B = 8,
//          MHA, 16k); below m3w4s by 2-4% on the contiguous cache at B = 1 MHA 16k and at B = 8,
//          4k, where the rule takes m2w4s though m3w4s read more.
//
// Pages of 16 rows are worse: the registered candidate reads 0.58-0.61 of its contiguous TB/s
// at B = 8 (2.53 against 4.39 at MHA, 16k) and at B = 1, 16k (MHA 0.61, GQA 0.71), where pages
// of 64 read 0.93-0.95 (docs/results/h200-decode.md, ffd1e10). A 64-key tile then spans 4
// pages, and load_tile_async calls cache_row() for each of its 1 024 16-byte chunks (d = 128):
// 8 per thread. Per thread and tile (a warp issues the same count, once for its 32 lanes), from
// the PTX of m3w4s (ptxas's expansion of the division estimated):
//   pages of 64  1 table read (1 LDG a warp, 4 a block, one word for every lane), 1 division
//                and 1 remainder by page_size, the entry checked against the pool, 1 64-bit
//                product; then per chunk the row of its key added to the tile's first (a
//                64-bit multiply-add and a select): ≈ 65 + 8 × 40 ≈ 385 instructions.
//   pages of 16  per chunk all of that: the capacity check, the division and remainder
//                (≈ 20 instructions in SASS for a divisor known only at run time), table_entry's
//                column check and 64-bit address, the LDG, the pool and slot checks, two
//                64-bit products: ≈ 8 × 88 ≈ 700 instructions, 8 LDG a warp (32 a block,
//                1 024 thread reads), i.e. ≈ 300 more per warp and tile than pages of 64, on
//                the ≈ 740 measured for m3w4 (docs/results/h200-ncu-decode-mma.txt).
// The instructions alone would leave 740 / 1 040 ≈ 0.71 at the worst, were the kernel bound by
// issue (it issues 0.45 per scheduler and cycle): not 0.58. The latency does: cp_async_16 is asm
// volatile with a "memory" clobber, so chunk i + 1's table read cannot be issued before chunk i's
// cp.async, and that cp.async needs the read's page: 8 round trips to L1/L2 in series per thread
// and tile, against 1. At 2.53 TB/s a block (2 per SM, 32 KiB a tile) takes ≈ 6 700 cycles a tile
// (1.97 GHz, 132 SMs), at 4.08 (pages of 64) ≈ 4 200: the 2 500 cycles between are 7 more round
// trips of ≈ 360 cycles, an L2 hit's latency under load.
//   m3w4sp m3w4s with Traits::kTileTable: lanes 0 … 3 of each warp read the tile's 4 entries
//          (1 LDG a warp, 16 bytes: one sector), check each as cache_row does (outside the
//          table: not read; outside the pool, or past key_end: −1, a zero row), keep
//          entry · page_size; each chunk takes its page's by a shuffle (key >> 4) and adds
//          pos & 15: no division, no 64-bit product but the row's, one round trip a tile as
//          with pages of 64: ≈ 20 + 8 × 30 ≈ 260 instructions per thread and tile (164
//          registers, m3w4s 166; no spills). Predicted: pages of 16 read what m3w4s's pages of
//          64 read, within 5%: >= 0.88 of the contiguous cache at B = 8, MHA and GQA, 16k
//          (m3w4s ≈ 0.58-0.60) and at B = 1, 16k (≈ 0.61 MHA, 0.71 GQA today); the contiguous
//          cache and pages of 64 as m3w4s's within 3% (their path is unchanged). If pages of 16
//          stay lower, what is left is 4 pages (4 address translations) per tile against 1.
//   m3w4spl1, m3w4spl2  m3w4sp with cp.async's prefetch-size qualifier, .L2::128B and .L2::256B:
//          on a miss, L2 asks HBM for the aligned 128 or 256 bytes around the 16-byte chunk, not
//          only the sectors the request touches. A row of K or V at d = 128 is 256 bytes, its 16
//          chunks copied by 16 lanes of one warp in one instruction, so its sectors are asked for
//          within a few cycles anyway; what the qualifier can change is how L2 groups them into
//          HBM requests. m3w4sp reads 96-98% of the measured bandwidth at B >= 8, 16k and 32k,
//          torch_cudnn 99-100% (docs/results/h200-decode.md). Predicted: there, 1.00-1.02x
//          m3w4sp (128 B) and 1.01-1.03x (256 B); B = 1 as m3w4sp within 3%.
//          Measured (docs/results/h200-variants-12-689dbf3.md, B = 8 and 32, 16k and 32k, MHA
//          and GQA): 128 B level with m3w4sp (1.00x), 256 B 0.92-0.94x (pages of 64:
//          0.94-0.98x), the prediction's sign wrong. Neither kept; what the larger fetch costs
//          was not looked into.
//   m3w4spa  m3w4sp with Traits::kTileBase. Nsight Compute at B = 8, MHA, 16k, contiguous
//          (docs/results/h200-ncu-decode-cudnn-9f3e457.txt): m3w4sp executes 214 M warp
//          instructions where torch_cudnn's kernel, on the same grid of 256 blocks of 128
//          threads, executes 74 M, and takes 502 µs against 478. Both issue the same 4.2 M
//          LDGSTS (16-byte cp.async); ours spends about 130 M on integer and branch work (IMAD,
//          IADD3, LOP3, ISETP, SHF, LEA, SEL, BRA; 137 M with VIADD and LDC), some 30-33 per
//          cp.async, most of it, we read, the general path of load_tile_async working out every
//          chunk's row, its checks and selects. With a whole tile of attended keys in one page
//          or in the contiguous cache (every tile but a sequence's last when its keys are not a
//          multiple of 64), thread x copies chunk x % 16 of rows x / 16 + 8i, one base address
//          per tile plus 8i rows: counted from the source, about 3 instructions per cp.async,
//          about 816 → 390 per warp and tile. Predicted: B >= 8, 16k and 32k, contiguous and pages
//          of 64 and 256: 1.02-1.04x m3w4sp, i.e. at torch_cudnn's 4.4-4.5 TB/s or within 1% of it
//          (the issue slots freed let the copies of the next tiles go out sooner); B = 1 and pages
//          of 16 (which keep the tile-table path) as m3w4sp within 2%.
//          Measured (docs/results/h200-variants-12-2b799ae.md): contiguous 1.00-1.02x m3w4sp at
//          B >= 8, 16k and 32k, under the prediction; pages of 64 1.02-1.06x and of 256
//          1.01-1.05x, as predicted or above; pages of 16 level; B = 1 1.01-1.06x, above its 2%.
//          182 registers against 164 (2 blocks per SM still: shared memory is the limit). Not
//          profiled: its instruction count above is the source's. 12_decode_v2 runs it.
//   m3w4spam  m3w4spa with Traits::kLazyRescale: O's 64 accumulators per lane multiplied by
//          exp(m_old − m_new) only in a tile where some row of the warp has a new maximum (one
//          vote), the same products otherwise (a factor of exactly 1 skipped). Per warp and tile
//          64 FMUL of m3w4spa's ≈ 390 counted instructions, skipped on all but the few tiles
//          where a maximum grows (with random scores, about ln(tiles) of them). Instructions no
//          longer bind m3w4spa as they bound m3w4sp (tile base gave 0-2% for half the count),
//          so predicted: B >= 8, 16k and 32k 1.00-1.01x m3w4spa; B = 1 within 1%. Measured
//          beside the peers in the step's cache layout (peers.py --kv-layouts bnhd), where
//          torch_cudnn reads 1-1.6% less than in its own at B = 8 (h200-decode.md).
//          Measured (h200-variants-12-7105ea9.md): 1.00x m3w4spa (0.99-1.01) at every shape:
//          level, at the low end of the prediction. Not kept.
//   m3w4spac2, m3w4spac4, m3w4spac8  m3w4spa with the blocks of 2, 4 or 8 neighbouring K/V heads
//          launched as one thread-block cluster, a cluster barrier per tile in place of the
//          block's __syncthreads (Traits::kClusterHeads). In the cache's [B, N, H_kv, d] layout
//          one head's row is 256 bytes of a B·N row of H_kv · 256; each block copies its own
//          head's 256 bytes, 64 rows a tile, and nothing keeps the blocks of neighbouring heads
//          near the same rows: after hundreds of tiles they drift apart. torch_cudnn, given
//          that layout instead of [B, H_kv, N, d] (where a head's rows are contiguous), reads
//          1.2-1.4% less at B = 8 and 32 (h200-decode.md, commit 7105ea9), and ours is within
//          0.6% of it there: the layout, we read, costs the DRAM some efficiency (a 256-byte
//          run is a quarter of a 1 KiB DRAM page or less). Held in step, the cluster's blocks
//          ask for the same rows of 2, 4 or 8 heads together, 512 B to 2 KiB side by side.
//          Predicted: B >= 8, 16k/32k: 1.00-1.02x m3w4spa, more with bigger clusters if the
//          reading holds, less (0.98-1.00x) if the barrier's wait for the slowest block costs
//          more than the runs gain; B = 1 (8-32 splits) within 2%.
//          Measured (h200-variants-12-fc71c95.md): clusters of 2 at 0.92-0.98x m3w4spa on the
//          contiguous cache (0.84x paged at B = 1), of 4 and 8 0.5-0.8x (B = 8, MHA, 16k:
//          4.28, 2.56 and 2.53 TB/s against 4.52): a loss far beyond a barrier's cost.
//          Explained since (scripts/cluster_places.cu, h200-cluster-places-dad480a.txt): the
//          GPU holds 248 blocks of this size in clusters of 4 and 240 in clusters of 8, against
//          264 without, so B = 8, MHA's 256 blocks need a second wave. Not kept.
//          The layout's own cost was then measured without any attention arithmetic
//          (bin/hbm_layouts, h200-hbm-layouts-01f93f1.md): about 1% at B = 8, MHA and at
//          B = 32, GQA, nothing at B = 32, MHA, the shapes where torch_cudnn loses as much.
//   m3w4spah2, m3w4spah4  m3w4spa with 2 or 4 neighbouring K/V heads in one block instead of
//          a cluster (Traits::kHeads): a tile is 32 or 16 positions of every head of the block,
//          stored head-major so that a warp's 16 rows are still one head's 16 positions (2
//          warps per head, or one), each position's 512 or 1024 bytes asked for by consecutive
//          threads (load_tile_heads_async, split_tiles.cuh); Q of every head in shared memory
//          (104 and 112 KiB: still 2 blocks per SM); the in-block merge over a head's warps
//          only. No barrier beyond the block's own, so nothing to wait on but the block's data.
//          With half or a quarter as many blocks, the rule splits up to 2 or 4 times as finely
//          (wave_splits with heads_per_block): B = 8, MHA and B = 32, GQA go from one split to
//          2 or 4, with a combine where m3w4spa has none. Predicted from bin/hbm_layouts' bare
//          copies with 2 and 4 heads per block: B >= 8, 16k/32k: 1.00-1.015x m3w4spa (the
//          layout's ~1% back, less the combine); B = 1 within 2%.
//          Measured (h200-hbm-layouts-be9443a.md, h200-variants-12-be9443a.md): the bare copies
//          of 4 heads per block read as fast in bnhd as one head per block in bhnd (0.995-
//          1.003 at B = 8, MHA and B = 32, GQA, where one head per block reads 0.982-0.988),
//          of 2 heads per block hardly faster (0.984-0.988). The kernels do not follow:
//          m3w4spah4 0.98-1.01x m3w4spa at B >= 8, 16k/32k (B = 8, MHA, 16k: 4.43 against
//          4.43, 4 splits and a combine against one split; B = 32, GQA, 32k: 4.48 against
//          4.46; B = 8, GQA the lowest), m3w4spah2 0.99-1.005x; at B = 1, where the rule splits
//          up to 128 times, m3w4spah4 0.81-0.98x, m3w4spah2 0.94-1.00x. Under Nsight Compute
//          (h200-ncu-decode-m3w4spa-96cbe74.txt, B = 8, MHA, 16k) m3w4spah4's attention kernel
//          alone takes 0.7% less time than m3w4spa's, half the copies' gain; its 4 splits' combine
//          then takes about as much. Not kept.
//   m3w4spah4f  m3w4spah4 with its copies laid out as kTileBase's (Traits::kFixedRows):
//          thread t copies chunk t % 16 of positions t / 16 and t / 16 + 8 of each of the 4
//          heads, so that its 8 rows in shared memory share one row % 8 (one swizzled chunk)
//          and its 16 copies (K and V) lie at offsets known at compile time; m3w4spah4's
//          thread computes a swizzled chunk per copy. Why: at B = 32, MHA, where both run one
//          split and no combine, m3w4spah4 read 0.99x m3w4spa, where bare copies of 4 heads
//          per block read 1.004x those of one (in 4 parts of the positions each, not one; and
//          in the run below m3w4spah4 read 1.00-1.01x there: the 0.99 was within the runs'
//          spread); kTileBase showed the copies' address arithmetic to cost 2-4%. Each
//          instruction of the block now asks for 8 positions' 256 bytes of one head, a
//          position's 1 KiB from 4 instructions a few apart. Predicted: B >= 8, 16k/32k:
//          1.00-1.02x m3w4spah4; B = 1 as m3w4spah4 within 2%.
//          Measured (h200-variants-12-6b61e60.md, the eleven-problem check; sanitizer's four
//          tools on the checks of m3w4spah2/4/4f clean, h200-sanitizer-12-variants-6b61e60.txt):
//          level with m3w4spah4 (1.00-1.01x at B >= 8, B = 1 within 1.5%): the copies'
//          address arithmetic does not move its speed. Not kept.
//   m3w4spt  m3w4spa with each tile whose keys are all attended to and lie in one page (or
//          the contiguous cache) copied by the TMA (Traits::kTma): thread 0 issues 2 boxes of
//          64 positions × 64 dims for K and 2 for V (the 128-byte swizzle takes boxes at most 128
//          bytes wide, so a tile is two panels of 128-byte rows, ldmatrix addresses one panel
//          further for the upper 64 dims), their bytes counted on the stage's mbarrier; the
//          other warps issue no copy; pages of 16 or 32 rows a box per page (lanes 0-3 or 0-1 of
//          warp 0). The last, partial tile of a sequence goes by cp.async as in m3w4spa, into
//          the same panels. Why: step 11's backward gained
//          6-15% when the TMA took over its per-thread Q and dO copies (h200-variants-11-
//          24679ea.md), and the last profile of m3w4spa (h200-ncu-decode-m3w4spa-96cbe74.txt)
//          counts ~17 IMAD.WIDE and 16 LDGSTS per warp and tile among its 423.4 instructions,
//          where torch_cudnn's kernel executes two thirds of ours. About 40 of 423 per warp and
//          tile go; m3w4spam's 64 fewer did not make it faster, so the count alone will not:
//          predicted B >= 8, 16k/32k, contiguous and pages of 64: 1.00-1.02x m3w4spa; B = 1 and
//          pages of 16 as m3w4spa within 2%.
//          Measured first (h200-variants-12-a449a4b.md) with pages of 16 and 32 left to
//          cp.async: contiguous 1.00-1.01x m3w4spa at every shape, pages of 64 0.99-1.00x, but
//          pages of 16 0.91-0.96x (the cp.async path into the panels; not looked into), so
//          those pages now go by the TMA too (a box of 16 positions per page): predicted as
//          m3w4spa's pages of 16 within 2% or faster.
//          Measured (h200-variants-12-8c7ba38.md): contiguous 0.99-1.00x m3w4spa at every
//          shape, pages of 64 and 256 0.99-1.00x at B >= 8; pages of 16 0.96-0.99x and of 32
//          0.96-1.00x: the prediction's low end on the contiguous cache and with pages of 64,
//          below it with pages of 16 and 32 (at B = 1, GQA, 16k, pages of 16: 0.96x).
//          Nsight Compute (h200-ncu-decode-m3w4spt-8c7ba38.txt, B = 8, MHA, 16k, pages of 64):
//          349.0 warp instructions per tile against 423.4, no LDGSTS, barrier stall samples
//          4.5% against 15.7%, memory waits half of the samples as in torch_cudnn's kernel, and
//          the same 2.148 GB read in 491.0 us against 487.6. The copies' instructions and
//          stalls do not set the speed at this shape. Not kept.
//          Since commit 5dbd0f7 a tile the TMA does not take goes through the general cp.async
//          path (no copy of it in the TMA branch) and one rule, DecodeTraitsMma::tma_pages,
//          says which pages the TMA takes, host and kernel alike. Re-measured there
//          (h200-variants-12-5dbd0f7.md, h200-checks-12-5dbd0f7.txt): m3w4spt 168 registers
//          as before, 0.995-1.000x m3w4spa at B >= 8 on the contiguous cache as before, pages
//          of 16 0.97-0.99x; m2w4spt 164 registers (166 before), 1.00-1.01x; every check ok.
//   m2w4spt  m3w4spt at 2 stages: 70 KiB, 3 blocks per SM (166 registers: 3 × 128 × 168 of
//          65 536), 12 warps per SM, 96 KiB in flight per SM against 128. Predicted: B >= 8,
//          16k/32k: 1.00-1.02x m3w4spt; B = 1 within 3% of m3w4spt (the rule's splits count 3
//          blocks per SM).
//          Measured (h200-variants-12-8c7ba38.md): B >= 8, 16k/32k, 0.99-1.02x m3w4spt on the
//          contiguous cache, 1.00-1.03x with pages of 64 (the same in the run of a449a4b), as
//          predicted; B = 1 0.96-1.01x on the contiguous cache (43-47 splits at GQA, against
//          32), beyond the 3% at GQA. Against m3w4spa, the registered kernel: 0.99-1.01x at B >= 8
//          on the contiguous cache, 1.00-1.02x with pages of 64, down to 0.95x at B = 1. Not kept:
//          at most 2% where it gains, up to 5% lost at B = 1.
//   m3w4spas, m3w4spts  m3w4spa and m3w4spt with Traits::kSpread: block y + grid_y · z walks
//          its split's n tiles from tile (y + grid_y · z) · n / (grid_y · grid_z) on, round to the
//          first. Why: the cache's layout costs bare copies 1.5% exactly at the shapes whose 256
//          blocks run in one wave, in step (B = 8, MHA and B = 32, GQA: h200-hbm-layouts-
//          be9443a.md), and not where several waves put the blocks out of step (B = 32, MHA);
//          if the blocks asking for the same positions at once crowd some DRAM channels,
//          spreading them gets the percent back. Predicted: those shapes 1.00-1.015x, the others
//          and B = 1 level within 1%. The same test on bare copies first (bin/hbm_layouts
//          --starts spread, h200-hbm-layouts-597a118.md): bnhd read as much or less spread
//          (0.98-1.00x aligned, 4.46 against 4.52 TB/s at B = 8, MHA, 32k), bhnd as much.
//          Measured (h200-variants-12-597a118.md): m3w4spas 0.98-1.00x m3w4spa at B >= 8
//          (contiguous and both page sizes), 0.97-0.99x at B = 1 on the contiguous cache;
//          m3w4spts 0.975-1.002x m3w4spt at B >= 8, 0.975-1.033x at B = 1. This spread did not
//          help. It also puts neighbouring heads of a sequence a tile apart, which in bnhd
//          read one position's rows side by side, and only bnhd slowed: so the bare copies
//          were run again with the heads of a sequence kept together and only the sequences
//          spread (--starts sequences; m3w4spaz below). Not kept.
//   m3w4spaz  m3w4spa with Traits::kSpread 2: the blocks of sequence z begin at tile z · n / Z,
//          a sequence's heads together, so that neighbouring heads still read a position's
//          rows side by side while the sequences no longer ask for the same positions at once.
//          Predicted: B = 8, MHA and B = 32, GQA, 16k/32k 1.00-1.015x m3w4spa if sequences in
//          step crowd the DRAM; the rest level within 1%. Bare copies first (--starts
//          sequences, h200-hbm-layouts-f8a175f.md, a machine whose HBM read 4.59-4.64 TB/s):
//          bnhd 0.99-1.01x aligned, where spread read 0.97-1.00x in the same run.
//          Measured (h200-variants-12-f8a175f.md): 0.99-1.005x m3w4spa at B >= 8, 1.00-1.01x
//          at B = 1: level. Neither kind of spread start helps: the blocks in step are not
//          what costs, and keeping a sequence's heads together is worth up to 1-2% in bnhd
//          (spread against sequences, bare copies). Not kept.
//   m3w4spae, m3w4spte  m3w4spa and m3w4spt with Traits::kEarlyIssue: tile t + 2 asked for once
//          every warp is done with tile t - 1 (a barrier), before the wait for tile t (then a
//          second barrier for the cp.async bytes; a TMA tile needs none, its mbarrier shows
//          them). While a block waits, 3 tiles are on their way instead of 2 (96 KiB instead of
//          64). Predicted: 1.00-1.02x at B >= 8 and 1.00-1.03x at B = 1 if the bytes in flight
//          bind, level within 1% (the second barrier) if not.
//          Measured (h200-variants-12-71dbc09.md): m3w4spae 0.995-1.002x m3w4spa at B >= 8
//          and 0.995-1.012x at B = 1 over the three caches; m3w4spte 0.99-1.02x m3w4spt
//          (0.990-1.017x at B >= 8, 0.992-1.017x at B = 1): level. Again at f8a175f, after the
//          second barrier was written with if constexpr (h200-variants-12-f8a175f.md, the
//          contiguous cache and pages of 64): m3w4spae 0.99-1.00x m3w4spa at B >= 8, m3w4spte
//          0.98-1.00x m3w4spa.
//          Two tiles in flight per block, four per SM, are enough; not kept.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "../candidate/decode_kernel_mma.cuh"
#include "../candidate/decode_kernel_v2.cuh"
#include "../decode_step.cuh"
#include "common/cuda_check.h"
#include "variants.h"

namespace fa::step12 {

int blocks_per_sm(const void* kernel, int threads, std::size_t smem) {
  static std::mutex mutex;
  static std::map<const void*, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(kernel); it != known.end()) return it->second;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  known[kernel] = blocks;
  return blocks;
}

// A block's fixed cost in tile times (the prologue's fill, the merge of its warps): without
// it the rule would cut B = 8, MHA, 16k into 128 splits to save 6 tile times of 256.
constexpr long long kFixedTiles = 2;

int wave_splits(const DecodeProblem& p, int sm_count, int rows_per_block, int block_n, int slots,
                int heads_per_block) {
  const int heads = std::max(heads_per_block, 1);
  const long long base = static_cast<long long>(p.batch) * ((p.heads_kv + heads - 1) / heads) *
                         row_chunks(p, rows_per_block);
  const long long places = static_cast<long long>(std::max(slots, 1)) * std::max(sm_count, 1);
  const long long keys = block_n / heads;  // positions per tile
  const long long tiles = (p.max_kv_len() + keys - 1) / keys;
  // The fixed cost counted in tiles of block_n rows, whatever their positions.
  const long long fixed = kFixedTiles * heads;
  const long long most =
      std::clamp(tiles / kMinTilesPerSplit, 1LL, static_cast<long long>(kMaxSplits));
  long long best = 1, best_cost = LLONG_MAX;
  for (long long s = 1; s <= most; ++s) {
    const long long per_split = (tiles + s - 1) / s;
    const long long used = (tiles + per_split - 1) / per_split;  // the splits that get tiles
    const long long waves = (base * used + places - 1) / places;
    const long long cost = waves * (per_split + fixed);
    if (cost < best_cost) best = used, best_cost = cost;
  }
  return static_cast<int>(best);
}

// h23s (see above): the rows per block and keys per tile of both its kernels, and the tiles
// per split from which m2w4s's is taken.
constexpr int kH23Rows = 16, kH23BlockN = 64, kH23MinTiles = 8;

bool h23s_two_stages(const DecodeProblem& p, int sm_count, int splits) {
  const long long tiles = (p.max_kv_len() + kH23BlockN - 1) / kH23BlockN;
  const long long per_split = (tiles + splits - 1) / std::max(splits, 1);
  return splits >= wave_splits(p, sm_count, kH23Rows, kH23BlockN, 3) &&
         (splits == 1 || per_split >= kH23MinTiles);
}

int h23s_splits(const DecodeProblem& p, int sm_count) {
  const int three = wave_splits(p, sm_count, kH23Rows, kH23BlockN, 3);
  return h23s_two_stages(p, sm_count, three) ? three
                                             : wave_splits(p, sm_count, kH23Rows, kH23BlockN, 2);
}

namespace {

/// What DecodeStep needs of a configuration (decode_step.cuh), bf16 and d = 128 only: the
/// scalar candidate's kernel (decode_kernel_v2.cuh) or the tensor-core one
/// (decode_kernel_mma.cuh) with the configuration Traits; kRuleSlots: the blocks per SM the
/// split rule counts (0: the occupancy the device reports).
template <class Traits_, bool kMma, int kRuleSlots = 0>
struct VariantKernels {
  using Traits = Traits_;
  static constexpr bool kCandidate = true;
  static constexpr int kRows = Traits::kMaxRows;
  static constexpr auto attention() {
    if constexpr (kMma) {
      return &decode_attention_mma_kernel<Traits, __nv_bfloat16>;
    } else {
      return &decode_attention_v2_kernel<Traits, __nv_bfloat16>;
    }
  }
  static const void* kernel() { return reinterpret_cast<const void*>(attention()); }
  static constexpr int heads_per_block() {
    if constexpr (kMma) {
      return Traits::kHeads;
    } else {
      return 1;
    }
  }
  static int num_splits(const DecodeProblem& p, int sm_count) {
    return wave_splits(
        p, sm_count, kRows, Traits::kBlockN,
        kRuleSlots > 0 ? kRuleSlots : blocks_per_sm(kernel(), Traits::kThreads, Traits::kSmemBytes),
        heads_per_block());
  }
  static std::size_t smem_bytes(int) { return Traits::kSmemBytes; }
  template <int kHeadDim, class Element>
  static void launch(const DecodeParams& p, cudaStream_t stream) {
    if constexpr (kHeadDim == 128 && std::is_same_v<Element, __nv_bfloat16>) {
      if constexpr (kMma) {
        launch_attend_combine_mma<Traits, Element>(attention(), p, stream);
      } else {
        launch_attend_combine<Traits, Element>(attention(), p, stream);
      }
    } else {  // DecodeStepInfo::dtypes and head_dims refuse these before any launch
      throw std::invalid_argument("the variants of step 12 run bf16 with head_dim 128 only");
    }
  }
};
template <int kStages, int kWarps, int kBlockN>
using Scalar = VariantKernels<DecodeTraitsV2<128, kStages, kWarps, kBlockN>, false>;
template <int kStages, int kWarps, int kBlockN, bool kSplitP = true, bool kBulk = false,
          int kPrefetch = 0, bool kEarly = false, bool kSwizzle = false, int kRuleSlots = 0,
          bool kTileTable = false, int kL2Bytes = 0, bool kTileBase = false,
          bool kLazyRescale = false, int kClusterHeads = 1, int kHeads = 1, bool kFixedRows = false,
          bool kTma = false, int kSpread = 0, bool kEarlyIssue = false>
using Mma =
    VariantKernels<DecodeTraitsMma<128, kStages, kWarps, kBlockN, kSplitP, kBulk, kPrefetch, kEarly,
                                   kSwizzle, kTileTable, kL2Bytes, kTileBase, kLazyRescale,
                                   kClusterHeads, kHeads, kFixedRows, kTma, kSpread, kEarlyIssue>,
                   true, kRuleSlots>;

struct S3W4 : Scalar<3, 4, 64> {
  static constexpr const char* kName = "s3w4";
  static constexpr const char* kLesson = "the candidate as registered, the wave-aware split rule";
};
struct S2W4 : Scalar<2, 4, 64> {
  static constexpr const char* kName = "s2w4";
  static constexpr const char* kLesson = "2 stages: 72 KiB, 3 blocks of 4 warps per SM";
};
struct S2W8 : Scalar<2, 8, 128> {
  static constexpr const char* kName = "s2w8";
  static constexpr const char* kLesson = "8 warps, tiles of 128 keys, 2 stages: 140 KiB";
};
struct S3W8 : Scalar<3, 8, 128> {
  static constexpr const char* kName = "s3w8";
  static constexpr const char* kLesson = "8 warps, tiles of 128 keys, 3 stages: 208 KiB";
};

struct M2W4 : Mma<2, 4, 64> {
  static constexpr const char* kName = "m2w4";
  static constexpr const char* kLesson = "tensor cores, 2 stages: 72 KiB, 3 blocks per SM";
};
struct M3W4 : Mma<3, 4, 64> {
  static constexpr const char* kName = "m3w4";
  static constexpr const char* kLesson = "tensor cores, 3 stages: 106 KiB, 2 blocks per SM";
};
struct M3W4B : Mma<3, 4, 64, true, true> {
  static constexpr const char* kName = "m3w4b";
  static constexpr const char* kLesson = "tensor cores, 3 stages, rows by bulk copy (sm_90)";
};
struct M2W4B : Mma<2, 4, 64, true, true> {
  static constexpr const char* kName = "m2w4b";
  static constexpr const char* kLesson = "tensor cores, 2 stages, rows by bulk copy (sm_90)";
};
struct M4W4B : Mma<4, 4, 64, true, true> {
  static constexpr const char* kName = "m4w4b";
  static constexpr const char* kLesson = "tensor cores, 4 stages, rows by bulk copy (sm_90)";
};
struct M3W4P1 : Mma<3, 4, 64, true, false, 1> {
  static constexpr const char* kName = "m3w4p1";
  static constexpr const char* kLesson = "tensor cores, 3 stages, L2 prefetch 1 tile ahead";
};
struct M3W4P2 : Mma<3, 4, 64, true, false, 2> {
  static constexpr const char* kName = "m3w4p2";
  static constexpr const char* kLesson = "tensor cores, 3 stages, L2 prefetch 2 tiles ahead";
};
struct M2W4P2 : Mma<2, 4, 64, true, false, 2> {
  static constexpr const char* kName = "m2w4p2";
  static constexpr const char* kLesson = "tensor cores, 2 stages, L2 prefetch 2 tiles ahead";
};
struct M3W4E : Mma<3, 4, 64, true, false, 0, true> {
  static constexpr const char* kName = "m3w4e";
  static constexpr const char* kLesson = "tensor cores, 3 stages, the combine scheduled at once";
};
struct M3W4S : Mma<3, 4, 64, true, false, 0, false, true> {
  static constexpr const char* kName = "m3w4s";
  static constexpr const char* kLesson = "tensor cores, 3 stages, swizzled unpadded rows";
};
struct M3W4SP : Mma<3, 4, 64, true, false, 0, false, true, 0, true> {
  static constexpr const char* kName = "m3w4sp";
  static constexpr const char* kLesson = "m3w4s, a tile's block-table entries read once per tile";
};
struct M3W4SPA : Mma<3, 4, 64, true, false, 0, false, true, 0, true, 0, true> {
  static constexpr const char* kName = "m3w4spa";
  static constexpr const char* kLesson = "m3w4sp, a whole tile's copies from one base address";
};
struct M3W4SPAM : Mma<3, 4, 64, true, false, 0, false, true, 0, true, 0, true, true> {
  static constexpr const char* kName = "m3w4spam";
  static constexpr const char* kLesson = "m3w4spa, O rescaled only when a row's maximum grows";
};
template <int kHeads>
using M3W4SPAC = Mma<3, 4, 64, true, false, 0, false, true, 0, true, 0, true, false, kHeads>;
struct M3W4SPAC2 : M3W4SPAC<2> {
  static constexpr const char* kName = "m3w4spac2";
  static constexpr const char* kLesson = "m3w4spa, clusters of 2 heads in step, tile by tile";
};
struct M3W4SPAC4 : M3W4SPAC<4> {
  static constexpr const char* kName = "m3w4spac4";
  static constexpr const char* kLesson = "m3w4spa, clusters of 4 heads in step, tile by tile";
};
struct M3W4SPAC8 : M3W4SPAC<8> {
  static constexpr const char* kName = "m3w4spac8";
  static constexpr const char* kLesson = "m3w4spa, clusters of 8 heads in step, tile by tile";
};
template <int kHeads, bool kFixedRows = false>
using M3W4SPAH =
    Mma<3, 4, 64, true, false, 0, false, true, 0, true, 0, true, false, 1, kHeads, kFixedRows>;
struct M3W4SPAH2 : M3W4SPAH<2> {
  static constexpr const char* kName = "m3w4spah2";
  static constexpr const char* kLesson = "m3w4spa, 2 K/V heads per block, 2 warps each";
};
struct M3W4SPAH4 : M3W4SPAH<4> {
  static constexpr const char* kName = "m3w4spah4";
  static constexpr const char* kLesson = "m3w4spa, 4 K/V heads per block, a warp each";
};
struct M3W4SPAH4F : M3W4SPAH<4, true> {
  static constexpr const char* kName = "m3w4spah4f";
  static constexpr const char* kLesson = "m3w4spah4, each thread's copies at fixed offsets";
};
template <int kStages, bool kTma, int kSpread = 0, bool kEarlyIssue = false>
using MWxSP =
    Mma<kStages, 4, 64, /*kSplitP=*/true, /*kBulk=*/false, /*kPrefetch=*/0,
        /*kEarly=*/false, /*kSwizzle=*/true, /*kRuleSlots=*/0, /*kTileTable=*/true,
        /*kL2Bytes=*/0, /*kTileBase=*/true, /*kLazyRescale=*/false,
        /*kClusterHeads=*/1, /*kHeads=*/1, /*kFixedRows=*/false, kTma, kSpread, kEarlyIssue>;
struct M3W4SPT : MWxSP<3, /*kTma=*/true> {
  static constexpr const char* kName = "m3w4spt";
  static constexpr const char* kLesson = "m3w4spa, whole tiles copied by the TMA from warp 0";
};
struct M2W4SPT : MWxSP<2, /*kTma=*/true> {
  static constexpr const char* kName = "m2w4spt";
  static constexpr const char* kLesson = "m3w4spt at 2 stages: 70 KiB, 3 blocks per SM";
};
struct M3W4SPAS : MWxSP<3, /*kTma=*/false, /*kSpread=*/1> {
  static constexpr const char* kName = "m3w4spas";
  static constexpr const char* kLesson = "m3w4spa, each block's tiles from one of its own on";
};
struct M3W4SPTS : MWxSP<3, /*kTma=*/true, /*kSpread=*/1> {
  static constexpr const char* kName = "m3w4spts";
  static constexpr const char* kLesson = "m3w4spt, each block's tiles from one of its own on";
};
struct M3W4SPAZ : MWxSP<3, /*kTma=*/false, /*kSpread=*/2> {
  static constexpr const char* kName = "m3w4spaz";
  static constexpr const char* kLesson = "m3w4spa, each sequence's blocks from a tile of its own";
};
struct M3W4SPAE : MWxSP<3, /*kTma=*/false, /*kSpread=*/0, /*kEarlyIssue=*/true> {
  static constexpr const char* kName = "m3w4spae";
  static constexpr const char* kLesson = "m3w4spa, the next tile asked for before this one lands";
};
struct M3W4SPTE : MWxSP<3, /*kTma=*/true, /*kSpread=*/0, /*kEarlyIssue=*/true> {
  static constexpr const char* kName = "m3w4spte";
  static constexpr const char* kLesson = "m3w4spt, the next tile asked for before this one lands";
};
struct M3W4SPL1 : Mma<3, 4, 64, true, false, 0, false, true, 0, true, 128> {
  static constexpr const char* kName = "m3w4spl1";
  static constexpr const char* kLesson = "m3w4sp, its copies asking L2 for 128 bytes at once";
};
struct M3W4SPL2 : Mma<3, 4, 64, true, false, 0, false, true, 0, true, 256> {
  static constexpr const char* kName = "m3w4spl2";
  static constexpr const char* kLesson = "m3w4sp, its copies asking L2 for 256 bytes at once";
};
struct M2W4S2 : Mma<2, 4, 64, true, false, 0, false, true, 2> {
  static constexpr const char* kName = "m2w4s2";
  static constexpr const char* kLesson = "m2w4s, splits counted for 2 blocks per SM";
};
struct M2W4S : Mma<2, 4, 64, true, false, 0, false, true> {
  static constexpr const char* kName = "m2w4s";
  static constexpr const char* kLesson = "tensor cores, 2 stages, swizzled unpadded rows";
};
// h23s: m3w4s's DecodeStepInfo (its check_device counts the larger shared memory) with the
// split rule h23s_splits, and run and attend that take m2w4s's or m3w4s's from the problem and
// the split count (h23s_two_stages): launch sees DecodeParams, which lack the longest sequence.
struct H23S : M3W4S {
  static_assert(M2W4S::kRows == kH23Rows && M3W4S::kRows == kH23Rows &&
                M2W4S::Traits::kBlockN == kH23BlockN && M3W4S::Traits::kBlockN == kH23BlockN);
  static constexpr const char* kName = "h23s";
  static constexpr const char* kLesson = "m2w4s where its splits get 8 tiles or more, else m3w4s";
  static int num_splits(const DecodeProblem& p, int sm_count) { return h23s_splits(p, sm_count); }
  static int device_sms() {
    int device = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }
  static void run(const DecodeProblem& p, const DecodeTensors& t, int splits, void* workspace,
                  cudaStream_t stream) {
    (h23s_two_stages(p, device_sms(), splits) ? DecodeStep<M2W4S>::run : DecodeStep<M3W4S>::run)(
        p, t, splits, workspace, stream);
  }
  static void attend(const DecodeProblem& p, const DecodeTensors& t, int splits, void* workspace,
                     cudaStream_t stream) {
    (h23s_two_stages(p, device_sms(), splits)
         ? DecodeStep<M2W4S>::attend_only
         : DecodeStep<M3W4S>::attend_only)(p, t, splits, workspace, stream);
  }
};
struct M3W4R : Mma<3, 4, 64, false> {
  static constexpr const char* kName = "m3w4r";
  static constexpr const char* kLesson = "tensor cores, 3 stages, P rounded once (step 07)";
};

template <class T>
std::string config_of() {
  return std::to_string(T::kStages) + " stages, " + std::to_string(T::kWarps) +
         " warps, tiles of " + std::to_string(T::kBlockN) + " keys, " +
         std::to_string(T::kSmemBytes / 1024) + " KiB";
}

template <class K>
DecodeVariant make(std::string change, std::string predicted) {
  using T = typename K::Traits;
  DecodeVariant v;
  v.info = DecodeStep<K>::info();
  v.info.dtypes = {DType::BF16};
  v.info.head_dims = {128};
  v.change = std::move(change);
  v.config = config_of<T>();
  v.predicted = std::move(predicted);
  v.kernel = K::kernel();
  v.threads = T::kThreads;
  v.smem_bytes = T::kSmemBytes;
  return v;
}

// h23s's row: its run and attend; regs and blocks/SM of m2w4s's kernel.
DecodeVariant make_h23s(std::string change, std::string predicted) {
  DecodeVariant v = make<H23S>(std::move(change), std::move(predicted));
  v.info.run = H23S::run;
  v.info.attend = H23S::attend;
  v.config = "m2w4s (" + config_of<M2W4S::Traits>() + ") or m3w4s (" + config_of<M3W4S::Traits>() +
             "); regs, blocks/SM: m2w4s's";
  v.kernel = M2W4S::kernel();
  v.smem_bytes = M2W4S::Traits::kSmemBytes;
  return v;
}

}  // namespace

std::vector<DecodeVariant> decode_variants() {
  return {make<S3W4>("the first design as it was registered; the wave-aware split rule",
                     "the registered candidate's TB/s within noise"),
          make<S2W4>("2 stages: 3 blocks of 4 warps per SM",
                     "B=8: MHA >= 4.0 TB/s, GQA ~2.7; B=1 16k: MHA ~3.4, GQA ~1.35"),
          make<S2W8>("8 warps, tiles of 128 keys, 2 stages: 1 block per SM",
                     "the registered candidate's TB/s within 10%"),
          make<S3W8>("8 warps, tiles of 128 keys, 3 stages: 1 block per SM",
                     "the registered candidate's TB/s within 10%, and s2w8's"),
          make<M2W4>("tensor cores (mma.sync) for S = Q K^T and O += P V; 2 stages",
                     "B=8 16k: MHA >= 4.2 TB/s, GQA >= 4.0; B=1 16k: MHA >= 3.4, GQA >= 2.0"),
          make<M3W4>("tensor cores (mma.sync) for S = Q K^T and O += P V; 3 stages",
                     "m2w4's figures within 5%"),
          make<M3W4R>("m3w4 with P rounded once to bf16 (half the P V products)",
                      "m3w4's figures within 3%: the kernel is bound by bytes, not issue"),
          make<M3W4B>("m3w4 with each row of K and V copied by cp.async.bulk",
                      "B=8 16k: >= 4.3 TB/s MHA and GQA (L2 requests / 16, see above)"),
          make<M2W4B>("m2w4 with each row of K and V copied by cp.async.bulk",
                      "m3w4b's figures within 5%"),
          make<M4W4B>("4 stages (140 KiB, 1 block per SM) by cp.async.bulk",
                      "below m3w4b: 4 warps per SM cannot hide the softmax and barrier"),
          make<M3W4P1>("m3w4 asking L2 for the tile after the last in flight",
                       "B=8 16k: MHA >= 4.3 TB/s, GQA >= 4.1; B=1 as m3w4"),
          make<M3W4P2>("m3w4 asking L2 two tiles past the last in flight",
                       "m3w4p1's figures, within 3%"),
          make<M2W4P2>("m2w4 asking L2 two tiles past the last in flight",
                       "m3w4p2's figures, within 3%"),
          make<M3W4E>("m3w4 letting the combine be scheduled at the attention's start",
                      "B=1 GQA 16k: +2 to +4 us saved of ~27 (>= 2.6 TB/s where m3w4 reads "
                      "2.4-2.55); B=8 MHA (one split, no combine): as m3w4"),
          make<M3W4S>("m3w4 with unpadded rows, chunks swizzled (c ^ row % 8)",
                      "B=8 16k: MHA >= 4.3 TB/s, GQA >= 4.1 (L2 sectors / 1.5, see above)"),
          make<M2W4S>("m2w4 with unpadded rows, chunks swizzled (c ^ row % 8)",
                      "m3w4s's figures within 3%"),
          make<M2W4S2>("m2w4s with the splits the registered rule counts (2 blocks per SM)",
                       "B=8: m2w4s's within 5%; B=1 GQA 16k: 32 splits, >= m2w4s's"),
          make_h23s("m2w4s where its rule gives 8 tiles per split or more (or 1 split), else "
                    "m3w4s",
                    "the chosen kernel's ffd1e10 TB/s within 3%: contiguous 2.71 / 3.73 / 1.38 / "
                    "2.63 / 3.94 / 4.38 / 3.22 / 4.01, pages of 64 2.57 / 3.59 / 1.34 / 2.50 / "
                    "3.78 / 4.24 / 3.09 / 3.84 (splits 8 / 12 / 32 / 32 / 3 / 3 / 6 / 6)"),
          make<M3W4SP>("m3w4s reading a tile's block-table entries once per tile (pages < 64)",
                       "pages of 16 as m3w4s's pages of 64: >= 0.88 of contiguous at B=8 and "
                       "B=1, 16k (m3w4s: 0.58-0.61); contiguous and pages of 64 as m3w4s"),
          make<M3W4SPL1>("m3w4sp with cp.async's L2 prefetch size 128 B",
                         "B=8, 16k/32k: 1.00-1.02x m3w4sp (a 256-byte row in 2 L2 requests, "
                         "not 8 sectors' worth); B=1 as m3w4sp within 3%"),
          make<M3W4SPL2>("m3w4sp with cp.async's L2 prefetch size 256 B",
                         "B=8, 16k/32k: 1.01-1.03x m3w4sp (a 256-byte row of K or V fetched "
                         "from HBM at once); B=1 as m3w4sp within 3%"),
          make<M3W4SPA>("m3w4sp copying a whole tile in one page from one base address per "
                        "thread",
                        "B>=8, 16k/32k, contiguous and pages of 64/256: 1.02-1.04x m3w4sp "
                        "(about 430 fewer instructions per warp and tile, of ~816); B=1 and "
                        "pages of 16 as m3w4sp within 2%"),
          make<M3W4SPAM>("m3w4spa rescaling O only in a tile where some row's maximum grew",
                         "B>=8, 16k/32k: 1.00-1.01x m3w4spa (64 of ~390 instructions per warp "
                         "and tile skipped on most tiles); B=1 as m3w4spa within 1%"),
          make<M3W4SPAC2>("m3w4spa with 2 neighbouring heads' blocks as a cluster, one "
                          "cluster barrier per tile",
                          "B>=8, 16k/32k: 1.00-1.01x m3w4spa (rows of 2 heads, 512 B, asked "
                          "for together); B=1 within 2%"),
          make<M3W4SPAC4>("m3w4spa with 4 neighbouring heads' blocks as a cluster, one "
                          "cluster barrier per tile",
                          "B>=8, 16k/32k: 1.00-1.02x m3w4spa (1 KiB of a cache row asked for "
                          "together); B=1 within 2%"),
          make<M3W4SPAC8>("m3w4spa with 8 neighbouring heads' blocks as a cluster, one "
                          "cluster barrier per tile",
                          "B>=8, 16k/32k: 1.00-1.02x m3w4spa (2 KiB together; the barrier "
                          "waits on the slowest of 8); B=1 within 2%"),
          make<M3W4SPAH2>("m3w4spa with 2 neighbouring K/V heads per block (tiles of 32 "
                          "positions, 2 warps per head)",
                          "B>=8, 16k/32k: 1.00-1.01x m3w4spa (512-byte runs; a combine "
                          "where m3w4spa has one split); B=1 within 2%"),
          make<M3W4SPAH4>("m3w4spa with 4 neighbouring K/V heads per block (tiles of 16 "
                          "positions, a warp per head)",
                          "B>=8, 16k/32k: 1.00-1.015x m3w4spa (1 KiB runs; a combine where "
                          "m3w4spa has one split); B=1 within 2%"),
          make<M3W4SPAH4F>("m3w4spah4 with thread t copying chunk t % 16 of positions t / 16 "
                           "+ 8s of all 4 heads: offsets fixed at compile time, one swizzled "
                           "chunk",
                           "B>=8, 16k/32k: 1.00-1.02x m3w4spah4 (its loss to m3w4spa at one "
                           "split, B=32 MHA, taken for the copies' address arithmetic)"),
          make<M3W4SPT>("m3w4spa with each whole tile of K and V copied by the TMA (4 boxes "
                        "of 64 positions x 64 dims from thread 0, or a box per page of 16 or "
                        "32 from lanes of warp 0), the rest by cp.async",
                        "B>=8, 16k/32k, contiguous and pages of 64: 1.00-1.02x m3w4spa (about "
                        "40 of ~423 instructions per warp and tile gone); B=1 and pages of 16 "
                        "as m3w4spa within 2%"),
          make<M2W4SPT>("m3w4spt at 2 stages (3 blocks per SM if registers allow)",
                        "B>=8, 16k/32k: 1.00-1.02x m3w4spt (12 warps per SM, 96 KiB in flight "
                        "against 128); B=1 within 3% of m3w4spt (more splits)"),
          make<M3W4SPAS>("m3w4spa with each block walking its split's tiles from tile y·n/Y "
                         "on (y its place among the grid's Y blocks per split), round to the "
                         "first: the blocks running at once ask for positions spread over the "
                         "cache, not the same positions in step",
                         "B=8 MHA and B=32 GQA, 16k/32k (one wave of 256 blocks in step): "
                         "1.00-1.015x m3w4spa; B=8 GQA, B=32 MHA and B=1: level within 1%"),
          make<M3W4SPTS>("m3w4spt with m3w4spas's spread starts", "as m3w4spas against m3w4spt"),
          make<M3W4SPAZ>("m3w4spa with the blocks of sequence z starting at tile z·n/Z of their n, "
                         "round to the first: a sequence's heads together, the sequences spread",
                         "B=8 MHA and B=32 GQA, 16k/32k: 1.00-1.015x m3w4spa if sequences in "
                         "step crowd the DRAM while heads side by side help; the rest level "
                         "within 1%"),
          make<M3W4SPAE>("m3w4spa asking for tile t + 2 once every warp is done with tile t - 1, "
                         "before waiting for tile t (two barriers per tile): 3 tiles on their "
                         "way while a block waits, not 2",
                         "if the bytes in flight bind: B>=8, 16k/32k 1.00-1.02x m3w4spa, B=1 "
                         "1.00-1.03x; if not, level within 1% (the second barrier's cost)"),
          make<M3W4SPTE>("m3w4spt asking for tile t + 2 before waiting for tile t (one barrier "
                         "per TMA tile: the mbarrier shows the bytes)",
                         "as m3w4spae against m3w4spt")};
}

}  // namespace fa::step12
