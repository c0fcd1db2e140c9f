"""ring_plan — what each rank of the ring computes, and the ring's time model; no GPU, no torch.

A Python mirror of reference/ring.{h,cpp} (the CPU simulation the GPU step must match), checked
against it by tests/check_ring_plan.py through bin/ring_dump:

  * the layouts: contiguous (P chunks of C = N/P rows, rank r holds chunk r) and zigzag (2P
    chunks of C = N/(2P), rank r holds chunks r and 2P-1-r), the same chunks for Q and K/V;
  * the causal relation of a (q chunk, kv chunk) pair: "full" (kv chunk first), "diagonal"
    (the same chunk: causal within the pair), "hidden" (kv chunk later: skipped); unmasked,
    every pair is full;
  * the work (visible score entries, summed over batch and query heads) of every rank at every
    step, and the time model ring_time / ring_min_hidden_n;

and what only the GPU step needs: plan_step(), the forward calls of one step, which cover every
visible pair exactly once with the fewest calls (each call a rectangle of local Q rows against
local K/V rows of the visiting slice, causal or not). A rank's local rows are its chunks in
order, so zigzag rank r's rows are chunk r, then chunk 2P-1-r.
"""
from dataclasses import dataclass, field

LAYOUTS = ("contiguous", "zigzag")
FULL, DIAGONAL, HIDDEN = "full", "diagonal", "hidden"
_DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "fp32": 4, "fp16": 2, "bf16": 2}


class RingError(ValueError):
    """A problem the ring cannot run: the message names the parameter, its value and the limit
    (the same text as reference/ring.cpp's refusals)."""


def _refuse(what):
    raise RingError("ring attention: " + what)


def num_chunks(ranks, layout):
    """Chunks the sequence is cut into: P (contiguous) or 2P (zigzag)."""
    if layout not in LAYOUTS:
        raise RingError(f"ring attention: layout ({layout!r}) must be 'contiguous' or 'zigzag'")
    return 2 * ranks if layout == "zigzag" else ranks


def check_shape(n_q, n_kv, causal, ranks, layout):
    """The ring's own refusals (reference/ring.cpp, check_shape), in its order and words."""
    if ranks < 1:
        _refuse(f"ranks ({ranks}) must be at least 1")
    if causal and n_q != n_kv:
        _refuse(f"causal needs N_q = N_kv; got N_q {n_q}, N_kv {n_kv}")
    chunks = num_chunks(ranks, layout)
    limit = (f"2·ranks ({chunks}) for the zigzag layout" if layout == "zigzag"
             else f"ranks ({chunks}) for the contiguous layout")
    if n_q < 1 or n_q % chunks:
        _refuse(f"N_q ({n_q}) must be a positive multiple of {limit}")
    if n_kv < 1 or n_kv % chunks:
        _refuse(f"N_kv ({n_kv}) must be a positive multiple of {limit}")


def chunks_of(rank, ranks, layout):
    """The chunks rank `rank` holds, in the order of its local rows."""
    return [rank] if layout == "contiguous" else [rank, 2 * ranks - 1 - rank]


def source(rank, step, ranks):
    """Whose K/V slice rank `rank` holds at step `step`: (rank - step) mod P."""
    return (rank - step) % ranks


def relation(causal, q_chunk, kv_chunk):
    """"full", "diagonal" or "hidden" (module comment)."""
    if not causal or kv_chunk < q_chunk:
        return FULL
    return DIAGONAL if kv_chunk == q_chunk else HIDDEN


def pair_entries(rel, cq, ckv):
    """Visible score entries of one pair, for one (batch, query head)."""
    return {FULL: cq * ckv, DIAGONAL: cq * (cq + 1) // 2, HIDDEN: 0}[rel]


def ring_work(batch, heads_q, n_q, n_kv, causal, ranks, layout):
    """work[r][s]: the visible entries rank r computes at step s (reference ring_work)."""
    check_shape(n_q, n_kv, causal, ranks, layout)
    n = num_chunks(ranks, layout)
    cq, ckv = n_q // n, n_kv // n
    work = [[0] * ranks for _ in range(ranks)]
    for r in range(ranks):
        for s in range(ranks):
            src = source(r, s, ranks)
            for qc in chunks_of(r, ranks, layout):
                for kc in chunks_of(src, ranks, layout):
                    work[r][s] += batch * heads_q * pair_entries(relation(causal, qc, kc), cq, ckv)
    return work


@dataclass(frozen=True)
class Call:
    """One forward call of a step: local Q rows [q0, q1) against rows [k0, k1) of the visiting
    K/V slice, with the causal mask within the rectangle (then square and diagonal) or not."""
    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool


@dataclass
class StepPlan:
    """The calls of one step of one rank, and the pairs they cover."""
    source: int                                # whose K/V slice visits
    calls: list = field(default_factory=list)  # [Call]
    pairs: dict = field(default_factory=dict)  # (q chunk, kv chunk) -> relation, hidden too


def plan_step(rank, step, ranks, layout, causal, chunk_rows, kv_chunk_rows=None):
    """The forward calls of step `step` of rank `rank` (module comment), for chunks of
    chunk_rows query rows and kv_chunk_rows K/V rows (the same when None; causal needs them
    equal). Rules, in order:

    * every pair hidden: no call (the rows get an empty partial, L = -inf);
    * the pairs are exactly the causal pattern of the local order (pair (a, b) of local
      chunks diagonal when a = b, full when b < a, hidden when b > a): one causal call over
      all local rows (zigzag's first step; a lone diagonal chunk);
    * otherwise each q chunk's visible kv chunks must all be full and consecutive in the
      local order: one call per run of q chunks that see the same kv chunks.

    Any other pattern raises RuntimeError: the layouts here never give one (the CPU tests
    check every rank and step up to P = 16)."""
    kv_rows = chunk_rows if kv_chunk_rows is None else kv_chunk_rows
    if causal and kv_rows != chunk_rows:
        raise RingError(f"ring attention: causal needs N_q = N_kv; got chunks of {chunk_rows} "
                        f"and {kv_rows} rows")
    src = source(rank, step, ranks)
    qcs, kcs = chunks_of(rank, ranks, layout), chunks_of(src, ranks, layout)
    plan = StepPlan(src)
    rel = {(a, b): relation(causal, qc, kc)
           for a, qc in enumerate(qcs) for b, kc in enumerate(kcs)}
    plan.pairs = {(qcs[a], kcs[b]): r for (a, b), r in rel.items()}
    if all(r == HIDDEN for r in rel.values()):
        return plan
    local_causal = {(a, b): DIAGONAL if a == b else FULL if b < a else HIDDEN for (a, b) in rel}
    if len(qcs) == len(kcs) and rel == local_causal and causal:
        n = len(qcs) * chunk_rows
        plan.calls.append(Call(0, n, 0, n, True))
        return plan
    seen = []  # (q chunk index, (first kv index, last kv index + 1))
    for a in range(len(qcs)):
        vis = [b for b in range(len(kcs)) if rel[(a, b)] != HIDDEN]
        if not vis:
            continue
        if any(rel[(a, b)] != FULL for b in vis) or vis != list(range(vis[0], vis[-1] + 1)):
            raise RuntimeError(f"ring plan: rank {rank} step {step}: q chunk {qcs[a]} sees "
                               f"{[(kcs[b], rel[(a, b)]) for b in vis]}, not one full run")
        seen.append((a, (vis[0], vis[-1] + 1)))
    i = 0
    while i < len(seen):  # runs of consecutive q chunks with the same kv run: one call each
        j = i
        while j + 1 < len(seen) and seen[j + 1][0] == seen[j][0] + 1 and seen[j + 1][1] == seen[i][1]:
            j += 1
        (a0, (b0, b1)), a1 = seen[i], seen[j][0] + 1
        plan.calls.append(Call(a0 * chunk_rows, a1 * chunk_rows, b0 * kv_rows, b1 * kv_rows,
                               False))
        i = j + 1
    return plan


def call_entries(call):
    """Visible entries of one call, per (batch, query head)."""
    rows, cols = call.q1 - call.q0, call.k1 - call.k0
    return rows * (rows + 1) // 2 if call.causal else rows * cols


# ---------------------------------------------------------------------------------------------
# The time model (reference ring_time, ring_min_hidden_n)
# ---------------------------------------------------------------------------------------------

@dataclass
class RingTime:
    """reference/ring.h's RingTime."""
    step_s: list
    total_s: float
    compute_s: float
    send_s: float
    hidden_fraction: float
    exposed_steps: int


def ring_time(batch, heads_q, heads_kv, n, head_dim, dtype, causal, ranks, layout,
              flops_per_s, bytes_per_s):
    """The ring in lockstep (reference ring_time): step s takes max(compute_s, send) (the last,
    compute_s), compute_s = 4·d·(busiest rank's work) / flops_per_s, send = one K and one V
    slice, 2·B·H_kv·(N/P)·d·e bytes / bytes_per_s; N_q = N_kv = n."""
    if not flops_per_s > 0:
        _refuse(f"flops_per_s ({flops_per_s:f}) must be positive")
    if not bytes_per_s > 0:
        _refuse(f"bytes_per_s ({bytes_per_s:f}) must be positive")
    work = ring_work(batch, heads_q, n, n, causal, ranks, layout)
    send = 2.0 * batch * heads_kv * (n / ranks) * head_dim * _DTYPE_SIZE[dtype] / bytes_per_s
    steps, compute_sum, hidden, exposed = [], 0.0, 0.0, 0
    for s in range(ranks):
        compute = 4.0 * head_dim * max(work[r][s] for r in range(ranks)) / flops_per_s
        compute_sum += compute
        sends = s < ranks - 1
        steps.append(max(compute, send) if sends else compute)
        if sends:
            hidden += min(compute, send)
            exposed += compute < send
    sent = (ranks - 1) * send
    return RingTime(steps, sum(steps), compute_sum, send, hidden / sent if sent > 0 else 1.0,
                    exposed)


def ring_min_hidden_n(batch, heads_q, heads_kv, head_dim, dtype, causal, ranks, layout,
                      flops_per_s, bytes_per_s):
    """The smallest N (a multiple of the chunk count, at most 2^30) at which no step's
    communication shows (reference ring_min_hidden_n)."""
    granule = num_chunks(max(ranks, 1), layout)
    most = 1 << 30

    def hides(m):
        return ring_time(batch, heads_q, heads_kv, m * granule, head_dim, dtype, causal, ranks,
                         layout, flops_per_s, bytes_per_s).exposed_steps == 0

    lo, hi = 0, most // granule
    if not hides(hi):
        _refuse(f"communication does not hide for any N up to {most} (flops_per_s "
                f"{flops_per_s:f}, bytes_per_s {bytes_per_s:f})")
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if hides(mid):
            hi = mid
        else:
            lo = mid
    return hi * granule


def calibrate(compute_s, flops, send_s, send_bytes):
    """The model's two constants from measurements: a rank's throughput (FLOPs of its busiest
    path / the compute-alone time) and the link's bandwidth (bytes of one slice / the time of
    one send alone). Returns (flops_per_s, bytes_per_s)."""
    if not (compute_s > 0 and send_s > 0):
        raise ValueError(f"calibrate: times must be positive (compute_s {compute_s}, "
                         f"send_s {send_s})")
    return flops / compute_s, send_bytes / send_s
