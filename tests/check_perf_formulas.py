#!/usr/bin/env python3
"""Check that the Python FLOP and byte formulas (scripts/fa_perf.py) agree with C++'s
(common/perf.h; common/decode.h for decode_kv_bytes) on every problem bin/perf_formulas
lists: causal and not, N_q ≠ N_kv, GQA,
every dtype; the forward's and the backward's FLOPs and minimum bytes, and the N×N bytes. Registered in ctest as conventions/perf_formulas.

  python3 tests/check_perf_formulas.py --program build/bin/perf_formulas

Exit status 0 when every value agrees to a relative 1e-12, 1 otherwise (each difference is
printed). Standard library only.
"""

import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fa_perf  # noqa: E402

REL_TOL = 1e-12
REQUIRED = ("causal", "gqa", "n_q<n_kv", "n_q>n_kv", "fp32", "fp16", "bf16")


def python_values(c):
    return {
        "flops": fa_perf.attention_flops(c["batch"], c["heads_q"], c["n_q"], c["n_kv"], c["d"],
                                         c["causal"]),
        "min_io_bytes": fa_perf.min_io_bytes(c["batch"], c["heads_q"], c["heads_kv"], c["n_q"],
                                             c["n_kv"], c["d"], c["dtype"]),
        "nxn_matrix_bytes": fa_perf.nxn_matrix_bytes(c["batch"], c["heads_q"], c["n_q"],
                                                     c["n_kv"]),
        "backward_flops": fa_perf.attention_backward_flops(c["batch"], c["heads_q"], c["n_q"],
                                                           c["n_kv"], c["d"], c["causal"]),
        "backward_min_io_bytes": fa_perf.backward_min_io_bytes(
            c["batch"], c["heads_q"], c["heads_kv"], c["n_q"], c["n_kv"], c["d"], c["dtype"]),
        # a decoding step of B sequences that attend to N_kv keys each
        "decode_kv_bytes": fa_perf.decode_kv_bytes(c["batch"], c["heads_kv"], c["n_kv"], c["d"],
                                                   c["dtype"]),
    }


def kinds(c):
    k = {c["dtype"]}
    if c["causal"]:
        k.add("causal")
    if c["heads_kv"] != c["heads_q"]:
        k.add("gqa")
    if c["n_q"] < c["n_kv"]:
        k.add("n_q<n_kv")
    if c["n_q"] > c["n_kv"]:
        k.add("n_q>n_kv")
    return k


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", required=True, help="bin/perf_formulas")
    args = p.parse_args(argv)
    r = subprocess.run([args.program], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{args.program} failed (exit {r.returncode}): {r.stderr.strip()}")
        return 1
    cases = json.loads(r.stdout)
    problems = []
    covered = set()
    for c in cases:
        covered |= kinds(c)
        want = python_values(c)
        for key, py in want.items():
            if key not in c:
                problems.append(f"{key}: {args.program} does not print it")
                continue
            cpp = c[key]
            if not (py > 0 and math.isclose(cpp, py, rel_tol=REL_TOL, abs_tol=0)):
                shape = {k: c[k] for k in ("batch", "heads_q", "heads_kv", "n_q", "n_kv", "d",
                                           "causal", "dtype")}
                problems.append(f"{key}: C++ {cpp!r}, Python {py!r} for {shape}")
    missing = [k for k in REQUIRED if k not in covered]
    if missing:
        problems.append("the problem list covers no case of: " + ", ".join(missing))
    for line in problems:
        print("error: " + line)
    print(f"check_perf_formulas.py: {len(cases)} problems, "
          f"{len(python_values(cases[0])) if cases else 0} formulas each, "
          f"{len(problems)} differences")
    return 1 if problems or not cases else 0


if __name__ == "__main__":
    sys.exit(main())
