#!/usr/bin/env python3
"""check_ring_plan.py — step 13's plan (steps/13_ring_attention/ring_plan.py) against the ring
reference (reference/ring.h), on the CPU, without PyTorch (ctest cpu/ring_plan):

  1. the work of every rank at every step, and every refusal's message, equal the reference's
     (bin/ring_dump) for P = 1 … 8 and 16, both layouts, causal and not, N_q = N_kv and not;
  2. the time model (ring_time, ring_min_hidden_n) equals the reference's to 1e-12;
  3. the calls of every step of every rank (plan_step) cover each visible score entry exactly
     once, with the right mask, no hidden one, and give every local row at most one call per
     step (the merge keeps one partial per row and step); zigzag gives every rank the same
     work at every step;
  4. calibrate() inverts the model: a ring timed by the model gives back its constants.

    tests/check_ring_plan.py --ring-dump build/bin/ring_dump
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "steps",
                                "13_ring_attention"))
import ring_plan as rp  # noqa: E402

passed = failed = 0


def check(ok, what):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"FAIL  {what}")


def close(a, b, tol=1e-12):
    return abs(a - b) <= tol * max(1.0, abs(b))


def cases():
    """(batch, heads_q, heads_kv, n_q, n_kv, d, dtype, causal, ranks, layout, flops, bytes)."""
    out = []
    for ranks in list(range(1, 9)) + [16]:
        for layout in rp.LAYOUTS:
            for causal in (0, 1):
                g = rp.num_chunks(ranks, layout)
                for n_q, n_kv in ((g * 3, g * 3), (g * 64, g * 64), (g * 5, g * 7), (g * 3 + 1,
                                                                                     g * 3 + 1)):
                    out.append((2, 4, 2, n_q, n_kv, 128, "bf16", causal, ranks, layout, 6.0e14,
                                4.0e11))
    out += [(1, 16, 16, 131072, 131072, 128, "bf16", c, p, l, 6.2e14, 3.5e11)
            for c in (0, 1) for p in (2, 8, 64) for l in rp.LAYOUTS]
    out += [(1, 32, 8, 4096, 4096, 64, "fp16", 1, 4, "zigzag", 1e13, float("inf")),
            (1, 2, 2, 12, 12, 16, "fp32", 1, 0, "zigzag", 1e12, 1e9),
            (1, 2, 2, 12, 12, 16, "fp32", 1, 4, "zigzag", 1e12, 1e9),
            (1, 2, 2, 12, 12, 16, "fp32", 1, 5, "contiguous", 1e12, 1e9),
            (1, 2, 2, 6, 12, 16, "fp32", 1, 2, "contiguous", 1e12, 1e9),
            (1, 2, 2, 6, 9, 16, "fp32", 0, 2, "contiguous", 1e12, 1e9)]
    return out


def python_side(c):
    b, hq, hkv, nq, nkv, d, dtype, causal, ranks, layout, flops, bw = c
    try:
        out = {"work": rp.ring_work(b, hq, nq, nkv, bool(causal), ranks, layout)}
        if nq == nkv:
            t = rp.ring_time(b, hq, hkv, nq, d, dtype, bool(causal), ranks, layout, flops, bw)
            out["time"] = t
            out["min_hidden_n"] = rp.ring_min_hidden_n(b, hq, hkv, d, dtype, bool(causal), ranks,
                                                       layout, flops, bw)
        return out
    except rp.RingError as e:
        return {"error": str(e)}


def compare_reference(ring_dump):
    cs = cases()
    text = "\n".join(" ".join(str(x) if not isinstance(x, float) else repr(x).replace(
        "inf", "inf") for x in c) for c in cs) + "\n"
    run = subprocess.run([ring_dump], input=text, capture_output=True, text=True)
    check(run.returncode == 0, f"ring_dump ran: {run.stderr.strip()}")
    lines = run.stdout.splitlines()
    check(len(lines) == len(cs), f"ring_dump answered {len(lines)} of {len(cs)} cases")
    errors = 0
    for c, line in zip(cs, lines):
        want, got = json.loads(line), python_side(c)
        what = f"case {c}"
        if "error" in want or "error" in got:
            check(want.get("error") == got.get("error"),
                  f"{what}: refusal {got.get('error')!r}, reference {want.get('error')!r}")
            errors += "error" in want
            continue
        check(got["work"] == want["work"], f"{what}: work {got['work']} vs {want['work']}")
        if "time" in want:
            t, w = got["time"], want["time"]
            ok = (len(t.step_s) == len(w["step_s"]) and
                  all(close(a, b) for a, b in zip(t.step_s, w["step_s"])) and
                  all(close(getattr(t, k), w[k]) for k in ("total_s", "compute_s", "send_s",
                                                           "hidden_fraction")) and
                  t.exposed_steps == w["exposed_steps"])
            check(ok, f"{what}: ring_time {t} vs {w}")
            check(got["min_hidden_n"] == want["min_hidden_n"],
                  f"{what}: ring_min_hidden_n {got['min_hidden_n']} vs {want['min_hidden_n']}")
    check(errors >= 6, f"the reference refused {errors} cases (at least 6 are bad)")
    return len(cs)


def visible(rel, i, j):
    """Is entry (i, j) of a pair (rows i, cols j inside the chunks) visible?"""
    return rel == rp.FULL or (rel == rp.DIAGONAL and j <= i)


def check_calls(ranks, layout, causal, c=3):
    """Every visible entry of every rank and step covered once by the calls, nothing else."""
    work = rp.ring_work(1, 1, 2 * ranks * c if layout == "zigzag" else ranks * c,
                        2 * ranks * c if layout == "zigzag" else ranks * c, causal, ranks, layout)
    for r in range(ranks):
        qcs = rp.chunks_of(r, ranks, layout)
        for s in range(ranks):
            plan = rp.plan_step(r, s, ranks, layout, causal, c)
            kcs = rp.chunks_of(plan.source, ranks, layout)
            covered = {}
            rows_called = []
            for call in plan.calls:
                rows_called += range(call.q0, call.q1)
                for i in range(call.q0, call.q1):
                    for j in range(call.k0, call.k1):
                        if call.causal and j - call.k0 > i - call.q0:
                            continue
                        covered[(i, j)] = covered.get((i, j), 0) + 1
            want = {(a * c + i, b * c + j)
                    for a, qc in enumerate(qcs) for b, kc in enumerate(kcs)
                    for i in range(c) for j in range(c)
                    if visible(rp.relation(causal, qc, kc), i, j)}
            what = f"P {ranks} {layout} causal {causal} rank {r} step {s}"
            check(set(covered) == want and all(v == 1 for v in covered.values()),
                  f"{what}: calls {plan.calls} cover the visible entries once")
            check(len(rows_called) == len(set(rows_called)),
                  f"{what}: at most one call per local row")
            check(sum(rp.call_entries(x) for x in plan.calls) == work[r][s],
                  f"{what}: the calls' entries are the reference's work")
            check(len(plan.calls) <= 1, f"{what}: one call at most ({plan.calls})")
    if layout == "zigzag":
        check(all(work[r][s] == work[0][s] for r in range(ranks) for s in range(ranks)),
              f"P {ranks} zigzag causal {causal}: every rank the same work at every step")


def check_model():
    # P = 1 sends nothing; calibrate() gives back the model's constants.
    t = rp.ring_time(1, 16, 16, 65536, 128, "bf16", False, 1, "zigzag", 6e14, 4e11)
    check(t.hidden_fraction == 1.0 and t.send_s > 0 and len(t.step_s) == 1,
          "P = 1: nothing sent, all hidden")
    flops_per_s, bytes_per_s = 5.5e14, 3.0e11
    t = rp.ring_time(1, 16, 16, 131072, 128, "bf16", False, 2, "zigzag", flops_per_s,
                     bytes_per_s)
    work = rp.ring_work(1, 16, 131072, 131072, False, 2, "zigzag")
    flops = 4.0 * 128 * sum(max(w[s] for w in work) for s in range(2))
    f, w = rp.calibrate(t.compute_s, flops, t.send_s, 2 * 16 * 65536 * 128 * 2)
    check(close(f, flops_per_s) and close(w, bytes_per_s), f"calibrate: {f}, {w}")
    for bad in ((0, 1, 1, 1), (1, 1, -1, 1)):
        try:
            rp.calibrate(*bad)
            check(False, f"calibrate refuses {bad}")
        except ValueError:
            check(True, "")
    try:
        rp.num_chunks(2, "striped")
        check(False, "an unknown layout is refused")
    except rp.RingError as e:
        check("layout ('striped') must be 'contiguous' or 'zigzag'" in str(e), str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ring-dump", required=True, help="the ring_dump program (bin/ring_dump)")
    args = ap.parse_args()
    n = compare_reference(args.ring_dump)
    for ranks in list(range(1, 9)) + [16]:
        for layout in rp.LAYOUTS:
            for causal in (False, True):
                check_calls(ranks, layout, causal)
    check_model()
    # N_q != N_kv (unmasked): the calls in K/V rows cover every local K/V row of each step.
    for ranks in (1, 2, 3):
        for layout in rp.LAYOUTS:
            for r in range(ranks):
                for s in range(ranks):
                    pl = rp.plan_step(r, s, ranks, layout, False, 3, 5)
                    per = rp.num_chunks(ranks, layout) // ranks
                    check([(c.q0, c.q1, c.k0, c.k1, c.causal) for c in pl.calls] ==
                          [(0, 3 * per, 0, 5 * per, False)],
                          f"N_q != N_kv, P {ranks} {layout} rank {r} step {s}: {pl.calls}")
    try:
        rp.plan_step(0, 0, 2, "zigzag", True, 3, 5)
        check(False, "plan_step refuses causal chunks of unequal lengths")
    except rp.RingError as e:
        check("causal needs N_q = N_kv" in str(e), str(e))
    print(f"check_ring_plan: {passed} checks passed, {failed} failed ({n} cases against the "
          "reference)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
