#!/usr/bin/env python3
"""Tests of scripts/make_results.py (and what reads its output: scripts/plots.py,
scripts/refresh_docs.py's README table) on the forward and backward passes, without a GPU:
the committed docs/results/h200.json and fixtures of bench_all --pass backward and
peers.py --pass backward output. Registered in ctest as conventions/make_results.

  1. The committed results file re-rendered (--merge, no new input) gives back the same JSON
     and Markdown, byte for byte: a file without "pass" fields reads as forward passes.
  2. Backward records merged into it: every forward record is kept as it was; the backward
     ones carry "pass": "backward", parsed from impl/backward/… names (ours) and from the
     peers' "pass" field, with TFLOP/s at 2.5 × the forward's FLOPs where a record has none;
     h200.md keeps its forward part and gains backward tables per (dtype, d, causal) and
     ratios against the backward peers.
  3. Re-measuring forward records keeps the backward ones, and the reverse; a record whose
     pass is neither forward nor backward is refused, naming the file.
  4. The README table (refresh_docs.results_table) and the plots' choice of the backward
     memory group (plots.pick_backward_memory_group) read the passes apart; with matplotlib,
     plots.py writes the backward plots too.

Exit status 0 when every check holds, 1 otherwise (each failure printed). Standard library.
"""

import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import fa_perf  # noqa: E402
import make_results  # noqa: E402
import plots  # noqa: E402
import refresh_docs  # noqa: E402

TOOL = os.path.join(ROOT, "scripts", "make_results.py")
RESULTS = os.path.join(ROOT, "docs", "results", "h200.json")
MD = os.path.join(ROOT, "docs", "results", "h200.md")

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def run(*args):
    r = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def shape(n, d=64, causal=False):
    return dict(d=d, causal=causal, batch=16384 // n, heads_q=2048 // d, heads_kv=2048 // d,
                n_q=n, n_kv=n)


def bench_entry(impl, kind, n, ms, d=64, causal=False, dtype="fp32"):
    """One Google Benchmark entry as bench_all writes it (pass after the impl)."""
    s = shape(n, d, causal)
    name = (f"{impl}/{kind + '/' if kind else ''}{dtype}/d{d}/causal{int(causal)}/B{s['batch']}"
            f"/Hq{s['heads_q']}/Hkv{s['heads_kv']}/Nq{n}/Nkv{n}/bnhd/manual_time")
    f = fa_perf.attention_backward_flops if kind == "backward" else fa_perf.attention_flops
    flops = f(s["batch"], s["heads_q"], n, n, d, causal)
    return {"name": name, "run_name": name, "run_type": "iteration", "iterations": 10,
            "real_time": ms, "time_unit": "ms", "median_ms": ms,
            "tflops": flops / (ms * 1e-3) / 1e12, "extra_device_bytes": 1000.0 * n,
            "min_io_bytes": 1.0, "label": "O and L from 04_flash_attention"}


def peer_record(impl, n, ms, extra, d=64, causal=False, dtype="fp32", tflops=True):
    s = shape(n, d, causal)
    r = dict(impl=impl, layout="bhnd", dtype=dtype, median_ms=ms, extra_device_bytes=extra,
             **s)
    r["pass"] = "backward"
    if tflops:
        flops = fa_perf.attention_backward_flops(s["batch"], s["heads_q"], n, n, d, causal)
        r["tflops"] = flops / (ms * 1e-3) / 1e12
    return r


NS = (1024, 4096)
OURS_MS = {1024: 8.0, 4096: 30.0}
EFF_MS = {1024: 2.0, 4096: 6.0}
BENCH_BACKWARD = {"context": {}, "benchmarks": [
    bench_entry("10_backward", "backward", n, OURS_MS[n], causal=c) for n in NS
    for c in (False, True)]}
PEERS_BACKWARD = {"gpu": "NVIDIA H200", "torch": "2.9.0", "cudnn": 91002, "cuda": "12.8",
                  "pass": "backward", "results": [
                      peer_record("torch_efficient", n, EFF_MS[n], 5000.0 * n) for n in NS] + [
                      peer_record("torch_naive", n, 20.0, 4.0 * n * n * 32, tflops=False)
                      for n in NS] + [
                      peer_record("torch_flash", 4096, 3.0, 1.0e6, d=128, dtype="bf16")]}


def main():
    original = json.loads(read(RESULTS))
    with tempfile.TemporaryDirectory() as tmp:
        out_json, out_md = os.path.join(tmp, "h200.json"), os.path.join(tmp, "h200.md")

        # 1. the committed file re-rendered: the same bytes
        with open(out_json, "w", encoding="utf-8") as f:
            f.write(read(RESULTS))
        rc, log = run("--merge", "--out-json", out_json, "--out-md", out_md)
        expect(rc == 0, f"re-rendering the committed results exits 0 (rc {rc}):\n{log}")
        expect(read(out_json) == read(RESULTS), "re-rendered h200.json is the committed one")
        expect(read(out_md) == read(MD), "re-rendered h200.md is the committed one")
        expect(not any("pass" in r for r in original["results"]
                       if r.get("pass", "forward") == "forward"),
               "the committed forward records have no pass field")

        # 2. backward records merged into the committed forward part (its backward records,
        # if any, left out: the fixtures below stand for them), under the forward's header
        run_fwd = original.get("runs", {}).get("forward", original)
        original = dict(original, results=[r for r in original["results"] if "pass" not in r],
                        **{k: run_fwd[k] for k in ("date", "commit", "command")})
        original.pop("runs", None)
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump(original, f)
        rc, log = run("--merge", "--out-json", out_json, "--out-md", out_md)
        expect(rc == 0, f"re-rendering the forward part exits 0 (rc {rc}):\n{log}")
        forward_md = read(out_md)
        bench = os.path.join(tmp, "bench-backward-fp32.json")
        peers = os.path.join(tmp, "peers-backward.json")
        with open(bench, "w", encoding="utf-8") as f:
            json.dump(BENCH_BACKWARD, f)
        with open(peers, "w", encoding="utf-8") as f:
            # the software of the committed peers, so that h200.md's header stays as it is
            json.dump(dict(PEERS_BACKWARD, **original.get("peers_software", {})), f)
        rc, log = run("--bench", bench, "--peers", peers, "--merge", "--out-json", out_json,
                      "--out-md", out_md, "--date", original["date"], "--commit",
                      original["commit"], "--command", original["command"])
        expect(rc == 0, f"merging backward records exits 0 (rc {rc}):\n{log}")
        merged = json.loads(read(out_json))["results"]
        forward = [r for r in merged if "pass" not in r]
        backward = [r for r in merged if r.get("pass") == "backward"]
        expect(len(merged) == len(forward) + len(backward),
               "every merged record is forward (no pass) or backward")
        expect(forward == original["results"],
               "the forward records are kept exactly, in their order, before the backward ones")
        expect(merged[:len(forward)] == forward, "the forward records come first")
        want = len(BENCH_BACKWARD["benchmarks"]) + len(PEERS_BACKWARD["results"])
        expect(len(backward) == want, f"{want} backward records (got {len(backward)})")
        ours = [r for r in backward if r["impl"] == "10_backward"]
        expect(len(ours) == 4 and all(r["layout"] == "bnhd" and r["dtype"] == "fp32"
                                      for r in ours),
               f"10_backward/backward/fp32/… names parse into backward records: {ours}")
        naive = [r for r in backward if r["impl"] == "torch_naive"]
        for r in naive:
            flops = fa_perf.attention_backward_flops(r["batch"], r["heads_q"], r["n_q"],
                                                     r["n_kv"], r["d"], r["causal"])
            expect(abs(r["tflops"] - flops / (r["median_ms"] * 1e-3) / 1e12) < 1e-9,
                   f"a backward record without tflops gets 2.5 × the forward FLOPs: {r}")

        md = read(out_md)
        expect(md.startswith(forward_md), "h200.md keeps its forward part as it was")
        back = md[len(forward_md):]
        expect(back.lstrip().startswith("# Backward attention on NVIDIA H200"),
               f"the backward part follows, under its own title:\n{back[:300]}")
        for title in ("## Backward: fp32, d = 64, non-causal", "## Backward: fp32, d = 64, causal",
                      "## Backward: bf16, d = 128, non-causal", "## Backward ratios"):
            expect(title in back, f"the backward part has {title!r}:\n{back}")
        s = shape(4096)
        tf = fa_perf.attention_backward_flops(s["batch"], s["heads_q"], 4096, 4096, 64, False)
        ours_4096 = tf / (OURS_MS[4096] * 1e-3) / 1e12
        row = next((line for line in back.splitlines() if line.startswith("| 10_backward |")),
                   "")
        expect(f"| {ours_4096:.1f} |" in row or row.endswith(f"| {ours_4096:.1f} |"),
               f"the backward table shows 10_backward's TFLOP/s at N = 4096 ({ours_4096:.1f}): "
               f"{row!r}")
        ratio = f"{EFF_MS[4096] / OURS_MS[4096]:.2f}×"
        ratio_row = next((line for line in back.splitlines()
                          if line.startswith("| 10_backward / torch_efficient |")), "")
        expect(ratio_row.endswith(f"| {ratio} |"),
               f"the backward ratio against torch_efficient at N = 4096 is {ratio}: "
               f"{ratio_row!r}")
        expect("10_backward / torch_naive" not in back,
               "the backward ratios are against --backward-ratio-peers only")

        # 3. re-measuring one pass keeps the other
        fwd_bench = os.path.join(tmp, "bench-fp32.json")
        old = next(r for r in forward if r["impl"] == "04_flash_attention" and r["dtype"] ==
                   "fp32" and r["n_q"] == 4096 and r["d"] == 64 and not r["causal"])
        with open(fwd_bench, "w", encoding="utf-8") as f:
            json.dump({"benchmarks": [bench_entry("04_flash_attention", None, 4096, 1.0)]}, f)
        rc, log = run("--bench", fwd_bench, "--merge", "--out-json", out_json,
                      "--out-md", out_md)
        again = json.loads(read(out_json))["results"]
        expect(rc == 0 and len(again) == len(merged),
               f"a forward re-measure replaces, adds nothing (rc {rc}, {len(again)} records)")
        expect(sum(1 for r in again if r.get("pass") == "backward") == len(backward),
               "a forward re-measure keeps every backward record")
        new = next(r for r in again if r["impl"] == "04_flash_attention" and
                   "pass" not in r and r["dtype"] == "fp32" and r["n_q"] == 4096 and
                   r["d"] == 64 and not r["causal"] and r["layout"] == "bnhd")
        expect(new["median_ms"] == 1.0 and old["median_ms"] != 1.0,
               f"the re-measured forward record is the new one: {new}")
        rc, log = run("--bench", bench, "--merge", "--out-json", out_json, "--out-md", out_md)
        expect(rc == 0 and json.loads(read(out_json))["results"] == again,
               f"re-measuring the same backward records changes nothing else (rc {rc}):\n{log}")
        bad = copy.deepcopy(PEERS_BACKWARD)
        bad["results"][0]["pass"] = "sideways"
        with open(peers, "w", encoding="utf-8") as f:
            json.dump(bad, f)
        rc, log = run("--peers", peers, "--out-json", os.path.join(tmp, "bad.json"))
        expect(rc != 0 and "pass 'sideways' is not one of forward, backward" in log
               and "peers-backward.json: result 0" in log,
               f"a record of an unknown pass is refused, naming the file (rc {rc}):\n{log}")

        # 3b. a step's deterministic mode (bench_all --pass backward --deterministic names it
        # impl+deterministic) is an impl of its own that renames nothing: merged beside the
        # step's default records, it keeps them all
        det_json = os.path.join(tmp, "h200-det.json")
        with open(det_json, "w", encoding="utf-8") as f:
            f.write(read(out_json))
        det_bench = os.path.join(tmp, "bench-backward-det.json")
        with open(det_bench, "w", encoding="utf-8") as f:
            json.dump({"benchmarks": [bench_entry("10_backward+deterministic", "backward", 4096,
                                                  40.0)]}, f)
        rc, log = run("--bench", det_bench, "--merge", "--out-json", det_json,
                      "--out-md", os.path.join(tmp, "h200-det.md"))
        det = json.loads(read(det_json))["results"]
        expect(rc == 0 and len(det) == len(again) + 1 and "dropping" not in log,
               f"a deterministic record is added, none dropped (rc {rc}, {len(det)} records):\n"
               f"{log}")
        expect(sum(1 for r in det if r["impl"] == "10_backward") == len(ours)
               and [r["median_ms"] for r in det
                    if r["impl"] == "10_backward+deterministic"] == [40.0],
               "10_backward+deterministic/backward/… parses into an impl of its own, beside "
               "10_backward's records")
        expect(make_results.step_of("11_backward_tc+deterministic") == "11_backward_tc"
               and make_results.is_ours("11_backward_tc+deterministic"),
               "a step's mode belongs to the step")

        # 4. the README table and the plots read the passes apart
        doc = json.loads(read(out_json))
        table = "\n".join(refresh_docs.results_table(doc, 4096))
        expect(table == "\n".join(refresh_docs.results_table(
                   dict(doc, results=[r for r in doc["results"] if "pass" not in r]), 4096)),
               "the README table is the forward records' alone")
        expect("10_backward" not in table, "no backward step in the README's forward table")
        records = [make_results.normalize(r) for r in doc["results"]]
        groups = make_results.group_records(make_results.of_pass(records, "backward"))
        expect(plots.pick_backward_memory_group(groups, 128, False) == ("fp32", 64, False),
               "the backward memory plot takes a group with our step and torch_naive, over "
               "the preferred head dim")
        expect(plots.pick_backward_memory_group(
                   {g: v for g, v in groups.items() if not make_results.is_ours(v[0]["impl"])
                    and g != ("fp32", 64, False) and g != ("fp32", 64, True)}, 64, False) is None,
               "no backward memory plot without a step of ours")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("note: matplotlib is not installed here: plots.py itself not run")
        else:
            images = os.path.join(tmp, "images")
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plots.py"),
                                "--results", out_json, "--outdir", images, "--prefix", "t_"],
                               capture_output=True, text=True)
            made = set(os.listdir(images)) if os.path.isdir(images) else set()
            for name in ("t_backward_memory.png", "t_backward_tflops_fp32_d64_full.png",
                         "t_backward_tflops_bf16_d128_full.png", "t_memory.png"):
                expect(name in made, f"plots.py writes {name} (rc {r.returncode}):\n"
                                     f"{r.stdout}{r.stderr}")

    if failures:
        print(f"check_make_results.py: {len(failures)} check(s) failed")
        return 1
    print("check_make_results.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
