#!/usr/bin/env python3
"""Checks the Python wrapper (and so the C API) against PyTorch on the GPU, for every step:
random inputs, both layouts, causal and GQA; and that bad input raises a clear error.

Then the gradients: flash_tutorial.flash_attention (a forward step, then a backward step
through torch.autograd) against PyTorch's scaled_dot_product_attention and its autograd, for
every backward step, on random problems (causal, GQA and MQA, N_q != N_kv, both layouts,
strided inputs). The yardstick is docs/conventions.md's: the error of O, dQ, dK and dV
against a float64 reference (SDPA in float64) may be at most

    rel_err <= rel_slack + factor * (SDPA's rel_err in the same dtype)
    max_abs <= abs_slack + factor * (SDPA's max_abs in the same dtype) + one ulp of the dtype

(fp32: factor 4, slacks 1e-5 and 1e-4; fp16 and bf16: factor 2, slacks 1e-3, plus the ulp).
A step the GPU refuses (its device limits) is reported as not run, never as passed.

Then decoding: flash_tutorial.decode (append this step's new K/V into the cache, then attend)
for every decoding step, with a contiguous cache and with a paged one (flash_tutorial's
PagedKVCache: pages in shuffled order), MHA, GQA and MQA, q_len 1 and up to 16 (causal among
the new tokens), lengths 0, 1, odd and not a multiple of the page. Each sequence's O is judged
by the rule above against SDPA (enable_gqa, the bottom-right causal mask) in the same dtype,
the float64 reference as the truth; L within 1e-3 of the reference; the cache bit for bit (the
new rows where they belong, no other row written); one split against the step's choice and 7
splits (O within two units in the last place plus 1e-5, L within 1e-4 * max(1, |L|)). Then its
refusals: bad tensors raise ValueError, what the C API refuses raises FlashTutorialError, each
naming the argument, and the cache is left as it was.

    scripts/check_python_api.py [--fp32-forward STEP] [--half-forward STEP] [--backward STEP]...
                                [--decode-random N] [--no-decode]
"""
import argparse
import faulthandler
import math
import sys

import torch

faulthandler.enable()  # a crash inside the library prints where it happened
sys.stdout.reconfigure(line_buffering=True)

sys.path.insert(0, __import__("os").path.dirname(__file__))
import flash_tutorial as ft  # noqa: E402


def reference(q, k, v, causal):
    """float64 attention in [B, H, N, d], bottom-right causal, GQA by repeating K/V heads."""
    g = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(g, dim=1)
    v = v.double().repeat_interleave(g, dim=1)
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        nq, nkv = s.shape[-2:]
        i = torch.arange(nq, device=q.device)[:, None]
        j = torch.arange(nkv, device=q.device)[None, :]
        s = s.masked_fill(j > i + (nkv - nq), float("-inf"))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def forward_checks():
    """Every forward step against the float64 reference; the count of failures."""
    failures = 0
    for step in ft.forward_steps():
      for dtype in (torch.float32, torch.bfloat16):
        for layout in ("bhnd", "bnhd"):
            for causal in (False, True):
                q = torch.randn(2, 4, 130, 64, device="cuda", dtype=dtype)
                k = torch.randn(2, 2, 200, 64, device="cuda", dtype=dtype)
                v = torch.randn(2, 2, 200, 64, device="cuda", dtype=dtype)
                args = (q, k, v) if layout == "bhnd" else tuple(t.transpose(1, 2) for t in (q, k, v))
                try:
                    o, lse = ft.attention(*args, step=step, causal=causal, layout=layout)
                except ft.FlashTutorialError as e:
                    print(f"{step:24s} {str(dtype)[6:]:8s} {layout} causal={causal}: "
                          f"not supported: {e}")
                    continue
                if layout == "bnhd":
                    o = o.transpose(1, 2)
                ro, rl = reference(q, k, v, causal)
                err = ((o.double() - ro).norm() / ro.norm()).item()
                lerr = (lse.double() - rl).abs().max().item()
                ok = err < (1e-4 if dtype == torch.float32 else 1e-2) and lerr < 1e-3
                failures += not ok
                print(f"{step:24s} {str(dtype)[6:]:8s} {layout} causal={causal}: rel err {err:.2e}, L err {lerr:.2e} "
                      f"{'ok' if ok else 'FAIL'}")
    return failures


def refusal_checks():
    """Bad input raises a clear error, before anything runs; the count of failures."""
    failures = 0
    try:
        q = torch.randn(1, 3, 16, 64, device="cuda")
        k = torch.randn(1, 2, 16, 64, device="cuda")
        ft.attention(q, k, k, step=ft.steps()[0])
        print("FAIL: heads_q=3, heads_kv=2 was accepted")
        failures += 1
    except ft.FlashTutorialError as e:
        print(f"bad input rejected: {e}")
    try:
        ft.attention(q, q, q, step="no_such_step")
        failures += 1
    except ft.FlashTutorialError as e:
        print(f"unknown step rejected: {e}")
    return failures


# docs/conventions.md, Tolerances: (factor, rel_slack, abs_slack) by dtype.
TOLERANCE = {torch.float32: (4, 1e-5, 1e-4), torch.float16: (2, 1e-3, 1e-3),
             torch.bfloat16: (2, 1e-3, 1e-3)}


def sdpa_with_grads(q, k, v, d_o, causal, scale):
    """O, dQ, dK, dV by PyTorch SDPA and its autograd, in the dtype of q ([B, H, N, d]).

    GQA by repeating K and V heads (autograd sums their gradients over each group); the causal
    mask bottom-right aligned, as ours. Rows that see no key at all (causal, N_q > N_kv) are
    left out of SDPA, whose answer for them differs between backends and versions, and get the
    convention's O = 0 and dQ = 0 (they contribute nothing to dK and dV)."""
    nq, nkv = q.shape[2], k.shape[2]
    first = max(0, nq - nkv) if causal else 0
    q = q[:, :, first:].detach().requires_grad_()
    k, v = k.detach().requires_grad_(), v.detach().requires_grad_()
    g = q.shape[1] // k.shape[1]
    mask = None
    if causal:
        i = torch.arange(first, nq, device=q.device)[:, None]
        j = torch.arange(nkv, device=q.device)[None, :]
        mask = j <= i + (nkv - nq)
    o = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), attn_mask=mask,
        scale=scale)
    o.backward(d_o[:, :, first:])

    def pad(t):
        return torch.cat([t.new_zeros(t.shape[0], t.shape[1], first, t.shape[3]), t], dim=2)

    return pad(o.detach()), pad(q.grad), k.grad, v.grad


def ours_with_grads(q, k, v, d_o, causal, scale, layout, forward, backward, backward_dtype):
    """O, dQ, dK, dV through ft.flash_attention, in bhnd whatever the layout it ran in. In bnhd
    the inputs are transposed views (not contiguous), as a model's would be."""
    def to_layout(t):
        return t if layout == "bhnd" else t.transpose(1, 2)

    q, k, v = (to_layout(t).detach().requires_grad_() for t in (q, k, v))
    o = ft.flash_attention(q, k, v, causal=causal, scale=scale, layout=layout,
                           forward_step=forward, backward_step=backward,
                           backward_dtype=backward_dtype)
    o.backward(to_layout(d_o))
    return tuple(to_layout(t) for t in (o.detach(), q.grad, k.grad, v.grad))


def judge(ours, oracle, ref, dtype):
    """(ok, rel_err, bound): docs/conventions.md's rule, SDPA in `dtype` as the yardstick."""
    factor, rel_slack, abs_slack = TOLERANCE[dtype]
    norm = ref.norm().item()

    def errors(x):
        diff = x.double() - ref
        return (diff.norm().item() / norm if norm > 0 else diff.norm().item(),
                diff.abs().max().item())

    rel, mx = errors(ours)
    orel, omx = errors(oracle)
    top = ref.abs().max().item()
    ulp = 0.0
    if dtype != torch.float32 and top > 0:  # one unit in the last place at the largest |ref|
        ulp = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(top))
    rel_bound = rel_slack + factor * orel
    abs_bound = abs_slack + factor * omx + ulp
    ok = bool(torch.isfinite(ours).all()) and rel <= rel_bound and mx <= abs_bound
    return ok, rel, rel_bound


def gradient_problems(count):
    """(B, H_q, H_kv, N_q, N_kv, d, causal, scale): fixed cases for each feature, then `count`
    random ones (seeded)."""
    fixed = [(2, 4, 4, 128, 128, 64, False, None),   # plain
             (2, 4, 2, 130, 200, 64, True, None),    # GQA, causal, N_q < N_kv
             (1, 8, 1, 257, 96, 128, False, 0.3),    # MQA, N_q > N_kv, an explicit scale
             (2, 4, 2, 200, 130, 128, True, None),   # causal, N_q > N_kv: rows that see no key
             (1, 2, 2, 1, 300, 64, True, None)]      # one query row (decoding)
    g = torch.Generator().manual_seed(1)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    for _ in range(count):
        hkv, group = pick((1, 2, 4)), pick((1, 2, 4))
        nq, nkv = (int(torch.randint(1, 300, (1,), generator=g)) for _ in range(2))
        fixed.append((pick((1, 2)), hkv * group, hkv, nq, nkv, pick((64, 128)),
                      pick((False, True)), None))
    return fixed


def gradient_checks(args):
    """Every backward step's gradients against SDPA's autograd; the count of failures."""
    failures = 0
    problems = gradient_problems(args.random)
    for backward in args.backward or ft.backward_steps():
        # (input dtype, the dtype the backward runs in): each dtype the step takes, and bf16
        # inputs behind an fp32 backward (backward_dtype) for a step that takes fp32.
        runs = [(dt, None) for dt in TOLERANCE if ft.supports(backward, dt)]
        if ft.supports(backward, torch.float32):
            runs.append((torch.bfloat16, torch.float32))
        for dtype, backward_dtype in runs:
            forward = args.fp32_forward if dtype == torch.float32 else args.half_forward
            how = f"{str(dtype)[6:]}{'->fp32' if backward_dtype else ''}"
            for b, hq, hkv, nq, nkv, d, causal, scale in problems:
                torch.manual_seed(hash((b, hq, hkv, nq, nkv, d, causal)) % 2**31)
                q = torch.randn(b, hq, nq, d, device="cuda", dtype=dtype)
                k = torch.randn(b, hkv, nkv, d, device="cuda", dtype=dtype)
                v = torch.randn(b, hkv, nkv, d, device="cuda", dtype=dtype)
                d_o = torch.randn(b, hq, nq, d, device="cuda", dtype=dtype)
                ref = sdpa_with_grads(*(t.double() for t in (q, k, v, d_o)), causal, scale)
                oracle = sdpa_with_grads(q, k, v, d_o, causal, scale)
                for layout in ("bhnd", "bnhd"):
                    name = (f"grad {backward} after {forward} {how:12s} {layout} B={b} Hq={hq} "
                            f"Hkv={hkv} Nq={nq} Nkv={nkv} d={d} causal={causal} scale={scale}")
                    try:
                        ours = ours_with_grads(q, k, v, d_o, causal, scale, layout, forward,
                                               backward, backward_dtype)
                    except ft.FlashTutorialError as e:
                        print(f"{name}: not run on this GPU: {e}")
                        continue
                    cells, ok_all = [], True
                    for label, x, o_x, r_x in zip(("O", "dQ", "dK", "dV"), ours, oracle, ref):
                        ok, rel, bound = judge(x, o_x, r_x, dtype)
                        ok_all &= ok
                        cells.append(f"{label} {rel:.1e}/{bound:.1e}{'' if ok else ' FAIL'}")
                    failures += not ok_all
                    print(f"{name}: {', '.join(cells)} {'ok' if ok_all else 'FAIL'}")
    return failures


def gradient_refusals():
    """A backward that cannot follow the forward is refused before the forward runs."""
    failures = 0
    q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for kwargs, expect in (({"backward_step": "10_backward"}, "backward_dtype=torch.float32"),
                           ({"backward_step": "07_flash_attention_2"}, "has no backward pass"),
                           ({"forward_step": "10_backward", "backward_dtype": torch.float32},
                            "has no forward pass")):
        try:
            ft.flash_attention(q, q, q, **kwargs)
            print(f"FAIL: flash_attention({kwargs}) on bf16 was accepted")
            failures += 1
        except ft.FlashTutorialError as e:
            ok = expect in str(e)
            failures += not ok
            print(f"{'' if ok else 'FAIL: '}refused flash_attention({kwargs}): {e}")
    try:
        ft.flash_attention(q, q, q[:, :, :8], backward_dtype=torch.float32)
        print("FAIL: v shaped unlike k was accepted")
        failures += 1
    except ValueError as e:
        print(f"refused v shaped unlike k: {e}")
    return failures


DEVICE = "cuda"  # where the decoding checks make their tensors


def sdpa_gqa(q, k, v, mask):
    """PyTorch SDPA in [B, H, N, d] with fewer K/V heads than query heads: enable_gqa (PyTorch
    2.5 and later), else K and V heads repeated."""
    f = torch.nn.functional.scaled_dot_product_attention
    try:
        return f(q, k, v, attn_mask=mask, enable_gqa=True)
    except TypeError:  # PyTorch before 2.5
        g = q.shape[1] // k.shape[1]
        return f(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), attn_mask=mask)


def decode_problems(count):
    """(B, H_q, H_kv, d, q_len, lens, page_size or None (contiguous), dtype): fixed cases for
    each feature, then `count` random ones (seeded)."""
    f16, bf16 = torch.float16, torch.bfloat16
    fixed = [(3, 4, 4, 64, 1, [1, 37, 255], None, f16),           # MHA, q_len 1, contiguous
             (3, 8, 2, 128, 1, [0, 17, 300], 16, bf16),           # GQA, an empty sequence, paged
             (3, 8, 1, 64, 5, [1, 63, 129], 32, f16),             # MQA, q_len 5
             (2, 4, 2, 128, 16, [33, 1000], None, bf16),          # q_len 16, contiguous
             (2, 16, 1, 64, 16, [5, 700], 64, f16),               # 256 rows per K/V head
             (2, 32, 8, 128, 2, [4095, 3001], 256, bf16)]         # long: many splits
    g = torch.Generator().manual_seed(2)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    for _ in range(count):
        hkv, group, b = pick((1, 2, 4)), pick((1, 2, 4, 8)), pick((1, 2, 3, 4))
        lens = [int(torch.randint(0, 2000, (1,), generator=g)) for _ in range(b)]
        fixed.append((b, hkv * group, hkv, pick((64, 128)), pick((1, 2, 3, 8, 16)), lens,
                      pick((None, 16, 48, 256)), pick((f16, bf16))))
    return fixed


def same_bits(a, b):
    """Equal tensors, NaN where the other has NaN."""
    return a.shape == b.shape and bool((a.view(torch.int16) == b.view(torch.int16)).all())


def decode_case(step, b, hq, hkv, d, q_len, lens, page, dtype):
    """One decoding problem through flash_tutorial.decode; (ok, the line to print)."""
    dev = DEVICE
    hist_k = [torch.randn(n, hkv, d, device=dev, dtype=dtype) for n in lens]
    hist_v = [torch.randn(n, hkv, d, device=dev, dtype=dtype) for n in lens]
    q = torch.randn(b, q_len, hq, d, device=dev, dtype=dtype)
    k_new, v_new = (torch.randn(b, q_len, hkv, d, device=dev, dtype=dtype) for _ in range(2))
    if page is None:  # contiguous, N_max a little beyond the longest sequence
        n_max = max(lens) + q_len + 7
        k_cache, v_cache = (torch.full((b, n_max, hkv, d), float("nan"), device=dev, dtype=dtype)
                            for _ in range(2))
        for i, n in enumerate(lens):
            k_cache[i, :n], v_cache[i, :n] = hist_k[i], hist_v[i]

        def run(**kw):
            return ft.decode(q, k_new, v_new, k_cache, v_cache, lens, step=step, **kw)

        def rows(i, n):
            return k_cache[i, :n], v_cache[i, :n]
        where = f"contiguous(N_max {n_max})"
    else:
        need = sum(-(-(n + q_len) // page) for n in lens)
        cache = ft.PagedKVCache(b, hkv, d, num_pages=need + 3, page_size=page,
                                max_pages=max(-(-(n + q_len) // page) for n in lens) + 1,
                                dtype=dtype, device=dev, seed=sum(lens))
        for i, n in enumerate(lens):
            cache.append(0, i, hist_k[i], hist_v[i])
            cache.advance(n, i)
            cache.reserve(i, n + q_len)  # the pages the new rows go to

        def run(**kw):
            return ft.decode(q, k_new, v_new, cache.k[0], cache.v[0], cache.lengths,
                             cache.block_table, step=step, **kw)

        def rows(i, n):
            pages, at = cache._rows(i, 0, n, dev)
            return cache.k[0][pages, at], cache.v[0][pages, at]
        where = f"paged({page} x {need + 3})"
    o, lse = run()
    name = (f"decode {step} {str(dtype)[6:]:8s} B={b} Hq={hq} Hkv={hkv} d={d} q_len={q_len} "
            f"lens={lens} {where}")
    cells, ok = [], True
    # The cache: every sequence's rows are its history then the new rows, bit for bit, and no
    # other row was written (the NaN elsewhere stays).
    written = 0
    for i, n in enumerate(lens):
        k_rows, v_rows = rows(i, n + q_len)
        ok_i = (same_bits(k_rows, torch.cat([hist_k[i], k_new[i]])) and
                same_bits(v_rows, torch.cat([hist_v[i], v_new[i]])))
        ok &= ok_i
        written += n + q_len
    pool = k_cache if page is None else cache.k[0]
    stray = int((~torch.isnan(pool)).flatten(-2).any(-1).sum()) - written
    ok &= stray == 0
    cells.append(f"cache {'ok' if ok else 'FAIL'}{f' ({stray} stray rows)' if stray else ''}")
    # O and L per sequence against SDPA and the float64 reference.
    worst, lworst = 0.0, 0.0
    for i, n in enumerate(lens):
        qb = q[i].transpose(0, 1)[None]                          # [1, H_q, q_len, d]
        kb = torch.cat([hist_k[i], k_new[i]]).transpose(0, 1)[None]
        vb = torch.cat([hist_v[i], v_new[i]]).transpose(0, 1)[None]
        ro, rl = reference(qb, kb, vb, causal=True)
        j = torch.arange(n + q_len, device=dev)[None, :]
        mask = j <= torch.arange(q_len, device=dev)[:, None] + n
        oracle = sdpa_gqa(qb, kb, vb, mask)
        ok_o, rel, bound = judge(o[i].transpose(0, 1)[None], oracle, ro, dtype)
        lerr = (lse[i][None].double() - rl).abs().max().item()
        ok &= ok_o and lerr < 1e-3
        worst, lworst = max(worst, rel / bound), max(lworst, lerr)
    cells.append(f"O rel/bound {worst:.2f}, L err {lworst:.1e}")
    # One split and seven against the step's choice (the append repeats the same rows).
    for splits in (1, 7):
        o2, l2 = run(num_splits=splits)
        tol = 2 * torch.finfo(dtype).eps * o.float().abs() + 1e-5
        same = bool(((o2.float() - o.float()).abs() <= tol).all()) and bool(
            ((l2 - lse).abs() <= 1e-4 * lse.abs().clamp(min=1)).all())
        ok &= same
        cells.append(f"{splits} split{'s' if splits > 1 else ''} {'ok' if same else 'FAIL'}")
    return ok, f"{name}: {', '.join(cells)} {'ok' if ok else 'FAIL'}"


def decode_checks(args):
    """Every decoding step on the problems of decode_problems(); the count of failures."""
    failures = 0
    for step in ft.decode_steps():
        for b, hq, hkv, d, q_len, lens, page, dtype in decode_problems(args.decode_random):
            torch.manual_seed(hash((b, hq, hkv, d, q_len, tuple(lens))) % 2**31)
            try:
                ok, line = decode_case(step, b, hq, hkv, d, q_len, lens, page, dtype)
            except ft.FlashTutorialError as e:
                print(f"decode {step} B={b} Hq={hq} Hkv={hkv} d={d} q_len={q_len} lens={lens}: "
                      f"not run on this GPU: {e}")
                continue
            failures += not ok
            print(line)
    return failures


def decode_refusals():
    """Bad decoding input: ValueError for the tensors, FlashTutorialError for what the C API
    refuses, each naming the argument; the cache unchanged. The count of failures."""
    failures = 0
    dev, f16 = DEVICE, torch.float16
    q = torch.randn(2, 1, 4, 64, device=dev, dtype=f16)
    kn = torch.randn(2, 1, 2, 64, device=dev, dtype=f16)
    kc = torch.randn(2, 40, 2, 64, device=dev, dtype=f16)
    vc = torch.randn_like(kc)
    pool = torch.randn(8, 16, 2, 64, device=dev, dtype=f16)
    table = [[0, 1, 2], [3, 4, -1]]
    q96, kn96 = q.new_zeros(2, 1, 4, 96), kn.new_zeros(2, 1, 2, 96)
    kc96 = kc.new_zeros(2, 40, 2, 96)
    before = (kc.clone(), vc.clone(), pool.clone())
    cases = [
        ("q on the CPU", lambda: ft.decode(q.cpu(), kn, kn, kc, vc, [3, 4]), ValueError, "q must"),
        ("v_cache unlike k_cache", lambda: ft.decode(q, kn, kn, kc.transpose(0, 1), vc, [3, 4]),
         ValueError, "v_cache is"),
        ("k_cache not contiguous", lambda: ft.decode(
            q, kn, kn, kc.transpose(1, 2).contiguous().transpose(1, 2),
            vc.transpose(1, 2).contiguous().transpose(1, 2), [3, 4]), ValueError,
         "k_cache must be contiguous"),
        ("v_new unlike k_new", lambda: ft.decode(q, kn, kn[:, :, :1], kc, vc, [3, 4]),
         ValueError, "v_new is"),
        ("cache in fp32", lambda: ft.decode(q, kn, kn, kc.float(), vc.float(), [3, 4]),
         ValueError, "k_cache has dtype"),
        ("cache_lens of 3", lambda: ft.decode(q, kn, kn, kc, vc, [3, 4, 5]), ValueError,
         "cache_lens has shape"),
        ("cache_lens of floats", lambda: ft.decode(q, kn, kn, kc, vc, [3.0, 4.0]), ValueError,
         "cache_lens must hold integers"),
        ("block_table of 1 row", lambda: ft.decode(q, kn, kn, pool, pool, [3, 4], [[0, 1]]),
         ValueError, "block_table has shape"),
        ("batch unlike q", lambda: ft.decode(q, kn, kn, kc[:1], vc[:1], [3, 4]), ValueError,
         "k_cache has shape"),
        ("length past N_max", lambda: ft.decode(q, kn, kn, kc, vc, [3, 40]),
         ft.FlashTutorialError, "cache_lens[1] + q_len (40 + 1 = 41) exceeds n_max (40)"),
        ("page out of the pool", lambda: ft.decode(q, kn, kn, pool, pool, [3, 4],
                                                   [[0, 1, 2], [8, 4, -1]]),
         ft.FlashTutorialError, "block_table[1][0] (8) is out of range [0, 8) (num_pages)"),
        ("sequence longer than its pages", lambda: ft.decode(q, kn, kn, pool, pool, [3, 48], table),
         ft.FlashTutorialError, "cache_lens[1] + q_len (48 + 1 = 49) needs 4 pages"),
        ("page appended into twice", lambda: ft.decode(q, kn, kn, pool, pool, [3, 4],
                                                       [[0, 1, 2], [0, 4, -1]]),
         ft.FlashTutorialError, "block_table[0][0] (0) is used 2 times"),
        ("q_len 17", lambda: ft.decode(q.repeat(1, 17, 1, 1), kn.repeat(1, 17, 1, 1),
                                       kn.repeat(1, 17, 1, 1), kc, vc, [3, 4]),
         ft.FlashTutorialError, "q_len (17) must be in [1, 16]"),
        ("num_splits 200", lambda: ft.decode(q, kn, kn, kc, vc, [3, 4], num_splits=200),
         ft.FlashTutorialError, "num_splits (200) must be 0 (the step's rule) or in [1, 128]"),
        ("fp32", lambda: ft.decode(q.float(), kn.float(), kn.float(), kc.float(), vc.float(),
                                   [3, 4]),
         ft.FlashTutorialError, "dtype (fp32) is not supported by step 12_decode"),
        ("head_dim 96", lambda: ft.decode(q96, kn96, kn96, kc96, kc96.clone(), [3, 4]),
         ft.FlashTutorialError, "head_dim (96) is not supported by step 12_decode"),
        ("a forward step", lambda: ft.decode(q, kn, kn, kc, vc, [3, 4], step="07"),
         ft.FlashTutorialError, "step (07) is not a registered decoding step"),
        ("more pages than max_pages", lambda: ft.PagedKVCache(
            1, 2, 64, num_pages=8, max_pages=2, device=dev).reserve(0, 33), ValueError,
         "more than max_pages (2)"),
        ("pool exhausted", lambda: ft.PagedKVCache(
            1, 2, 64, num_pages=2, max_pages=4, device=dev).reserve(0, 33), ValueError,
         "of num_pages (2) are free"),
    ]
    # A pool of 2^31 pages (of one row, d = 1: 4 GiB of fp16, never written) is refused by the
    # wrapper before ctypes would wrap num_pages into a 32-bit int; run where it fits.
    if torch.cuda.mem_get_info(q.device)[0] >= 6 * 2**30:
        q1 = q.new_zeros(2, 1, 1, 1)
        cases.append(("a pool of 2^31 pages", lambda: ft.decode(
            q1, q1, q1, *(2 * [q1.new_empty(2**31, 1, 1, 1)]), [0, 0], [[0], [1]]), ValueError,
            "k_cache.shape[0] (2147483648) exceeds the limit of 2147483647"))
    else:
        print("not run: decode with a pool of 2^31 pages (4 GiB of free GPU memory needed)")
    for what, call, error, expect in cases:
        try:
            call()
            print(f"FAIL: decode with {what} was accepted")
            failures += 1
        except error as e:
            ok = expect in str(e)
            failures += not ok
            print(f"{'' if ok else 'FAIL: '}decode refused {what}: {e}")
    torch.cuda.synchronize()
    unchanged = all(torch.equal(a, b) for a, b in zip(before, (kc, vc, pool)))
    failures += not unchanged
    print(f"{'' if unchanged else 'FAIL: '}the caches are {'un' if unchanged else ''}changed "
          "after the refusals")
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fp32-forward", default="04_flash_attention",
                        help="forward step before an fp32 backward (default %(default)s)")
    parser.add_argument("--half-forward", default="07_flash_attention_2",
                        help="forward step before an fp16 or bf16 backward (default %(default)s)")
    parser.add_argument("--backward", action="append",
                        help="a backward step to check (repeatable; default: every one)")
    parser.add_argument("--random", type=int, default=4,
                        help="random problems beside the fixed ones (default %(default)s)")
    parser.add_argument("--no-forward", action="store_true",
                        help="skip the forward checks of every step")
    parser.add_argument("--decode-random", type=int, default=6,
                        help="random decoding problems beside the fixed ones (default %(default)s)")
    parser.add_argument("--no-decode", action="store_true",
                        help="skip the decoding checks")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    failures = 0 if args.no_forward else forward_checks()
    failures += refusal_checks()
    failures += gradient_checks(args)
    failures += gradient_refusals()
    if not args.no_decode:
        failures += decode_checks(args)
        failures += decode_refusals()
    print(f"python API: {'OK' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
