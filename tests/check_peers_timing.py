#!/usr/bin/env python3
"""What scripts/peers.py times, checked without PyTorch or a GPU: it runs against a stand-in
`torch` module (written to a temporary folder put first on PYTHONPATH) that logs every
forward, backward, GPU spin and CUDA event in order. Registered in ctest as
conventions/peers_timing.

  1. --pass forward: each timed call (between a measurement's start and stop events) is one
     forward, after a spin; records carry "pass": "forward" and 4·B·H·N²·d FLOPs.
  2. --pass backward: one forward per measurement, before any timed call and never between
     the events; each timed call is one backward (torch.autograd.grad with retain_graph on
     that forward's output, with dO), after a spin; the extra memory is the backward's
     peak over what was allocated after the forward; records carry "pass": "backward" and
     2.5 × the forward's FLOPs (scripts/fa_perf.py).
  3. --pass decode: the same as 1 for one decoding step, q [B, H_q, 1, d] against K and V
     [B, H_kv, N, d] with enable_gqa=True; records carry "pass": "decode", bench_decode's
     record name and fields, kv_bytes (scripts/fa_perf.py) and kv_bytes per second. A
     backend that refuses enable_gqa (the stand-in's cuDNN) is measured on K and V expanded
     beforehand, untimed, and its record says so.
  4. --pass decode --kv-layouts bhnd,bnhd: K and V made once per layout, the bnhd pair as
     [B, N, H_kv, d] seen through a transpose, its records named impl_bnhd; the refusing
     backend's K and V expanded in the layout measured; an unknown, empty or repeated layout,
     or the option outside --pass decode, refused by name.
  5. --pass decode waits for the HBM: a sum over a kept buffer, 3 untimed calls then 20 timed
     at the start, and 3 timed after each shape's inputs are made, before the shape's first
     call (the stand-in reads at speed at once, so no more), each timed one after a spin and
     never between a measurement's events; each record says it waited 0 ms. Scripted slow
     probes: the shape waits until one reads at 95% again and its record says how long; probes
     that stay slow give up at --max-seconds, and the record says so. --no-hbm-wait makes no
     probe, and is refused outside --pass decode.

Exit status 0 when every check holds, 1 otherwise (each failure printed). Standard library.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fa_perf  # noqa: E402

MS = 2.0  # every event pair's elapsed time
FORWARD_PEAK, BACKWARD_PEAK = 500, 3000  # bytes a stand-in call allocates at its peak

# The stand-in: what peers.py calls, each call appended to the log file as one line.
FAKE_TORCH = '''
import contextlib, os
__version__ = "0.0-stand-in"
float32, float16, bfloat16, bool = "float32", "float16", "bfloat16", "bool"
_LOG = os.environ["FAKE_TORCH_LOG"]
_mem = {"alloc": 1000, "peak": 1000}
# Elapsed times (milliseconds) of the timed HBM probes, in order; then the default.
_PROBE_TIMES = [float(x) for x in os.environ.get("FAKE_PROBE_TIMES", "").split(",") if x]
_state = {}


def _log(what):
    with open(_LOG, "a") as f:
        f.write(what + "\\n")


def _peak(extra):
    _mem["peak"] = max(_mem["peak"], _mem["alloc"] + extra)


class Tensor:
    def __init__(self, shape, requires_grad=False):
        self.shape, self.requires_grad = tuple(shape), requires_grad

    def transpose(self, a, b):
        _log(f"transpose {a} {b}")
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return Tensor(shape)

    def mul_(self, x):
        return self

    def masked_fill_(self, mask, value):
        return self

    def triu_(self, k):
        return self

    def tril_(self, k):
        return self

    def normal_(self):
        return self

    def sum(self):  # the decode pass's HBM probe
        _log("probe")
        _state["probe"] = True
        return Tensor(())

    def numel(self):
        n = 1
        for x in self.shape:
            n *= x
        return n

    def element_size(self):
        return 2

    def repeat_interleave(self, n, dim):
        _log(f"expand dim {dim}")
        shape = list(self.shape)
        shape[dim] *= n
        return Tensor(shape)


def device(name):
    return name


def randn(*shape, device=None, dtype=None, requires_grad=False):
    _log("randn grad" if requires_grad else "randn")
    _log("shape " + "x".join(map(str, shape)))
    return Tensor(shape, requires_grad)


def ones(*shape, device=None, dtype=None):
    return Tensor(shape)


def empty(*shape, device=None, dtype=None):
    return Tensor(shape)


def matmul(a, b):
    return Tensor(a.shape)


def softmax(s, dim):  # the naive composite's forward
    _log("forward")
    _peak(FORWARD_PEAK)
    return s


def manual_seed(seed):
    pass


class _Autograd:
    @staticmethod
    def grad(outputs, inputs, grad_outputs, retain_graph=False):
        ok = (isinstance(outputs, Tensor) and len(inputs) == 3
              and all(t.requires_grad for t in inputs) and isinstance(grad_outputs, Tensor)
              and not grad_outputs.requires_grad and retain_graph)
        _log("backward" if ok else "backward-misused")
        _peak(BACKWARD_PEAK)
        return tuple(Tensor(t.shape) for t in inputs)


autograd = _Autograd()


class _Cuda:
    OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

    class Event:
        def __init__(self, enable_timing=False):
            self.id = id(self)

        def record(self):
            _log("event")

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            if _state.pop("probe", False) and _PROBE_TIMES:
                return _PROBE_TIMES.pop(0)
            return MS

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_name():
        return "Stand-in GPU"

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def memory_allocated():
        return _mem["alloc"]

    @staticmethod
    def max_memory_allocated():
        return _mem["peak"]

    @staticmethod
    def reset_peak_memory_stats():
        _mem["peak"] = _mem["alloc"]

    @staticmethod
    def empty_cache():
        pass

    @staticmethod
    def _sleep(cycles):
        _log("spin")


cuda = _Cuda()


class version:
    cuda = "0.0"


class backends:
    class cudnn:
        @staticmethod
        def version():
            return 1

    class cuda:
        class matmul:
            allow_tf32 = False
'''.replace("MS", repr(MS)).replace("FORWARD_PEAK", str(FORWARD_PEAK)).replace(
    "BACKWARD_PEAK", str(BACKWARD_PEAK))

FAKE_FUNCTIONAL = '''
from torch import _log, _peak, Tensor


def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
    from torch.nn import attention
    if enable_gqa and attention.CURRENT == [attention.SDPBackend.CUDNN_ATTENTION]:
        _log("refused")  # this stand-in's cuDNN refuses grouped heads, as some versions do
        raise RuntimeError("No available kernel. Aborting execution.")
    # Grouped heads (H_q != H_kv) need enable_gqa, as PyTorch's SDPA does.
    _log("forward" if enable_gqa or q.shape[1] == k.shape[1] else "forward-without-gqa")
    _peak(''' + str(FORWARD_PEAK) + ''')
    return Tensor(q.shape)
'''

FAKE_ATTENTION = '''
import contextlib


class SDPBackend:
    FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION, MATH = range(4)


CURRENT = []


@contextlib.contextmanager
def sdpa_kernel(backend):
    CURRENT.append(backend)
    try:
        yield
    finally:
        CURRENT.pop()
'''

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def without_probes(log):
    """The log without the decode pass's HBM probes: timed (spin, event, probe, event) and
    untimed (probe)."""
    out = list(log)
    i = 0
    while i < len(out):
        if out[i:i + 4] == ["spin", "event", "probe", "event"]:
            del out[i:i + 4]
        elif out[i] == "probe":
            del out[i]
        else:
            i += 1
    return out


def timed_probes(log):
    """Indices of the timed probes (spin, event, probe, event) in the log."""
    return [i for i in range(len(log) - 3)
            if log[i:i + 4] == ["spin", "event", "probe", "event"]]


def measurements(log):
    """The log split into measurements: each starts at the first call after the inputs
    (randn) or after the previous measurement's last event; returns lists of lines. The HBM
    probes are left out (without_probes)."""
    out, current = [], []
    for line in without_probes(log):
        if line.startswith(("shape ", "transpose ")):  # the inputs' making, not a call
            continue
        if line.startswith("randn"):
            if current:
                out.append(current)
            current = []
            continue
        current.append(line)
        if line == "event" and current.count("event") == 2 * REPS:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return [m for m in out if m]


REPS, WARMUP = 4, 2


DECODE = dict(batch=2, heads_q=4, heads_kv=2, q_len=1, cache=96, d=64, dtype="bf16")


def run_peers(tmp, kind, extra=(), env_extra=None):
    fake = os.path.join(tmp, "fake")
    write(os.path.join(fake, "torch", "__init__.py"), FAKE_TORCH)
    write(os.path.join(fake, "torch", "nn", "__init__.py"), "from . import functional\n")
    write(os.path.join(fake, "torch", "nn", "functional.py"), FAKE_FUNCTIONAL)
    write(os.path.join(fake, "torch", "nn", "attention.py"), FAKE_ATTENTION)
    tag = kind + ("-" + "-".join(extra).replace(",", "-").strip("-") if extra else "")
    log = os.path.join(tmp, f"{tag}.log")
    out = os.path.join(tmp, f"peers-{tag}.json")
    env = dict(os.environ, PYTHONPATH=fake, FAKE_TORCH_LOG=log, **(env_extra or {}))
    if os.path.exists(log):  # the stand-in appends: each run its own log
        os.remove(log)
    if kind == "decode":  # one shape, two backends: as many measurements as the others
        shape = ["--dtypes", DECODE["dtype"], "--dims", str(DECODE["d"]), "--batches",
                 str(DECODE["batch"]), "--caches", str(DECODE["cache"]), "--heads-q",
                 str(DECODE["heads_q"]), "--heads-kv", str(DECODE["heads_kv"]), "--impls",
                 "torch_flash,torch_cudnn"]
    else:
        shape = ["--dtypes", "fp32", "--dims", "64", "--ns", "512", "--causal", "both",
                 "--impls", "torch_flash,torch_naive"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peers.py"), "--pass",
                        kind] + shape + list(extra) + ["--reps", str(REPS), "--warmup",
                                                       str(WARMUP), "--out", out],
                       capture_output=True, text=True, env=env)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    doc = json.load(open(out)) if os.path.exists(out) else {}
    return r, lines, doc


def check(tmp, kind):
    r, log, doc = run_peers(tmp, kind)
    expect(r.returncode == 0, f"peers.py --pass {kind} exits 0 (got {r.returncode}):\n"
                              f"{r.stdout}{r.stderr}")
    results = doc.get("results", [])
    backward, decode = kind == "backward", kind == "decode"
    want_records = 2 if decode else 4
    expect(len(results) == want_records,
           f"--pass {kind}: {want_records} records (2 impls"
           f"{'' if decode else ', causal off and on'}), got {len(results)}: {doc}")
    for rec in results if decode else []:
        c = DECODE
        kv = fa_perf.decode_kv_bytes(c["batch"], c["heads_kv"], c["cache"], c["d"], c["dtype"])
        name = (f"{rec.get('impl')}/{c['dtype']}/d{c['d']}/B{c['batch']}/Hq{c['heads_q']}/"
                f"Hkv{c['heads_kv']}/q{c['q_len']}/N{c['cache']}/contiguous")
        expect(rec.get("pass") == "decode" and rec.get("name") == name
               and all(rec.get(k) == c[k] for k in ("batch", "heads_q", "heads_kv", "q_len",
                                                    "cache", "d", "dtype"))
               and rec.get("layout") == "contiguous",
               f"--pass decode: the record names its shape as bench_decode does ({name}): {rec}")
        expect(rec.get("kv_bytes") == kv and rec["median_ms"] == MS
               and abs(rec["tbps"] - kv / (MS * 1e-3) / 1e12) < 1e-12,
               f"--pass decode: kv_bytes {kv:g} and TB/s from the median time: {rec}")
    if decode:
        cudnn = [r for r in doc.get("results", []) if r.get("impl") == "torch_cudnn"]
        flash = [r for r in doc.get("results", []) if r.get("impl") == "torch_flash"]
        expect(len(cudnn) == 1 and cudnn[0].get("gqa") == "expanded"
               and "No available kernel" in cudnn[0].get("note", "")
               and flash and "gqa" not in flash[0],
               f"a backend refusing enable_gqa is measured on expanded K, V and says so: {doc}")
        expect(log.count("refused") == 1 and log.count("expand dim 1") == 2
               and log.index("refused") < log.index("expand dim 1"),
               f"K and V are expanded once each, after the refusal, before any timing: {log}")
        expect(not doc.get("skipped"), f"nothing skipped: {doc.get('skipped')}")
        expect("forward-without-gqa" not in log,
               "--pass decode calls SDPA with enable_gqa, or on K and V expanded to H_q heads")
        # The HBM wait: 3 untimed and 20 timed probes at the start, 3 timed after the shape's
        # inputs (at speed at once), all before the shape's first call.
        last_input = max(i for i, x in enumerate(log) if x.startswith("randn"))
        first_call = min(i for i, x in enumerate(log) if x in ("forward", "refused"))
        probes = [i for i, x in enumerate(log) if x == "probe"]
        timed = timed_probes(log)
        expect(len(probes) == 26 and len(timed) == 23 and all(i < first_call for i in probes)
               and sum(i > last_input for i in timed) == 3
               and "probe" not in without_probes(log),
               f"--pass decode: 3 untimed and 20 timed HBM probes at the start, 3 timed after "
               f"the inputs, each after a spin and between its own events, before the first "
               f"call: {log}")
        expect(all(x.get("hbm_wait_ms") == 0 and "hbm_wait_gave_up" not in x
                   for x in doc.get("results", []))
               and doc.get("hbm_wait", {}).get("fraction") == 0.95,
               f"--pass decode: each record says it waited 0 ms, the file the wait's rule: {doc}")
        results = []  # the FLOP checks below are the attention passes'
    flops_of = fa_perf.attention_backward_flops if backward else fa_perf.attention_flops
    for rec in results:
        flops = flops_of(rec["batch"], rec["heads_q"], rec["n_q"], rec["n_kv"], rec["d"],
                         rec["causal"])
        expect(rec.get("pass") == kind, f"a --pass {kind} record says so: {rec}")
        expect(abs(rec["tflops"] - flops / (MS * 1e-3) / 1e12) < 1e-9 and rec["median_ms"] == MS,
               f"--pass {kind}: TFLOP/s from {flops:g} FLOPs and the median time: {rec}")
        want = BACKWARD_PEAK if backward else FORWARD_PEAK
        expect(rec["extra_device_bytes"] == want,
               f"--pass {kind}: the extra memory is the timed call's peak ({want}): {rec}")
    expect(doc.get("pass") == kind, f"the peers file says its pass: {doc.get('pass')!r}")
    expect("backward-misused" not in log,
           "every backward is autograd.grad(O, (Q, K, V), dO, retain_graph=True)")
    expect(("randn grad" in log) == backward, f"--pass {kind}: Q, K, V require gradients "
                                              f"{'' if backward else 'not '}")
    ms = measurements(log)
    expect(len(ms) == want_records,
           f"--pass {kind}: {want_records} measurements in the log, got {len(ms)}: {log}")
    timed = "backward" if backward else "forward"
    for m in ms:
        first_event = m.index("event") if "event" in m else len(m)
        before, during = m[:first_event], m[first_event:]
        if backward:
            expect(before.count("forward") == 1,
                   f"one untimed forward per measurement, before the timing: {m}")
            expect("forward" not in during, f"no forward among the timed calls: {m}")
            expect("forward" in m and "backward" in m
                   and m.index("forward") < m.index("backward"),
                   f"the forward comes before the first backward: {m}")
        # the warm-up and the memory call, then REPS × (spin, event, call, event)
        expect(before.count(timed) == WARMUP + 1,
               f"{WARMUP} warm-up calls and one for the memory before the timing: {before}")
        expect(during == ["event", timed, "event", "spin"] * (REPS - 1) + ["event", timed, "event"]
               and before[-1] == "spin",
               f"each timed call is one {timed} between its events, a spin before each: {m}")


def check_kv_layouts(tmp):
    """--kv-layouts bhnd,bnhd: each backend timed on K, V made as [B, H_kv, N, d] and as
    [B, N, H_kv, d] seen through a transpose, the second named impl + _bnhd."""
    r, log, doc = run_peers(tmp, "decode", ("--kv-layouts", "bhnd,bnhd"))
    expect(r.returncode == 0, f"--kv-layouts bhnd,bnhd exits 0: {r.stdout}{r.stderr}")
    got = sorted((x.get("impl"), x.get("kv_layout")) for x in doc.get("results", []))
    want = sorted([("torch_cudnn", "bhnd"), ("torch_flash", "bhnd"),
                   ("torch_cudnn_bnhd", "bnhd"), ("torch_flash_bnhd", "bnhd")])
    expect(got == want, f"--kv-layouts bhnd,bnhd: records {want}, got {got}")
    for x in doc.get("results", []):
        expect(x.get("name", "").startswith(x.get("impl", "?") + "/"),
               f"a record's name starts with its impl: {x}")
    c = DECODE
    bhnd = f"shape {c['batch']}x{c['heads_kv']}x{c['cache']}x{c['d']}"
    bnhd = f"shape {c['batch']}x{c['cache']}x{c['heads_kv']}x{c['d']}"
    expect(log.count(bhnd) == 2 and log.count(bnhd) == 2,
           f"K and V made once per layout: {log}")
    q_made = [i for i, x in enumerate(log)
              if x == f"shape {c['batch']}x{c['heads_q']}x{c['q_len']}x{c['d']}"]
    timed = timed_probes(log)
    expect(len(timed) == 26 and len(q_made) == 2
           and sum(q_made[0] < i < q_made[1] for i in timed) == 3
           and sum(i > q_made[1] for i in timed) == 3,
           f"--kv-layouts bhnd,bnhd: the HBM wait after each layout's inputs (3 probes each): "
           f"{log}")
    # bhnd: cuDNN's refusal expands along dim 1; bnhd: transposed to [B, N, H, d], expanded
    # along its heads (dim 2), seen again as [B, H, N, d].
    expect(log.count("expand dim 1") == 2 and log.count("expand dim 2") == 2,
           f"K, V expanded in the layout measured (bhnd: dim 1, bnhd: dim 2 of [B, N, H, d]): "
           f"{log}")
    for bad, why in ((["--kv-layouts", ""], "--kv-layouts"),
                     (["--kv-layouts", "bhnd,bhnd"], "each once"),
                     (["--pass", "forward", "--kv-layouts", "bnhd"], "only with --pass decode")):
        argv = ["--pass", "decode"] + bad if bad[0] != "--pass" else bad
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peers.py")] + argv,
                           capture_output=True, text=True)
        expect(r.returncode == 2 and why in r.stderr, f"{argv} refused naming {why}: {r.stderr}")
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peers.py"), "--pass",
                          "decode", "--kv-layouts", "bhnd,nbhd"], capture_output=True, text=True)
    expect(bad.returncode == 2 and "--kv-layouts" in bad.stderr and "nbhd" in bad.stderr,
           f"an unknown --kv-layouts is refused by name: {bad.stderr}")


def check_hbm_wait_slow(tmp):
    """Scripted probes: slow once after the inputs, then at speed: the shape waits and says
    how long; slow for good: the wait gives up at --max-seconds and the record says so."""
    base = ",".join([str(MS)] * 20)
    env_once = dict(FAKE_PROBE_TIMES=base + "," + ",".join([str(MS * 1.25)] * 3))
    r, log, doc = run_peers(tmp, "decode", (), env_once)
    recs = doc.get("results", [])
    expect(r.returncode == 0 and len(recs) == 2
           and all(0 < x.get("hbm_wait_ms", 0) < 4000 and "hbm_wait_gave_up" not in x
                   for x in recs) and "waited" in r.stderr + r.stdout
           and len(timed_probes(log)) == 26,
           f"a probe at 80% then one at speed: the shape waits (two probes of 3) and says so: "
           f"{r.stdout}{r.stderr}{recs}")
    env_slow = dict(FAKE_PROBE_TIMES=base + "," + ",".join([str(MS * 2)] * 3000))
    r, log, doc = run_peers(tmp, "decode", ("--max-seconds", "3"), env_slow)
    recs = doc.get("results", [])
    expect(r.returncode == 0 and len(recs) == 2
           and all(x.get("hbm_wait_gave_up") is True and 0 < x.get("hbm_wait_ms", 0) < 4900
                   for x in recs) and "gave up" in r.stderr + r.stdout,
           f"probes that stay slow: the wait gives up at --max-seconds (3 s), not after 5 s, and "
           f"the records say so: {r.stdout}{r.stderr}{recs}")


def check_no_hbm_wait(tmp):
    """--no-hbm-wait: no probe, no wait in the records; outside --pass decode refused."""
    r, log, doc = run_peers(tmp, "decode", ("--no-hbm-wait",))
    expect(r.returncode == 0 and len(doc.get("results", [])) == 2,
           f"--no-hbm-wait exits 0 with 2 records: {r.stdout}{r.stderr}")
    expect("probe" not in log and "hbm_wait" not in doc
           and not any("hbm_wait_ms" in x for x in doc.get("results", [])),
           f"--no-hbm-wait: no probe and no wait recorded: {log} {doc}")
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peers.py"), "--pass",
                          "forward", "--no-hbm-wait"], capture_output=True, text=True)
    expect(bad.returncode == 2 and "only with --pass decode" in bad.stderr,
           f"--no-hbm-wait outside --pass decode is refused: {bad.stderr}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check(tmp, "forward")
        check(tmp, "backward")
        check(tmp, "decode")
        check_kv_layouts(tmp)
        check_hbm_wait_slow(tmp)
        check_no_hbm_wait(tmp)
    if failures:
        print(f"check_peers_timing.py: {len(failures)} check(s) failed")
        return 1
    print("check_peers_timing.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
