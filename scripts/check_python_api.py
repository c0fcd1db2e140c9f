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

    scripts/check_python_api.py [--fp32-forward STEP] [--half-forward STEP] [--backward STEP]...
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
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    failures = 0 if args.no_forward else forward_checks()
    failures += refusal_checks()
    failures += gradient_checks(args)
    failures += gradient_refusals()
    print(f"python API: {'OK' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
