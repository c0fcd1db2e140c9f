#!/usr/bin/env python3
"""ring_bench.py — step 13's benchmark, one process per GPU (run it with launch.sh).

For each N (B = 1, 16 heads, d = 128, bf16 by default):

  * the same forward step on one GPU over the whole sequence (rank 0; the others wait),
    unmasked and causal: the baseline;
  * the ring over all ranks, unmasked (zigzag chunks), causal zigzag and causal contiguous
    (the contrast), each timed three ways: as it runs ("both"), its compute alone (no sends:
    every step reads the rank's own slice), its sends alone (no compute);
  * the speedup over one GPU, and the share of the sends hidden under the compute,
    (compute + sends − both) / sends, clamped to [0, 1];
  * the time model (ring_plan.ring_time, reference/ring.h) calibrated on these figures: a
    rank's throughput from the compute alone (4·d FLOPs per visible entry of the busiest rank
    at each step), the link's bandwidth from the sends alone; its prediction for this ring
    next to the measurement, and for 8 and 64 GPUs, with the N below which the sends stop
    hiding.

Timing (docs/conventions.md): CUDA events around each call on the compute stream, a GPU spin
queued before each timed call, untimed warm-up calls first, the median of the timed calls; a
ring's time is the slowest rank's median. Writes JSON (--json) and the Markdown table (--md),
rank 0 only.

    launch.sh --nproc 2 ring_bench.py --md docs/results/h200x2-ring.md
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

SKIP = 77
CONFIGS = (("full", False, "zigzag"), ("causal zigzag", True, "zigzag"),
           ("causal contiguous", True, "contiguous"))


def positive_ints(text):
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a comma-separated list of integers")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text}: every value must be at least 1")
    return vals


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=positive_ints, default=[131072, 262144, 524288],
                    help="sequence lengths (default 131072,262144,524288)")
    ap.add_argument("--heads", type=int, default=16, help="query and K/V heads (default 16)")
    ap.add_argument("--d", type=int, default=128, choices=(64, 128), help="head dim")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls (default 3)")
    ap.add_argument("--spin-cycles", type=int, default=1_000_000,
                    help="GPU spin before each timed call, clock cycles (default 1e6)")
    ap.add_argument("--predict", type=positive_ints, default=[8, 64],
                    help="rank counts the model predicts (default 8,64)")
    ap.add_argument("--json", help="write every figure here (rank 0)")
    ap.add_argument("--md", help="write the results table here (rank 0)")
    ap.add_argument("--tests-log", help="a file of test summary lines to quote in --md")
    ap.add_argument("--command", default="", help="the command line to record in --md")
    args = ap.parse_args(argv)
    if args.heads < 1 or args.warmup < 0 or args.reps < 1 or args.spin_cycles < 0:
        ap.error("--heads and --reps must be at least 1, --warmup and --spin-cycles at least 0")
    return args


def main():
    args = parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ring_attention as ra

    reason = ra.skip_reason(1)
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIP
    import torch.distributed as dist

    rank, ranks = ra.init()
    import ring_plan as rp

    for n in args.ns:  # every configuration needs N divisible by 2P: say so before timing
        try:
            rp.check_shape(n, n, True, ranks, "zigzag")
        except rp.RingError as e:
            if rank == 0:
                print(f"ring_bench.py: error: --ns: {e}", file=sys.stderr)
            dist.destroy_process_group()
            return 2
    b = Bench(args, rank, ranks)
    rows = [b.one_n(n) for n in args.ns]
    if rank == 0:
        result = b.summary(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        if args.md:
            with open(args.md, "w") as f:
                f.write(markdown(result, args))
        print(markdown(result, args))
    dist.barrier()
    dist.destroy_process_group()
    return 0


class Bench:
    def __init__(self, args, rank, ranks):
        import torch

        self.args, self.rank, self.ranks = args, rank, ranks
        self.dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16

    def _time(self, fn):
        """The median event time of fn() in ms (spin first), the slowest rank's."""
        import torch
        import torch.distributed as dist

        for _ in range(self.args.warmup):
            fn()
        times = []
        for _ in range(self.args.reps):
            dist.barrier()
            torch.cuda.synchronize()
            torch.cuda._sleep(self.args.spin_cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        t = torch.tensor([statistics.median(times)], device="cuda", dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def _single(self, n, causal):
        """The step on one GPU over all n rows (rank 0 times it; every rank returns its time)."""
        import torch
        import torch.distributed as dist
        import flash_tutorial as ft
        import ring_attention as ra

        t = torch.zeros(1, device="cuda", dtype=torch.float64)
        if self.rank == 0:
            g = torch.Generator(device="cuda").manual_seed(n)
            shape = (1, n, self.args.heads, self.args.d)
            q, k, v = (torch.randn(shape, device="cuda", dtype=self.dtype, generator=g)
                       for _ in range(3))
            fn = lambda: ft.attention(q, k, v, step=ra.DEFAULT_STEP, causal=causal,  # noqa
                                      layout="bnhd")
            for _ in range(self.args.warmup):
                fn()
            times = []
            for _ in range(self.args.reps):
                torch.cuda.synchronize()
                torch.cuda._sleep(self.args.spin_cycles)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            t[0] = statistics.median(times)
            del q, k, v
            torch.cuda.empty_cache()
        dist.broadcast(t, 0)
        return t.item()

    def one_n(self, n):
        import torch
        import ring_attention as ra
        import ring_plan as rp

        a, P = self.args, self.ranks
        row = {"n": n, "single_ms": {"full": self._single(n, False),
                                     "causal": self._single(n, True)}, "ring": {}}
        g = torch.Generator(device="cuda").manual_seed(n * 131 + self.rank)
        shape = (1, n // P, a.heads, a.d)
        q, k, v = (torch.randn(shape, device="cuda", dtype=self.dtype, generator=g)
                   for _ in range(3))
        for name, causal, chunks in CONFIGS:
            ring = ra.RingAttention(q, k, v, causal=causal, chunks=chunks)
            both = self._time(lambda: ring(q, k, v))
            comp = self._time(lambda: ring(q, k, v, mode="compute"))
            send = self._time(lambda: ring(q, k, v, mode="send")) if P > 1 else 0.0
            ring = None  # its buffers go before the next configuration's
            hidden = min(1.0, max(0.0, (comp + send - both) / send)) if send > 0 else 1.0
            work = rp.ring_work(1, a.heads, n, n, causal, P, chunks)
            flops = 4.0 * a.d * sum(max(w[s] for w in work) for s in range(P))
            slice_bytes = 2.0 * a.heads * (n / P) * a.d * 2
            single = row["single_ms"]["causal" if causal else "full"]
            entry = {"both_ms": both, "compute_ms": comp, "send_ms": send,
                     "speedup": single / both, "hidden": hidden}
            if P > 1:
                f, w = rp.calibrate(comp / 1e3, flops, send / 1e3 / (P - 1), slice_bytes)
                model = rp.ring_time(1, a.heads, a.heads, n, a.d, a.dtype, causal, P, chunks,
                                     f, w)
                entry.update(flops_per_s=f, bytes_per_s=w, model_ms=model.total_s * 1e3,
                             model_hidden=model.hidden_fraction)
            row["ring"][name] = entry
            if self.rank == 0:
                print(f"N={n} {name}: ring {both:.2f} ms (compute {comp:.2f}, sends {send:.2f}),"
                      f" one GPU {single:.2f} ms, speedup {single / both:.2f}x, hidden "
                      f"{hidden:.0%}", flush=True)
        q = k = v = None
        torch.cuda.empty_cache()
        return row

    def summary(self, rows):
        """The rows, the machine, and the model's predictions."""
        import torch
        import ring_plan as rp

        a, P = self.args, self.ranks
        out = {"gpu": torch.cuda.get_device_name(), "gpus": P, "driver": driver(),
               "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "commit": commit(), "command": a.command, "step": "09_warp_specialized",
               "shape": {"batch": 1, "heads": a.heads, "head_dim": a.d, "dtype": a.dtype},
               "rows": rows, "predictions": []}
        if P < 2:
            return out
        # The model's constants from the largest N (the steadiest figures), per configuration.
        last = rows[-1]["ring"]
        for name, causal, chunks in CONFIGS:
            f, w = last[name]["flops_per_s"], last[name]["bytes_per_s"]
            for p in [P] + [x for x in a.predict if x != P]:
                pred = {"config": name, "ranks": p, "flops_per_s": f, "bytes_per_s": w,
                        "times_ms": {}, "hidden": {}}
                for r in rows:
                    n = r["n"]
                    if n % rp.num_chunks(p, chunks):
                        continue
                    t = rp.ring_time(1, a.heads, a.heads, n, a.d, a.dtype, causal, p, chunks, f, w)
                    pred["times_ms"][n] = t.total_s * 1e3
                    pred["hidden"][n] = t.hidden_fraction
                pred["min_hidden_n"] = rp.ring_min_hidden_n(1, a.heads, a.heads, a.d, a.dtype,
                                                            causal, p, chunks, f, w)
                out["predictions"].append(pred)
        return out


def driver():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.split()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def commit():
    """FA_COMMIT if set (as scripts/gpu_check.sh reads it: a copy of the tree may have no
    history of its own), else git's short HEAD, "+changes" when the tree differs from it."""
    if os.environ.get("FA_COMMIT"):
        return os.environ["FA_COMMIT"]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return (sha or "unknown") + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def markdown(r, args):
    P = r["gpus"]
    s = r["shape"]
    lines = [f"GPU: {P} × {r['gpu']}, driver {r['driver']}, PyTorch {r['torch']} (CUDA "
             f"{r['cuda']}); date {r['date']}; commit {r['commit']}; command: "
             f"`{r['command'] or 'ring_bench.py'}`", "",
             f"# Ring attention on {P} GPUs (step 13)", "",
             f"B = {s['batch']}, {s['heads']} heads (Q and K/V), d = {s['head_dim']}, "
             f"{s['dtype']}; every pair computed by step {r['step']} through the C API, the "
             "partials merged by fa_merge. Times: CUDA events, a GPU spin before each call, the "
             f"median of {args.reps} calls after {args.warmup} untimed, a ring's time its slowest "
             "rank's. *Speedup*: the step on one GPU over the whole sequence (the same mask) "
             "divided by the ring's time. *Hidden*: (compute alone + sends alone − both) / sends "
             "alone.", ""]
    if args.tests_log and os.path.exists(args.tests_log):
        lines += ["## Tests", "", "```text"] + \
                 [x.rstrip() for x in open(args.tests_log) if x.strip()] + ["```", ""]
    lines += ["## Speed", "",
              "| N | mask | chunks | one GPU ms | ring ms | speedup | compute alone ms | "
              "sends alone ms | hidden | model ms (this N's F, W) |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        for name, causal, chunks in CONFIGS:
            e = row["ring"][name]
            single = row["single_ms"]["causal" if causal else "full"]
            model = f"{e['model_ms']:.1f}" if "model_ms" in e else "–"
            lines.append(f"| {row['n']} | {'causal' if causal else 'full'} | {chunks} | "
                         f"{single:.1f} | {e['both_ms']:.1f} | {e['speedup']:.2f}× | "
                         f"{e['compute_ms']:.1f} | {e['send_ms']:.2f} | {e['hidden']:.0%} | "
                         f"{model} |")
    if r["predictions"]:
        lines += ["", "## The time model", "",
                  "`ring_time` (reference/ring.h; its Python mirror ring_plan.py) with a rank's "
                  "throughput F from the compute alone and the link's bandwidth W from the sends "
                  f"alone at N = {r['rows'][-1]['n']}. The 8- and 64-GPU figures assume every "
                  "link as fast as the one measured here (one NVLink hop); across nodes W is "
                  "the network's and the edge N scales with F/W. *Edge N*: below it some step's "
                  "sends outlast its compute (ring_min_hidden_n).", "",
                  "| chunks, mask | F TFLOP/s | W GB/s | GPUs | " +
                  " | ".join(f"ms at N = {row['n']}" for row in r["rows"]) + " | edge N |",
                  "|---|---:|---:|---:|" + "---:|" * len(r["rows"]) + "---:|"]
        for name, causal, chunks in CONFIGS:
            for pred in r["predictions"]:
                if pred["config"] != name:
                    continue
                cells = []
                for row in r["rows"]:
                    t = pred["times_ms"].get(row["n"])
                    cells.append("–" if t is None else f"{t:.1f}" + (
                        f" (measured {row['ring'][name]['both_ms']:.1f})"
                        if pred["ranks"] == P else ""))
                lines.append(f"| {name} | {pred['flops_per_s'] / 1e12:.0f} | "
                             f"{pred['bytes_per_s'] / 1e9:.0f} | {pred['ranks']} | " +
                             " | ".join(cells) + f" | {pred['min_hidden_n']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
