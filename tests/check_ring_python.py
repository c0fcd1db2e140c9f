#!/usr/bin/env python3
"""check_ring_python.py — step 13's Python ring (steps/13_ring_attention/ring_attention.py) run
on the CPU, without PyTorch, NCCL or a GPU (ctest cpu/ring_python): a stand-in `torch` module
backed by numpy (float64 arrays; views write through as torch's do), a stand-in
torch.distributed that runs P ranks as P threads (all_gather_object through a barrier,
batch_isend_irecv through queues), and stand-ins for the C API's fa_run, fa_backward and
fa_merge that compute in numpy. What runs is the module's own code: the checks on every
rank, the plan, the buffers and their double buffering, the slices each call gets, the
partials' slots, the merge, the backward's dK/dV sums travelling round the ring.

  1. forward: the gathered O and L equal float64 attention (to 1e-10) for P = 1 … 4, both
     chunk layouts, causal and not, both tensor layouts, GQA and B = 2, N_q != N_kv unmasked;
  2. backward: dQ, dK and dV of ring_attention_backward equal the float64 gradients likewise;
  3. bad input on one rank raises the same RingError, naming that rank, on every rank; ranks
     that disagree on the shapes are told so; the timing modes ("compute", "send") run.

The head dims are cut to 8 here (ring_attention.HEAD_DIMS) to keep numpy quick; nothing else
depends on them. Exit status 0 pass, 1 fail, 77 when no Python with numpy is found (it tries
this interpreter, then /usr/bin/python3).
"""
import math
import os
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_TORCH = '''
import contextlib
import numpy as np


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__


float16, bfloat16, float32, uint8 = (dtype(n) for n in ("float16", "bfloat16", "float32",
                                                        "uint8"))


class device:
    def __init__(self, kind="cuda", index=0):
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"{self.type}:{self.index}"


def is_grad_enabled():
    return True


class Tensor:
    def __init__(self, a, dt=float32):
        self.a, self.dtype, self.device, self.requires_grad = a, dt, device(), False

    shape = property(lambda self: tuple(self.a.shape))
    is_cuda = property(lambda self: True)

    def dim(self):
        return self.a.ndim

    def is_contiguous(self):
        return self.a.flags["C_CONTIGUOUS"]

    def contiguous(self):
        return self if self.is_contiguous() else Tensor(np.ascontiguousarray(self.a), self.dtype)

    def __getitem__(self, idx):
        return Tensor(self.a[idx], self.dtype)

    def __setitem__(self, idx, value):
        self.a[idx] = value.a

    def __iadd__(self, other):
        self.a += other.a
        return self

    def data_ptr(self):  # the stand-in C API takes the tensor itself
        return self

    def fill_(self, x):
        self.a[...] = x
        return self

    def copy_(self, other):
        self.a[...] = other.a
        return self

    def transpose(self, i, j):
        return Tensor(np.swapaxes(self.a, i, j), self.dtype)

    def numel(self):
        return self.a.size

    def chunk(self, n, dim=0):
        return [Tensor(x, self.dtype) for x in np.split(self.a, n, axis=dim)]

    def float(self):
        return Tensor(self.a, float32)

    def to(self, dt):
        return Tensor(self.a.copy(), dt)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self


def empty(shape, device=None, dtype=float32):
    return Tensor(np.full(shape, np.nan), dtype)  # NaN: what is never written shows


def empty_like(t):
    return Tensor(np.full(t.a.shape, np.nan), t.dtype)


def zeros(shape, device=None, dtype=float32):
    return Tensor(np.zeros(shape), dtype)


def cat(ts, dim=0):
    return Tensor(np.concatenate([t.a for t in ts], axis=dim), ts[0].dtype)


import threading as _threading

_trace = _threading.local()  # per rank (thread): what the ring asked of its streams, in order


def log(*what):
    """Appends to this thread's trace: ("record", stream), ("wait", waiter, waited),
    ("work_wait", stream) (dist's Work.wait on the current stream)."""
    if not hasattr(_trace, "events"):
        _trace.events = []
    _trace.events.append(what)


def trace():
    """This thread's trace, emptied."""
    out, _trace.events = getattr(_trace, "events", []), []
    return out


class _Cuda:
    class Event:  # records the order of record() calls: a clock that ticks once per event
        ticks = [0]

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            _Cuda.Event.ticks[0] += 1
            self.t = _Cuda.Event.ticks[0]
            log("record", (stream or cuda.current_stream()).name)

        def elapsed_time(self, other):
            return float(other.t - self.t)

    class Stream:
        cuda_stream = 0

        def __init__(self, device=None, name="comm"):
            self.name = name

        def wait_stream(self, other):
            log("wait", self.name, other.name)

    def __init__(self):
        self._stream = self.Stream(name="compute")
        self._current = _threading.local()

    def current_device(self):
        return 0

    def set_device(self, i):
        pass

    def is_available(self):
        return True

    def device_count(self):
        return 64

    def current_stream(self, device=None):
        return getattr(self._current, "s", None) or self._stream

    @contextlib.contextmanager
    def stream(self, s):
        before = getattr(self._current, "s", None)
        self._current.s = s
        try:
            yield
        finally:
            self._current.s = before


cuda = _Cuda()
'''

FAKE_DIST = '''
import queue
import threading

_local = threading.local()
_state = {}


def setup(world):
    _state.update(world=world, barrier=threading.Barrier(world), slots={},
                  queues={(a, b): queue.Queue() for a in range(world) for b in range(world)})


def is_initialized():
    return True


def get_rank(group=None):
    return _local.rank


def get_world_size(group=None):
    return _state["world"]


def all_gather_object(out, obj, group=None):
    _state["slots"][_local.rank] = obj
    _state["barrier"].wait()
    for r in range(_state["world"]):
        out[r] = _state["slots"][r]
    _state["barrier"].wait()


def isend():
    pass


def irecv():
    pass


class P2POp:
    def __init__(self, op, tensor, peer, group=None):
        self.op, self.tensor, self.peer = op, tensor, peer


class _Work:
    def wait(self):
        import torch
        torch.log("work_wait", torch.cuda.current_stream().name)


def batch_isend_irecv(ops):
    me = _local.rank
    for o in ops:
        if o.op is isend:
            _state["queues"][(me, o.peer)].put(o.tensor.a.copy())
    for o in ops:
        if o.op is irecv:
            o.tensor.a[...] = _state["queues"][(o.peer, me)].get(timeout=30)
    return [_Work()]
'''


def attention(np, q, k, v, causal):
    """float64 O and L of [B, N, H, d] arrays (GQA by repeating heads), bottom-right causal."""
    _, nq, hq, d = q.shape
    nkv, g = k.shape[1], hq // k.shape[2]
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) / math.sqrt(d)
    if causal:
        s = np.where(np.arange(nkv)[None, :] > np.arange(nq)[:, None] + (nkv - nq), -np.inf, s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    ls = e.sum(-1, keepdims=True)
    return np.einsum("bhij,bjhd->bihd", e / ls, vv), (m + np.log(ls))[..., 0]


def gradients(np, q, k, v, o, lse, d_o, causal):
    """float64 dQ, dK, dV of a block, given the rows' final O and L (what fa_backward gets)."""
    _, nq, hq, d = q.shape
    b, nkv, hkv = k.shape[0], k.shape[1], k.shape[2]
    g = hq // hkv
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, kk) / math.sqrt(d)
    if causal:
        s = np.where(np.arange(nkv)[None, :] > np.arange(nq)[:, None] + (nkv - nq), -np.inf, s)
    p = np.exp(s - lse[..., None])
    dv = np.einsum("bhij,bihd->bjhd", p, d_o)
    ds = p * (np.einsum("bihd,bjhd->bhij", d_o, vv) - np.einsum("bihd,bihd->bhi", d_o, o)[..., None])
    dq = np.einsum("bhij,bjhd->bihd", ds, kk) / math.sqrt(d)
    dk = np.einsum("bhij,bihd->bjhd", ds, q) / math.sqrt(d)
    return dq, dk.reshape(b, nkv, hkv, g, d).sum(3), dv.reshape(b, nkv, hkv, g, d).sum(3)


def main():
    try:
        import numpy as np
    except ImportError:
        other = "/usr/bin/python3"
        if os.path.exists(other) and os.path.realpath(other) != os.path.realpath(sys.executable) \
                and subprocess.run([other, "-c", "import numpy"],
                                   capture_output=True).returncode == 0:
            os.execv(other, [other, os.path.abspath(__file__)] + sys.argv[1:])
        print("SKIPPED: no Python with numpy (tried this one and /usr/bin/python3)")
        return 77

    fake = tempfile.mkdtemp(prefix="fake_torch_")
    os.makedirs(os.path.join(fake, "torch", "distributed"))
    with open(os.path.join(fake, "torch", "__init__.py"), "w") as f:
        f.write(FAKE_TORCH + "\nfrom . import distributed  # noqa\n")
    with open(os.path.join(fake, "torch", "distributed", "__init__.py"), "w") as f:
        f.write(FAKE_DIST)
    sys.path.insert(0, fake)
    sys.path.insert(0, os.path.join(ROOT, "steps", "13_ring_attention"))
    import torch
    import torch.distributed as dist
    import ring_attention as ra
    import flash_tutorial as ft

    ra.HEAD_DIMS = (8,)  # numpy is quick at d = 8; the checks above it do not depend on d
    calls = {"run": 0, "backward": 0, "merge": 0}

    class Lib:
        def fa_workspace_bytes(self, step, problem, ws):
            return 0

        fa_backward_workspace_bytes = fa_workspace_bytes

        def fa_run(self, step, pref, q, k, v, o, lse, ws, nbytes, stream):
            p = pref._obj
            assert q.shape == (p.batch, p.n_q, p.heads_q, p.head_dim), (q.shape, p.n_q)
            assert k.shape == v.shape == (p.batch, p.n_kv, p.heads_kv, p.head_dim)
            assert all(t.is_contiguous() for t in (q, k, v, o, lse))
            o.a[...], lse.a[...] = attention(np, q.a, k.a, v.a, bool(p.causal))
            calls["run"] += 1
            return 0

        def fa_backward(self, step, pref, q, k, v, o, lse, d_o, dq, dk, dv, ws, nbytes, stream):
            p = pref._obj
            assert all(t.is_contiguous() for t in (q, k, v, o, lse, d_o, dq, dk, dv))
            dq.a[...], dk.a[...], dv.a[...] = gradients(np, q.a, k.a, v.a, o.a, lse.a, d_o.a,
                                                        bool(p.causal))
            calls["backward"] += 1
            return 0

        def fa_last_error(self):
            return b""

    def merge(o_parts, lse_parts, out=None, layout="bhnd"):
        assert layout == "bnhd" and out is not None
        lse = lse_parts.a                           # [P, B, H, rows], −inf: an empty partial
        m = lse.max(0)
        w = np.exp(lse - m)
        total = w.sum(0)
        o = np.nan_to_num(o_parts.a)                # an empty partial's O is never written
        out[0].a[...] = np.einsum("pbhr,pbrhd->brhd", w / total, o)
        out[1].a[...] = m + np.log(total)
        calls["merge"] += 1
        return out

    ft._load = lambda: Lib()
    ft.merge = merge
    failed = passed = 0

    def check(ok, what):
        nonlocal failed, passed
        passed, failed = passed + bool(ok), failed + (not ok)
        if not ok:
            print(f"FAIL  {what}")

    def ranks(P, body):
        """body(rank) on P threads standing for P ranks; the results (or exceptions)."""
        dist.setup(P)
        out = [None] * P

        def run(r):
            dist._local.rank = r
            try:
                out[r] = body(r)
            except Exception as e:  # noqa: BLE001
                out[r] = e

        threads = [threading.Thread(target=run, args=(r,)) for r in range(P)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        return out

    rng = np.random.default_rng(13)
    d = 8
    for P in (1, 2, 3, 4):
        for chunks in ("contiguous", "zigzag"):
            for causal in (False, True):
                for layout in ("bnhd", "bhnd"):
                    for b, hq, hkv in ((1, 4, 2), (2, 2, 2)):
                        n = 2 * P * 5
                        nkv = n if causal else 2 * P * 7
                        qa, do_a = (rng.standard_normal((b, n, hq, d)) for _ in range(2))
                        ka, va = (rng.standard_normal((b, nkv, hkv, d)) for _ in range(2))
                        oa, la = attention(np, qa, ka, va, causal)
                        want = gradients(np, qa, ka, va, oa, la, do_a, causal)
                        seq = 1 if layout == "bnhd" else 2
                        tl = (lambda x: x) if layout == "bnhd" else \
                            (lambda x: np.ascontiguousarray(np.swapaxes(x, 1, 2)))
                        q, k, v, d_o = (torch.Tensor(tl(x), torch.bfloat16)
                                        for x in (qa, ka, va, do_a))

                        def body(r):
                            loc = [ra.shard(x, r, P, chunks, dim=seq) for x in (q, k, v, d_o)]
                            o, lse = ra.ring_attention(*loc[:3], causal=causal, layout=layout,
                                                       chunks=chunks)
                            grads = ra.ring_attention_backward(*loc[:3], o, lse, loc[3],
                                                               causal=causal, layout=layout,
                                                               chunks=chunks)
                            return (o, lse) + grads

                        out = ranks(P, body)
                        what = f"P {P} {chunks} causal {causal} {layout} B {b} H {hq}/{hkv}"
                        errors = [x for x in out if isinstance(x, Exception)]
                        check(not errors, f"{what}: {errors}")
                        if errors:
                            continue
                        back = (lambda x: x) if layout == "bnhd" else \
                            (lambda x: np.swapaxes(x, 1, 2))
                        got = [back(ra.unshard([x[i] for x in out], chunks, dim=seq).a)
                               for i in (0, 2, 3, 4)]
                        lse = ra.unshard([x[1] for x in out], chunks, dim=2).a
                        for name, g, w in zip(("O", "dQ", "dK", "dV"), got, (oa,) + want):
                            err = np.abs(g - w).max()
                            check(err < 1e-10, f"{what}: {name} off by {err:.2e}")
                        err = np.abs(lse - la).max()
                        check(err < 1e-10, f"{what}: L off by {err:.2e}")

    # Bad input on one rank: the same error on every rank; shapes the ranks disagree on.
    for P, bad in ((2, 1), (3, 0)):
        def refused(r):
            x = torch.Tensor(rng.standard_normal((1, 8, 4, d)), torch.bfloat16)
            y = torch.Tensor(rng.standard_normal((1, 8, 2, d)), torch.bfloat16)
            if r == bad:
                x = torch.Tensor(x.a, torch.float32)
            return ra.ring_attention(x, y, y, causal=True)

        out = ranks(P, refused)
        msg = (f"ring attention: rank {bad}: q has dtype torch.float32; the ring takes "
               "torch.float16 or torch.bfloat16")
        check(all(isinstance(x, ra.RingError) and str(x) == msg for x in out),
              f"P {P}, bad dtype on rank {bad}: {out}")

    def disagree(r):
        x = torch.Tensor(rng.standard_normal((1, 8 + 4 * r, 4, d)), torch.bfloat16)
        return ra.ring_attention(x, x, x)

    out = ranks(2, disagree)
    msg = "ring attention: the ranks disagree on q shape: rank 0 (1, 8, 4, 8), rank 1 (1, 12, 4, 8)"
    check(all(isinstance(x, ra.RingError) and str(x) == msg for x in out), f"disagree: {out}")

    def modes(r):
        x = torch.Tensor(rng.standard_normal((1, 8, 4, d)), torch.bfloat16)
        ring = ra.RingAttention(x, x, x, causal=True)
        return [ring(x, x, x, mode=m)[1].shape for m in ("both", "compute", "send")]

    out = ranks(2, modes)
    check(all(x == [(1, 4, 8)] * 3 for x in out), f"the timing modes run: {out}")

    # The timeline ring_bench.py reads: per step, events around the compute and the send, the
    # last step without a send; its overlap() on spans it can compute by hand.
    # And the order of the streams' waits and events: at each step with a send, the
    # communication stream waits for the compute stream (the buffer it fills is free), marks the
    # send's start, waits for NCCL's work (Work.wait on that stream) and marks the arrival; the
    # compute stream marks its step and then waits for the communication stream before the next.
    def timeline(r):
        x = torch.Tensor(rng.standard_normal((1, 8, 4, d)), torch.bfloat16)
        tl = []
        ring = ra.RingAttention(x, x, x, causal=True)
        torch.trace()
        ring(x, x, x, timeline=tl)
        return [(m["compute"] is not None, m["send"] is not None) for m in tl], torch.trace()

    for P in (1, 3):
        out = ranks(P, timeline)
        want = [(True, s < P - 1) for s in range(P)]
        send = [("wait", "comm", "compute"), ("record", "comm"), ("work_wait", "comm"),
                ("record", "comm")]
        order = []
        for s in range(P):
            order += (send if s < P - 1 else []) + [("record", "compute")] * 2 + \
                ([("wait", "compute", "comm")] if s < P - 1 else [])
        check(all(x == (want, order) for x in out), f"timeline, {P} ranks: {out}")
    import ring_bench as rb

    steps = [{"compute": [0.0, 4.0], "send": [1.0, 6.0]},  # 3 of 5 ms under step 0's compute
             {"compute": [7.0, 9.0], "send": [7.5, 8.5]},  # all under step 1's
             {"compute": [10.0, 11.0], "send": None}]
    share, sent, exposed = rb.overlap(steps)
    check(abs(sent - 6.0) < 1e-12 and abs(exposed - 2.0) < 1e-12 and abs(share - 4 / 6) < 1e-12,
          f"overlap: {share}, {sent}, {exposed}")
    check(rb.overlap(steps[2:]) == (1.0, 0.0, 0.0), "overlap without sends")
    check(calls["run"] > 0 and calls["backward"] > 0 and calls["merge"] > 0, f"calls {calls}")
    print(f"check_ring_python: {passed} checks passed, {failed} failed ({calls['run']} forward, "
          f"{calls['backward']} backward calls, {calls['merge']} merges)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
