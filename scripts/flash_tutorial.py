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

Decoding (step 12): decode() appends this step's new keys and values into a KV cache,
contiguous [B, N_max, H_kv, d] or paged (a pool of pages and a block table), and attends;
PagedKVCache keeps a pool, hands out pages in shuffled order and holds the block table and
the lengths:

    cache = ft.PagedKVCache(batch=2, heads_kv=2, head_dim=64, num_pages=64, max_pages=16)
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.float16)   # [B, q_len, H_q, d]
    k, v = (torch.randn(2, 1, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    o, lse = cache.decode(0, q, k, v)                        # layer 0; appends, then attends
    cache.advance(1)                                         # every sequence is 1 longer

ctypes only: nothing is built against PyTorch. The library is found through the
FLASH_TUTORIAL_LIB environment variable or in build*/lib/ next to this folder.
Run as a program (python3 scripts/flash_tutorial.py), it lists the steps the library holds
and the pass each runs (forward, backward or decode).
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


class _DecodeProblem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("q_len", ctypes.c_int), ("scale", ctypes.c_float),
                ("dtype", ctypes.c_int), ("cache", ctypes.c_int), ("n_max", ctypes.c_int),
                ("page_size", ctypes.c_int), ("num_pages", ctypes.c_int),
                ("max_pages", ctypes.c_int), ("cache_lens", ctypes.POINTER(ctypes.c_int)),
                ("block_table", ctypes.POINTER(ctypes.c_int))]


_CACHE_CONTIGUOUS, _CACHE_PAGED = 0, 1  # fa_cache_kind (flash_tutorial.h)

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
    lib.fa_num_decode_steps.restype = ctypes.c_int
    for f in (lib.fa_decode_step_name, lib.fa_decode_step_lesson):
        f.restype = ctypes.c_char_p
        f.argtypes = [ctypes.c_int]
    lib.fa_decode_splits.argtypes = [ctypes.c_char_p, ctypes.POINTER(_DecodeProblem),
                                     ctypes.POINTER(ctypes.c_int)]
    lib.fa_decode_workspace_bytes.argtypes = [ctypes.c_char_p, ctypes.POINTER(_DecodeProblem),
                                              ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    lib.fa_decode.argtypes = [ctypes.c_char_p, ctypes.POINTER(_DecodeProblem), ctypes.c_int] + \
        [ctypes.c_void_p] * 8 + [ctypes.c_size_t, ctypes.c_void_p]
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


def decode_steps():
    """Names of the registered decoding steps (decode())."""
    lib = _load()
    return [lib.fa_decode_step_name(i).decode() for i in range(lib.fa_num_decode_steps())]


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


def _dtype_of(tensors):
    """The C API's dtype code of (name, tensor) pairs, each a 4-D CUDA tensor on the device and
    in the dtype of the first (q); ValueError naming the first that is not."""
    q = tensors[0][1]
    for name, t in tensors:
        if not hasattr(t, "is_cuda") or t.dim() != 4 or not t.is_cuda:
            got = f"{_shape(t)} on {t.device}" if hasattr(t, "is_cuda") else type(t).__name__
            raise ValueError(f"{name} must be a 4-D CUDA tensor, got {got}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}: all must be on one device")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, q has {q.dtype}")
    dtype = _DTYPES.get(str(q.dtype).replace("torch.", ""))
    if dtype is None:
        raise ValueError(f"dtype ({q.dtype}) must be float32, float16 or bfloat16")
    return dtype


def _problem(q, k, v, causal, scale, layout):
    """The C API's problem for q, k, v (checked here: what the C API cannot see, the tensors)."""
    if layout not in ("bhnd", "bnhd"):
        raise ValueError(f"layout ({layout!r}) must be 'bhnd' or 'bnhd'")
    dtype = _dtype_of((("q", q), ("k", k), ("v", v)))
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


def _int_array(name, values, shape):
    """An int32 CPU tensor of `shape` from a list, a tuple or an integer tensor (any device);
    ValueError naming `name` when it has another shape or holds a value beyond 32 bits."""
    import torch

    t = values if isinstance(values, torch.Tensor) else torch.tensor(values)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integers, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {_shape(t)}; it must be {tuple(shape)}")
    t = t.to("cpu", torch.int64)
    if t.numel() and (t.min() < -2**31 or t.max() >= 2**31):
        raise ValueError(f"{name} holds {int(t.max() if t.max() >= 2**31 else t.min())}, "
                         "beyond a 32-bit int")
    return t.to(torch.int32).contiguous()


def decode(q, k_new, v_new, k_cache, v_cache, cache_lens, block_table=None, scale=None,
           step="12_decode", num_splits=0):
    """One decoding step: appends k_new and v_new into the cache, then attends. Returns O
    ([B, q_len, H_q, d], q's dtype) and L (fp32 [B, H_q, q_len], the row logsumexp).

    q is [B, q_len, H_q, d] with 1 <= q_len <= 16; k_new and v_new [B, q_len, H_kv, d] (GQA and
    MQA: H_q a multiple of H_kv). cache_lens holds B ints (a list or an integer tensor): the
    keys each sequence holds before this step. The new rows go to positions cache_lens[b] ..
    cache_lens[b] + q_len - 1, and new query i sees positions [0, cache_lens[b] + i]: causal
    among the new tokens. The caller then adds q_len to its lengths (PagedKVCache.advance).

    The cache, written in place (so it must be contiguous), in q's dtype:
      block_table None: contiguous, k_cache and v_cache [B, N_max, H_kv, d];
      block_table [B, max_pages] (ints): paged, k_cache and v_cache a pool
      [num_pages, page_size, H_kv, d]; row pos of sequence b is row pos % page_size of page
      block_table[b][pos // page_size].
    scale None means 1/sqrt(d). num_splits 0 lets the step choose its split count for this
    GPU; 1 .. 128 forces one. What the tensors get wrong raises ValueError naming the
    argument; what the C API refuses (a length past N_max or past the pages, a table entry
    outside the pool, q_len, the dtype or head dim) raises FlashTutorialError with its message.
    Nothing is written on an error.
    """
    import torch

    dtype = _dtype_of((("q", q), ("k_new", k_new), ("v_new", v_new), ("k_cache", k_cache),
                       ("v_cache", v_cache)))
    b, q_len, heads_q, d = q.shape
    if k_new.shape[0] != b or k_new.shape[1] != q_len or k_new.shape[3] != d:
        raise ValueError(f"k_new has shape {_shape(k_new)}, q has {_shape(q)}: k_new must be "
                         f"[B, q_len, H_kv, d] = [{b}, {q_len}, H_kv, {d}]")
    _like("v_new", v_new, k_new, "k_new")
    _like("v_cache", v_cache, k_cache, "k_cache")
    heads_kv = k_new.shape[2]
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous: the step appends into it in place")
        if t.shape[2] != heads_kv or t.shape[3] != d:
            raise ValueError(f"{name} has shape {_shape(t)}: its last two dims must be H_kv and "
                             f"d of k_new, ({heads_kv}, {d})")
    lens = _int_array("cache_lens", cache_lens, (b,))
    # The C struct's fields are 32-bit ints, and ctypes would wrap a larger size silently: a
    # cache of 2^31 rows or more per sequence (or pages in a pool) is refused here, by name.
    for name, size in (("k_cache.shape[0]", k_cache.shape[0]), ("k_cache.shape[1]",
                                                                  k_cache.shape[1])):
        if size >= 2**31:
            raise ValueError(f"{name} ({size}) exceeds the limit of {2**31 - 1}")
    p = _DecodeProblem(b, heads_q, heads_kv, d, q_len, float(scale or 0.0), dtype)
    p.cache_lens = ctypes.cast(lens.data_ptr(), ctypes.POINTER(ctypes.c_int))
    table = None
    if block_table is None:
        if k_cache.shape[0] != b:
            raise ValueError(f"k_cache has shape {_shape(k_cache)}: a contiguous cache is "
                             f"[B, N_max, H_kv, d] with B = {b} (q's batch); pass block_table "
                             "for a paged pool")
        p.cache, p.n_max = _CACHE_CONTIGUOUS, k_cache.shape[1]
    else:
        bt = block_table if isinstance(block_table, torch.Tensor) else torch.tensor(block_table)
        if bt.dim() != 2 or bt.shape[0] != b or bt.shape[1] < 1:
            raise ValueError(f"block_table has shape {_shape(bt)}; it must be [B, max_pages] "
                             f"with B = {b} (q's batch) and max_pages >= 1")
        table = _int_array("block_table", bt, bt.shape)
        p.cache, p.page_size, p.num_pages = _CACHE_PAGED, k_cache.shape[1], k_cache.shape[0]
        p.max_pages = table.shape[1]
        p.block_table = ctypes.cast(table.data_ptr(), ctypes.POINTER(ctypes.c_int))
    q, k_new, v_new = q.contiguous(), k_new.contiguous(), v_new.contiguous()
    lib, name = _load(), step.encode()
    with torch.cuda.device(q.device):
        splits = ctypes.c_int(num_splits)
        if num_splits == 0:
            _check(lib.fa_decode_splits(name, ctypes.byref(p), ctypes.byref(splits)))
        ws = ctypes.c_size_t(0)
        _check(lib.fa_decode_workspace_bytes(name, ctypes.byref(p), splits.value,
                                             ctypes.byref(ws)))
        work = torch.empty(max(ws.value, 1), device=q.device, dtype=torch.uint8)
        o = torch.empty_like(q)
        lse = torch.empty((b, heads_q, q_len), device=q.device, dtype=torch.float32)
        stream = torch.cuda.current_stream(q.device).cuda_stream
        _check(lib.fa_decode(name, ctypes.byref(p), splits.value, q.data_ptr(),
                             k_new.data_ptr(), v_new.data_ptr(), k_cache.data_ptr(),
                             v_cache.data_ptr(), o.data_ptr(), lse.data_ptr(), work.data_ptr(),
                             ws.value, stream))
    return o, lse  # lens and table lived through the call: the C API has copied them


class PagedKVCache:
    """A paged KV cache for `layers` layers of B sequences: per layer a K and a V pool
    [num_pages, page_size, H_kv, d] (filled with NaN, so a row read before it is written
    shows), one block table [B, max_pages] (int32, on the host; -1 where no page is given) and
    the lengths, shared by every layer. Pages are handed out in a shuffled order (seed), so
    no sequence's pages lie in order in the pool.

        cache.append(layer, b, k, v)        # prefill: k, v [n, H_kv, d] after sequence b's rows
        o, lse = cache.decode(layer, q, k_new, v_new)   # decode() over this cache
        cache.advance(n)                    # after every layer: lengths += n (or advance(n, b))
    """

    def __init__(self, batch, heads_kv, head_dim, num_pages, max_pages, page_size=16,
                 layers=1, dtype=None, device="cuda", seed=0):
        import torch

        if dtype is None:
            dtype = torch.float16
        for name, value in (("batch", batch), ("heads_kv", heads_kv), ("head_dim", head_dim),
                            ("num_pages", num_pages), ("max_pages", max_pages),
                            ("page_size", page_size), ("layers", layers)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} ({value!r}) must be an integer >= 1")
        self.page_size, self.num_pages, self.max_pages = page_size, num_pages, max_pages
        shape = (num_pages, page_size, heads_kv, head_dim)
        self.k = [torch.full(shape, float("nan"), dtype=dtype, device=device)
                  for _ in range(layers)]
        self.v = [torch.full(shape, float("nan"), dtype=dtype, device=device)
                  for _ in range(layers)]
        self.block_table = torch.full((batch, max_pages), -1, dtype=torch.int32)
        self.lengths = [0] * batch
        gen = torch.Generator().manual_seed(seed)
        self._free = torch.randperm(num_pages, generator=gen).tolist()

    def reserve(self, b, rows):
        """Gives sequence b pages enough for `rows` rows (from the shuffled free list)."""
        need = -(-rows // self.page_size)
        if need > self.max_pages:
            raise ValueError(f"sequence {b}: {rows} rows need {need} pages of {self.page_size}, "
                             f"more than max_pages ({self.max_pages})")
        have = int((self.block_table[b] >= 0).sum())
        if need - have > len(self._free):
            raise ValueError(f"sequence {b}: {rows} rows need {need - have} more pages; "
                             f"{len(self._free)} of num_pages ({self.num_pages}) are free")
        for j in range(have, need):
            self.block_table[b, j] = self._free.pop()

    def _rows(self, b, start, n, device):
        """Pool (page, row) indices of positions start .. start + n - 1 of sequence b."""
        import torch

        pos = torch.arange(start, start + n)
        pages = self.block_table[b, pos // self.page_size].long()
        return pages.to(device), (pos % self.page_size).to(device)

    def append(self, layer, b, k, v):
        """Writes k and v ([n, H_kv, d]) at positions lengths[b] .. lengths[b] + n - 1 of
        sequence b in `layer`'s pools (a prefill; advance(n, b) once every layer has them)."""
        n = k.shape[0]
        self.reserve(b, self.lengths[b] + n)
        pages, rows = self._rows(b, self.lengths[b], n, self.k[layer].device)
        self.k[layer][pages, rows] = k.to(self.k[layer].dtype)
        self.v[layer][pages, rows] = v.to(self.v[layer].dtype)

    def decode(self, layer, q, k_new, v_new, **kwargs):
        """decode() over `layer`'s pools with this cache's block table and lengths, after
        reserving the pages the q_len new tokens of every sequence need."""
        for b, length in enumerate(self.lengths):
            self.reserve(b, length + q.shape[1])
        return decode(q, k_new, v_new, self.k[layer], self.v[layer], self.lengths,
                      self.block_table, **kwargs)

    def advance(self, n, b=None):
        """Adds n rows to sequence b's length (every sequence's when b is None)."""
        for i in range(len(self.lengths)) if b is None else (b,):
            self.lengths[i] += n

    def gather(self, layer, b):
        """Sequence b's K and V rows of `layer`, [lengths[b], H_kv, d] each (dense copies)."""
        pages, rows = self._rows(b, 0, self.lengths[b], self.k[layer].device)
        return self.k[layer][pages, rows], self.v[layer][pages, rows]
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
    for i in range(lib.fa_num_decode_steps()):
        print(f"{lib.fa_decode_step_name(i).decode():24s} {'decode':9s} "
              f"{lib.fa_decode_step_lesson(i).decode()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
