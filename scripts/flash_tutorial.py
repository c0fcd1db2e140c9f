#!/usr/bin/env python3
"""flash_tutorial — run any step of the tutorial on torch tensors, through the C API.

    import torch, flash_tutorial as ft
    q = torch.randn(2, 8, 1024, 64, device="cuda")          # [B, H, N, d]
    k, v = torch.randn_like(q), torch.randn_like(q)
    o, lse = ft.attention(q, k, v, step="01_naive_attention", causal=True)

Training through the kernels: flash_attention() is differentiable. Its forward runs a forward
step and keeps O and L (the row logsumexp), never P; its backward runs a backward step, which
recomputes P tile by tile from L:

    q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", requires_grad=True)
               for _ in range(3))
    o = ft.flash_attention(q, k, v, causal=True, forward_step="04_flash_attention",
                           backward_step="10_backward")
    o.square().sum().backward()                              # q.grad, k.grad, v.grad

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


class _MergeProblem(ctypes.Structure):
    _fields_ = [("parts", ctypes.c_int), ("batch", ctypes.c_int), ("heads", ctypes.c_int),
                ("rows", ctypes.c_int), ("head_dim", ctypes.c_int), ("dtype", ctypes.c_int),
                ("layout", ctypes.c_int)]


_lib = None

_PASS_FORWARD, _PASS_BACKWARD = 1, 2  # fa_step_passes() bits (flash_tutorial.h)


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
    lib.fa_step_passes.restype = ctypes.c_int
    lib.fa_step_passes.argtypes = [ctypes.c_int]
    lib.fa_last_error.restype = ctypes.c_char_p
    lib.fa_check.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem)]
    for f in (lib.fa_workspace_bytes, lib.fa_backward_workspace_bytes):
        f.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem), ctypes.POINTER(ctypes.c_size_t)]
    lib.fa_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem)] + [ctypes.c_void_p] * 6 + \
        [ctypes.c_size_t, ctypes.c_void_p]
    lib.fa_backward.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Problem)] + \
        [ctypes.c_void_p] * 10 + [ctypes.c_size_t, ctypes.c_void_p]
    lib.fa_merge.argtypes = [ctypes.POINTER(_MergeProblem)] + [ctypes.c_void_p] * 5
    _lib = lib
    return lib


def _steps_with(passes):
    lib = _load()
    return [lib.fa_step_name(i).decode() for i in range(lib.fa_num_steps())
            if lib.fa_step_passes(i) & passes]


def steps():
    """Names of the registered GPU steps, in chapter order (forward and backward)."""
    return _steps_with(_PASS_FORWARD | _PASS_BACKWARD)


def forward_steps():
    """Names of the steps that run the forward pass (attention())."""
    return _steps_with(_PASS_FORWARD)


def backward_steps():
    """Names of the steps that run the backward pass (backward())."""
    return _steps_with(_PASS_BACKWARD)


def supports(step, dtype, head_dim=64):
    """Whether the registry lets `step` run a problem in `dtype` (a torch dtype or its name,
    e.g. "bfloat16") with this head dim, in whichever passes it has (forward_steps(),
    backward_steps()); no GPU is asked, so a step may still be refused by this device's
    limits when it runs."""
    code = _DTYPES.get(str(dtype).replace("torch.", ""))
    if code is None:
        raise ValueError(f"dtype ({dtype}) must be float32, float16 or bfloat16")
    p = _Problem(1, 1, 1, 16, 16, head_dim, 0.0, 0, code, 1)
    return _load().fa_check(step.encode(), ctypes.byref(p)) == 0


def _check(status):
    if status != 0:
        raise FlashTutorialError(_load().fa_last_error().decode())


def _shape(t):
    return tuple(t.shape)


def _problem(q, k, v, causal, scale, layout):
    """The C API's problem for q, k, v (checked here: what the C API cannot see, the tensors)."""
    if layout not in ("bhnd", "bnhd"):
        raise ValueError(f"layout ({layout!r}) must be 'bhnd' or 'bnhd'")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4 or not t.is_cuda:
            raise ValueError(f"{name} must be a 4-D CUDA tensor, got {_shape(t)} on {t.device}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}: all must be on one device")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, q has {q.dtype}")
    dtype = _DTYPES.get(str(q.dtype).replace("torch.", ""))
    if dtype is None:
        raise ValueError(f"dtype ({q.dtype}) must be float32, float16 or bfloat16")
    if v.shape != k.shape:
        raise ValueError(f"v has shape {_shape(v)}, k has {_shape(k)}: v must be shaped like k")
    seq, heads = (2, 1) if layout == "bhnd" else (1, 2)
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"k has shape {_shape(k)}, q has {_shape(q)}: the batch (dim 0) and the "
                         f"head dim (dim 3) must match ({layout})")
    b, d = q.shape[0], q.shape[3]
    return _Problem(b, q.shape[heads], k.shape[heads], q.shape[seq], k.shape[seq], d,
                    float(scale or 0.0), int(bool(causal)), dtype, 0 if layout == "bnhd" else 1)


def _like(name, t, ref, ref_name):
    """t must have ref's shape, dtype and device."""
    if _shape(t) != _shape(ref) or t.dtype != ref.dtype or t.device != ref.device:
        raise ValueError(f"{name} is {_shape(t)} {t.dtype} on {t.device}; it must be shaped like "
                         f"{ref_name}: {_shape(ref)} {ref.dtype} on {ref.device}")


def _workspace_bytes(query, step, p):
    """Bytes of scratch `step` needs (query: fa_workspace_bytes or fa_backward_workspace_bytes);
    raises FlashTutorialError when the step cannot run p (or lacks that pass)."""
    ws = ctypes.c_size_t(0)
    _check(query(step.encode(), ctypes.byref(p), ctypes.byref(ws)))
    return ws.value


def _workspace(query, step, p, device):
    import torch

    ws = _workspace_bytes(query, step, p)
    return torch.empty(max(ws, 1), device=device, dtype=torch.uint8), ws


def attention(q, k, v, step, causal=False, scale=None, layout="bhnd"):
    """O and L (row logsumexp, fp32 [B, H_q, N_q]) for CUDA tensors q, k, v.

    layout "bhnd": q is [B, H_q, N_q, d], k and v [B, H_kv, N_kv, d] (PyTorch SDPA's layout);
    layout "bnhd": q is [B, N_q, H_q, d], k and v [B, N_kv, H_kv, d] (FlashAttention's).
    scale None means 1/sqrt(d). Tensors that are not contiguous are copied. O is contiguous.
    """
    import torch

    p = _problem(q, k, v, causal, scale, layout)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    lib = _load()
    with torch.cuda.device(q.device):
        work, ws = _workspace(lib.fa_workspace_bytes, step, p, q.device)
        o = torch.empty_like(q)
        lse = torch.empty((p.batch, p.heads_q, p.n_q), device=q.device, dtype=torch.float32)
        stream = torch.cuda.current_stream(q.device).cuda_stream
        _check(lib.fa_run(step.encode(), ctypes.byref(p), q.data_ptr(), k.data_ptr(),
                          v.data_ptr(), o.data_ptr(), lse.data_ptr(), work.data_ptr(), ws, stream))
    return o, lse


def backward(q, k, v, o, lse, d_o, step, causal=False, scale=None, layout="bhnd"):
    """dQ, dK and dV (in the dtype and layout of q, k, v) from the forward's O and L and dO.

    q, k, v, causal, scale and layout as for attention(); o and d_o shaped like q, lse the
    forward's fp32 [B, H_q, N_q]. dK and dV are summed over each group of query heads (GQA).
    """
    import torch

    p = _problem(q, k, v, causal, scale, layout)
    _like("o", o, q, "q")
    _like("d_o", d_o, q, "q")
    want = (p.batch, p.heads_q, p.n_q)
    if _shape(lse) != want or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"lse is {_shape(lse)} {lse.dtype} on {lse.device}; it must be "
                         f"{want} torch.float32 on {q.device}")
    q, k, v, o, lse, d_o = (t.contiguous() for t in (q, k, v, o, lse, d_o))
    lib = _load()
    with torch.cuda.device(q.device):
        work, ws = _workspace(lib.fa_backward_workspace_bytes, step, p, q.device)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        stream = torch.cuda.current_stream(q.device).cuda_stream
        _check(lib.fa_backward(step.encode(), ctypes.byref(p), q.data_ptr(), k.data_ptr(),
                               v.data_ptr(), o.data_ptr(), lse.data_ptr(), d_o.data_ptr(),
                               dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), work.data_ptr(), ws,
                               stream))
    return dq, dk, dv


def merge(o_parts, lse_parts, out=None, layout="bhnd"):
    """Merges partial results of the same query rows over disjoint key sets (fa_merge): the
    online-softmax rescale in fp32, L = log sum_s exp(L_s), O = sum_s exp(L_s - L) O_s.

    o_parts: [S, B, H, rows, d] ("bhnd") or [S, B, rows, H, d] ("bnhd"), fp16 or bf16, d = 64
    or 128: S partials, as attention() returns each O; lse_parts: fp32 [S, B, H, rows], their L.
    A partial with L_s = -inf is skipped (its O_s is never read). Returns (O, L) shaped like one
    partial, written into out = (o, lse) when given.
    """
    import torch

    if layout not in ("bhnd", "bnhd"):
        raise ValueError(f"layout ({layout!r}) must be 'bhnd' or 'bnhd'")
    if o_parts.dim() != 5 or not o_parts.is_cuda:
        raise ValueError(f"o_parts must be a 5-D CUDA tensor, got {_shape(o_parts)} on "
                         f"{o_parts.device}")
    s, b = o_parts.shape[0], o_parts.shape[1]
    h, rows = (o_parts.shape[2], o_parts.shape[3]) if layout == "bhnd" else \
        (o_parts.shape[3], o_parts.shape[2])
    want = (s, b, h, rows)
    if _shape(lse_parts) != want or lse_parts.dtype != torch.float32 or \
            lse_parts.device != o_parts.device:
        raise ValueError(f"lse_parts is {_shape(lse_parts)} {lse_parts.dtype} on "
                         f"{lse_parts.device}; it must be {want} torch.float32 on "
                         f"{o_parts.device}")
    dtype = _DTYPES.get(str(o_parts.dtype).replace("torch.", ""))
    if dtype is None:
        raise ValueError(f"dtype ({o_parts.dtype}) must be float16 or bfloat16")
    o_parts, lse_parts = o_parts.contiguous(), lse_parts.contiguous()
    if out is None:
        out = (torch.empty(o_parts.shape[1:], device=o_parts.device, dtype=o_parts.dtype),
               torch.empty(want[1:], device=o_parts.device, dtype=torch.float32))
    o, lse = out
    _like("o", o, o_parts[0], "one partial")
    _like("lse", lse, lse_parts[0], "one partial's L")
    if not (o.is_contiguous() and lse.is_contiguous()):
        raise ValueError("out: o and lse must be contiguous")
    p = _MergeProblem(s, b, h, rows, o_parts.shape[4], dtype, 0 if layout == "bnhd" else 1)
    with torch.cuda.device(o_parts.device):
        stream = torch.cuda.current_stream(o_parts.device).cuda_stream
        _check(_load().fa_merge(ctypes.byref(p), o_parts.data_ptr(), lse_parts.data_ptr(),
                                o.data_ptr(), lse.data_ptr(), stream))
    return o, lse


_function = None


def _autograd_function():
    """The torch.autograd.Function, made on first use (so that this module imports without
    PyTorch: listing the steps needs none)."""
    global _function
    if _function is not None:
        return _function
    import torch

    class FlashAttention(torch.autograd.Function):
        """Attention whose forward runs a forward step and whose backward a backward step.

        Saved for the backward: Q, K, V, O and L (O(N) memory per row), never P."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale, layout, forward_step, backward_step,
                    backward_dtype):
            # The contiguous tensors the kernels read are the ones kept: the backward reads them
            # again, and a caller's strided view (say, of one fused QKV projection) is let go.
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o, lse = attention(q, k, v, forward_step, causal, scale, layout)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.options = (causal, scale, layout, backward_step, backward_dtype)
            return o

        @staticmethod
        @torch.autograd.function.once_differentiable  # a second derivative is not provided
        def backward(ctx, d_o):
            q, k, v, o, lse = ctx.saved_tensors
            causal, scale, layout, step, dtype = ctx.options
            inputs = (q, k, v, o, d_o.to(o.dtype))
            if dtype is not None and dtype != q.dtype:
                inputs = tuple(t.to(dtype) for t in inputs)
            q2, k2, v2, o2, d_o2 = inputs
            dq, dk, dv = backward(q2, k2, v2, o2, lse, d_o2, step, causal, scale, layout)
            return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)) + (None,) * 6

    _function = FlashAttention
    return _function


def __getattr__(name):
    """ft.FlashAttention: the torch.autograd.Function (made on first use)."""
    if name == "FlashAttention":
        return _autograd_function()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flash_attention(q, k, v, causal=False, scale=None, layout="bhnd",
                    forward_step="07_flash_attention_2", backward_step="10_backward",
                    backward_dtype=None):
    """Differentiable attention: O from forward_step; dQ, dK, dV from backward_step.

    q, k, v, causal, scale and layout as for attention(). The gradients come back in the
    inputs' dtype. backward_dtype runs the backward in another dtype (inputs, O and dO cast
    to it, the gradients cast back), e.g. torch.float32 for step 10, which runs fp32 only,
    behind a bf16 forward; None runs it in the inputs' dtype. Every check of the backward
    (the step has one and accepts this problem) is made before the forward runs, so a bad
    choice fails at once rather than after the loss is computed.
    """
    import torch

    p = _problem(q, k, v, causal, scale, layout)
    if backward_dtype is not None:
        code = _DTYPES.get(str(backward_dtype).replace("torch.", ""))
        if code is None:
            raise ValueError(f"backward_dtype ({backward_dtype}) must be None, torch.float32, "
                             "torch.float16 or torch.bfloat16")
        p.dtype = code
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        try:
            _workspace_bytes(_load().fa_backward_workspace_bytes, backward_step, p)
        except FlashTutorialError as e:
            if backward_dtype is None and "(supported: fp32)" in str(e):
                raise FlashTutorialError(f"{e}; backward_dtype=torch.float32 runs it in fp32 "
                                         "behind this forward") from None
            raise
    return _autograd_function().apply(q, k, v, causal, scale, layout, forward_step,
                                      backward_step, backward_dtype)


def _main():
    """Lists the library's steps and what each teaches; 1 when the library cannot be loaded."""
    try:
        lib = _load()
    except (FlashTutorialError, OSError) as e:
        print(f"flash_tutorial.py: error: {e}", file=__import__("sys").stderr)
        return 1
    for i in range(lib.fa_num_steps()):
        passes = lib.fa_step_passes(i)
        kind = "+".join(n for bit, n in ((_PASS_FORWARD, "forward"), (_PASS_BACKWARD, "backward"))
                        if passes & bit)
        print(f"{lib.fa_step_name(i).decode():24s} {kind:9s} {lib.fa_step_lesson(i).decode()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
