#!/usr/bin/env python3
"""plot_lm.py — the loss curves of scripts/train_lm.py runs, laid over each other.

    scripts/plot_lm.py lm_ours.json lm_sdpa.json --out docs/images/lm_loss.png

Each run's training loss per step (thin) with its validation loss (markers); the legend gives
its attention and median tokens/s. The runs must share every setting but --attention and the
steps it chose, so that the curves differ by the attention alone (exit status 2 otherwise).
"""
import argparse
import json
import os
import sys

# Settings that may differ between the runs laid over each other: which attention ran.
_MAY_DIFFER = {"attention", "forward_step", "backward_step"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="scripts/plot_lm.py",
                                description="Overlay the loss curves of train_lm.py runs.")
    p.add_argument("logs", nargs="+", help="JSON logs written by scripts/train_lm.py")
    p.add_argument("--out", default="docs/images/lm_loss.png",
                   help="the figure (default: %(default)s)")
    p.add_argument("--smooth", type=int, default=10,
                   help="steps in the moving average of the training loss; 1: none "
                        "(default: %(default)s)")
    args = p.parse_args(argv)
    if args.smooth < 1:
        p.error(f"--smooth ({args.smooth}) must be at least 1")
    runs = []
    for path in args.logs:
        try:
            with open(path) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"{path}: cannot be read as a train_lm.py log ({e})")
        if not isinstance(run, dict) or not {"train", "val", "settings"} <= run.keys():
            p.error(f"{path}: not a train_lm.py log (no train, val or settings)")
        runs.append(run)
    first = runs[0]["settings"]
    for path, run in zip(args.logs[1:], runs[1:]):
        differ = sorted(k for k in set(first) | set(run["settings"])
                        if k not in _MAY_DIFFER and first.get(k) != run["settings"].get(k))
        if differ:
            p.error(f"{path} differs from {args.logs[0]} in "
                    + ", ".join(f"{k} ({run['settings'].get(k)} vs {first.get(k)})"
                                for k in differ)
                    + ": the curves would not compare the attention alone")
    args.runs = runs
    return args


def label(run):
    """e.g. "ours (09_warp_specialized + 10_backward in float32), 1.2 M tokens/s"."""
    name = "PyTorch SDPA" if run["attention"] == "sdpa" else "ours"
    if run["attention"] == "ours":
        name += f" ({run['forward']} + {run['backward']}"
        name += f" in {run['backward_dtype']})" if run.get("backward_dtype") else ")"
    rate = run.get("median_tokens_per_s")
    return name + (f", {rate / 1e6:.2f} M tokens/s" if rate else "")


def smooth(values, width):
    """Trailing moving average over `width` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def main(argv=None):
    args = parse_args(argv)
    try:
        import matplotlib
    except ImportError as e:
        print(f"plot_lm.py: error: matplotlib is needed ({e}); no plot written", file=sys.stderr)
        return 1
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    two = len(args.runs) == 2
    if two:  # below the curves, their difference step by step
        fig, (ax, diff) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1]})
    else:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, run in enumerate(args.runs):
        color = f"C{i}"
        steps = [r["step"] for r in run["train"]]
        ax.plot(steps, smooth([r["loss"] for r in run["train"]], args.smooth), color=color,
                linewidth=1.2, label=f"{label(run)}: training")
        ax.plot([r["step"] for r in run["val"]], [r["loss"] for r in run["val"]], "o--",
                color=color, markersize=4, linewidth=0.8, label="validation (held-out text)")
    s = args.runs[0]["settings"]
    ax.set_title(f"Byte-level LM on docs/*.md: {s['layers']} layers, d_model {s['d_model']}, "
                 f"{s['heads']} heads, context {s['context']}, batch {s['batch']}, {s['dtype']}\n"
                 f"{args.runs[0]['device']}, seed {s['seed']}", fontsize=9)
    ax.set_ylabel("loss (nats per byte)")
    if args.smooth > 1:
        ax.text(0.01, 0.02, f"training loss: mean of the last {args.smooth} steps",
                transform=ax.transAxes, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if two:
        a, b = ({r["step"]: r["loss"] for r in run["train"]} for run in args.runs)
        common = sorted(set(a) & set(b))
        diff.plot(common, [a[i] - b[i] for i in common], color="k", linewidth=0.8)
        diff.axhline(0, color="grey", linewidth=0.5)
        diff.set_ylabel(f"{args.runs[0]['attention']} − {args.runs[1]['attention']}")
        diff.grid(alpha=0.3)
    (diff if two else ax).set_xlabel("step (training loss per step, not averaged, below)"
                                     if two else "step")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"plot_lm: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
