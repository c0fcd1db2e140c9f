#!/usr/bin/env python3
"""grid_order.py — a model of the order in which step 11's backward CTAs run, under the causal mask.

    scripts/grid_order.py --out docs/images/backward_grid_order.png

Each CTA of the backward's main kernel owns one tile of kBlockN = 128 keys of one (batch, K/V
head) and visits the Q tiles that see those keys: under the causal mask (N_q = N_kv = N) key tile
n sees (N − 128 n) / kBlockM of them, so the first key tile of a head is the longest CTA and the
last the shortest. The model gives every CTA a time of its Q tiles plus one (the loads before
the first and the stores after the last) and lets 132 SMs, one CTA each, take the CTAs in the
grid's order, each SM the next CTA as soon as it is free (a list schedule). It prints, per
order, how far the last CTA ends past the even share (the total time over 132), and draws both
schedules: the grid's x fastest, x = key tile (the order of FlashAttention-2 and of the step
until commit 14dd898) and x = head, every head's first key tile launched first (the step's
under the mask since). A model, not a measurement: bin/variants_11's rows fa2ufzuch and
fa2d64ch measure it (docs/11-backward-tc.md, "The grid's order under the mask").
"""
import argparse
import heapq
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="scripts/grid_order.py",
                                description="A list-schedule model of the causal backward's grid order.")
    p.add_argument("--n", type=int, default=4096, help="sequence length N (default: %(default)s)")
    p.add_argument("--d", type=int, choices=(64, 128), default=128,
                   help="head dim: 64 (128-row Q tiles) or 128 (64-row) (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=16384,
                   help="B·N, as the benchmark keeps it (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=2048,
                   help="H·d, as the benchmark keeps it (default: %(default)s)")
    p.add_argument("--sms", type=int, default=132, help="SMs, one CTA each (default: %(default)s)")
    p.add_argument("--out", default=None, help="draw both schedules into this PNG")
    args = p.parse_args(argv)
    if args.n < 128 or args.n % 128:
        p.error(f"--n ({args.n}) must be a positive multiple of 128 (the key tile)")
    for name in ("tokens", "hidden", "sms"):
        if getattr(args, name) < 1:
            p.error(f"--{name} ({getattr(args, name)}) must be at least 1")
    if args.tokens % args.n:
        p.error(f"--tokens ({args.tokens}) must be a multiple of --n ({args.n}): B = tokens / N")
    if args.hidden % args.d:
        p.error(f"--hidden ({args.hidden}) must be a multiple of --d ({args.d}): H = hidden / d")
    return args


def schedule(lengths, sms):
    """(start, end, sm, length) of each CTA, taken in order by the first free SM."""
    free = [(0.0, sm) for sm in range(sms)]
    heapq.heapify(free)
    out = []
    for w in lengths:
        t, sm = heapq.heappop(free)
        out.append((t, t + w, sm, w))
        heapq.heappush(free, (t + w, sm))
    return out


def main(argv=None):
    args = parse_args(argv)
    block_m = 64 if args.d == 128 else 128
    heads = (args.tokens // args.n) * (args.hidden // args.d)  # B · H
    tiles = args.n // 128

    def length(n):  # Q tiles that see key tile n under the causal mask, plus one
        return (args.n - 128 * n + block_m - 1) // block_m + 1

    orders = {
        "key tile fastest (grid x = key tile)": [length(n) for _ in range(heads) for n in range(tiles)],
        "heavy first (grid x = head)": [length(n) for n in range(tiles) for _ in range(heads)],
    }
    even = sum(orders["heavy first (grid x = head)"]) / args.sms
    runs = {}
    print(f"N = {args.n}, d = {args.d}: {heads} heads x {tiles} key tiles = {heads * tiles} CTAs "
          f"on {args.sms} SMs; the even share {even:.1f} Q-tile times")
    for name, lengths in orders.items():
        runs[name] = schedule(lengths, args.sms)
        end = max(e for _, e, _, _ in runs[name])
        print(f"  {name}: the last CTA ends at {end:.1f}, {100 * (end / even - 1):.1f}% past it")
    if args.out:
        try:
            import matplotlib
        except ImportError as e:
            print(f"grid_order.py: error: --out needs matplotlib ({e})", file=sys.stderr)
            return 1
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        longest = length(0)
        fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
        cmap = plt.get_cmap("viridis")
        for ax, (name, run) in zip(axes, runs.items()):
            for start, end, sm, w in run:
                ax.broken_barh([(start, end - start)], (sm, 0.9), facecolors=cmap(w / longest),
                               edgecolor="none")
            last = max(e for _, e, _, _ in run)
            ax.axvline(even, color="black", linestyle="--", linewidth=1)
            ax.axvline(last, color="#c62828", linewidth=1.5)
            ax.set_title(f"{name}: the last CTA ends {100 * (last / even - 1):.1f}% past the even share",
                         fontsize=11)
            ax.set_ylabel("SM")
            ax.set_ylim(0, args.sms)
        axes[-1].set_xlabel("time, in Q-tile times (dashed: the even share; red: the last CTA's end)")
        sm_map = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, longest))
        fig.colorbar(sm_map, ax=axes, label="CTA length (Q tiles + 1)")
        fig.suptitle(f"Step 11's causal backward, a list-schedule model: N = {args.n}, d = {args.d}, "
                     f"{heads} heads x {tiles} key tiles on {args.sms} SMs", fontsize=12)
        fig.savefig(args.out, dpi=110, bbox_inches="tight")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
