#!/usr/bin/env python3
"""Plot a results JSON (from scripts/make_results.py): TFLOP/s and extra device memory vs N.

Writes, into --outdir:
  <prefix>tflops_<dtype>_d<d>_<causal|full>.png   one per (dtype, d, causal): TFLOP/s vs N
                                                    (log2 x axis), one line per implementation
  <prefix>memory.png                                extra device bytes vs N (log-log), one line
                                                    per implementation, for one (dtype, d)
                                                    group (--memory-dtype/--memory-d), with one
                                                    fp32 N×N matrix as a dashed reference
and, when the results hold backward passes (records with "pass": "backward"):
  <prefix>backward_tflops_<dtype>_d<d>_<causal|full>.png
                                                    the same for the backward, TFLOP/s at
                                                    2.5 × the forward's FLOPs
  <prefix>backward_memory.png                       the backward's extra device bytes vs N of
                                                    our backward steps (O(N): dQ, dK, dV and
                                                    a workspace of O(N·d)) and torch_naive's
                                                    autograd (O(N²)), for one group: the
                                                    --memory-d/--memory-causal one among those
                                                    holding both, if any

and, for a decoding results file (make_results.py --decode, "kind": "decode"), instead:
  <prefix>decode.png                                K+V TB/s vs cache length N (log2 x axis),
                                                    one panel per batch (columns) and H_kv
                                                    (rows), our step contiguous and paged
                                                    (the rule's split count) and each peer,
                                                    the HBM read bandwidth measured in the
                                                    same run as a dotted line
  <prefix>decode_layouts.png                        when the peers were also timed in the
                                                    step's cache layout (peers.py --kv-layouts:
                                                    records named impl_bnhd): at B >= 8 and
                                                    N >= 16k (bf16, d = 128, q_len = 1), our
                                                    fastest step over torch_cudnn in each
                                                    layout, and torch_cudnn in the cache's
                                                    layout over its own

Our steps are drawn solid with circles, cublas_baseline dash-dotted, the torch peers dashed (a
peer timed in the decoding step's cache layout, name_bnhd, dotted with hollow markers in its
backend's colour).
Needs matplotlib; without it the script says so and exits 0.

Example:
  python3 scripts/plots.py --results docs/results/h200.json --outdir docs/images --prefix h200_
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_results import (group_records, group_sort_key, impl_rank, is_ours,  # noqa: E402
                          normalize, of_pass, rows_of)


def log(msg):
    print(msg, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="TFLOP/s and memory plots from a results JSON.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--results", required=True, metavar="FILE",
                   help="results JSON from make_results.py")
    p.add_argument("--outdir", default="docs/images", help="folder for the PNGs")
    p.add_argument("--prefix", default="", help="file name prefix, e.g. h200_")
    p.add_argument("--memory-dtype", default="bf16",
                   help="dtype of the memory plot (falls back on the group with most points)")
    p.add_argument("--memory-d", type=int, default=128, help="head dim of the memory plot")
    p.add_argument("--memory-causal", choices=("off", "on"), default="off",
                   help="causal setting of the memory plot (falls back on the other)")
    p.add_argument("--dpi", type=int, default=120)
    return p.parse_args(argv)


def style(impl, index):
    if is_ours(impl):
        return dict(linestyle="-", marker="o", linewidth=2.0, markersize=5)
    if impl.startswith("cublas"):
        return dict(linestyle="-.", marker="s", linewidth=1.5, markersize=4)
    return dict(linestyle="--", marker="^", linewidth=1.2, markersize=4)


def n_label(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def set_n_axis(ax, ns, base):
    ax.set_xscale("log", base=base)
    ax.set_xticks(ns)
    ax.set_xticklabels([n_label(n) for n in ns])
    ax.minorticks_off()
    if len(ns) == 1:  # one point: give the axis some width around it
        ax.set_xlim(ns[0] / 1.5, ns[0] * 1.5)
    ax.set_xlabel("sequence length N")


def title_of(g, records):
    dtype, d, causal = g
    shape = ""
    tokens = {r["batch"] * r["n_q"] for r in records}
    heads = {r["heads_q"] for r in records}
    if len(tokens) == 1 and len(heads) == 1:
        shape = f", B·N = {tokens.pop()}, H = {heads.pop()}"
    return f"{dtype}, d = {d}, {'causal' if causal else 'non-causal'}{shape}"


def plot_tflops(plt, g, records, path, gpu, dpi, backward=False):
    fig, ax = plt.subplots(figsize=(8, 5))
    ns = sorted({r["n_q"] for r in records})
    layouts = {r["layout"] for r in records}
    for i, (label, layout, cells) in enumerate(rows_of(records)):
        if len(layouts) > 1:
            label += f" [{layout}]"
        xs = sorted(cells)
        ys = [cells[n]["tflops"] for n in xs]
        ax.plot(xs, ys, label=label, **style(label.split(" ")[0], i))
    set_n_axis(ax, ns, 2)
    ax.set_ylabel(("TFLOP/s (backward, 10·B·H·N²·d" if backward else
                   "TFLOP/s (forward, 4·B·H·N²·d") + (" / 2)" if g[2] else ")"))
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{gpu}: {'backward, ' if backward else ''}{title_of(g, records)}", fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def pick_memory_group(groups, dtype, d, causal):
    want = [(dtype, d, causal), (dtype, d, not causal)]
    for g in want:
        if g in groups and any(r.get("extra_device_bytes") for r in groups[g]):
            return g
    usable = [g for g in groups if any(r.get("extra_device_bytes") for r in groups[g])]
    if not usable:
        return None
    g = max(usable, key=lambda g: (len(groups[g]), [-x if isinstance(x, int) else 0
                                                   for x in group_sort_key(g)]))
    log(f"note: no memory data for {dtype} d={d}; plotting {g[0]} d={g[1]} "
        f"{'causal' if g[2] else 'non-causal'} instead")
    return g


def pick_backward_memory_group(groups, d, causal):
    """The backward group whose memory to plot: one where both one of our steps and
    torch_naive have extra_device_bytes, preferring head dim d, then the causal setting,
    then the most points; without such a group, the one of our steps with most points;
    None when no step of ours has any."""
    def has(recs, want):
        return any(want(r["impl"]) and r.get("extra_device_bytes") for r in recs)
    usable = [g for g, recs in groups.items() if has(recs, is_ours)]
    if not usable:
        return None
    return max(usable, key=lambda g: (has(groups[g], lambda i: i == "torch_naive"), g[1] == d,
                                      g[2] == causal, len(groups[g]),
                                      [-x if isinstance(x, int) else 0
                                       for x in group_sort_key(g)]))


def plot_memory(plt, g, records, path, gpu, dpi, backward=False):
    fig, ax = plt.subplots(figsize=(8, 5))
    ns = sorted({r["n_q"] for r in records})
    drawn = 0
    layouts = {r["layout"] for r in records}
    for i, (label, layout, cells) in enumerate(rows_of(records)):
        if len(layouts) > 1:
            label += f" [{layout}]"
        pts = [(n, cells[n]["extra_device_bytes"]) for n in sorted(cells)
               if cells[n].get("extra_device_bytes")]  # 0 / missing cannot go on a log axis
        if not pts:
            log(f"note: {label}: no positive extra_device_bytes; left off the memory plot")
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                **style(label.split(" ")[0], i))
        drawn += 1
    # Reference: one fp32 N×N matrix for all batches and heads, what a naive step stores.
    ref = {}
    for r in records:
        ref.setdefault(r["n_q"], 4.0 * r["batch"] * r["heads_q"] * r["n_q"] * r["n_kv"])
    xs = sorted(ref)
    ax.plot(xs, [ref[n] for n in xs], color="grey", linestyle=":", linewidth=1, marker=".",
            label="one fp32 N×N matrix (4·B·H·N² bytes)")
    set_n_axis(ax, ns, 2)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human(v)))
    ax.set_ylabel("extra device memory (bytes beyond Q, K, V, O, L, dO)" if backward
                  else "extra device memory (bytes beyond Q, K, V)")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{gpu}: {'backward, ' if backward else ''}{title_of(g, records)}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return drawn


def plot_backward(plt, args, records, gpu):
    """The backward's plots (TFLOP/s per group, the memory of ours against torch_naive's);
    returns how many were written."""
    if not records:
        return 0
    written = 0
    groups = group_records(records)
    for g, recs in groups.items():
        dtype, d, causal = g
        name = f"{args.prefix}backward_tflops_{dtype}_d{d}_{'causal' if causal else 'full'}.png"
        path = os.path.join(args.outdir, name)
        plot_tflops(plt, g, recs, path, gpu, args.dpi, backward=True)
        written += 1
        log(f"wrote {path} ({len({r['impl'] for r in recs})} implementations, "
            f"{len(recs)} points)")
    g = pick_backward_memory_group(groups, args.memory_d, args.memory_causal == "on")
    if g is None:
        log("note: no backward extra_device_bytes of our steps; backward memory plot skipped")
        return written
    shown = [r for r in groups[g] if is_ours(r["impl"]) or r["impl"] == "torch_naive"]
    if not any(r["impl"] == "torch_naive" for r in shown):
        log(f"note: no torch_naive backward in {g[0]} d={g[1]}; the backward memory plot "
            "shows our steps alone")
    path = os.path.join(args.outdir, f"{args.prefix}backward_memory.png")
    drawn = plot_memory(plt, g, shown, path, gpu, args.dpi, backward=True)
    log(f"wrote {path} ({g[0]} d={g[1]} {'causal' if g[2] else 'non-causal'}, "
        f"{drawn} implementations)")
    return written + 1


def plot_decode(plt, doc, path, dpi):
    """TB/s vs N per (H_kv, B) panel for one (dtype, d, q_len) group: bf16, d = 128, q_len = 1
    when measured, else the group with most records. Returns the group plotted."""
    recs = [r for r in doc["results"] if r.get("rule") is not False]  # no forced split counts
    groups = {}
    for r in recs:
        groups.setdefault((r["dtype"], r["d"], r["q_len"]), []).append(r)
    g = ("bf16", 128, 1) if ("bf16", 128, 1) in groups else max(groups, key=lambda k: len(groups[k]))
    recs = groups[g]
    batches = sorted({r["batch"] for r in recs})
    heads = sorted({(r["heads_q"], r["heads_kv"]) for r in recs}, key=lambda h: -h[1])
    ns = sorted({r["cache"] for r in recs})
    lines = sorted({(r["impl"], r["layout"]) for r in recs},
                   key=lambda x: (not is_ours(x[0]), x[0], x[1] != "contiguous",
                                  int(x[1][4:]) if x[1] != "contiguous" else 0))
    # A peer timed in the step's cache layout (name_bnhd, peers.py --kv-layouts) takes its
    # backend's colour, dotted, with hollow markers.
    base_of = {(impl, layout): (impl.removesuffix("_bnhd"), layout) for impl, layout in lines}
    bases = list(dict.fromkeys(base_of.values()))  # in the lines' order, each once
    # Ten colours while they suffice, else twenty (matplotlib's tab10 and tab20).
    palette = plt.get_cmap("tab10" if len(bases) <= 10 else "tab20")
    colours = {line: palette(bases.index(base) % palette.N) for line, base in base_of.items()}
    hbm = doc["hbm"]["tbps"]
    fig, axes = plt.subplots(len(heads), len(batches), squeeze=False, sharey=True,
                             figsize=(4 * len(batches) + 3, 3.2 * len(heads)))
    for i, (hq, hkv) in enumerate(heads):
        for j, b in enumerate(batches):
            ax = axes[i][j]
            for k, (impl, layout) in enumerate(lines):
                pts = sorted((r["cache"], r["tbps"]) for r in recs
                             if r["impl"] == impl and r["layout"] == layout and r["batch"] == b
                             and r["heads_kv"] == hkv and r["heads_q"] == hq)
                if not pts:
                    continue
                st = dict(style(impl, k), color=colours[(impl, layout)])
                if is_ours(impl) and layout != "contiguous":
                    st = dict(st, linestyle=":", marker="s")
                if impl.endswith("_bnhd"):
                    st = dict(st, linestyle=":", markerfacecolor="none")
                label = f"{impl} {layout}" if is_ours(impl) else impl
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **st)
            ax.axhline(hbm, color="grey", linestyle="--", linewidth=1,
                       label=f"HBM read, measured ({hbm:.2f} TB/s)")
            set_n_axis(ax, ns, 2)
            ax.set_xlabel("cache length N")
            ax.set_ylim(bottom=0, top=hbm * 1.1)
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"B = {b}, H_q/H_kv = {hq}/{hkv}", fontsize=9)
            if j == 0:
                ax.set_ylabel("K+V TB/s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(0.79, 0.5))
    fig.suptitle(f"{doc.get('gpu', '?')}: one decoding step, {g[0]}, d = {g[1]}, "
                 f"q_len = {g[2]}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.78, 0.96))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return g


def plot_decode_layouts(plt, doc, path, dpi, peer="torch_cudnn"):
    """Ratios at B >= 8, N >= 16k (bf16, d = 128, q_len = 1, contiguous, the rule's split
    count): our fastest step over `peer` in PyTorch's layout and in the cache's (peer_bnhd),
    and peer_bnhd over peer. Returns the shapes drawn (none: nothing written)."""
    recs = [r for r in doc["results"] if r.get("rule") is not False
            and (r["dtype"], r["d"], r["q_len"], r["layout"]) == ("bf16", 128, 1, "contiguous")
            and r["batch"] >= 8 and r["cache"] >= 16384]
    at = {(r["impl"], r["batch"], r["heads_q"], r["heads_kv"], r["cache"]): r["median_ms"]
          for r in recs}
    shapes = sorted({k[1:] for k in at}, key=lambda s: (s[0], -s[2], s[3]))
    shapes = [s for s in shapes if (peer,) + s in at and (peer + "_bnhd",) + s in at]
    ours = sorted({r["impl"] for r in recs if is_ours(r["impl"])})
    ours = [o for o in ours if all((o,) + s in at for s in shapes)]
    if not shapes or not ours:
        return []
    # Our fastest step: the least geometric mean of its times over the shapes' peer times.
    best = min(ours, key=lambda o: sum(math.log(at[(o,) + s] / at[(peer,) + s]) for s in shapes))
    series = [(f"{best} / {peer}", [at[(peer,) + s] / at[(best,) + s] for s in shapes], "C0"),
              (f"{best} / {peer}_bnhd (the same layout)",
               [at[(peer + "_bnhd",) + s] / at[(best,) + s] for s in shapes], "C1"),
              (f"{peer}_bnhd / {peer} (the cache's layout over its own)",
               [at[(peer,) + s] / at[(peer + "_bnhd",) + s] for s in shapes], "C7")]
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(series)
    for i, (label, values, colour) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(shapes))]
        ax.bar(xs, [v - 1 for v in values], width, bottom=1.0, label=label, color=colour)
    ax.axhline(1.0, color="black", linewidth=1)
    lo = min(min(v) for _, v, _ in series)
    hi = max(max(v) for _, v, _ in series)
    ax.set_ylim(min(0.97, lo - 0.005), max(1.03, hi + 0.02))
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"B={b}\n{hq}/{hkv}\n{n_label(n)}" for b, hq, hkv, n in shapes],
                       fontsize=8)
    ax.set_ylabel("ratio of K+V TB/s (above 1: faster)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=1, framealpha=0.9)
    ax.set_title(f"{doc.get('gpu', '?')}: one decoding step, bf16, d = 128, q_len = 1; "
                 f"{peer} given K and V as [B, H_kv, N, d] and as [B, N, H_kv, d]", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return shapes


def human(v):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= size:
            return f"{v / size:g} {unit}"
    return f"{v:g} B"


def main(argv=None):
    args = parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("plots.py: matplotlib is not installed; no plots written "
            "(try /usr/bin/python3, or pip install matplotlib)")
        return 0

    with open(args.results) as f:
        doc = json.load(f)
    if doc.get("kind") == "decode":
        if not doc.get("results"):
            log(f"plots.py: {args.results} holds no results; nothing to plot")
            return 0
        os.makedirs(args.outdir, exist_ok=True)
        path = os.path.join(args.outdir, f"{args.prefix}decode.png")
        g = plot_decode(plt, doc, path, args.dpi)
        log(f"wrote {path} ({g[0]} d={g[1]} q_len={g[2]})")
        path = os.path.join(args.outdir, f"{args.prefix}decode_layouts.png")
        shapes = plot_decode_layouts(plt, doc, path, args.dpi)
        if shapes:
            log(f"wrote {path} ({len(shapes)} shapes)")
        else:
            log(f"note: no torch_cudnn_bnhd records at B >= 8, N >= 16k: {path} not written"
                + (" (an earlier one is left there)" if os.path.exists(path) else ""))
        return 0
    records = []
    for x in doc.get("results", []):
        try:
            records.append(normalize(x))
        except (KeyError, TypeError, ValueError) as e:
            log(f"note: skipping a malformed record ({e!r}): {x}")
    gpu = doc.get("gpu", "unknown GPU")
    if not records:
        log(f"plots.py: {args.results} holds no results; nothing to plot")
        return 0
    os.makedirs(args.outdir, exist_ok=True)
    backward = of_pass(records, "backward")
    records = of_pass(records, "forward")

    groups = group_records(records)
    written = 0
    for g, recs in groups.items():
        dtype, d, causal = g
        name = f"{args.prefix}tflops_{dtype}_d{d}_{'causal' if causal else 'full'}.png"
        path = os.path.join(args.outdir, name)
        npts = len(recs)
        impls = sorted({r["impl"] for r in recs}, key=impl_rank)
        plot_tflops(plt, g, recs, path, gpu, args.dpi)
        written += 1
        log(f"wrote {path} ({len(impls)} implementations, {npts} points"
            + (", few points" if len({r['n_q'] for r in recs}) < 2 else "") + ")")

    g = pick_memory_group(groups, args.memory_dtype, args.memory_d, args.memory_causal == "on")
    if g is None:
        log("note: no extra_device_bytes in the results; memory plot skipped")
    else:
        path = os.path.join(args.outdir, f"{args.prefix}memory.png")
        drawn = plot_memory(plt, g, groups[g], path, gpu, args.dpi)
        written += 1
        log(f"wrote {path} ({g[0]} d={g[1]} {'causal' if g[2] else 'non-causal'}, "
            f"{drawn} implementations)")
    written += plot_backward(plt, args, backward, gpu)
    log(f"plots.py: {written} PNG files in {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
