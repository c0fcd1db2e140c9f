#!/usr/bin/env python3
"""Tests of scripts/make_results.py --decode (scripts/decode_results.py) and of what reads its
output (the quoted figures' decode: source, plots.py), without a GPU, on a small synthetic
run: a bench_decode JSON (two shapes, contiguous and paged, the rule's split count and forced
ones, the HBM read bandwidth in its context) and a peers.py --pass decode JSON (two backends,
one refusal). Registered in ctest as conventions/decode_results.

  1. Every record is kept, with TB/s from the median time and the K+V bytes of its shape, and
     hbm_fraction over the HBM bandwidth of the run; the header carries the HBM figure.
  2. The Markdown: the TB/s (%) table with ours in every layout and each peer, a refused peer
     marked "skipped" and listed with its message, a peer measured on K and V expanded to H_q
     heads (it refused enable_gqa) marked † with its refusal, a peer timed after its wait for
     HBM reads at speed gave up marked ‡ with its wait (every record keeps hbm_wait_ms), the
     ratios (ours / peer, paged / contiguous) and the split rule's table with the best forced
     count.
  3. --decode --merge without inputs re-renders the Markdown byte for byte.
  4. Refusals: a bench file without the HBM figure, a peers file of another pass, a record
     whose kv_bytes is not its shape's, a name that is not a decoding record's.
  5. quoted_figures' decode: keys read the file (TB/s at two decimals, %, forced splits,
     decode:hbm) and name what they cannot find; plots.py writes the plot (with matplotlib).

Exit status 0 when every check holds, 1 otherwise (each failure printed). Standard library.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import decode_results  # noqa: E402
import fa_perf  # noqa: E402
import quoted_figures  # noqa: E402

TOOL = os.path.join(ROOT, "scripts", "make_results.py")
HBM = 4.0  # TB/s, the synthetic run's measured HBM read bandwidth

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def run(*args):
    r = subprocess.run([sys.executable, TOOL, "--decode"] + list(args), capture_output=True,
                       text=True)
    return r.returncode, r.stdout + r.stderr


def ms_for(kv, tbps):
    return kv / (tbps * 1e12) * 1e3


# (B, H_kv, N) -> TB/s of ours by layout, of each forced split count, and of the peers
SHAPES = {
    (1, 8, 16384): dict(rule=(8, 3.2), page64=3.1, page256=3.15, forced={1: 0.4, 8: 3.0, 16: 3.3},
                        torch_cudnn=1.6, torch_flash=1.2),
    (8, 32, 4096): dict(rule=(1, 3.6), page64=3.5, page256=3.55, forced={1: 3.6, 8: 3.4, 16: 3.1},
                        torch_cudnn=3.0, torch_flash=2.0),
}


def bench_doc(kv_override=None, context=True):
    entries = []
    for (b, hkv, n), t in SHAPES.items():
        kv = fa_perf.decode_kv_bytes(b, hkv, n, 128, "bf16")
        base = f"12_decode/bf16/d128/B{b}/Hq32/Hkv{hkv}/q1/N{n}"

        def entry(layout, kind, splits, tbps):
            return {"name": f"{base}/{layout}/{kind}{splits}/iterations:20/manual_time",
                    "run_name": f"{base}/{layout}/{kind}{splits}/iterations:20/manual_time",
                    "run_type": "iteration", "median_ms": ms_for(kv, tbps),
                    "kv_bytes": kv_override or kv, "tbps": tbps, "hbm_fraction": tbps / HBM}
        s, tb = t["rule"]
        entries.append(entry("contiguous", "rule", s, tb))
        entries.append(entry("page64", "rule", s, t["page64"]))
        entries.append(entry("page256", "rule", s, t["page256"]))
        entries += [entry("contiguous", "splits", k, v) for k, v in t["forced"].items()]
    ctx = {"hbm_read_tbps": str(HBM), "hbm_read_bytes": str(4 << 30),
           "hbm_read_median_ms": "1.073741824",
           "hbm_read_method": "streaming read kernel, 16-byte loads, bytes read only",
           "decode_timed": "attention only (split-KV kernel and combine); the append is not "
                           "timed"} if context else {}
    return {"context": ctx, "benchmarks": entries}


def peers_doc(kind="decode"):
    results = []
    for (b, hkv, n), t in SHAPES.items():
        kv = fa_perf.decode_kv_bytes(b, hkv, n, 128, "bf16")
        for impl in ("torch_cudnn", "torch_flash"):
            results.append({"impl": impl, "pass": "decode", "dtype": "bf16", "d": 128,
                            "batch": b, "heads_q": 32, "heads_kv": hkv, "q_len": 1, "cache": n,
                            "layout": "contiguous", "name": "…", "median_ms": ms_for(kv, t[impl]),
                            "kv_bytes": kv, "tbps": t[impl], "extra_device_bytes": 0})
            if impl == "torch_cudnn" and hkv == 8:  # measured on K, V expanded by peers.py
                results[-1].update(gqa="expanded", note="enable_gqa refused: No available "
                                                        "kernel. Aborting execution.")
            results[-1]["hbm_wait_ms"] = 12.5  # peers.py's wait for HBM reads at speed
            if impl == "torch_flash" and hkv == 32:  # a wait that gave up
                results[-1].update(hbm_wait_ms=5000.0, hbm_wait_gave_up=True)
    skipped = [{"pass": "decode", "impl": "torch_efficient", "dtype": "bf16", "d": 128,
                "batch": 1, "heads_q": 32, "heads_kv": 8, "q_len": 1, "cache": 16384,
                "layout": "contiguous", "reason": "No available kernel. Aborting execution."}]
    return {"gpu": "Stand-in GPU", "torch": "2.9.0", "cudnn": 91002, "cuda": "12.9",
            "pass": kind, "results": results, "skipped": skipped}


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bench, peers = os.path.join(tmp, "bench.json"), os.path.join(tmp, "peers.json")
        os.makedirs(os.path.join(tmp, "results"))
        out_json = os.path.join(tmp, "results", "h200-decode.json")
        out_md = os.path.join(tmp, "results", "h200-decode.md")
        write(bench, bench_doc())
        write(peers, peers_doc())
        header = ["--gpu", "Stand-in GPU", "--driver", "1.2.3", "--commit", "abc1234",
                  "--date", "2026-11-30", "--command", "bench_decode && peers.py --pass decode"]
        rc, out = run("--bench", bench, "--peers", peers, "--out-json", out_json, *header)
        expect(rc == 0, f"make_results.py --decode exits 0: {out}")
        doc = json.load(open(out_json))
        md = open(out_md, encoding="utf-8").read()

        # 1. records and the HBM figure
        expect(doc.get("kind") == "decode" and doc["hbm"]["tbps"] == HBM,
               f"the file says it is decoding results, HBM {HBM} TB/s: {doc.get('hbm')}")
        ours = [r for r in doc["results"] if r["impl"] == "12_decode"]
        theirs = [r for r in doc["results"] if r["impl"] != "12_decode"]
        expect(len(ours) == 12 and len(theirs) == 4, f"12 records of ours and 4 of the peers: "
                                                     f"{len(ours)}, {len(theirs)}")
        for r in doc["results"]:
            kv = fa_perf.decode_kv_bytes(r["batch"], r["heads_kv"], r["cache"], r["d"],
                                         r["dtype"])
            expect(r["kv_bytes"] == kv and abs(r["tbps"] - kv / (r["median_ms"] * 1e-3) / 1e12)
                   < 1e-9 and abs(r["hbm_fraction"] - r["tbps"] / HBM) < 1e-12,
                   f"kv_bytes, TB/s and hbm_fraction of the record's shape and time: {r}")
        rule = [r for r in ours if r["rule"] is True]
        forced = [r for r in ours if r["rule"] is False]
        expect(len(rule) == 6 and len(forced) == 6 and all(r["splits"] is None and r["rule"] is
                                                          None for r in theirs),
               "the rule's rows, the forced ones, and the peers' without a split count")
        expect(doc["skipped"] and doc["skipped"][0]["impl"] == "torch_efficient",
               f"the peers' refusal is kept: {doc.get('skipped')}")

        # 2. the Markdown
        expect("HBM read bandwidth, measured in this run: 4.00 TB/s" in md,
               "the header gives the measured HBM read bandwidth")
        expect("| 1 | 32/8 | 16384 | 8 | 3.20 (80%) | 3.10 (78%) | 3.15 (79%) | 1.60 (40%) † | "
               "1.20 (30%) | skipped |" in md,
               "a row: B, heads, N, the rule's splits, ours in each layout, each peer, "
               "a refused peer marked skipped")
        expect("- torch_cudnn, B = 1, H_q/H_kv = 32/8, N = 16384: enable_gqa refused: No "
               "available kernel. Aborting execution." in md and "† K and V expanded" in md,
               "a peer measured on expanded K and V is marked and its refusal listed")
        expect([r.get("gqa") for r in theirs].count("expanded") == 1,
               f"the record keeps gqa: expanded: {theirs}")
        expect(all(r.get("hbm_wait_ms") in (12.5, 5000.0) for r in theirs)
               and [r.get("hbm_wait_gave_up") for r in theirs].count(True) == 1,
               f"the peers' records keep their HBM waits and the one that gave up: {theirs}")
        expect("| 8 | 32/32 | 4096 | 1 | 3.60 (90%) | 3.50 (87%) | 3.55 (89%) | 3.00 (75%) | "
               "2.00 (50%) ‡ | – |" in md
               and "- torch_flash, B = 8, H_q/H_kv = 32/32, N = 4096, contiguous: waited 5000 ms"
               in md and "‡ timed although the wait for HBM reads" in md,
               "a peer timed after its HBM wait gave up is marked and listed with its wait")
        expect("- torch_efficient, B = 1, H_q/H_kv = 32/8, N = 16384: No available kernel. "
               "Aborting execution." in md, "a refusal is listed with its message")
        expect("| 1 | 32/8 | 16384 | 2.00× | 2.67× | – | 0.97× | 0.98× |" in md,
               "the ratios: ours / each peer, each paged layout / contiguous")
        expect("| 1 | 32/8 | 16384 | 8: 3.20 | 0.40 | 3.00 | 3.30 | 16: 3.30 | 0.97× |" in md,
               "the split table: the rule's choice, each forced count, the best, rule / best")
        expect("| 8 | 32/32 | 4096 | 1: 3.60 | 3.60 | 3.40 | 3.10 | 1: 3.60 | 1.00× |" in md,
               "the split table where the rule picks the best")

        # 3. re-render; with the plot drawn (images/ beside results/), the page names it
        expect("![" not in md, "no plot drawn yet: the page shows none")
        os.replace(out_md, out_md + ".old")
        rc, out = run("--merge", "--out-json", out_json)
        expect(rc == 0 and open(out_md, encoding="utf-8").read() == md,
               f"--decode --merge without inputs re-renders the Markdown byte for byte: {out}")
        os.makedirs(os.path.join(tmp, "images"))
        with open(os.path.join(tmp, "images", "h200_decode.png"), "wb") as f:
            f.write(b"\x89PNG")
        rc, out = run("--merge", "--out-json", out_json)
        shown = open(out_md, encoding="utf-8").read()
        line = ("The plot of these figures: `docs/images/h200_decode.png` (K+V TB/s against the "
                "cache length, per batch and H_kv), shown in [chapter 12](../12-decode.md).\n\n")
        expect(rc == 0 and line in shown and "![" not in shown and shown.replace(line, "") == md,
               f"once the plot is drawn, the re-rendered page names it (no embedded image: the "
               f"docs build could not follow the path) and nothing else changes: {out}")

        # 4. refusals
        bad = os.path.join(tmp, "bad.json")
        write(bad, bench_doc(context=False))
        rc, out = run("--bench", bad, "--out-json", os.path.join(tmp, "x.json"))
        expect(rc != 0 and "no hbm_read_tbps" in out, f"a bench file without the HBM figure is "
                                                      f"refused: {rc} {out}")
        write(bad, peers_doc(kind="forward"))
        rc, out = run("--bench", bench, "--peers", bad, "--out-json", os.path.join(tmp, "x.json"))
        expect(rc != 0 and "not decode" in out, f"a peers file of another pass is refused: {out}")
        write(bad, bench_doc(kv_override=12345))
        rc, out = run("--bench", bad, "--out-json", os.path.join(tmp, "x.json"))
        expect(rc != 0 and "kv_bytes 12345 is not" in out,
               f"a record whose kv_bytes is not its shape's is refused: {out}")
        odd = bench_doc()
        odd["benchmarks"][0]["name"] = "12_decode/bf16/d128/B1/contiguous"
        write(bad, odd)
        rc, out = run("--bench", bad, "--out-json", os.path.join(tmp, "x.json"))
        expect(rc != 0 and "is not impl/dtype/dD" in out, f"an unknown name is refused: {out}")

        # 5. quoted figures and the plot
        cache = {}
        fig = lambda key: quoted_figures.figure(key, os.path.dirname(out_json), cache)  # noqa
        key = "decode:bf16:128:12_decode:1:32:8:16384"
        expect(fig(f"{key}:contiguous") == 3.2 and fig(f"{key}:page64") == 3.1,
               "decode: gives the rule's TB/s at two decimals")
        expect(abs(fig(f"{key}:page64:pct") - 77.5) < 1e-9, "decode:…:pct is % of the HBM")
        expect(fig(f"{key}:contiguous@16") == 3.3 and fig(f"{key}:contiguous:splits") == 8,
               "decode: reads a forced split count's row and the rule's split count")
        expect(fig("decode:hbm") == HBM, "decode:hbm is the run's HBM read bandwidth")
        expect(abs(fig(f"calc:[{key}:contiguous]/[decode:bf16:128:torch_cudnn:1:32:8:16384:"
                       "contiguous]") - 2.0) < 1e-12, "calc: divides two decode: figures")
        for missing in (f"{key}:page16", "decode:bf16:128:12_decode:2:32:8:16384:contiguous",
                        f"{key}:contiguous:gbps"):
            try:
                fig(missing)
                expect(False, f"{missing} names no figure and must fail")
            except quoted_figures.SourceError:
                pass
        expect(os.path.join(tmp, "images", "h200_decode.png") == decode_results.plot_path(out_json),
               "make_results looks for the plot where plots.py --prefix h200_ puts it")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("note: no matplotlib; plots.py's decode plot not drawn")
        else:
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plots.py"),
                                "--results", out_json, "--outdir", tmp, "--prefix", "t_"],
                               capture_output=True, text=True)
            png = os.path.join(tmp, "t_decode.png")
            expect(r.returncode == 0 and os.path.getsize(png) > 10000,
                   f"plots.py writes the decode plot: {r.stdout}{r.stderr}")
            expect(not os.path.exists(os.path.join(tmp, "t_decode_layouts.png")),
                   "no _bnhd peer: no layouts plot")

        # 6. a peer timed in the cache's layout (peers.py --kv-layouts bnhd): its column right
        # after its backend's, the header saying what it is (only then)
        expect("`…_bnhd`" not in md, "without a _bnhd peer the header does not explain one")
        both = peers_doc()
        extra = [dict(r, impl=r["impl"] + "_bnhd", kv_layout="bnhd") for r in both["results"]
                 if r["impl"] == "torch_cudnn" and "gqa" not in r]
        both["results"] += extra
        write(peers, both)
        out2 = os.path.join(tmp, "results", "b-decode.json")
        rc, out = run("--bench", bench, "--peers", peers, "--out-json", out2, *header)
        md2 = open(out2[:-5] + ".md", encoding="utf-8").read()
        expect(rc == 0 and "`…_bnhd`" in md2 and
               "| 12_decode page256 | torch_cudnn | torch_cudnn_bnhd | torch_flash |" in md2,
               f"a _bnhd peer: explained in the header, its column after its backend's: {out}")
    if failures:
        print(f"check_decode_results.py: {len(failures)} check(s) failed")
        return 1
    print("check_decode_results.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
