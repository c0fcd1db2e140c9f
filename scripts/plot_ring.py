#!/usr/bin/env python3
"""plot_ring.py — the ring's time model (steps/13_ring_attention/ring_plan.py, the mirror of
reference/ring.h's ring_time) against the ring benchmark's measurements.

Reads the JSON that ring_bench.py writes (docs/results/h200x2-ring.json): per mask, the
model's two constants calibrated on the two-GPU run (a rank's throughput F and the link's
bandwidth W), and the measured times. Draws, per mask (full; causal with zigzag chunks), the
modelled time of one attention (B, heads and d of the benchmark) against N for 1, 2, 8 and 64
GPUs, the measured two-GPU times as points, and each ring's edge N (below it some step's
send outlasts its compute: ring_min_hidden_n) as a dotted line. The 8- and 64-GPU lines
assume every link as fast as the one measured.

With --timeline FILE it also draws the measured timelines (every rank's median call, as
ring_bench.py recorded them with CUDA events): per N up to 128k and per mask, each rank's
compute steps and its sends, with the share of the sends hidden under the compute. Each rank's
times start at its own call's start.

    scripts/plot_ring.py docs/results/h200x2-ring.json --out docs/images/h200x2_ring_model.png \
        --timeline docs/images/h200x2_ring_timeline.png
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "steps", "13_ring_attention"))
import ring_plan  # noqa: E402

CONFIGS = (("full", False, "zigzag", "non-causal"), ("causal zigzag", True, "zigzag",
                                                      "causal, zigzag chunks"))


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot the ring's time model against the "
                                 "measurements (ring_bench.py's JSON).")
    ap.add_argument("results", help="ring_bench.py's JSON, e.g. docs/results/h200x2-ring.json")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "images",
                                                  "h200x2_ring_model.png"))
    ap.add_argument("--ranks", default="2,8,64", help="GPU counts to model, comma-separated")
    ap.add_argument("--timeline", help="also draw the measured timelines into this PNG")
    args = ap.parse_args(argv)
    try:
        ranks = [int(x) for x in args.ranks.split(",")]
    except ValueError:
        ap.error(f"--ranks: {args.ranks!r} is not a comma-separated list of integers")
    if not ranks or min(ranks) < 1:
        ap.error(f"--ranks: {args.ranks!r}: every count must be at least 1")
    with open(args.results) as f:
        doc = json.load(f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_ring: matplotlib is not installed; nothing drawn", file=sys.stderr)
        return 1
    shape = doc["shape"]
    b, h, d, dt = shape["batch"], shape["heads"], shape["head_dim"], shape["dtype"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, (config, causal, layout, title) in zip(axes, CONFIGS):
        pred = next(p for p in doc["predictions"] if p["config"] == config)
        f_s, w_s = pred["flops_per_s"], pred["bytes_per_s"]
        ns = [2 ** k for k in range(12, 23)]  # 4k .. 4M
        for p in [1] + ranks:
            pts = []
            for n in ns:
                if n % ring_plan.num_chunks(p, layout):
                    continue
                t = ring_plan.ring_time(b, h, h, n, d, dt, causal, p, layout, f_s, w_s)
                pts.append((n, t.total_s * 1e3))
            label = "one GPU (model)" if p == 1 else f"{p} GPUs (model)"
            ax.plot([x for x, _ in pts], [y for _, y in pts], "-" if p > 1 else "--", label=label)
            if p > 1:
                edge = ring_plan.ring_min_hidden_n(b, h, h, d, dt, causal, p, layout, f_s, w_s)
                ax.axvline(edge, ls=":", lw=1, color=ax.lines[-1].get_color())
        meas = [(r["n"], r["ring"][config]["both_ms"]) for r in doc["rows"]]
        single = [(r["n"], r["single_ms"]["causal" if causal else "full"]) for r in doc["rows"]]
        ax.plot([x for x, _ in meas], [y for _, y in meas], "o", color="black",
                label=f"{doc['gpus']} GPUs, measured")
        ax.plot([x for x, _ in single], [y for _, y in single], "s", mfc="none", color="black",
                label="one GPU, measured")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (tokens); dotted: each ring's edge N")
        ax.set_title(f"{title}: F = {f_s / 1e12:.0f} TFLOP/s, W = {w_s / 1e9:.0f} GB/s")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("time of one attention (ms)")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Ring attention's time model, calibrated on {doc['gpus']} × {doc['gpu']}: "
                 f"B = {b}, {h} heads, d = {d}, {dt}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot_ring: wrote {args.out}")
    if args.timeline:
        return timelines(doc, args.timeline, plt)
    return 0


def timelines(doc, out, plt):
    """The measured timelines (module comment); 1 when the JSON has none."""
    rows = [r for r in doc["rows"] if r["n"] <= 131072 and
            all(r["ring"][c].get("timelines") for c, *_ in CONFIGS)]
    if not rows:
        print("plot_ring: the JSON has no timelines (ring_bench.py records them)", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 1.2 + 1.3 * len(rows)), squeeze=False)
    for row, line in zip(rows, axes):
        for ax, (config, causal, layout, title) in zip(line, CONFIGS):
            e = row["ring"][config]
            model_hidden = f"{e['model_hidden']:.0%}" if "model_hidden" in e else "–"
            labels = []
            for r, steps in enumerate(e["timelines"]):
                for s, m in enumerate(steps):
                    shade = 0.35 + 0.5 * s / max(1, len(steps) - 1)
                    if m["compute"]:
                        c0, c1 = m["compute"]
                        ax.broken_barh([(c0, c1 - c0)], (2 * r + 1.05, 0.8),
                                       color=(0.2, 0.4, shade + 0.1))
                    if m["send"]:
                        s0, s1 = m["send"]
                        ax.broken_barh([(s0, s1 - s0)], (2 * r + 0.15, 0.8),
                                       color=(0.95, 0.45 + 0.3 * shade, 0.1))
                labels += [f"rank {r} sends", f"rank {r} compute"]
            ax.set_yticks([0.55 + i for i in range(len(labels))], labels, fontsize=7)
            ax.set_ylim(0, len(labels))
            ax.set_title(f"N = {row['n']}, {title}: ring {e['both_ms']:.3g} ms, sends "
                         f"{e['sends_in_ring_ms']:.3g} ms, hidden {e['hidden']:.0%} "
                         f"(model {model_hidden})", fontsize=7.5)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(True, axis="x", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("ms from the start of the rank's call")
    # Files written before the priority was an option were measured at NCCL's default.
    streams = doc.get("nccl_streams", "default priority")
    fig.suptitle(f"Ring attention on {doc['gpus']} × {doc['gpu']}, NCCL's streams at {streams}, "
                 "measured (CUDA events, each rank's median call):\ncompute steps (blue, lighter = "
                 "later step) and the sends of the next slice (orange)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_ring: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
