#!/usr/bin/env python3
"""HBM traffic per step, measured with Nsight Compute next to the analytic count.

For each step (and the cuBLAS baseline) it runs the tour once under
    ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum
on one problem (default N = 4096, d = 64, B = 1, H = 16, fp32), sums the DRAM bytes of all
the step's kernels, and writes a Markdown table and JSON with the analytic count beside it.

    python3 scripts/ncu_traffic.py --tour build/bin/tour --out-md docs/results/h200-traffic.md
"""
import argparse
import csv
import io
import json
import math
import os
import re
import subprocess
import sys


def analytic(step, n, d, bh, block_m):
    """Bytes each design must move through HBM (fp32), as the chapters derive them."""
    io_bytes = 4 * bh * n * d * 4 + 4 * bh * n          # read Q, K, V; write O; write L
    nxn = 4 * bh * n * n                                # one fp32 N×N matrix
    if step in ("01_naive_attention", "02_tiled_matmul", "cublas_baseline"):
        # write S, read S, write P, read P (the baseline writes P over S: same traffic)
        return io_bytes + 4 * nxn, "Q,K,V,O,L + S written, S read, P written, P read (4·N²)"
    if step == "03_online_softmax":
        return io_bytes + 2 * nxn, "Q,K,V,O,L + S written and read once (2·N²)"
    if step == "04_flash_attention":
        # Each of the ⌈N/Br⌉ query tiles streams all of K and V: Θ(N²d/Br) = Θ(N²d²/M).
        tiles = math.ceil(n / block_m)
        kv = 2 * bh * tiles * n * d * 4
        return 2 * bh * n * d * 4 + 4 * bh * n + kv, (
            f"Q read and O,L written once + K,V read once per {block_m}-row query tile")
    return io_bytes, "Q,K,V,O,L once"


def run_ncu(ncu, tour, step, n, d, bh):
    cmd = [ncu, "--clock-control", "none", "--metrics",
           "dram__bytes_read.sum,dram__bytes_write.sum", "--csv", "--print-units", "base",
           tour, "--step", step, "--n", str(n), "--d", str(d), "--batch", "1",
           "--heads-q", str(bh), "--heads-kv", str(bh), "--no-check", "--reps", "1",
           "--warmup", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout
    start = text.find('"ID"')
    if out.returncode != 0 or start < 0:
        raise RuntimeError(f"ncu failed for {step} (exit {out.returncode}): "
                           f"{(out.stderr or text)[-600:]}")
    read = write = 0.0
    kernels = set()
    for row in csv.DictReader(io.StringIO(text[start:])):
        value = float(row["Metric Value"].replace(",", ""))
        kernels.add(row["Kernel Name"].split("(")[0])
        if row["Metric Name"] == "dram__bytes_read.sum":
            read += value
        elif row["Metric Name"] == "dram__bytes_write.sum":
            write += value
    return read, write, sorted(kernels)


def human(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tour", default="build/bin/tour")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=16, help="B·H (B = 1)")
    ap.add_argument("--block-m", type=int, default=64, help="step 04's query-tile rows at this d")
    ap.add_argument("--steps", default="", help="comma list; default: steps/NN_* folders + baseline")
    ap.add_argument("--out-md", default="")
    ap.add_argument("--out-json", default="")
    a = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    steps = [s for s in a.steps.split(",") if s] or sorted(
        f for f in os.listdir(os.path.join(root, "steps"))
        if re.match(r"\d\d_", f) and not f.startswith("00")) + ["cublas_baseline"]
    rows = []
    for step in steps:
        try:
            r, w, kernels = run_ncu(a.ncu, a.tour, step, a.n, a.d, a.heads)
        except RuntimeError as e:
            print(f"skip {step}: {e}", flush=True)
            continue
        model, how = analytic(step, a.n, a.d, a.heads, a.block_m)
        rows.append({"impl": step, "dram_read_bytes": r, "dram_write_bytes": w,
                     "analytic_bytes": model, "analytic_model": how, "kernels": kernels})
        print(f"{step:22s} read {human(r):>10s} write {human(w):>10s} "
              f"total {human(r + w):>10s} analytic {human(model):>10s}", flush=True)

    shape = f"N = {a.n}, d = {a.d}, B·H = {a.heads} (B = 1), fp32, non-causal"
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"shape": shape, "n": a.n, "d": a.d, "heads": a.heads, "results": rows},
                      f, indent=1)
    if a.out_md:
        lines = [f"# HBM traffic per step ({shape})", "",
                 "Measured with `ncu --clock-control none --metrics "
                 "dram__bytes_read.sum,dram__bytes_write.sum` over one run of each step "
                 "(all its kernels), next to the analytic count of its design. "
                 "One fp32 N×N matrix here is " + human(4 * a.heads * a.n * a.n) + ".", "",
                 "| impl | DRAM read | DRAM written | total | analytic | analytic model |",
                 "|---|---|---|---|---|---|"]
        for x in rows:
            lines.append(f"| {x['impl']} | {human(x['dram_read_bytes'])} | "
                         f"{human(x['dram_write_bytes'])} | "
                         f"{human(x['dram_read_bytes'] + x['dram_write_bytes'])} | "
                         f"{human(x['analytic_bytes'])} | {x['analytic_model']} |")
        with open(a.out_md, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
