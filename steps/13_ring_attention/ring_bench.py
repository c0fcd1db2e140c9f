#!/usr/bin/env python3
"""ring_bench.py — step 13's benchmark, one process per GPU (run it with launch.sh).

For each N (B = 1, 16 heads, d = 128, bf16 by default):

  * the same forward step on one GPU over the whole sequence (rank 0; the others wait),
    unmasked and causal: the baseline;
  * the ring over all ranks, unmasked (zigzag chunks), causal zigzag and causal contiguous
    (the contrast), each timed three ways: as it runs ("both"), its compute alone (no sends:
    every step reads the rank's own slice), its sends alone (no compute);
  * the speedup over one GPU, and the share of the sends hidden under the compute, read off
    the timeline of the ring as it runs: CUDA events around every step's compute (compute
    stream) and every step's send and receive (communication stream); a send's hidden time is
    the part of it during which the compute stream was inside a step, and "hidden" is the
    sends' hidden time over their whole time (the model's hidden_fraction, measured); the
    slowest rank's time and the least-hidden rank's share are reported;
  * with --backward-ns, the backward the same way at those N (ring_attention_backward
    against step 11 on one GPU over the whole sequence), unmasked and causal zigzag;
  * the time model (ring_plan.ring_time, reference/ring.h) calibrated on these figures: a
    rank's throughput from the compute alone (4·d FLOPs per visible entry of the busiest rank
    at each step), the link's bandwidth from the sends alone; its prediction for this ring
    next to the measurement, and for 8 and 64 GPUs, with the N below which the sends stop
    hiding.

Timing (docs/conventions.md): CUDA events around each call on the compute stream, a GPU spin
queued before each timed call, untimed warm-up calls first, the median of the timed calls (at
least --reps of them, more for a short call: enough to fill --min-ms); a ring's time is the
slowest rank's median. Writes JSON (--json, with every rank's timeline of its median call)
and the Markdown table (--md), rank 0 only.

    launch.sh --nproc 2 ring_bench.py --md docs/results/h200x2-ring.md
"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys

SKIP = 77
CONFIGS = (("full", False, "zigzag"), ("causal zigzag", True, "zigzag"),
           ("causal contiguous", True, "contiguous"))


def positive_ints(text):
    if text == "none":
        return []
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a comma-separated list of integers")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text}: every value must be at least 1")
    return vals


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=positive_ints,
                    default=[4096, 8192, 16384, 32768, 131072, 262144, 524288],
                    help="sequence lengths, the model calibrated at the last (default 4096,"
                         "8192,16384,32768: around the edge; 131072,262144,524288: the goal's)")
    ap.add_argument("--heads", type=int, default=16, help="query and K/V heads (default 16)")
    ap.add_argument("--d", type=int, default=128, choices=(64, 128), help="head dim")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls, at least (default 3)")
    ap.add_argument("--min-ms", type=float, default=300.0,
                    help="more timed calls for a short call, up to 50, until they last this "
                         "long (default 300)")
    ap.add_argument("--backward-ns", type=positive_ints, default=[131072],
                    help="sequence lengths at which to time the backward too, or none "
                         "(default 131072)")
    ap.add_argument("--nccl-priority", default="high", choices=("high", "default"),
                    help="NCCL's stream priority (ring_attention.init; default high)")
    ap.add_argument("--spin-cycles", type=int, default=1_000_000,
                    help="GPU spin before each timed call, clock cycles (default 1e6)")
    ap.add_argument("--predict", type=positive_ints, default=[8, 64],
                    help="rank counts the model predicts (default 8,64)")
    ap.add_argument("--json", help="write every figure here (rank 0)")
    ap.add_argument("--md", help="write the results table here (rank 0)")
    ap.add_argument("--tests-log", help="a file of test summary lines to quote in --md")
    ap.add_argument("--command", default="", help="the command line to record in --md")
    args = ap.parse_args(argv)
    if not args.ns or not args.predict:
        ap.error("--ns and --predict need at least one value")
    for name, value, low in (("--heads", args.heads, 1), ("--reps", args.reps, 1),
                             ("--warmup", args.warmup, 0), ("--spin-cycles", args.spin_cycles, 0),
                             ("--min-ms", args.min_ms, 0)):
        if not (math.isfinite(value) and value >= low):
            ap.error(f"{name} ({value}) must be a number of at least {low}")
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

    rank, ranks = ra.init(high_priority=args.nccl_priority == "high")
    import ring_plan as rp

    for flag, ns in (("--ns", args.ns), ("--backward-ns", args.backward_ns)):
        for n in ns:  # every configuration needs N divisible by 2P: say so before timing
            try:
                rp.check_shape(n, n, True, ranks, "zigzag")
            except rp.RingError as e:
                if rank == 0:
                    print(f"ring_bench.py: error: {flag}: {e}", file=sys.stderr)
                dist.destroy_process_group()
                return 2
    b = Bench(args, rank, ranks)
    rows = [b.one_n(n) for n in args.ns]
    backward = [b.backward_n(n) for n in args.backward_ns]
    if rank == 0:
        result = b.summary(rows)
        result["backward"] = backward
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

    def _reps(self, times_ms, ranks_agree=True):
        """Timed calls to make after warm-up calls that took times_ms (module comment): --reps,
        or more, up to 50, for a short call (its last warm-up call's time, the slowest rank's:
        the first call of a ring may include NCCL's connection setup); every rank makes as many
        (a barrier precedes each)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([times_ms[-1] if times_ms else 0.0], device="cuda", dtype=torch.float64)
        if ranks_agree:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if t.item() <= 0:
            return self.args.reps
        return max(self.args.reps, min(50, math.ceil(self.args.min_ms / t.item())))

    def _time(self, fn, with_timeline=False):
        """The median event time of fn(timeline) in ms (spin first), the slowest rank's; with
        with_timeline, also (this rank's timeline of its median call, the least-hidden rank's
        share of its sends hidden, the sends' ms as they ran, their exposed ms, the number of
        timed calls: the "calls" column)."""
        import torch
        import torch.distributed as dist

        def once(timeline):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(timeline)
            end.record()
            end.synchronize()
            return start, start.elapsed_time(end)

        warm = [once(None)[1] for _ in range(self.args.warmup)]
        calls = []
        for _ in range(self._reps(warm)):
            dist.barrier()
            torch.cuda.synchronize()
            torch.cuda._sleep(self.args.spin_cycles)
            timeline = [] if with_timeline else None
            start, ms = once(timeline)
            calls.append((ms, spans(start, timeline) if with_timeline else None))
        calls.sort(key=lambda c: c[0])
        median_ms, median_spans = calls[len(calls) // 2]
        t = torch.tensor([statistics.median(c[0] for c in calls)], device="cuda",
                         dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if not with_timeline:
            return t.item()
        shares = [overlap(sp) for _, sp in calls]
        mine = torch.tensor([statistics.median(h for h, _, _ in shares),
                             statistics.median(s for _, s, _ in shares),
                             statistics.median(e for _, _, e in shares)],
                            device="cuda", dtype=torch.float64)
        every = [torch.zeros_like(mine) for _ in range(self.ranks)]
        dist.all_gather(every, mine)
        worst = min(every, key=lambda x: x[0].item())
        timelines = [None] * self.ranks
        dist.all_gather_object(timelines, median_spans)
        return (t.item(), timelines, worst[0].item(), worst[1].item(), worst[2].item(),
                len(calls))

    def _time_local(self, fn):
        """The median event time of fn() in ms on this rank alone (spin first; no collective)."""
        import torch

        def once(spin):
            torch.cuda.synchronize()
            torch.cuda._sleep(spin)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        warm = [once(0) for _ in range(self.args.warmup)]
        return statistics.median(once(self.args.spin_cycles)
                                 for _ in range(self._reps(warm, ranks_agree=False)))

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
            t[0] = self._time_local(lambda: ft.attention(q, k, v, step=ra.DEFAULT_STEP,
                                                         causal=causal, layout="bnhd"))
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
            both, timelines, hidden, sent, exposed, calls = self._time(
                lambda tl: ring(q, k, v, timeline=tl), with_timeline=True)
            comp = self._time(lambda tl: ring(q, k, v, mode="compute"))
            send = self._time(lambda tl: ring(q, k, v, mode="send")) if P > 1 else 0.0
            ring = None  # its buffers go before the next configuration's
            work = rp.ring_work(1, a.heads, n, n, causal, P, chunks)
            flops = 4.0 * a.d * sum(max(w[s] for w in work) for s in range(P))
            slice_bytes = 2.0 * a.heads * (n / P) * a.d * 2
            single = row["single_ms"]["causal" if causal else "full"]
            entry = {"both_ms": both, "compute_ms": comp, "send_ms": send,
                     "speedup": single / both, "hidden": hidden, "sends_in_ring_ms": sent,
                     "exposed_ms": exposed, "timelines": timelines, "calls": calls}
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
                      f"{hidden:.0%} of {sent:.3f} ms", flush=True)
        q = k = v = None
        torch.cuda.empty_cache()
        return row

    def backward_n(self, n):
        """The backward at n: step 11 on one GPU over the whole sequence (rank 0) and
        ring_attention_backward over the ranks, unmasked and causal zigzag (from the ring's
        own O and L, with a random dO); ms, the slowest rank's."""
        import torch
        import torch.distributed as dist
        import flash_tutorial as ft
        import ring_attention as ra

        a, P = self.args, self.ranks
        row = {"n": n, "single_ms": {}, "ring_ms": {}}
        for causal in (False, True):
            key = "causal" if causal else "full"
            t = torch.zeros(1, device="cuda", dtype=torch.float64)
            if self.rank == 0:
                g = torch.Generator(device="cuda").manual_seed(n + 7)
                shape = (1, n, a.heads, a.d)
                q, k, v, d_o = (torch.randn(shape, device="cuda", dtype=self.dtype, generator=g)
                                for _ in range(4))
                o, lse = ft.attention(q, k, v, step=ra.DEFAULT_STEP, causal=causal,
                                      layout="bnhd")
                t[0] = self._time_local(lambda: ft.backward(
                    q, k, v, o, lse, d_o, step=ra.DEFAULT_BACKWARD_STEP, causal=causal,
                    layout="bnhd"))
                q = k = v = d_o = o = lse = None
                torch.cuda.empty_cache()
            dist.broadcast(t, 0)
            row["single_ms"][key] = t.item()
            g = torch.Generator(device="cuda").manual_seed(n * 17 + self.rank)
            shape = (1, n // P, a.heads, a.d)
            q, k, v, d_o = (torch.randn(shape, device="cuda", dtype=self.dtype, generator=g)
                            for _ in range(4))
            o, lse = ra.ring_attention(q, k, v, causal=causal, chunks="zigzag")
            row["ring_ms"][key] = self._time(lambda tl: ra.ring_attention_backward(
                q, k, v, o, lse, d_o, causal=causal, chunks="zigzag"))
            q = k = v = d_o = o = lse = None
            torch.cuda.empty_cache()
            if self.rank == 0:
                print(f"N={n} backward {key}: ring {row['ring_ms'][key]:.2f} ms, one GPU "
                      f"{row['single_ms'][key]:.2f} ms, speedup "
                      f"{row['single_ms'][key] / row['ring_ms'][key]:.2f}x", flush=True)
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
               "nccl_streams": f"{a.nccl_priority} priority",
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


def spans(start, timeline):
    """A ring call's timeline (RingAttention's events) in ms from `start`: per step
    {"compute": [t0, t1] or None, "send": [t0, t1] or None}."""
    def ms(pair):
        return None if pair is None else [start.elapsed_time(pair[0]), start.elapsed_time(pair[1])]
    return [{"compute": ms(m["compute"]), "send": ms(m["send"])} for m in timeline]


def overlap(steps):
    """(share of the sends' time during which the compute stream was inside a step, the sends'
    ms, their ms outside every step's compute) for one rank's spans(); share 1 with no sends."""
    busy = [m["compute"] for m in steps if m["compute"]]
    sent = hidden = 0.0
    for m in steps:
        if not m["send"]:
            continue
        s0, s1 = m["send"]
        sent += s1 - s0
        hidden += sum(max(0.0, min(s1, c1) - max(s0, c0)) for c0, c1 in busy)
    return (hidden / sent if sent > 0 else 1.0), sent, sent - hidden


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


def fmt_ms(ms):
    """Milliseconds with three significant figures at least (0.412, 12.4, 1938.9)."""
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def markdown(r, args):
    P = r["gpus"]
    s = r["shape"]
    lines = [f"GPU: {P} × {r['gpu']}, driver {r['driver']}, PyTorch {r['torch']} (CUDA "
             f"{r['cuda']}); date {r['date']}; commit {r['commit']}; command: "
             f"`{r['command'] or 'ring_bench.py'}`", "",
             f"# Ring attention on {P} GPUs (step 13)", "",
             f"B = {s['batch']}, {s['heads']} heads (Q and K/V), d = {s['head_dim']}, "
             f"{s['dtype']}; every pair computed by step {r['step']} through the C API, the "
             f"partials merged by fa_merge; NCCL's streams at {r['nccl_streams']}. Times: CUDA "
             "events, a GPU spin before each call, the median of at least "
             f"{args.reps} calls (more for a short call: the column *calls*) after "
             f"{args.warmup} untimed, a ring's time its slowest rank's. *Speedup*: the step on one GPU over the whole sequence (the same mask) "
             "divided by the ring's time. *Sends in ring*: the time of the ring's sends as they "
             "ran beside the compute (events on the communication stream, from the send's issue "
             "to the slice's arrival); *exposed*: the part of it outside every step's compute "
             "(events on the compute stream); *hidden* = 1 − exposed / sends in ring, the median "
             "call's, of the rank where it is least (each of the three a median over the calls "
             "on its own); *model hidden*: the time model's hidden_fraction with this N's F and "
             "W; *calls*: the timed calls of the ring as it runs (at least --reps, more for a "
             f"short call, up to 50, to fill {args.min_ms:g} ms).", ""]
    if args.tests_log and os.path.exists(args.tests_log):
        lines += ["## Tests", "", "```text"] + \
                 [x.rstrip() for x in open(args.tests_log) if x.strip()] + ["```", ""]
    lines += ["## Speed", "",
              "| N | mask | chunks | one GPU ms | ring ms | speedup | compute alone ms | "
              "sends alone ms | sends in ring ms | exposed ms | hidden | model hidden | "
              "model ms (this N's F, W) | calls |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        for name, causal, chunks in CONFIGS:
            e = row["ring"][name]
            single = row["single_ms"]["causal" if causal else "full"]
            model = f"{e['model_ms']:.1f}" if "model_ms" in e else "–"
            model_hidden = f"{e['model_hidden']:.0%}" if "model_hidden" in e else "–"
            lines.append(f"| {row['n']} | {'causal' if causal else 'full'} | {chunks} | "
                         f"{fmt_ms(single)} | {fmt_ms(e['both_ms'])} | {e['speedup']:.2f}× | "
                         f"{fmt_ms(e['compute_ms'])} | {e['send_ms']:.3f} | "
                         f"{e['sends_in_ring_ms']:.3f} | {e['exposed_ms']:.3f} | "
                         f"{e['hidden']:.0%} | {model_hidden} | {model} | "
                         f"{e.get('calls', '–')} |")
    if r.get("backward"):
        lines += ["", "## Backward", "",
                  "ring_attention_backward (step 11 on every pair, the fp32 dK/dV sums sent round "
                  "the ring behind their slice) against step 11 on one GPU over the whole sequence; "
                  "zigzag chunks, the ring's own O and L, a random dO; a call includes the ranks' "
                  "agreement on the problem (one all_gather).", "",
                  "| N | mask | one GPU ms | ring ms | speedup |", "|---:|---|---:|---:|---:|"]
        for row in r["backward"]:
            for key in ("full", "causal"):
                one, ring = row["single_ms"][key], row["ring_ms"][key]
                lines.append(f"| {row['n']} | {key} | {fmt_ms(one)} | {fmt_ms(ring)} | "
                             f"{one / ring:.2f}× |")
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
