#!/usr/bin/env python3
"""The FLOP and byte counts of one attention problem, for the Python scripts.

The same formulas as common/perf.h (attention_flops, min_io_bytes, nxn_matrix_bytes,
attention_backward_flops, backward_min_io_bytes) and decoding's byte count
(decode_kv_bytes, as DecodeProblem::kv_bytes_read in common/decode.h); the
test conventions/perf_formulas (tests/check_perf_formulas.py) checks that the two agree on a
list of problems. docs/conventions.md explains the convention. scripts/peers.py and
scripts/make_results.py import this module; nothing else in Python may write the formulas.
It also holds the one byte formatter of the Python scripts (human_bytes), printing sizes as the
C++ programs do (fa::cli::human_bytes).

Run as a program it prints the counts of one problem, e.g.
  python3 scripts/fa_perf.py --batch 4 --heads-q 32 --n-q 4096 --n-kv 4096 --d 64 --causal
"""

import argparse
import sys

# Bytes of one element of each storage type (common/problem.cpp: dtype_size).
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def attention_flops(batch, heads_q, n_q, n_kv, d, causal):
    """Forward FLOPs by the FlashAttention convention: 4·B·H_q·N_q·N_kv·d (two matmuls of
    2·N_q·N_kv·d per head; softmax not counted), halved when causal, whatever N_q and N_kv."""
    f = 4.0 * batch * heads_q * n_q * n_kv * d
    return f / 2 if causal else f


def attention_backward_flops(batch, heads_q, n_q, n_kv, d, causal):
    """Backward FLOPs: 2.5 × the forward's (five matrix products where the forward has two),
    the FlashAttention convention; halved when causal, as the forward."""
    return 2.5 * attention_flops(batch, heads_q, n_q, n_kv, d, causal)


def _elements(batch, heads_q, heads_kv, n_q, n_kv, d, dtype):
    """(element size, elements of Q, of K, of L) of a problem."""
    try:
        e = DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}") from None
    return (e, float(batch) * heads_q * n_q * d, float(batch) * heads_kv * n_kv * d,
            float(batch) * heads_q * n_q)


def min_io_bytes(batch, heads_q, heads_kv, n_q, n_kv, d, dtype):
    """The fewest bytes any forward pass moves through device memory: Q, K, V read once, O
    written once (in the storage type), L written once (fp32)."""
    e, q, kv, lse = _elements(batch, heads_q, heads_kv, n_q, n_kv, d, dtype)
    return e * (2.0 * q + 2.0 * kv) + 4.0 * lse


def backward_min_io_bytes(batch, heads_q, heads_kv, n_q, n_kv, d, dtype):
    """The fewest bytes any backward pass moves through device memory: Q, K, V, O, dO read
    once and dQ, dK, dV written once (in the storage type), L read once (fp32)."""
    e, q, kv, lse = _elements(batch, heads_q, heads_kv, n_q, n_kv, d, dtype)
    return e * (4.0 * q + 4.0 * kv) + 4.0 * lse


def nxn_matrix_bytes(batch, heads_q, n_q, n_kv):
    """Bytes of one N_q × N_kv matrix (all batches and query heads) in fp32."""
    return 4.0 * batch * heads_q * n_q * n_kv


def decode_kv_bytes(batch, heads_kv, kv_len, d, dtype):
    """The bytes a decoding step must read from its cache when every one of the batch's
    sequences attends to kv_len keys: each K and V row once, B·kv_len·H_kv·d·2·e
    (common/decode.h: DecodeProblem::kv_bytes_read, docs/conventions.md, Decoding)."""
    e, _, kv, _ = _elements(batch, 1, heads_kv, 1, kv_len, d, dtype)
    return 2.0 * e * kv


def human_bytes(n):
    """"512.0 MiB": n bytes in binary units with one decimal, "37 B" below a KiB."""
    n = float(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def main(argv=None):
    p = argparse.ArgumentParser(description="FLOP and byte counts of one attention problem.")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads-q", type=int, default=1)
    p.add_argument("--heads-kv", type=int, default=None, help="default: --heads-q")
    p.add_argument("--n-q", type=int, required=True)
    p.add_argument("--n-kv", type=int, default=None, help="default: --n-q")
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="fp32")
    p.add_argument("--causal", action="store_true")
    a = p.parse_args(argv)
    heads_kv = a.heads_q if a.heads_kv is None else a.heads_kv
    n_kv = a.n_q if a.n_kv is None else a.n_kv
    print(f"flops {attention_flops(a.batch, a.heads_q, a.n_q, n_kv, a.d, a.causal):.6g}")
    io = min_io_bytes(a.batch, a.heads_q, heads_kv, a.n_q, n_kv, a.d, a.dtype)
    print(f"min_io_bytes {io:.6g}")
    print(f"nxn_matrix_bytes {nxn_matrix_bytes(a.batch, a.heads_q, a.n_q, n_kv):.6g}")
    bflops = attention_backward_flops(a.batch, a.heads_q, a.n_q, n_kv, a.d, a.causal)
    print(f"backward_flops {bflops:.6g}")
    bio = backward_min_io_bytes(a.batch, a.heads_q, heads_kv, a.n_q, n_kv, a.d, a.dtype)
    print(f"backward_min_io_bytes {bio:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
