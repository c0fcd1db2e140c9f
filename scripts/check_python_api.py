#!/usr/bin/env python3
"""Checks the Python wrapper (and so the C API) against PyTorch on the GPU, for every step:
random inputs, both layouts, causal and GQA; and that bad input raises a clear error."""
import faulthandler
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


def main():
    torch.manual_seed(0)
    failures = 0
    for step in ft.steps():
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
    print(f"python API: {'OK' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
