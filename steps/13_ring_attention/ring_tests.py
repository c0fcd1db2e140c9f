#!/usr/bin/env python3
"""ring_tests.py — step 13's GPU tests, one process per GPU (run it with launch.sh, which starts
torchrun; with one process it tests the P = 1 path on one GPU).

  merge     fa_merge against a float64 merge in PyTorch: 1, 2 and 5 partials, both layouts,
            fp16/bf16, d = 64/128, with empty partials (L = -inf, O full of NaN: never read)
            and a row whose every partial is empty (O = 0, L = -inf)
  ring      the gathered O and L of the ring against a float64 reference, judged by the
            tolerance policy of docs/conventions.md with the single-GPU step as the
            yardstick: rel_err <= 1e-3 + 2 * step's rel_err, max_abs <= 1e-3 + 2 * step's
            max_abs + one ulp of the dtype (O), the same without the ulp for L; every case
            of bf16/fp16 x d 64/128 x causal or not x contiguous/zigzag, MHA and GQA, N = 2P·k
            with chunks that are no multiple of a tile; both tensor layouts and B = 2
  backward  ring_attention_backward's gathered dQ, dK, dV against float64 autograd, judged by
            the same rule with the single-GPU backward step (11_backward_tc) as the yardstick,
            on the ring's own O and L: bf16/fp16, d = 64/128, causal or not, both chunk
            layouts, GQA, both tensor layouts
  refusals  bad input on one rank only (a dtype, a length, shapes the ranks disagree on, a head
            dim, causal with N_q != N_kv, gradients) raises RingError naming that rank on
            EVERY rank, before anything is sent; the ring runs afterwards as before

Exit status: 0 all passed, 1 a failure (on every rank), 77 skipped (no PyTorch, no CUDA
device, fewer GPUs than processes, or --need-ranks above the processes started).

    launch.sh --nproc 2 ring_tests.py [--groups merge,ring,refusals]
"""
import argparse
import math
import os
import sys

SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", default="merge,ring,refusals,backward",
                    help="comma-separated: merge, ring, refusals, backward (default: all)")
    ap.add_argument("--need-ranks", type=int, default=1,
                    help="skip (77) unless at least this many processes run (default 1)")
    args = ap.parse_args()
    groups = set(args.groups.split(","))
    if not groups <= {"merge", "ring", "refusals", "backward"}:
        print(f"ring_tests.py: error: --groups: {args.groups} not in merge,ring,refusals,backward",
              file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ring_attention as ra

    reason = ra.skip_reason(args.need_ranks)
    if reason:
        print(f"SKIPPED: {reason}")
        return SKIP
    import torch
    import torch.distributed as dist

    rank, ranks = ra.init()
    t = Tester(rank, ranks)
    if "merge" in groups:
        t.merge()
    if "ring" in groups:
        t.ring()
    if "refusals" in groups:
        t.refusals()
    if "backward" in groups:
        t.backward()
    failed = torch.tensor([t.failed], device="cuda")
    dist.all_reduce(failed)  # every rank exits with the same status
    if rank == 0:
        print(f"ring_tests: P = {ranks}: {t.passed} checks passed on rank 0, "
              f"{int(failed.item())} failed over all ranks")
    dist.destroy_process_group()
    return 1 if failed.item() else 0


class Tester:
    def __init__(self, rank, ranks):
        self.rank, self.ranks = rank, ranks
        self.passed = self.failed = 0

    def check(self, ok, what):
        self.passed += bool(ok)
        self.failed += not ok
        if not ok or self.rank == 0:
            print(f"[rank {self.rank}] {'ok  ' if ok else 'FAIL'}  {what}", flush=True)

    # -----------------------------------------------------------------------------------------
    def merge(self):
        import torch
        import flash_tutorial as ft

        g = torch.Generator(device="cpu").manual_seed(7)
        for parts in (1, 2, 5):
            for layout in ("bnhd", "bhnd"):
                for dtype in (torch.float16, torch.bfloat16):
                    for d in (64, 128):
                        b, h, rows = 2, 3, 37
                        lse = torch.randn(parts, b, h, rows, generator=g) * 4
                        if parts > 1:
                            lse[1, :, :, ::3] = float("-inf")  # empty partials
                        lse[:, 0, 0, 5] = float("-inf")        # a row with no key at all
                        shape = (parts, b, h, rows, d) if layout == "bhnd" else \
                            (parts, b, rows, h, d)
                        o = torch.randn(shape, generator=g).to(dtype)
                        o_bhnd = o if layout == "bhnd" else o.transpose(2, 3)
                        o_bhnd[torch.isinf(lse)] = float("nan")  # never read
                        lse_c, o_c = lse.cuda(), o.cuda()
                        got_o, got_l = ft.merge(o_c, lse_c, layout=layout)
                        # float64 reference
                        m = lse.double().amax(0)
                        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
                        w = torch.exp(lse.double() - m_safe)
                        s = w.sum(0)
                        ref_l = torch.where(s > 0, m_safe + torch.log(s),
                                            torch.full_like(s, float("-inf")))
                        wn = torch.where(s > 0, w / s, torch.zeros_like(w))
                        ob = torch.nan_to_num(o_bhnd.double(), nan=0.0)
                        ref_o = (wn[..., None] * ob).sum(0)
                        got_ob = got_o.cpu().double()
                        if layout == "bnhd":
                            got_ob = got_ob.transpose(1, 2)
                        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
                        err_o = (got_ob - ref_o).abs().max().item()
                        tol_o = ulp * max(1.0, ref_o.abs().max().item()) + 1e-5
                        fin = torch.isfinite(ref_l)
                        gl = got_l.cpu().double()
                        ok_l = bool((torch.isinf(gl) == ~fin).all()) and \
                            (gl[fin] - ref_l[fin]).abs().max().item() <= 1e-5 * max(
                                1.0, ref_l[fin].abs().max().item())
                        self.check(err_o <= tol_o and ok_l and not torch.isnan(got_ob).any() and
                                   got_ob[0, 0, 5].abs().max().item() == 0.0,
                                   f"merge: {parts} partials {layout} {dtype} d={d}: O max err "
                                   f"{err_o:.2e} (limit {tol_o:.2e}), L ok {ok_l}")
        # Its refusals, through the C API.
        o = torch.zeros(2, 1, 1, 8, 64, device="cuda", dtype=torch.float32)
        try:
            ft.merge(o, torch.zeros(2, 1, 1, 8, device="cuda"))
            self.check(False, "merge refuses fp32 partials")
        except ValueError as e:  # the wrapper has no code for float32 partials
            self.check("must be float16 or bfloat16" in str(e) or "float32" in str(e), str(e))
        except ft.FlashTutorialError as e:
            self.check("dtype (fp32) is not supported by the merge" in str(e), str(e))
        o = torch.zeros(2, 1, 1, 8, 96, device="cuda", dtype=torch.bfloat16)
        try:
            ft.merge(o, torch.zeros(2, 1, 1, 8, device="cuda"))
            self.check(False, "merge refuses d = 96")
        except ft.FlashTutorialError as e:
            self.check("head_dim (96) is not supported by the merge (supported: 64 128)" in str(e),
                       f"merge refuses d = 96: {e}")

    # -----------------------------------------------------------------------------------------
    def ring(self):
        import torch
        import torch.distributed as dist
        import flash_tutorial as ft
        import ring_attention as ra

        P = self.ranks
        cases = []
        for dtype in (torch.bfloat16, torch.float16):
            for d in (64, 128):
                for causal in (False, True):
                    for chunks in ("contiguous", "zigzag"):
                        for hq, hkv in ((4, 4), (4, 2)):
                            n = 2 * P * 97
                            cases.append((1, hq, hkv, n, n, d, dtype, causal, chunks, "bnhd"))
        cases += [(2, 4, 1, 2 * P * 64, 2 * P * 64, 128, torch.bfloat16, True, "zigzag", "bhnd"),
                  (2, 2, 2, 2 * P * 50, 2 * P * 50, 64, torch.float16, False, "contiguous",
                   "bhnd"),
                  (1, 4, 2, 2 * P * 40, 2 * P * 72, 64, torch.bfloat16, False, "zigzag", "bnhd"),
                  (1, 8, 2, 2 * P * 1024, 2 * P * 1024, 128, torch.bfloat16, True, "zigzag",
                   "bnhd"),
                  (1, 8, 8, 2 * P * 1024, 2 * P * 1024, 128, torch.bfloat16, True, "contiguous",
                   "bnhd")]
        for i, (b, hq, hkv, n, n_kv, d, dtype, causal, chunks, layout) in enumerate(cases):
            g = torch.Generator(device="cpu").manual_seed(1000 + i)
            seq = 1 if layout == "bnhd" else 2
            shape_q = (b, n, hq, d) if layout == "bnhd" else (b, hq, n, d)
            shape_kv = (b, n_kv, hkv, d) if layout == "bnhd" else (b, hkv, n_kv, d)
            q = torch.randn(shape_q, generator=g).to(dtype).cuda()
            k = torch.randn(shape_kv, generator=g).to(dtype).cuda()
            v = torch.randn(shape_kv, generator=g).to(dtype).cuda()
            loc = [ra.shard(x, self.rank, P, chunks, dim=seq) for x in (q, k, v)]
            o_loc, l_loc = ra.ring_attention(*loc, causal=causal, layout=layout, chunks=chunks)
            o_all = [torch.empty_like(o_loc.contiguous()) for _ in range(P)]
            l_all = [torch.empty_like(l_loc) for _ in range(P)]
            dist.all_gather(o_all, o_loc.contiguous())
            dist.all_gather(l_all, l_loc)
            o = ra.unshard(o_all, chunks, dim=seq)
            lse = ra.unshard(l_all, chunks, dim=2)
            # The single-GPU step on the whole problem: the yardstick.
            o_step, l_step = ft.attention(q, k, v, step=ra.DEFAULT_STEP, causal=causal,
                                          layout=layout)
            tq, tk, tv = (x if layout == "bhnd" else x.transpose(1, 2) for x in (q, k, v))
            ref_o, ref_l = reference(tq, tk, tv, causal)
            bh = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(1, 2))
            verdict = judge(bh(o), lse, bh(o_step), l_step, ref_o, ref_l, dtype)
            self.check(verdict[0], f"ring P={P} B={b} H={hq}/{hkv} N={n}/{n_kv} d={d} {dtype} "
                                   f"{'causal' if causal else 'full'} {chunks} {layout}: "
                                   f"{verdict[1]}")

    # -----------------------------------------------------------------------------------------
    def refusals(self):
        import torch
        import ring_attention as ra

        P, last = self.ranks, self.ranks - 1
        n_loc, d = 128, 64

        def tensors(n=n_loc, hq=4, hkv=2, dt=torch.bfloat16, dim=d):
            return (torch.randn(1, n, hq, dim, device="cuda", dtype=dt),
                    torch.randn(1, n, hkv, dim, device="cuda", dtype=dt),
                    torch.randn(1, n, hkv, dim, device="cuda", dtype=dt))

        def expect(what, args, kwargs, *words):
            try:
                ra.ring_attention(*args, **kwargs)
                self.check(False, f"refusal '{what}': no error raised")
            except ra.RingError as e:
                msg = str(e)
                self.check(all(w in msg for w in words), f"refusal '{what}': {msg}")

        odd = self.rank == last  # the rank that gets the bad input
        q, k, v = tensors()
        bad_q = q.float() if odd else q
        expect("fp32 on the last rank", (bad_q, k, v), {}, f"rank {last}:", "torch.float32",
               "torch.float16 or torch.bfloat16")
        if P == 1:
            q2, k2, v2 = tensors(n=n_loc + 1)
            expect("N not a multiple of 2P", (q2, k2, v2), {"causal": True}, "rank 0:",
                   f"N_q ({n_loc + 1}) must be a positive multiple of 2·ranks (2) for the "
                   "zigzag layout")
        else:  # the last rank's shard is 2 rows longer: valid alone, not with the others
            q2, k2, v2 = tensors(n=n_loc + 2 if odd else n_loc)
            expect("a length the ranks disagree on", (q2, k2, v2), {"causal": True},
                   "the ranks disagree on q shape")
            q3, k3, v3 = tensors(n=n_loc + 1)  # every rank: odd local N, global P·(N+1)
            expect("N not a multiple of 2P", (q3, k3, v3), {"causal": True}, "rank 0:",
                   f"N_q ({P * (n_loc + 1)}) must be a positive multiple of 2·ranks ({2 * P}) "
                   "for the zigzag layout")
        q4, k4, v4 = tensors(dim=96)
        expect("d = 96", (q4, k4, v4), {}, "head_dim (96) must be 64 or 128")
        q5, _, _ = tensors(n=2 * n_loc)
        expect("causal with N_q != N_kv", (q5, k, v), {"causal": True},
               f"causal needs N_q = N_kv; got N_q {2 * n_loc * P}, N_kv {n_loc * P}")
        expect("an unknown chunk layout", (q, k, v), {"chunks": "striped"},
               "chunks ('striped') must be 'contiguous' or 'zigzag'")
        qg = q.clone().requires_grad_(odd)
        expect("gradients", (qg, k, v), {}, f"rank {last}:", "ring_attention_backward")
        q6, k6, v6 = tensors(hq=3)
        expect("heads", (q6, k6, v6), {}, "heads_q (3) must be a multiple of heads_kv (2)")
        # The ring still runs, as before, after every refusal.
        o, lse = ra.ring_attention(q, k, v, causal=True)
        self.check(bool(torch.isfinite(o.float()).all()) and bool(torch.isfinite(lse).all()),
                   "after the refusals the ring runs")


def _backward(self):
    import torch
    import torch.distributed as dist
    import flash_tutorial as ft
    import ring_attention as ra

    P = self.ranks
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for causal in (False, True):
                for chunks in ("contiguous", "zigzag"):
                    cases.append((1, 4, 2, 2 * P * 96, d, dtype, causal, chunks, "bnhd"))
    cases += [(2, 4, 4, 2 * P * 64, 64, torch.bfloat16, True, "zigzag", "bhnd")]
    for i, (b, hq, hkv, n, d, dtype, causal, chunks, layout) in enumerate(cases):
        g = torch.Generator(device="cpu").manual_seed(5000 + i)
        seq = 1 if layout == "bnhd" else 2
        shape_q = (b, n, hq, d) if layout == "bnhd" else (b, hq, n, d)
        shape_kv = (b, n, hkv, d) if layout == "bnhd" else (b, hkv, n, d)
        q = torch.randn(shape_q, generator=g).to(dtype).cuda()
        k = torch.randn(shape_kv, generator=g).to(dtype).cuda()
        v = torch.randn(shape_kv, generator=g).to(dtype).cuda()
        d_o = torch.randn(shape_q, generator=g).to(dtype).cuda()
        loc = [ra.shard(x, self.rank, P, chunks, dim=seq) for x in (q, k, v, d_o)]
        o_loc, l_loc = ra.ring_attention(*loc[:3], causal=causal, layout=layout, chunks=chunks)
        grads = ra.ring_attention_backward(*loc[:3], o_loc, l_loc, loc[3], causal=causal,
                                           layout=layout, chunks=chunks)
        got = []
        for x in grads:
            parts = [torch.empty_like(x.contiguous()) for _ in range(P)]
            dist.all_gather(parts, x.contiguous())
            got.append(ra.unshard(parts, chunks, dim=seq))
        o_step, l_step = ft.attention(q, k, v, step=ra.DEFAULT_STEP, causal=causal, layout=layout)
        step = ft.backward(q, k, v, o_step, l_step, d_o, step=ra.DEFAULT_BACKWARD_STEP,
                           causal=causal, layout=layout)
        bh = (lambda x: x) if layout == "bhnd" else (lambda x: x.transpose(1, 2))
        tq, tk, tv, tdo = (bh(x).double().requires_grad_(True) for x in (q, k, v, d_o))
        ref_o, _ = reference(tq, tk, tv, causal)
        want = torch.autograd.grad(ref_o, (tq, tk, tv), tdo.detach())
        lines, ok = [], True
        for name, x, y, w in zip(("dQ", "dK", "dV"), got, step, want):
            good, line = judge_one(bh(x), bh(y), w, dtype)
            ok &= good
            lines.append(f"{name} {line}")
        self.check(ok, f"backward P={P} B={b} H={hq}/{hkv} N={n} d={d} {dtype} "
                       f"{'causal' if causal else 'full'} {chunks} {layout}: " + "; ".join(lines))


Tester.backward = _backward


def judge_one(x, y, ref, dtype):
    """One gradient against float64 by the rule of judge(), y the yardstick."""
    import torch

    def errs(t):
        dt = t.double() - ref
        if not bool(torch.isfinite(dt).all()):
            return math.inf, math.inf
        return (dt.norm() / ref.norm().clamp_min(1e-300)).item(), dt.abs().max().item()

    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    ulp_term = ulp * 2.0 ** math.floor(math.log2(max(ref.abs().max().item(), 1e-30)))
    rx, mx = errs(x)
    ry, my = errs(y)
    ok = rx <= 1e-3 + 2 * ry and mx <= 1e-3 + 2 * my + ulp_term
    return ok, f"rel {rx:.2e} (step {ry:.2e}) max {mx:.2e} (step {my:.2e})"


def reference(q, k, v, causal):
    """float64 attention of [B, H, N, d] tensors (GQA by repeating K/V heads), top-left =
    bottom-right causal for N_q = N_kv; O and L."""
    import torch

    g = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(g, dim=1)
    v = v.double().repeat_interleave(g, dim=1)
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1),
                          float("-inf"))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def judge(o, lse, o_step, l_step, ref_o, ref_l, dtype):
    """docs/conventions.md's rule, the step as yardstick: (passed, a line of figures)."""
    import torch

    def errs(x, ref):
        x = x.double()
        if not bool((torch.isfinite(x) == torch.isfinite(ref)).all()):
            return math.inf, math.inf
        fin = torch.isfinite(ref)
        dx = (x - ref)[fin]
        return (dx.norm() / ref[fin].norm().clamp_min(1e-300)).item(), dx.abs().max().item()

    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    ulp_term = ulp * 2.0 ** math.floor(math.log2(max(ref_o.abs().max().item(), 1e-30)))
    ro, mo = errs(o, ref_o)
    rs, ms = errs(o_step, ref_o)
    rl, ml = errs(lse, ref_l)
    rsl, msl = errs(l_step, ref_l)
    ok = (ro <= 1e-3 + 2 * rs and mo <= 1e-3 + 2 * ms + ulp_term and
          rl <= 1e-3 + 2 * rsl and ml <= 1e-3 + 2 * msl)
    return ok, (f"O rel {ro:.2e} (step {rs:.2e}) max {mo:.2e} (step {ms:.2e}); "
                f"L rel {rl:.2e} (step {rsl:.2e}) max {ml:.2e} (step {msl:.2e})")


if __name__ == "__main__":
    sys.exit(main())
