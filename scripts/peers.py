#!/usr/bin/env python3
"""Measure the peers: PyTorch's scaled_dot_product_attention with each backend forced.

Run it on the GPU machine, in the same session as our own benchmark, so the ratios compare
numbers taken on one machine at one time (docs/conventions.md).

Implementations (the "impl" field of each record):
  torch_flash      SDPBackend.FLASH_ATTENTION      FlashAttention-2 (fp16/bf16 only)
  torch_cudnn      SDPBackend.CUDNN_ATTENTION      cuDNN fused attention
  torch_efficient  SDPBackend.EFFICIENT_ATTENTION  xformers/CUTLASS memory-efficient kernel
  torch_math       SDPBackend.MATH                 PyTorch's composite reference
  torch_naive      q @ kᵀ · scale -> masked softmax -> @ v, materialising N×N

Before each timed call a short GPU spin (torch.cuda._sleep) is queued, so the CUDA events
time the kernels rather than Python's dispatch, as our C++ benchmark's events do
(--queue-ahead-cycles 0 turns this off).

Shapes follow docs/conventions.md: hidden size 2048 (d = 64 -> 32 heads, d = 128 -> 16 heads),
batch × N = 16384, inputs torch.randn contiguous [B, H, N, d] ("bhnd"). FLOPs are
4·B·H·N²·d, halved when causal. Each measurement: warm-up runs, then `--reps` runs timed one
by one with CUDA events; the median is recorded. Extra device memory is the peak allocated
during one call minus what was allocated before it (inputs excluded, the output included).

--pass backward times the backward instead: Q, K, V (requiring gradients) and dO random, the
forward run once per measurement, untimed, and each timed call torch.autograd.grad(O, (Q, K,
V), dO, retain_graph=True) on that saved graph: dQ, dK and dV, the backward kernels alone.
FLOPs are 2.5 × the forward's. Extra device memory is the peak during one backward call minus
what was allocated before it (the forward's output and saved tensors counted as inputs; dQ,
dK, dV and every intermediate of the backward included). Records carry "pass": "backward".

--pass decode times one decoding step instead (docs/conventions.md, Decoding): q [B, H_q,
q_len, d] against K and V [B, H_kv, N, d], enable_gqa=True, the query heads of a group sharing
a key/value head as in our step; with q_len > 1 a bottom-right causal mask among the new tokens
(an explicit boolean attn_mask, which some backends refuse: recorded as skipped). A backend
that refuses enable_gqa with H_q != H_kv is measured again on K and V expanded to H_q heads
beforehand (repeat_interleave, untimed, in the layout measured), as a user of it would have
to; that record carries "gqa": "expanded" and the refusal in "note", and its kv_bytes stay the
cache's. K and V are made as [B, H_kv, N, d] (bhnd, PyTorch's layout); --kv-layouts bhnd,bnhd
also times every backend on K and V made as [B, N, H_kv, d] (bnhd, the step's cache layout) and
passed as their [B, H_kv, N, d] views (.transpose(1, 2)): those records carry "kv_layout":
"bnhd" and are named the backend + _bnhd (torch_cudnn_bnhd). Shapes:
--batches, --caches (N), --heads-q, --heads-kv, --q-len, --dims (default 128), --dtypes
(default bf16); backends: torch_cudnn, torch_flash, torch_efficient by default (torch_math on
request; torch_naive has no decode pass). Records carry "pass": "decode", the shape fields of
bench_decode's records (batch, heads_q, heads_kv, q_len, cache, layout "contiguous"), its
record name without the split count, kv_bytes (every K and V row read once) and tbps (kv_bytes
per second, 10¹² bytes/s); scripts/make_results.py --decode relates them to the HBM read
bandwidth bench_decode measured in the same run. After a shape's inputs are made, the decode
pass waits until a sum over a 1 GiB bf16 buffer kept for the pass reads at 95% of its speed
measured at the start again (at most 5 s; --no-hbm-wait: no wait), as bench_decode waits: for
some tens of milliseconds after a large free the device reads slower (docs/12-decode.md, The
benchmark's order). Each record carries the wait before its shape, hbm_wait_ms (0: at speed at
the first probe), and hbm_wait_gave_up when the 5 s (or --max-seconds) passed first.

A backend that does not support a configuration is skipped with a one-line note; so is a
configuration that runs out of memory. The JSON file is rewritten after every measurement,
so a run that is stopped (or hits --max-seconds) still leaves what it measured.

Examples:
  python3 scripts/peers.py --out out/peers.json
  python3 scripts/peers.py --quick --dtypes bf16 --dims 128 --out out/peers_quick.json
  python3 scripts/peers.py --pass backward --out out/peers-backward.json
  python3 scripts/peers.py --pass decode --out out/peers-decode.json
"""

import argparse
import contextlib
import gc
import json
import math
import os
import re
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_perf  # noqa: E402  (the byte formatter)
from fa_perf import attention_backward_flops, attention_flops  # noqa: E402  (shared with C++)

# name -> SDPBackend attribute; "torch_naive" is our own composite, not an SDPA backend.
IMPLS = [
    ("torch_flash", "FLASH_ATTENTION"),
    ("torch_cudnn", "CUDNN_ATTENTION"),
    ("torch_efficient", "EFFICIENT_ATTENTION"),
    ("torch_math", "MATH"),
    ("torch_naive", None),
]
DTYPE_NAMES = ("fp32", "fp16", "bf16")
# --pass decode: the fused backends (torch_math on request).
DECODE_IMPLS = ("torch_cudnn", "torch_flash", "torch_efficient")
# --pass decode: K and V as [B, H_kv, N, d] (PyTorch's) or [B, N, H_kv, d] (the step's cache).
KV_LAYOUTS = ("bhnd", "bnhd")
# --pass decode: wait after new inputs until a 1 GiB sum reads at this fraction of its speed
# at the start, for at most this long, probing this often (bin/bench_decode's numbers).
HBM_WAIT_FRACTION, HBM_WAIT_MAX_S, HBM_WAIT_INTERVAL_S = 0.95, 5.0, 0.01
HBM_PROBE_BYTES = 1 << 30
DEFAULT_NS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_NS = (1024, 4096)


def log(msg):
    print(msg, flush=True)


def int_list(text):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def name_list(allowed):
    def parse(text):
        names = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in names if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
        return names
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Time torch SDPA backends (and a naive composite) on the benchmark shapes.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dtypes", type=name_list(DTYPE_NAMES), default=None,
                   help="comma-separated: fp32, fp16, bf16 (default: fp32,bf16; --pass decode: "
                        "bf16)")
    p.add_argument("--dims", type=int_list, default=None,
                   help="head dims d; heads = hidden / d (default: 64,128; --pass decode: 128)")
    p.add_argument("--ns", type=int_list, default=",".join(map(str, DEFAULT_NS)),
                   help="sequence lengths N (N_q = N_kv)")
    p.add_argument("--causal", choices=("both", "on", "off"), default="both",
                   help="causal masking: off, on, or both")
    p.add_argument("--impls", type=name_list([n for n, _ in IMPLS]), default=None,
                   help="which implementations to run, comma-separated (default: all; --pass "
                        f"decode: {','.join(DECODE_IMPLS)})")
    p.add_argument("--pass", dest="pass_", choices=("forward", "backward", "decode"),
                   default="forward",
                   help="the pass to time: the forward, the backward alone (dQ, dK, dV "
                        "from a forward run once, untimed, per measurement), or one decoding "
                        "step (q_len new tokens against a cache of N keys)")
    dec = p.add_argument_group("--pass decode")
    dec.add_argument("--batches", type=int_list, default="1,8,32", help="batch sizes B")
    dec.add_argument("--caches", type=int_list, default="4096,16384,32768",
                     help="cache lengths N: the keys each sequence attends to")
    dec.add_argument("--heads-q", type=int, default=32, help="query heads H_q")
    dec.add_argument("--heads-kv", type=int_list, default="32,8",
                     help="key/value heads H_kv (each must divide H_q)")
    dec.add_argument("--q-len", type=int, default=1, help="new tokens per sequence, 1 to 16")
    dec.add_argument("--kv-layouts", type=name_list(KV_LAYOUTS), default="bhnd",
                     help="comma-separated memory layouts of K and V: bhnd ([B, H_kv, N, d], "
                          "the layout PyTorch's kernels expect) and bnhd ([B, N, H_kv, d], the "
                          "decoding step's cache, passed as its [B, H_kv, N, d] view); a bnhd "
                          "record's impl is the backend's name + _bnhd")
    dec.add_argument("--max-cache-gib", type=float, default=40.0,
                     help="refuse a shape whose K and V together exceed this many GiB")
    dec.add_argument("--no-hbm-wait", action="store_true",
                     help="time a shape as soon as its inputs are made, without first waiting "
                          f"(at most {HBM_WAIT_MAX_S:g} s, and not past --max-seconds) until a "
                          "sum over a 1 GiB buffer kept for the pass, timed as the measurements "
                          f"are, reads at {round(100 * HBM_WAIT_FRACTION)}%% of its speed at the "
                          "start again (after the previous shape's tensors were freed, the "
                          "device may read slower for a while; bin/bench_decode waits likewise, "
                          "with a read kernel of its own)")
    p.add_argument("--reps", type=int, default=20, help="timed runs per measurement")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs per measurement")
    p.add_argument("--queue-ahead-cycles", type=int, default=1_000_000,
                   help="before each timed call, a GPU spin of this many clock cycles "
                        "(torch.cuda._sleep; 1e6 is about 0.5 ms) while Python enqueues the "
                        "call, so launch overhead is not timed; 0 = off")
    p.add_argument("--hidden", type=int, default=2048, help="heads = hidden / d")
    p.add_argument("--tokens", type=int, default=16384, help="batch = tokens / N (at least 1)")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the inputs")
    p.add_argument("--out", default="peers.json", help="output JSON file")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop gracefully (writing what was measured) after this many seconds; "
                        "0 = no limit")
    p.add_argument("--quick", action="store_true",
                   help=f"only N in {','.join(map(str, QUICK_NS))} (overrides --ns)")
    args = p.parse_args(argv)
    decode = args.pass_ == "decode"
    if args.dtypes is None:
        args.dtypes = ["bf16"] if decode else ["fp32", "bf16"]
    if args.dims is None:
        args.dims = [128] if decode else [64, 128]
    if args.impls is None:
        args.impls = list(DECODE_IMPLS) if decode else [n for n, _ in IMPLS]
    if decode:
        check_decode_args(p, args)
        return args
    if args.kv_layouts != ["bhnd"]:
        p.error(f"--kv-layouts {','.join(args.kv_layouts)}: only with --pass decode (the other "
                "passes time both layouts of the benchmark's own)")
    if args.no_hbm_wait:
        p.error("--no-hbm-wait: only with --pass decode (the only pass that waits)")
    if args.quick:
        args.ns = list(QUICK_NS)
    if args.reps < 1:
        p.error("--reps must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must be at least 0")
    for d in args.dims:
        if d <= 0 or args.hidden % d:
            p.error(f"--dims: d={d} does not divide --hidden {args.hidden}")
    for n in args.ns:
        if n <= 0:
            p.error(f"--ns: N={n} must be positive")
    return args


def check_decode_args(p, args):
    """--pass decode's shapes: each refusal names the option, its value and the limit."""
    for name, values in (("--batches", args.batches), ("--caches", args.caches),
                         ("--dims", args.dims)):
        for x in values:
            if x < 1:
                p.error(f"{name}: {x} must be at least 1")
    if args.heads_q < 1:
        p.error(f"--heads-q: {args.heads_q} must be at least 1")
    for h in args.heads_kv:
        if h < 1 or args.heads_q % h:
            p.error(f"--heads-kv: {h} must divide --heads-q ({args.heads_q})")
    if not 1 <= args.q_len <= 16:
        p.error(f"--q-len: {args.q_len} must be in [1, 16]")
    for n in args.caches:
        if n < args.q_len:
            p.error(f"--caches: {n} must be at least --q-len ({args.q_len})")
    if args.reps < 1:
        p.error("--reps must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must be at least 0")
    if not args.kv_layouts or len(set(args.kv_layouts)) != len(args.kv_layouts):
        p.error(f"--kv-layouts: {','.join(args.kv_layouts)!r} must name bhnd, bnhd or both, "
                "each once")
    if "torch_naive" in args.impls:
        p.error("--impls: torch_naive has no decode pass; choose from "
                + ", ".join(n for n, b in IMPLS if b))
    for b, h, n, d, dt in decode_shapes(args):
        gib = fa_perf.decode_kv_bytes(b, h, n, d, dt) / 2**30
        if gib > args.max_cache_gib:
            p.error(f"--batches {b} --caches {n} --heads-kv {h} --dims {d}: K and V need "
                    f"{gib:.1f} GiB, more than --max-cache-gib ({args.max_cache_gib:g})")


def decode_shapes(args):
    """(B, H_kv, N, d, dtype) in bench_decode's order."""
    return [(b, h, n, d, dt) for dt in args.dtypes for d in args.dims for b in args.batches
            for h in args.heads_kv for n in args.caches]


def decode_name(impl, dtype, d, batch, heads_q, heads_kv, q_len, n):
    """bench_decode's record name without the split count (a peer has none)."""
    return f"{impl}/{dtype}/d{d}/B{batch}/Hq{heads_q}/Hkv{heads_kv}/q{q_len}/N{n}/contiguous"


def human_bytes(n):
    return "n/a" if n is None else fa_perf.human_bytes(n)


def write_json(path, doc):
    """Write atomically, so an interrupted run never leaves a half-written file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


class Deadline:
    def __init__(self, seconds):
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self):
        return time.monotonic() - self.start

    def passed(self):
        return self.seconds > 0 and self.elapsed() > self.seconds

    def left(self):
        """Seconds until the deadline (infinity without one)."""
        return self.seconds - self.elapsed() if self.seconds > 0 else math.inf


def main(argv=None):
    args = parse_args(argv)
    deadline = Deadline(args.max_seconds)

    # torch is imported here, not at the top, so that --help works without it.
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        log(f"peers.py: PyTorch is required ({e})")
        return 2
    if not torch.cuda.is_available():
        log("peers.py: no CUDA device visible to PyTorch")
        return 2
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None
        log("note: torch.nn.attention.sdpa_kernel is missing (PyTorch < 2.3); "
            "only torch_naive can run")

    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    causal_modes = {"both": [False, True], "off": [False], "on": [True]}[args.causal]
    device = torch.device("cuda")

    cudnn_version = None
    with contextlib.suppress(Exception):
        cudnn_version = torch.backends.cudnn.version()
    tf32 = None  # fp32 matmuls on TF32 tensor cores? (affects torch_naive/torch_math in fp32)
    with contextlib.suppress(Exception):
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    doc = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": cudnn_version,
        "cuda": torch.version.cuda,
        "tf32_matmul": tf32,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "pass": args.pass_,
        "results": [],
        "skipped": [],
    }
    log(f"peers: {doc['gpu']}, torch {doc['torch']}, cuDNN {cudnn_version}, "
        f"CUDA {doc['cuda']}, TF32 matmul {({True: 'on', False: 'off'}).get(tf32, '?')}")
    if args.pass_ == "decode":
        log(f"peers: decode pass, dtypes {args.dtypes}, d {args.dims}, B {args.batches}, "
            f"H_q {args.heads_q}, H_kv {args.heads_kv}, q_len {args.q_len}, N {args.caches}, "
            f"K/V layouts {args.kv_layouts}, "
            f"impls {args.impls}, {args.warmup} warm-up + {args.reps} timed runs each")
    else:
        log(f"peers: {args.pass_} pass, dtypes {args.dtypes}, d {args.dims}, N {args.ns}, "
            f"causal {args.causal}, impls {args.impls}, {args.warmup} warm-up + {args.reps} "
            "timed runs each")
    write_json(args.out, doc)

    def naive(q, k, v, causal, mask):
        # Standard attention: the N×N scores and probabilities live in device memory.
        s = torch.matmul(q, k.transpose(-2, -1))
        s.mul_(1.0 / math.sqrt(q.shape[-1]))
        if causal:
            s.masked_fill_(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        del s
        return torch.matmul(p, v)

    def make_call(impl, q, k, v, causal, mask, d_o):
        """(context, prepare): the backend is forced once around the whole measurement, so the
        timed calls carry no context-manager overhead; prepare(), called in that context,
        returns the call to time. For the forward that is the forward itself; for the
        backward (d_o given) prepare runs the forward once, untimed, and the call is the
        backward on its saved graph, kept (retain_graph) for the next call."""
        backend_name = dict(IMPLS)[impl]
        if backend_name is None:
            forward = lambda: naive(q, k, v, causal, mask)  # noqa: E731
            context = contextlib.nullcontext()
        elif sdpa_kernel is None or not hasattr(SDPBackend, backend_name):
            raise RuntimeError(f"SDPBackend.{backend_name} is not in this PyTorch")
        else:
            forward = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa
            context = sdpa_kernel(getattr(SDPBackend, backend_name))
        if d_o is None:
            return context, lambda: forward

        def prepare_backward():
            out = forward()
            return lambda: torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True)
        return context, prepare_backward

    def first_line(text):
        text = str(text).strip()
        text = text.splitlines()[0] if text else "(no message)"
        # PyTorch's C++ warnings end with "(Triggered internally at <file>:<line>.)".
        return re.sub(r"\s*\(Triggered internally at .*$", "", text).strip() or "(no message)"

    def measure(context, prepare):
        """Returns (median_ms, extra_bytes, reps). Raises what prepare() or the call raises."""
        with context:
            return measure_in_context(prepare)

    def measure_in_context(prepare):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                call = prepare()  # the backward's forward, untimed
                out = call()  # first run: support check (and the first warm-up)
                torch.cuda.synchronize()
            except RuntimeError as e:
                # SDPA reports *why* a backend refused through warnings; keep the first.
                # The first is often a bare "... not used because:" header; skip those.
                why = [m for m in (first_line(w.message) for w in caught)
                       if not m.endswith(":")]
                if why and not isinstance(e, torch.cuda.OutOfMemoryError):
                    raise RuntimeError(f"{first_line(e)} [{why[0]}]") from e
                raise
        del out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(max(args.warmup - 1, 0)):
                call()
            torch.cuda.synchronize()

            # Extra device memory of one call: inputs (and for the backward the forward's
            # output and saved tensors) were allocated before `before`.
            gc.collect()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = call()
            torch.cuda.synchronize()
            extra = torch.cuda.max_memory_allocated() - before
            del out

            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(args.reps):
                if queue_ahead:
                    # Keep the GPU busy while Python enqueues the call, so the events time
                    # the kernels and not PyTorch's dispatch (as our C++ benchmark does).
                    torch.cuda._sleep(args.queue_ahead_cycles)
                start.record()
                call()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
                # Past the deadline: keep what we have if it is enough for a median.
                if deadline.passed() and len(times) >= 5:
                    break
        return statistics.median(times), int(extra), len(times)

    queue_ahead = args.queue_ahead_cycles > 0 and hasattr(torch.cuda, "_sleep")
    if args.queue_ahead_cycles > 0 and not queue_ahead:
        log("note: torch.cuda._sleep is missing; timings include Python dispatch")

    def release():
        gc.collect()
        torch.cuda.empty_cache()

    def skip(impl, base, shape, reason):
        log(f"skip  {impl:21s} {shape}: {reason}")
        doc["skipped"].append(dict(base, impl=impl, reason=reason))
        write_json(args.out, doc)

    def probe_tbps(buf, runs):
        """TB/s of a sum over buf (bytes read over the median of `runs` event-timed sums,
        each after the GPU spin, as the measurements are, so that Python's launch is not
        timed)."""
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(runs):
            if queue_ahead:
                torch.cuda._sleep(args.queue_ahead_cycles)
            start.record()
            buf.sum()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return buf.numel() * buf.element_size() / (statistics.median(times) * 1e-3) / 1e12

    hbm = {}  # the decode pass's probe buffer and its speed at the start

    def wait_for_hbm():
        """(ms waited, at speed): probes until the sum reads at HBM_WAIT_FRACTION of its
        speed at the start, for at most HBM_WAIT_MAX_S or until --max-seconds passes; 0 ms
        when the first probe is at speed."""
        t0, probes = time.monotonic(), 0
        most = min(HBM_WAIT_MAX_S, max(deadline.left(), 0.0))
        while True:
            probes += 1
            at_speed = probe_tbps(hbm["buf"], 3) >= HBM_WAIT_FRACTION * hbm["tbps"]
            waited = time.monotonic() - t0
            if at_speed or waited >= most:
                return (0.0 if at_speed and probes == 1 else waited * 1e3), at_speed
            time.sleep(HBM_WAIT_INTERVAL_S)

    def decode_pass():
        """One decoding step per shape, K/V layout and backend: q [B, H_q, q_len, d] against K,
        V [B, H_kv, N, d] (or its view of [B, N, H_kv, d]) with enable_gqa; a bottom-right
        causal mask among the new tokens."""
        if not args.no_hbm_wait:
            hbm["buf"] = torch.empty(HBM_PROBE_BYTES // 2, device=device,
                                     dtype=torch.bfloat16).normal_()
            for _ in range(3):  # the sum's first calls load its kernel: not the yardstick
                hbm["buf"].sum()
            torch.cuda.synchronize()
            hbm["tbps"] = probe_tbps(hbm["buf"], 20)
            doc["hbm_wait"] = dict(probe="sum of a 1 GiB bf16 buffer", probe_tbps=hbm["tbps"],
                                   fraction=HBM_WAIT_FRACTION, max_seconds=HBM_WAIT_MAX_S)
            log(f"peers: new inputs wait until a sum over a kept 1 GiB buffer reads at "
                f"{HBM_WAIT_FRACTION:.0%} of {hbm['tbps']:.2f} TB/s, its speed now "
                f"(at most {HBM_WAIT_MAX_S:g} s)")
        for b, hkv, n, d, dtype_name in decode_shapes(args):
            for kv_layout in args.kv_layouts:
                if deadline.passed():
                    log(f"stop: --max-seconds {args.max_seconds:g} passed "
                        f"({deadline.elapsed():.0f} s); writing what was measured")
                    return
                decode_shape(b, hkv, n, d, dtype_name, kv_layout)

    def decode_shape(b, hkv, n, d, dtype_name, kv_layout):
        """decode_pass() at one shape, K and V in kv_layout (bnhd: records' impl + _bnhd)."""
        hq, ql = args.heads_q, args.q_len
        shape = f"{dtype_name} d={d} B={b} Hq={hq} Hkv={hkv} q_len={ql} N={n}"
        if kv_layout != "bhnd":
            shape += f" {kv_layout}"
        base = {"pass": "decode", "dtype": dtype_name, "d": d, "batch": b, "heads_q": hq,
                "heads_kv": hkv, "q_len": ql, "cache": n, "layout": "contiguous",
                "kv_layout": kv_layout}
        dtype = dtypes[dtype_name]

        def name_of(impl):  # bhnd, PyTorch's own layout, keeps the backend's name
            return impl if kv_layout == "bhnd" else f"{impl}_{kv_layout}"

        try:
            q = torch.randn(b, hq, ql, d, device=device, dtype=dtype)
            if kv_layout == "bnhd":  # the step's cache, seen as [B, H_kv, N, d]
                k, v = (torch.randn(b, n, hkv, d, device=device, dtype=dtype).transpose(1, 2)
                        for _ in range(2))
            else:
                k, v = (torch.randn(b, hkv, n, d, device=device, dtype=dtype)
                        for _ in range(2))
            # New query i sees keys 0 .. n - ql + i (docs/conventions.md, Decoding).
            mask = (None if ql == 1 else
                    torch.ones(ql, n, device=device, dtype=torch.bool).tril_(n - ql))
        except torch.cuda.OutOfMemoryError:
            q = k = v = mask = None
            release()
            for impl in args.impls:
                skip(name_of(impl), base, shape, "out of memory (inputs)")
            return
        kv_bytes = fa_perf.decode_kv_bytes(b, hkv, n, d, dtype_name)
        if not args.no_hbm_wait:
            waited_ms, at_speed = wait_for_hbm()
            base["hbm_wait_ms"] = waited_ms
            if not at_speed:
                base["hbm_wait_gave_up"] = True
            if waited_ms > 0:
                log(f"{shape}: {'waited' if at_speed else 'gave up after'} {waited_ms:.0f} ms "
                    f"for the probe to read at {HBM_WAIT_FRACTION:.0%} again")
        for impl in args.impls:
            backend = getattr(SDPBackend, dict(IMPLS)[impl], None) if SDPBackend else None
            if backend is None:
                skip(name_of(impl), base, shape, f"SDPBackend.{dict(IMPLS)[impl]} is not in this "
                                        "PyTorch")
                continue
            def attempt(kk, vv, gqa):
                """measure() of the backend on K and V (enable_gqa when gqa); the refusal's
                reason (None when it ran) and the figures."""
                call = lambda: F.scaled_dot_product_attention(  # noqa: E731
                    q, kk, vv, attn_mask=mask, **({"enable_gqa": True} if gqa else {}))
                try:
                    return None, measure(sdpa_kernel(backend), lambda: call)
                except torch.cuda.OutOfMemoryError:
                    release()
                    return "out of memory", None
                except Exception as e:  # RuntimeError: the backend refuses the shape
                    release()
                    reason = first_line(e)
                    if not isinstance(e, RuntimeError):
                        reason = f"{type(e).__name__}: {reason}"
                    return reason, None

            # enable_gqa only where heads are grouped: MHA shapes need no PyTorch that has it
            reason, got = attempt(k, v, hq != hkv)
            expanded = None
            if got is None and hq != hkv and reason != "out of memory":
                # A backend that refuses grouped heads is measured as a user would run it:
                # K and V expanded to H_q heads beforehand (untimed), read H_q / H_kv times
                # over; the record says so, and kv_bytes stays the cache's.
                expanded = reason
                try:
                    # In the layout measured: a bnhd cache is expanded along its heads in
                    # place, [B, N, H_q, d], and seen again as [B, H_q, N, d].
                    if kv_layout == "bnhd":
                        ke, ve = (x.transpose(1, 2).repeat_interleave(hq // hkv, dim=2)
                                  .transpose(1, 2) for x in (k, v))
                    else:
                        ke, ve = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
                except torch.cuda.OutOfMemoryError:
                    release()
                    ke = ve = None
                    reason = f"enable_gqa refused ({expanded}); out of memory expanding K, V"
                if ke is not None:
                    reason, got = attempt(ke, ve, False)
                    del ke, ve
                    if got is None:
                        reason = f"enable_gqa refused ({expanded}); expanded K, V: {reason}"
            if got is None:
                skip(name_of(impl), base, shape, reason)
                continue
            ms, extra, reps = got
            tbps = kv_bytes / (ms * 1e-3) / 1e12
            rec = dict(impl=name_of(impl), **base,
                       name=decode_name(name_of(impl), dtype_name, d, b, hq, hkv, ql, n),
                       median_ms=ms, kv_bytes=kv_bytes, tbps=tbps, extra_device_bytes=extra)
            if expanded is not None:
                rec.update(gqa="expanded", note=f"enable_gqa refused: {expanded}")
            doc["results"].append(rec)
            write_json(args.out, doc)
            note = "" if reps == args.reps else f" ({reps} reps, deadline)"
            note += "" if expanded is None else " (K, V expanded: enable_gqa refused)"
            log(f"{name_of(impl):21s} {shape}: {ms:9.4f} ms {tbps:6.3f} TB/s "
                f"extra {human_bytes(extra)}{note}  [{deadline.elapsed():.0f} s]")
        del q, k, v, mask
        release()

    torch.manual_seed(args.seed)
    if args.pass_ == "decode":
        decode_pass()
        write_json(args.out, doc)
        log(f"peers: {len(doc['results'])} measurements, {len(doc['skipped'])} skipped, "
            f"{deadline.elapsed():.0f} s -> {args.out}")
        return 0
    backward = args.pass_ == "backward"
    stopped = False
    for dtype_name in args.dtypes:
        dtype = dtypes[dtype_name]
        for d in args.dims:
            heads = args.hidden // d
            for causal in causal_modes:
                for n in args.ns:
                    if stopped:
                        break
                    batch = max(args.tokens // n, 1)
                    shape = (f"{dtype_name} d={d} {'causal' if causal else 'full'} "
                             f"B={batch} H={heads} N={n}")
                    base = {"pass": args.pass_, "dtype": dtype_name, "d": d, "causal": causal,
                            "batch": batch, "heads_q": heads, "heads_kv": heads, "n_q": n,
                            "n_kv": n, "layout": "bhnd"}
                    try:
                        q, k, v = (torch.randn(batch, heads, n, d, device=device, dtype=dtype,
                                               requires_grad=backward)
                                   for _ in range(3))
                        d_o = (torch.randn(batch, heads, n, d, device=device, dtype=dtype)
                               if backward else None)
                        mask = (torch.ones(n, n, device=device, dtype=torch.bool).triu_(1)
                                if causal and "torch_naive" in args.impls else None)
                    except torch.cuda.OutOfMemoryError:
                        q = k = v = d_o = mask = None
                        release()
                        log(f"skip  {shape}: out of memory allocating the inputs")
                        for impl in args.impls:
                            doc["skipped"].append(dict(base, impl=impl,
                                                       reason="out of memory (inputs)"))
                        write_json(args.out, doc)
                        continue
                    flops = (attention_backward_flops if backward else attention_flops)(
                        batch, heads, n, n, d, causal)
                    for impl in args.impls:
                        if deadline.passed():
                            log(f"stop: --max-seconds {args.max_seconds:g} passed "
                                f"({deadline.elapsed():.0f} s); writing what was measured")
                            stopped = True
                            break
                        try:
                            ms, extra, reps = measure(*make_call(impl, q, k, v, causal, mask,
                                                                 d_o))
                        except torch.cuda.OutOfMemoryError:
                            release()
                            log(f"skip  {impl:16s} {shape}: out of memory")
                            doc["skipped"].append(dict(base, impl=impl, reason="out of memory"))
                            write_json(args.out, doc)
                            continue
                        except Exception as e:  # RuntimeError: backend refuses the config
                            release()
                            reason = first_line(e)
                            if not isinstance(e, RuntimeError):
                                reason = f"{type(e).__name__}: {reason}"
                            log(f"skip  {impl:16s} {shape}: {reason}")
                            doc["skipped"].append(dict(base, impl=impl, reason=reason))
                            write_json(args.out, doc)
                            continue
                        tflops = flops / (ms * 1e-3) / 1e12
                        rec = dict(impl=impl, **base, median_ms=ms, tflops=tflops,
                                   extra_device_bytes=extra)
                        doc["results"].append(rec)
                        write_json(args.out, doc)
                        note = "" if reps == args.reps else f" ({reps} reps, deadline)"
                        log(f"{impl:16s} {shape}: {ms:9.3f} ms {tflops:7.1f} TFLOP/s "
                            f"extra {human_bytes(extra)}{note}  [{deadline.elapsed():.0f} s]")
                    del q, k, v, d_o, mask
                    release()

    write_json(args.out, doc)
    log(f"peers: {len(doc['results'])} measurements, {len(doc['skipped'])} skipped, "
        f"{deadline.elapsed():.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
