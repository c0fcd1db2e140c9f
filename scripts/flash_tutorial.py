#!/usr/bin/env python3
"""flash_tutorial — run any step of the tutorial on torch tensors, through the C API.

    import torch, flash_tutorial as ft
    q = torch.randn(2, 8, 1024, 64, device="cuda")          # [B, H, N, d]
    k, v = torch.randn_like(q), torch.randn_like(q)
    o, lse = ft.attention(q, k, v, step="01_naive_attention", causal=True)

ctypes only: nothing is built against PyTorch. The library is found through the
FLASH_TUTORIAL_LIB environment variable or in build*/lib/ next to this folder.
Run as a program (python3 scripts/flash_tutorial.py), it lists the steps the library holds.
"""
import ctypes
import glob
import os

_DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2}


class FlashTutorialError(RuntimeError):
    """An error reported by the C API (bad input, unknown step, CUDA failure)."""


class _Problem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("n_q", ctypes.c_int), ("n_kv", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("scale", ctypes.c_float), ("causal", ctypes.c_int), ("dtype", ctypes.c_int),
                ("layout", ctypes.c_int)]


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("FLASH_TUTORIAL_LIB")
    if not path:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        found = sorted(glob.glob(os.path.join(root, "build*", "lib", "libflash_tutorial.so")))
        if not found:
            raise FlashTutorialError("libflash_tutorial.so not found: build the flash_tutorial "
                                     "target or set FLASH_TUTORIAL_LIB")
        path = found[0]
    lib = ctypes.CDLL(path)
    lib.fa_num_steps.restype = ctypes.c_int
    lib.fa_step_name.restype = ctypes.c_char_p
    lib.fa_step_name.argtypes = [ctypes.c_int]
    lib.fa_step_lesson.restype = ctypes.c_char_p
    lib.fa_step_lesson.argtypes = [ctypes.c_int]
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_workspace_bytes.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem),
                                       ctypes.POINTER(ctypes.c_size_t)]
    lib.fa_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem)] + [ctypes.c_void_p] * 6 + \
        [ctypes.c_size_t, ctypes.c_void_p]
    _lib = lib
    return lib


def steps():
    """Names of the registered GPU steps, in chapter order."""
    lib = _load()
    return [lib.fa_step_name(i).decode() for i in range(lib.fa_num_steps())]


def _check(status):
    if status != 0:
        raise FlashTutorialError(_load().fa_last_error().decode())


def attention(q, k, v, step, causal=False, scale=None, layout="bhnd"):
    """O and L (row logsumexp, fp32 [B, H_q, N_q]) for CUDA tensors q, k, v.

    layout "bhnd": q is [B, H_q, N_q, d], k and v [B, H_kv, N_kv, d] (PyTorch SDPA's layout);
    layout "bnhd": q is [B, N_q, H_q, d], k and v [B, N_kv, H_kv, d] (FlashAttention's).
    """
    import torch

    if layout not in ("bhnd", "bnhd"):
        raise ValueError(f"layout ({layout!r}) must be 'bhnd' or 'bnhd'")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4 or not t.is_cuda:
            raise ValueError(f"{name} must be a 4-D CUDA tensor, got {tuple(t.shape)} on {t.device}")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, q has {q.dtype}")
    dtype = _DTYPES.get(str(q.dtype).replace("torch.", ""))
    if dtype is None:
        raise ValueError(f"dtype ({q.dtype}) must be float32, float16 or bfloat16")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if layout == "bhnd":
        b, hq, nq, d = q.shape
        hkv, nkv = k.shape[1], k.shape[2]
    else:
        b, nq, hq, d = q.shape
        nkv, hkv = k.shape[1], k.shape[2]
    p = _Problem(b, hq, hkv, nq, nkv, d, float(scale or 0.0), int(bool(causal)), dtype,
                 0 if layout == "bnhd" else 1)
    lib = _load()
    ws = ctypes.c_size_t(0)
    _check(lib.fa_workspace_bytes(step.encode(), ctypes.byref(p), ctypes.byref(ws)))
    o = torch.empty_like(q)
    lse = torch.empty((b, hq, nq), device=q.device, dtype=torch.float32)
    work = torch.empty(max(ws.value, 1), device=q.device, dtype=torch.uint8)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    _check(lib.fa_run(step.encode(), ctypes.byref(p), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                      o.data_ptr(), lse.data_ptr(), work.data_ptr(), ws.value, stream))
    return o, lse



def _main():
    """Lists the library's steps and what each teaches; 1 when the library cannot be loaded."""
    try:
        lib = _load()
    except (FlashTutorialError, OSError) as e:
        print(f"flash_tutorial.py: error: {e}", file=__import__("sys").stderr)
        return 1
    for i in range(lib.fa_num_steps()):
        print(f"{lib.fa_step_name(i).decode():24s} {lib.fa_step_lesson(i).decode()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
