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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fa_perf import human_bytes  # noqa: E402  (the byte formatter of every script)


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
        # Each of the ⌈N/Br⌉ query tiles streams all of K and V: Θ(N²d/Br) = Θ(N²d²/M) bytes
        # requested from memory. On a GPU whose L2 holds a head's K and V, most of those
        # re-reads are L2 hits and DRAM sees little more than the minimum.
        tiles = math.ceil(n / block_m)
        kv = 2 * bh * tiles * n * d * 4
        return 2 * bh * n * d * 4 + 4 * bh * n + kv, (
            f"Q read, O,L written once + K,V read once per {block_m}-row query tile "
            f"(requested; L2 absorbs the re-reads)")
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
    ap.add_argument("--meta", default="", help="GPU, driver, date, commit: a line for the table")
    ap.add_argument("--from-json", default="", help="only re-render --out-md from this JSON")
    a = ap.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        a.n, a.d, a.heads = saved["n"], saved["d"], saved["heads"]
        for x in saved["results"]:
            x["analytic_bytes"], x["analytic_model"] = analytic(x["impl"], a.n, a.d, a.heads,
                                                                a.block_m)
        write_md(a, saved["results"])
        return 0

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
        print(f"{step:22s} read {human_bytes(r):>10s} write {human_bytes(w):>10s} "
              f"total {human_bytes(r + w):>10s} analytic {human_bytes(model):>10s}", flush=True)

    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"shape": shape_of(a), "n": a.n, "d": a.d, "heads": a.heads,
                       "results": rows}, f, indent=1)
    write_md(a, rows)
    return 0 if rows else 1


def shape_of(a):
    return f"N = {a.n}, d = {a.d}, B·H = {a.heads} (B = 1), fp32, non-causal"


def write_md(a, rows):
    shape = shape_of(a)
    minimum = 4 * a.heads * a.n * a.d * 4 + 4 * a.heads * a.n
    if a.out_md:
        lines = [f"# HBM traffic per step ({shape})", ""] + ([a.meta, ""] if a.meta else []) + [
                 "Measured with `ncu --clock-control none --metrics "
                 "dram__bytes_read.sum,dram__bytes_write.sum` over one run of each step "
                 "(all its kernels), next to the analytic count of its design. "
                 "One fp32 N×N matrix here is " + human_bytes(4 * a.heads * a.n * a.n) +
                 "; the minimum any pass must move (Q, K, V read once, O and L written "
                 "once) is " + human_bytes(minimum) + ".", "",
                 "Two things to know when reading DRAM counters: a re-read that hits the "
                 "L2 cache (60 MB on the H200) never reaches DRAM, and data written near "
                 "the end of a kernel can still sit in L2 when the kernel ends, so the "
                 "written bytes of a small output can read below its size.", "",
                 "| impl | DRAM read | DRAM written | total | analytic | analytic model |",
                 "|---|---|---|---|---|---|"]
        for x in rows:
            lines.append(f"| {x['impl']} | {human_bytes(x['dram_read_bytes'])} | "
                         f"{human_bytes(x['dram_write_bytes'])} | "
                         f"{human_bytes(x['dram_read_bytes'] + x['dram_write_bytes'])} | "
                         f"{human_bytes(x['analytic_bytes'])} | {x['analytic_model']} |")
        with open(a.out_md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
