"""ring_attention — step 13: ring attention (context parallelism) over NCCL.

One long sequence is sharded over the P GPUs of a torch.distributed job (one process per GPU,
started by torchrun: steps/13_ring_attention/launch.sh). Each rank keeps its query rows; the
K/V slices travel round the ring. At step s = 0 … P-1 rank r holds the K/V slice of rank
(r - s) mod P and computes the partial (O_s, L_s) of its queries against it with a forward step
of this tutorial (09_warp_specialized by default, through the C API's fa_run), while the slice
for step s + 1 is already on its way (NCCL send/recv issued from a stream of their own, into
the other of two receive buffers). At the end the P partials of every row are merged once, in
fp32, by the C API's fa_merge: step 12's combine of its splits, the same code.

    import ring_attention as ra
    rank, ranks = ra.init()                        # torchrun's env:// rendezvous, NCCL
    q_loc = ra.shard(q, rank, ranks, "zigzag")     # [B, N, H, d] → this rank's rows
    o_loc, lse_loc = ra.ring_attention(q_loc, k_loc, v_loc, causal=True, chunks="zigzag")

What each rank computes (which pairs of chunks, masked or skipped, in how many calls) is
ring_plan.py's, a mirror of reference/ring.h checked against it on the CPU. The backward,
ring_attention_backward(), runs the same pairs with step 11 (fa_backward) and sends the fp32
dK/dV sums round the ring behind their slice.

Inputs: this rank's shard of Q, K and V, already cut by shard() (zigzag: chunks r and
2P-1-r one after the other), fp16 or bf16, d = 64 or 128, "bnhd" [B, N_loc, H, d] or "bhnd"
[B, H, N_loc, d], H_q a multiple of H_kv (GQA). Refused before anything is launched, on every
rank, with one message naming the rank, the parameter, its value and the limit (RingError):
what the ring refuses (reference/ring.h: the global N_q = P·N_loc, N_kv alike, a multiple of
P (contiguous) or 2P (zigzag); causal with N_q != N_kv), what the forward step refuses (the
C API's check, e.g. a tensor over 2^31 elements), a dtype other than fp16/bf16, a head dim other
than 64 or 128, tensors not on this process's GPU, tensors that require grad (no autograd graph
is recorded: ring_attention_backward() computes dQ, dK and dV round the same ring), and ranks
that disagree on the problem. Every rank takes part in the check (one
all_gather of each rank's verdict) before any K/V is sent, so bad input on one rank is an
error on all, never a hang; the process group's timeout bounds any wait that remains.
"""
import datetime
import os
import sys

os.environ["NCCL_NVLS_ENABLE"] = "0"  # this machine requires it; before any communicator

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
sys.path.insert(0, os.path.join(_here, "..", "..", "scripts"))
import flash_tutorial as ft  # noqa: E402
import ring_plan as rp  # noqa: E402
from ring_plan import RingError  # noqa: E402,F401  (ring_attention.RingError)

DEFAULT_STEP = "09_warp_specialized"
HEAD_DIMS = (64, 128)
_MAX_PARTS = 1024  # fa_merge's limit on partials per row: the ranks of one ring
MODES = ("both", "compute", "send")


def skip_reason(need_ranks=1):
    """Why this process cannot run the GPU programs (ring_tests.py, ring_bench.py), or None:
    no PyTorch, fewer CUDA devices than processes (WORLD_SIZE), or fewer processes than
    need_ranks. launch.sh checks the same before it starts torchrun."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < world:
        return f"{gpus} CUDA device(s), {world} process(es)"
    if world < need_ranks:
        return f"{world} process(es), {need_ranks} needed"
    return None


def init(timeout_s=120, high_priority=True):
    """Joins the job torchrun started (env:// rendezvous, NCCL backend, this process's GPU from
    LOCAL_RANK), with a timeout on every collective; returns (rank, world size). Called again,
    it returns the group already joined. high_priority: NCCL's streams are created with the
    highest CUDA stream priority, so that the GPU starts the blocks of a send as soon as an SM
    frees, before the blocks of an attention kernel still waiting for one; at the default
    priority the send's blocks wait behind every block of the kernel queued before them, and
    the send ends with the step's compute instead of under it (chapter 13 measures both;
    ring_bench.py --nccl-priority default). A job that joins its own process group gets the
    same with ProcessGroupNCCL.Options(is_high_priority_stream=True)."""
    import torch
    import torch.distributed as dist

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        options = None
        if high_priority:
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = True
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s),
                                device_id=torch.device("cuda", local), pg_options=options)
    return dist.get_rank(), dist.get_world_size()


def shard(x, rank, ranks, chunks="zigzag", dim=1):
    """Rank `rank`'s rows of the full tensor x (rows along `dim`: 1 for bnhd, 2 for bhnd): chunk
    `rank` of P (contiguous), or chunks `rank` and 2P-1-`rank` of 2P, concatenated (zigzag).
    The row count must divide as the layout needs."""
    import torch

    n = rp.num_chunks(ranks, chunks)
    if x.shape[dim] % n:
        raise RingError(f"ring attention: rows ({x.shape[dim]}) must be a multiple of {n} "
                        f"({chunks} layout over {ranks} ranks)")
    parts = x.chunk(n, dim=dim)
    return torch.cat([parts[c] for c in rp.chunks_of(rank, ranks, chunks)], dim=dim)


def unshard(shards, chunks="zigzag", dim=1):
    """The full tensor from every rank's shard (a list in rank order): shard()'s inverse."""
    import torch

    ranks = len(shards)
    per = rp.num_chunks(ranks, chunks) // ranks
    pieces = {}
    for r, s in enumerate(shards):
        for i, c in enumerate(rp.chunks_of(r, ranks, chunks)):
            pieces[c] = s.chunk(per, dim=dim)[i]
    return torch.cat([pieces[c] for c in sorted(pieces)], dim=dim)


def _group_info(group):
    import torch.distributed as dist

    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _local_error(q, k, v, causal, layout, chunks, step, ranks):
    """This rank's verdict on its inputs: None, or the message (module comment)."""
    import torch

    if layout not in ("bnhd", "bhnd"):
        return f"layout ({layout!r}) must be 'bnhd' or 'bhnd'"
    if chunks not in rp.LAYOUTS:
        return f"chunks ({chunks!r}) must be 'contiguous' or 'zigzag'"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_cuda:
            what = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            return f"{name} must be a 4-D CUDA tensor, got {what}"
        if t.device.index != torch.cuda.current_device():
            return (f"{name} is on {t.device}, this process's GPU is cuda:"
                    f"{torch.cuda.current_device()} (torch.cuda.set_device, ra.init())")
        if t.dtype not in (torch.float16, torch.bfloat16):
            return f"{name} has dtype {t.dtype}; the ring takes torch.float16 or torch.bfloat16"
        if t.dtype != q.dtype:
            return f"{name} has dtype {t.dtype}, q has {q.dtype}"
        if t.requires_grad and torch.is_grad_enabled():
            return (f"{name} requires grad: ring_attention records no autograd graph; "
                    "ring_attention_backward gives the gradients")
    if v.shape != k.shape:
        return f"v has shape {tuple(v.shape)}, k has {tuple(k.shape)}: v must be shaped like k"
    seq, heads = (1, 2) if layout == "bnhd" else (2, 1)
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        return (f"k has shape {tuple(k.shape)}, q has {tuple(q.shape)}: the batch (dim 0) and "
                f"the head dim (dim 3) must match ({layout})")
    if q.shape[3] not in HEAD_DIMS:
        return f"head_dim ({q.shape[3]}) must be 64 or 128"
    if q.shape[heads] % k.shape[heads]:
        return f"heads_q ({q.shape[heads]}) must be a multiple of heads_kv ({k.shape[heads]})"
    if ranks > _MAX_PARTS:
        return f"ranks ({ranks}) exceeds the merge's limit of {_MAX_PARTS}"
    try:  # the ring's refusals, on the global lengths
        rp.check_shape(ranks * q.shape[seq], ranks * k.shape[seq], causal, ranks, chunks)
    except RingError as e:
        return str(e).removeprefix("ring attention: ")
    # The forward step on the largest call it will get: every local row against every row of
    # a visiting slice (the C API's checks: step name, dtype, head dim, the 2^31 limit…).
    p = ft._Problem(q.shape[0], q.shape[heads], k.shape[heads], q.shape[seq], k.shape[seq],
                    q.shape[3], 0.0, int(bool(causal)), ft._DTYPES[str(q.dtype)[6:]], 0)
    try:
        ft._workspace_bytes(ft._load().fa_workspace_bytes, step, p)
    except ft.FlashTutorialError as e:
        return str(e)
    return None


def _signature(q, k, causal, layout, chunks, step, scale):
    return (tuple(q.shape), tuple(k.shape), str(q.dtype), bool(causal), layout, chunks, step,
            scale)


def _agree(error, signature, group, rank, ranks):
    """Every rank's verdict, gathered: raises RingError on every rank if any rank refused or the
    ranks disagree on the problem."""
    import torch.distributed as dist

    if ranks == 1:
        if error:
            raise RingError(f"ring attention: rank 0: {error}")
        return
    gathered = [None] * ranks
    dist.all_gather_object(gathered, (error, signature if error is None else None), group=group)
    bad = [(r, e) for r, (e, _) in enumerate(gathered) if e]
    if bad:
        raise RingError("ring attention: " + "; ".join(f"rank {r}: {e}" for r, e in bad))
    sigs = [s for _, s in gathered]
    if any(s != sigs[0] for s in sigs):
        names = ("q shape", "k shape", "dtype", "causal", "layout", "chunks", "step", "scale")
        diff = next(i for i in range(len(names)) if any(s[i] != sigs[0][i] for s in sigs))
        raise RingError("ring attention: the ranks disagree on " + names[diff] + ": " +
                        ", ".join(f"rank {r} {s[diff]}" for r, s in enumerate(sigs)))


_comm_streams = {}


class RingAttention:
    """The ring for one problem, checked on every rank and with its buffers allocated; call it
    to run (ring_attention() does both). Reusing one object for repeated calls on tensors of
    the same shape skips the check, as a benchmark does."""

    def __init__(self, q, k, v, causal=False, layout="bnhd", chunks="zigzag", scale=None,
                 step=DEFAULT_STEP, group=None):
        import torch

        self.rank, self.ranks = _group_info(group)
        self.group = group
        try:
            error = _local_error(q, k, v, causal, layout, chunks, step, self.ranks)
        except Exception as e:  # noqa: BLE001  (any failure must still reach _agree)
            error = f"{type(e).__name__}: {e}"
        _agree(error, None if error else _signature(q, k, causal, layout, chunks, step, scale),
               group, self.rank, self.ranks)
        self.causal, self.layout, self.chunks, self.step = bool(causal), layout, chunks, step
        self.scale = float(scale or 0.0)
        seq, heads = (1, 2) if layout == "bnhd" else (2, 1)
        self.batch, self.heads_q, self.heads_kv = q.shape[0], q.shape[heads], k.shape[heads]
        self.n_q, self.n_kv, self.head_dim = q.shape[seq], k.shape[seq], q.shape[3]
        self.dtype, self.device = q.dtype, q.device
        per = rp.num_chunks(self.ranks, chunks) // self.ranks
        self.cq, self.ckv = self.n_q // per, self.n_kv // per
        self.plans = [rp.plan_step(self.rank, s, self.ranks, chunks, self.causal, self.cq,
                                   self.ckv) for s in range(self.ranks)]
        lib = ft._load()
        most = 1
        for pl in self.plans:
            for c in pl.calls:
                most = max(most, ft._workspace_bytes(lib.fa_workspace_bytes, step,
                                                     self._problem(c)))
        self.workspace = torch.empty(most, device=self.device, dtype=torch.uint8)
        shape_kv = (self.batch, self.n_kv, self.heads_kv, self.head_dim)
        self.recv = [(torch.empty(shape_kv, device=self.device, dtype=self.dtype),
                      torch.empty(shape_kv, device=self.device, dtype=self.dtype))
                     for _ in range(min(2, self.ranks - 1))]
        self.o_parts = torch.empty((self.ranks, self.batch, self.n_q, self.heads_q,
                                    self.head_dim), device=self.device, dtype=self.dtype)
        self.lse_parts = torch.empty((self.ranks, self.batch, self.heads_q, self.n_q),
                                     device=self.device, dtype=torch.float32)
        if self.device not in _comm_streams:
            _comm_streams[self.device] = torch.cuda.Stream(self.device)
        self.comm = _comm_streams[self.device]

    def _problem(self, call):
        return ft._Problem(self.batch, self.heads_q, self.heads_kv, call.q1 - call.q0,
                           call.k1 - call.k0, self.head_dim, self.scale, int(call.causal),
                           ft._DTYPES[str(self.dtype)[6:]], 0)

    def _compute(self, s, k, v, stream):
        """Step s's calls on `stream`: each writes its rows' partial of slot s."""
        import torch

        lib = ft._load()
        lse = self.lse_parts[s]
        lse.fill_(float("-inf"))  # rows no call covers: an empty partial, never read
        for c in self.plans[s].calls:
            qs = self.q[:, c.q0:c.q1]
            ks, vs = k[:, c.k0:c.k1], v[:, c.k0:c.k1]
            out = self.o_parts[s][:, c.q0:c.q1]
            direct = out.is_contiguous()  # B = 1: a row range is one block of memory
            qs, ks, vs = qs.contiguous(), ks.contiguous(), vs.contiguous()
            o = out if direct else torch.empty_like(qs)
            part_lse = torch.empty((self.batch, self.heads_q, c.q1 - c.q0), device=self.device,
                                   dtype=torch.float32)
            p = self._problem(c)
            ft._check(lib.fa_run(self.step.encode(), ft.ctypes.byref(p), qs.data_ptr(),
                                 ks.data_ptr(), vs.data_ptr(), o.data_ptr(), part_lse.data_ptr(),
                                 self.workspace.data_ptr(), self.workspace.numel(),
                                 stream.cuda_stream))
            if not direct:
                out.copy_(o)
            lse[:, :, c.q0:c.q1].copy_(part_lse)

    def __call__(self, q, k, v, mode="both", timeline=None):
        """O and L of this rank's rows (O like q, L fp32 [B, H_q, N_loc]). mode "compute" skips
        the sends (every step reads this rank's own slice: wrong values, the same kernels) and
        "send" skips the compute (O and L are then not computed): both only to time the parts
        apart (ring_bench.py). `timeline`, a list, receives one entry per step: CUDA events
        (enabled for timing) around the step's compute on the compute stream ("compute") and
        around its send and receive on the communication stream ("send", None at the last step),
        recorded where they run, so that ring_bench.py can see when each stream was busy."""
        import torch
        import torch.distributed as dist

        def event(stream):
            e = torch.cuda.Event(enable_timing=True)
            e.record(stream)
            return e

        if mode not in MODES:
            raise ValueError(f"mode ({mode!r}) must be one of {MODES}")
        if self.layout == "bhnd":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        want_q = (self.batch, self.n_q, self.heads_q, self.head_dim)
        want_kv = (self.batch, self.n_kv, self.heads_kv, self.head_dim)
        got = (tuple(q.shape), tuple(k.shape), tuple(v.shape))
        if got != (want_q, want_kv, want_kv) or {t.dtype for t in (q, k, v)} != {self.dtype}:
            raise RingError(f"ring attention: q, k, v {got} are not the shapes (bnhd) this ring "
                            f"was prepared for {(want_q, want_kv, want_kv)} in {self.dtype}")
        self.q = q.contiguous()
        cur = (k.contiguous(), v.contiguous())
        compute = torch.cuda.current_stream(self.device)
        nxt_rank, prev_rank = (self.rank + 1) % self.ranks, (self.rank - 1) % self.ranks
        if self.group is not None:
            nxt_rank = dist.get_global_rank(self.group, nxt_rank)
            prev_rank = dist.get_global_rank(self.group, prev_rank)
        for s in range(self.ranks):
            sending = s < self.ranks - 1 and mode != "compute"
            marks = {"compute": None, "send": None}
            if sending:
                nxt = self.recv[s % 2]
                self.comm.wait_stream(compute)  # step s-1 no longer reads the buffer we fill
                with torch.cuda.stream(self.comm):  # NCCL's stream waits for this one
                    sent0 = event(self.comm) if timeline is not None else None
                    ops = [dist.P2POp(dist.isend, cur[0], nxt_rank, self.group),
                           dist.P2POp(dist.isend, cur[1], nxt_rank, self.group),
                           dist.P2POp(dist.irecv, nxt[0], prev_rank, self.group),
                           dist.P2POp(dist.irecv, nxt[1], prev_rank, self.group)]
                    for r in dist.batch_isend_irecv(ops):
                        r.wait()  # this stream waits for NCCL's: the slice has arrived
                    if timeline is not None:
                        marks["send"] = (sent0, event(self.comm))
            if mode != "send":
                start = event(compute) if timeline is not None else None
                self._compute(s, cur[0], cur[1], compute)
                if timeline is not None:
                    marks["compute"] = (start, event(compute))
            if timeline is not None:
                timeline.append(marks)
            if sending:
                compute.wait_stream(self.comm)  # step s + 1 reads the slice just received
                cur = nxt
        o = torch.empty_like(self.q)
        lse = torch.empty((self.batch, self.heads_q, self.n_q), device=self.device,
                          dtype=torch.float32)
        if mode != "send":
            ft.merge(self.o_parts, self.lse_parts, out=(o, lse), layout="bnhd")
        if self.layout == "bhnd":
            o = o.transpose(1, 2)
        return o, lse


def ring_attention(q, k, v, causal=False, layout="bnhd", chunks="zigzag", scale=None,
                   step=DEFAULT_STEP, group=None):
    """This rank's O (shaped like q) and L (fp32 [B, H_q, N_loc]) of ring attention over the
    ranks of `group` (the default group when None; one process alone without torch.distributed)
    on its shard q, k, v (module comment). `chunks` is the layout the shards were cut in
    (shard()), `step` the forward step each pair runs."""
    return RingAttention(q, k, v, causal, layout, chunks, scale, step, group)(q, k, v)


DEFAULT_BACKWARD_STEP = "11_backward_tc"


def ring_attention_backward(q, k, v, o, lse, d_o, causal=False, layout="bnhd", chunks="zigzag",
                            scale=None, step=DEFAULT_BACKWARD_STEP, group=None):
    """dQ, dK and dV of this rank's shard (in the dtype and layout of q, k, v) from the forward's
    O and L (ring_attention's, for this rank's rows) and dO, over the ranks of `group`.

    The backward step (11_backward_tc by default, through the C API's fa_backward) runs on the
    same pairs as the forward (ring_plan.plan_step), each given the rows' final O and L, so
    every pair's dS = P ∘ (dP − D) is exact (D = rowsum(dO ∘ O)) and the pairs' gradients add
    up. dQ sums in fp32 on the rank that owns the rows; the K/V slice travels round the ring as
    in the forward (its send hidden under the step's compute), and its fp32 dK/dV sums travel
    with it, one step behind: after each step the rank passes the sums it added to on, and after
    the last step they make one more hop home. Inputs are refused as by ring_attention (on every
    rank, before anything is sent); o and d_o must be shaped like q, lse fp32 [B, H_q, N_loc]."""
    import torch
    import torch.distributed as dist

    rank, ranks = _group_info(group)
    seq, heads = (1, 2) if layout == "bnhd" else (2, 1)
    try:
        error = _local_error(q, k, v, causal, layout, chunks, DEFAULT_STEP, ranks)
        if error is None:
            for name, t in (("o", o), ("d_o", d_o)):
                if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(q.shape) or \
                        t.dtype != q.dtype or t.device != q.device:
                    error = f"{name} must be shaped like q {tuple(q.shape)} {q.dtype} on {q.device}"
            want = (q.shape[0], q.shape[heads], q.shape[seq])
            if error is None and (not isinstance(lse, torch.Tensor) or
                                  tuple(lse.shape) != want or lse.dtype != torch.float32 or
                                  lse.device != q.device):
                error = f"lse must be {want} torch.float32 on {q.device}"
        if error is None:
            p = ft._Problem(q.shape[0], q.shape[heads], k.shape[heads], q.shape[seq],
                            k.shape[seq], q.shape[3], float(scale or 0.0), int(bool(causal)),
                            ft._DTYPES[str(q.dtype)[6:]], 0)
            try:
                ft._workspace_bytes(ft._load().fa_backward_workspace_bytes, step, p)
            except ft.FlashTutorialError as e:
                error = str(e)
    except Exception as e:  # noqa: BLE001  (any failure must still reach _agree)
        error = f"{type(e).__name__}: {e}"
    _agree(error, None if error else
           _signature(q, k, causal, layout, chunks, step, scale) + (tuple(lse.shape),),
           group, rank, ranks)

    if layout == "bhnd":
        q, k, v, o, d_o = (t.transpose(1, 2) for t in (q, k, v, o, d_o))
    q, k, v, o, d_o, lse = (t.contiguous() for t in (q, k, v, o, d_o, lse))
    b, n_q, hq, d = q.shape
    n_kv, hkv = k.shape[1], k.shape[2]
    per = rp.num_chunks(ranks, chunks) // ranks
    plans = [rp.plan_step(rank, s, ranks, chunks, bool(causal), n_q // per, n_kv // per)
             for s in range(ranks)]
    lib = ft._load()
    code = ft._DTYPES[str(q.dtype)[6:]]

    def problem(c):
        return ft._Problem(b, hq, hkv, c.q1 - c.q0, c.k1 - c.k0, d, float(scale or 0.0),
                           int(c.causal), code, 0)

    most = max([1] + [ft._workspace_bytes(lib.fa_backward_workspace_bytes, step, problem(c))
                      for pl in plans for c in pl.calls])
    work = torch.empty(most, device=q.device, dtype=torch.uint8)
    compute = torch.cuda.current_stream(q.device)
    if q.device not in _comm_streams:
        _comm_streams[q.device] = torch.cuda.Stream(q.device)
    comm = _comm_streams[q.device]
    nxt_rank, prev_rank = (rank + 1) % ranks, (rank - 1) % ranks
    if group is not None:
        nxt_rank = dist.get_global_rank(group, nxt_rank)
        prev_rank = dist.get_global_rank(group, prev_rank)

    def exchange(send, recv):
        """Sends `send` to the next rank, receives `recv` from the previous one (NCCL's stream
        after everything queued on the compute stream); returns the requests."""
        comm.wait_stream(compute)
        with torch.cuda.stream(comm):
            ops = [dist.P2POp(dist.isend, t, nxt_rank, group) for t in send] + \
                  [dist.P2POp(dist.irecv, t, prev_rank, group) for t in recv]
            return dist.batch_isend_irecv(ops)

    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    cur = (k, v)
    grads = (torch.zeros(k.shape, device=q.device, dtype=torch.float32),
             torch.zeros(k.shape, device=q.device, dtype=torch.float32))
    spare = [(torch.empty_like(k), torch.empty_like(v)) for _ in range(min(2, ranks - 1))]
    spare_grads = tuple(torch.empty_like(g) for g in grads) if ranks > 1 else None
    for s in range(ranks):
        reqs = []
        if s < ranks - 1:  # the next K/V slice, under this step's compute
            nxt = spare[s % 2]
            reqs = exchange(cur, nxt)
        for c in plans[s].calls:
            rows, cols = slice(c.q0, c.q1), slice(c.k0, c.k1)
            qs, os_, dos = (t[:, rows].contiguous() for t in (q, o, d_o))
            ks, vs = (t[:, cols].contiguous() for t in cur)
            ls = lse[:, :, rows].contiguous()
            dqs, dks, dvs = torch.empty_like(qs), torch.empty_like(ks), torch.empty_like(vs)
            pr = problem(c)
            ft._check(lib.fa_backward(step.encode(), ft.ctypes.byref(pr), qs.data_ptr(),
                                      ks.data_ptr(), vs.data_ptr(), os_.data_ptr(), ls.data_ptr(),
                                      dos.data_ptr(), dqs.data_ptr(), dks.data_ptr(),
                                      dvs.data_ptr(), work.data_ptr(), work.numel(),
                                      compute.cuda_stream))
            dq[:, rows] += dqs.float()
            grads[0][:, cols] += dks.float()
            grads[1][:, cols] += dvs.float()
        for r in reqs:
            r.wait()
        if ranks > 1:  # the sums travel on with their slice (after the last step: home)
            for r in exchange(grads, spare_grads):
                r.wait()
            grads, spare_grads = spare_grads, grads
        if reqs:
            cur = nxt
    dq, dk, dv = dq.to(q.dtype), grads[0].to(k.dtype), grads[1].to(v.dtype)
    if layout == "bhnd":
        dq, dk, dv = (t.transpose(1, 2) for t in (dq, dk, dv))
    return dq, dk, dv
