#!/usr/bin/env python3
"""Merge our Google Benchmark JSON and the peers' JSON into one results file and its tables.

Inputs
  --bench  JSON written by our benchmark (--benchmark_format=json or --benchmark_out). Each
           entry's name encodes the record, impl/dtype/d/causal/B/Hq/Hkv/Nq/Nkv/layout, e.g.
           04_flash_attention/fp32/d64/causal1/B8/Hq32/Hkv32/Nq2048/Nkv2048/bnhd/manual_time;
           a backward pass (bench_all --pass backward) has its pass after the impl,
           10_backward/backward/fp32/d64/…, and a step's deterministic mode (bench_all
           --pass backward --deterministic) is an impl of its own,
           11_backward_tc+deterministic/backward/bf16/…; the counters median_ms, tflops,
           extra_device_bytes, nxn_bytes sit at top level.
  --peers  JSON written by scripts/peers.py ({"gpu", "torch", "cudnn", "results": [...]});
           its records say their pass ("pass": "forward" or "backward").

Outputs
  --out-json  {"gpu", "driver", "date", "commit", "command", "results": [records]}; a record
              is {[pass,] impl, dtype, d, causal, batch, heads_q, heads_kv, n_q, n_kv, layout,
              median_ms, tflops, extra_device_bytes[, nxn_bytes]}, where "pass": "backward"
              marks a backward pass and a record without "pass" is a forward pass (so files
              written before the backward was measured read as they did).
  --out-md    a header, then per (dtype, d, causal) a TFLOP/s table and an extra-device-memory
              table (rows: implementations, columns: N), then ratios of each of our steps
              against the peers at each N measured by both; then the same for the backward
              passes, if any (ratios against --backward-ratio-peers).

With --decode the inputs are bench_decode's (--bench) and peers.py --pass decode's (--peers)
and the outputs the decoding results (scripts/decode_results.py says what they hold), written
afresh from the inputs; --decode --merge without inputs re-renders --out-md from --out-json,
showing the plot (docs/images/NAME_decode.png, scripts/plots.py) once it has been drawn.

With --merge, records already in --out-json whose key (pass, impl, dtype, d, causal, batch,
heads_q, heads_kv, n_q, n_kv, layout) is not measured again are kept, except those of a step
measured now under another number or name (NN_slug renamed or renumbered): they are dropped.

Example:
  python3 scripts/make_results.py --bench out/bench.json --peers out/peers.json \\
      --gpu "NVIDIA H200" --driver 580.159.03 --commit "$(git rev-parse --short HEAD)" \\
      --command "build/bench/fa_bench --benchmark_out=out/bench.json" --date 2026-11-30 \\
      --out-json docs/results/h200.json --out-md docs/results/h200.md
  python3 scripts/make_results.py --decode --bench out/bench-decode.json \
      --peers out/peers-decode.json --out-json docs/results/h200-decode.json
"""

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_results  # noqa: E402  (--decode)
import fa_perf  # noqa: E402  (scripts/fa_perf.py: the FLOP and byte formulas)

KEY_FIELDS = ("impl", "dtype", "d", "causal", "batch", "heads_q", "heads_kv", "n_q", "n_kv",
              "layout")
RECORD_FIELDS = KEY_FIELDS + ("median_ms", "tflops", "extra_device_bytes", "nxn_bytes")
DTYPE_ORDER = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
# Peers in the order docs/conventions.md lists them: fastest fused kernel first, the naive
# composite last.
PEER_ORDER = ["torch_cudnn", "torch_flash", "torch_efficient", "torch_math", "torch_naive"]
DEFAULT_RATIO_PEERS = "torch_efficient,torch_flash,torch_naive,cublas_baseline"
# The backward: FlashAttention-2's backward first; the memory-efficient kernel also runs fp32.
DEFAULT_BACKWARD_RATIO_PEERS = "torch_flash,torch_cudnn,torch_efficient"
# A record's pass; one without a "pass" field is a forward pass.
PASSES = ("forward", "backward")
NAME_FIELDS = [  # (position in the benchmark name, record field, prefix, type)
    (1, "dtype", "", str), (2, "d", "d", int), (3, "causal", "causal", int),
    (4, "batch", "B", int), (5, "heads_q", "Hq", int), (6, "heads_kv", "Hkv", int),
    (7, "n_q", "Nq", int), (8, "n_kv", "Nkv", int), (9, "layout", "", str),
]
TIME_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------- records

def to_bool(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "causal", "causal1")
    return bool(value)


def pass_of(r):
    """"forward" or "backward": the pass a record measured (absent: forward)."""
    return r.get("pass", "forward")


def attention_flops(r):
    """FLOPs of a record's pass (scripts/fa_perf.py, docs/conventions.md)."""
    f = (fa_perf.attention_backward_flops if pass_of(r) == "backward"
         else fa_perf.attention_flops)
    return f(r["batch"], r["heads_q"], r["n_q"], r["n_kv"], r["d"], r["causal"])


def normalize(rec):
    """Types made uniform (ints, bool causal, lower-case strings); only the known fields.
    "pass" is kept for a backward record only: a record without it is a forward pass."""
    r = {}
    kind = str(rec.get("pass", "forward")).lower()
    if kind not in PASSES:
        raise ValueError(f"pass {rec.get('pass')!r} is not one of {', '.join(PASSES)}")
    if kind != "forward":
        r["pass"] = kind
    for f in KEY_FIELDS:
        if f == "impl":
            r[f] = str(rec[f])
        elif f == "dtype":
            r[f] = str(rec[f]).lower()
        elif f == "layout":  # peers.py always writes it; SDPA's layout if absent
            r[f] = str(rec.get(f, "bhnd")).lower()
        elif f == "causal":
            r[f] = to_bool(rec[f])
        else:
            r[f] = int(rec[f])
    r["median_ms"] = float(rec["median_ms"])
    tflops = rec.get("tflops")
    if tflops is None or not math.isfinite(float(tflops)) or float(tflops) <= 0:
        tflops = attention_flops(r) / (r["median_ms"] * 1e-3) / 1e12 if r["median_ms"] > 0 else 0
    r["tflops"] = float(tflops)
    extra = rec.get("extra_device_bytes")
    r["extra_device_bytes"] = None if extra is None else int(round(float(extra)))
    if rec.get("nxn_bytes") is not None:
        r["nxn_bytes"] = int(round(float(rec["nxn_bytes"])))
    return r


def key_of(r):
    return (pass_of(r),) + tuple(r[f] for f in KEY_FIELDS)


def parse_bench_name(name):
    """'04_flash_attention/fp32/d64/causal1/B8/...' -> dict of key fields, or None; with the
    pass after the impl ('10_backward/backward/fp32/…') the dict has it."""
    parts = name.split("/")
    kind = parts.pop(1) if len(parts) > 1 and parts[1] in PASSES else None
    if len(parts) < 10:
        return None
    rec = {"impl": parts[0]}
    if kind:
        rec["pass"] = kind
    for pos, field, prefix, kind in NAME_FIELDS:
        text = parts[pos]
        if prefix:
            if not text.startswith(prefix):
                return None
            text = text[len(prefix):]
        try:
            rec[field] = kind(text)
        except ValueError:
            return None
    rec["causal"] = bool(rec["causal"])
    return rec


def load_bench(path):
    with open(path) as f:
        doc = json.load(f)
    found, skipped = [], 0
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        name = b.get("run_name") or b.get("name", "")
        if b.get("error_occurred"):
            log(f"  note: {name}: skipped by the benchmark ({b.get('error_message', '')})")
            skipped += 1
            continue
        rec = parse_bench_name(b.get("name", "")) or parse_bench_name(name)
        if rec is None:
            log(f"  note: {name}: name is not impl[/pass]/dtype/d/causal/B/Hq/Hkv/Nq/Nkv/layout; "
                "ignored")
            skipped += 1
            continue
        median_ms = b.get("median_ms")
        if median_ms is None and "real_time" in b:  # fall back on Google Benchmark's own time
            median_ms = float(b["real_time"]) * TIME_UNIT_MS.get(b.get("time_unit", "ns"), 1e-6)
        if median_ms is None:
            log(f"  note: {name}: no median_ms and no real_time; ignored")
            skipped += 1
            continue
        rec["median_ms"] = median_ms
        for counter in ("tflops", "extra_device_bytes", "nxn_bytes"):
            if counter in b:
                rec[counter] = b[counter]
        found.append(normalize(rec))
    log(f"bench {path}: {len(found)} records" + (f", {skipped} ignored" if skipped else ""))
    return found, doc.get("context", {})


def load_peers(path):
    with open(path) as f:
        doc = json.load(f)
    found = []
    for i, r in enumerate(doc.get("results", [])):
        try:
            found.append(normalize(r))
        except (KeyError, TypeError, ValueError) as e:
            sys.exit(f"make_results.py: error: {path}: result {i}: "
                     + (f"no field {e}" if isinstance(e, KeyError) else str(e)))
    log(f"peers {path}: {len(found)} records ({doc.get('gpu', '?')}, torch "
        f"{doc.get('torch', '?')}, cuDNN {doc.get('cudnn', '?')})"
        + (f", {len(doc['skipped'])} skipped by peers.py" if doc.get("skipped") else ""))
    return found, doc


def dedupe(records):
    """One record per key within one file; repetitions of a benchmark -> the median run."""
    by_key = {}
    for r in records:
        by_key.setdefault(key_of(r), []).append(r)
    out = []
    for key, group in by_key.items():
        if len(group) > 1:
            group = sorted(group, key=lambda r: r["median_ms"])
            log(f"  note: {'/'.join(map(str, key[1:]))} ({key[0]}): {len(group)} runs, keeping "
                "the median one")
        out.append(group[(len(group) - 1) // 2])
    return out


# ---------------------------------------------------------------------------------- ordering

def impl_rank(impl):
    """Our steps in number order, then cublas_baseline, then anything else, then torch peers."""
    m = re.match(r"^(\d+)_", impl)
    if m:
        return (0, int(m.group(1)), impl)
    if impl.startswith("cublas"):
        return (1, 0, impl)
    if impl.startswith("torch_"):
        return (3, PEER_ORDER.index(impl) if impl in PEER_ORDER else len(PEER_ORDER), impl)
    return (2, 0, impl)


def step_of(impl):
    """The step an impl measured: '11_backward_tc' of '11_backward_tc+deterministic' (bench_all
    --pass backward --deterministic names a step's mode so, keeping its records apart)."""
    return impl.split("+", 1)[0]


def is_ours(impl):
    return re.match(r"^\d+_", impl) is not None


def group_key(r):
    return (r["dtype"], r["d"], r["causal"])


def group_sort_key(g):
    dtype, d, causal = g
    return (DTYPE_ORDER.get(dtype, 9), dtype, d, causal)


def sort_records(records):
    """The forward's records first, then the backward's; each by group, impl and shape."""
    return sorted(records, key=lambda r: (PASSES.index(pass_of(r)),
                                          group_sort_key(group_key(r)), impl_rank(r["impl"]),
                                          r["layout"], r["heads_q"], r["heads_kv"],
                                          r["n_q"], r["n_kv"], r["batch"]))


def group_records(records):
    groups = {}
    for r in records:
        groups.setdefault(group_key(r), []).append(r)
    return {g: groups[g] for g in sorted(groups, key=group_sort_key)}


# Within a table a row is one implementation in one layout. Where a group also mixes other
# shapes (heads, tokens per batch, N_kv ≠ N_q), a row whose value differs from the group's
# most common one names it, e.g. "04_flash_attention (Hkv=8, B·N=8192)".
def _most_common(values):
    return max(set(values), key=lambda v: (values.count(v), str(v)))


def _variant_attrs(r):
    return (("Hq", r["heads_q"]), ("Hkv", r["heads_kv"]), ("B·N", r["batch"] * r["n_q"]),
            ("Nkv", "Nq" if r["n_kv"] == r["n_q"] else r["n_kv"]))


def rows_of(records):
    """[(label, layout, {n_q: record})] in display order."""
    common = {}
    for i, (name, _) in enumerate(_variant_attrs(records[0])):
        values = [_variant_attrs(r)[i][1] for r in records]
        common[name] = _most_common(values)
    rows = {}
    for r in records:
        attrs = tuple((k, v) for k, v in _variant_attrs(r) if v != common[k])
        rows.setdefault((r["impl"], attrs, r["layout"]), {})[r["n_q"]] = r
    ordered = sorted(rows, key=lambda k: (impl_rank(k[0]), [str(v) for _, v in k[1]], k[2]))
    out = []
    for impl, attrs, layout in ordered:
        label = impl + (" (" + ", ".join(f"{k}={v}" for k, v in attrs) + ")" if attrs else "")
        out.append((label, layout, rows[(impl, attrs, layout)]))
    return out


def constant_shape_note(records):
    """'B·N = 16384, H = 32': the group's (most common) shape apart from N."""
    attrs = [dict(_variant_attrs(r)) for r in records]
    common = {k: _most_common([a[k] for a in attrs]) for k in attrs[0]}
    h, k = common["Hq"], common["Hkv"]
    note = f"B·N = {common['B·N']}, " + (f"H = {h}" if h == k else f"H_q = {h}, H_kv = {k}")
    if common["Nkv"] != "Nq":
        note += f", N_kv = {common['Nkv']}"
    mixed = any(a != common for a in attrs)
    return note + (", other shapes marked" if mixed else "")


# ---------------------------------------------------------------------------------- markdown

def human_bytes(n):
    return "–" if n is None else fa_perf.human_bytes(n)


def fmt_n(n):
    return str(n)


def code(text):
    """Markdown code span that survives backticks inside the text."""
    text = str(text).replace("\n", " ")
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def group_title(g):
    dtype, d, causal = g
    return f"{dtype}, d = {d}, {'causal' if causal else 'non-causal'}"


def find_peer(records_by_shape, r, peer):
    """The peer's record for r's shape (any layout, r's own preferred)."""
    shape = (r["dtype"], r["d"], r["causal"], r["batch"], r["heads_q"], r["heads_kv"],
             r["n_q"], r["n_kv"])
    candidates = [p for p in records_by_shape.get(shape, []) if p["impl"] == peer]
    if not candidates:
        return None
    same = [p for p in candidates if p["layout"] == r["layout"]]
    return (same or candidates)[0]


def of_pass(records, kind):
    """The records of one pass ("forward" or "backward"), in their order."""
    return [r for r in records if pass_of(r) == kind]


def group_tables(records, title_prefix=""):
    """Per (dtype, d, causal): a TFLOP/s table and an extra-device-memory table."""
    out = []
    for g, recs in group_records(records).items():
        ns = sorted({r["n_q"] for r in recs})
        rows = rows_of(recs)
        note = constant_shape_note(recs)
        out.append(f"## {title_prefix}{group_title(g)}" + (f" ({note})" if note else ""))
        out.append("")
        out.append("TFLOP/s:")
        out.append("")
        out += table(["impl", "layout"] + [fmt_n(n) for n in ns],
                     [[label, layout] + [f"{cells[n]['tflops']:.1f}" if n in cells else "–"
                                         for n in ns] for label, layout, cells in rows])
        out.append("")
        out.append("Extra device memory:")
        out.append("")
        out += table(["impl", "layout"] + [fmt_n(n) for n in ns],
                     [[label, layout] + [human_bytes(cells[n]["extra_device_bytes"])
                                         if n in cells else "–" for n in ns]
                      for label, layout, cells in rows])
        out.append("")
    return out


def ratio_tables(records, ratio_peers):
    """Ours / peer in TFLOP/s at equal shapes (> 1 means our step is faster), one table per
    (dtype, d, causal) that has one of our steps and a peer at some N."""
    by_shape = {}
    for r in records:
        shape = (r["dtype"], r["d"], r["causal"], r["batch"], r["heads_q"], r["heads_kv"],
                 r["n_q"], r["n_kv"])
        by_shape.setdefault(shape, []).append(r)
    ratio_lines = []
    for g, recs in group_records(records).items():
        ours = [r for r in recs if is_ours(r["impl"])]
        if not ours:
            continue
        ns = sorted({r["n_q"] for r in ours})
        body = []
        layouts = {r["layout"] for r in ours}
        for label, layout, cells in rows_of(ours):
            if len(layouts) > 1:
                label += f" [{layout}]"
            for peer in ratio_peers:
                row, any_value = [f"{label} / {peer}"], False
                for n in ns:
                    r = cells.get(n)
                    p = find_peer(by_shape, r, peer) if r else None
                    if r and p and p["tflops"] > 0:
                        row.append(f"{r['tflops'] / p['tflops']:.2f}×")
                        any_value = True
                    else:
                        row.append("–")
                if any_value:
                    body.append(row)
        if body:
            ratio_lines += [f"### {group_title(g)}", ""]
            ratio_lines += table(["ours / peer"] + [fmt_n(n) for n in ns], body)
            ratio_lines.append("")
    return ratio_lines


def provenance_lines(doc, kind):
    """The date, commit and command that measured the records of pass `kind`: the pass's own
    entry in doc["runs"] when the file merges runs of different commits, else the header's."""
    run = doc.get("runs", {}).get(kind) or doc
    return [f"- Date: {run.get('date', '–')}",
            f"- Commit: {code(run.get('commit', '–'))}",
            f"- Command: {code(run['command'])}" if run.get("command") else "- Command: –"]


def make_markdown(doc, ratio_peers, backward_ratio_peers=None):
    records = of_pass(doc["results"], "forward")
    backward = of_pass(doc["results"], "backward")
    out = [f"# Forward attention on {doc['gpu']}", ""]
    out.append(f"- GPU: {doc['gpu']}")
    out.append(f"- Driver: {doc['driver']}")
    if doc.get("peers_software"):
        sw = doc["peers_software"]
        out.append(f"- Peers: PyTorch {sw.get('torch', '?')}, cuDNN {sw.get('cudnn', '?')}"
                   + (f", CUDA {sw['cuda']}" if sw.get("cuda") else ""))
    out += provenance_lines(doc, "forward")
    out += ["",
            "TFLOP/s counts forward FLOPs as 4·B·H·N²·d, halved when causal "
            "([conventions](../conventions.md)); the time is the median of CUDA-event "
            "timings. Peers (`torch_*`) are PyTorch's "
            "`scaled_dot_product_attention` with one backend forced, and `torch_naive` is "
            "matmul → softmax → matmul, measured in the same run. Extra device memory is what "
            "a call allocates beyond its inputs (output included). – means not measured or "
            "not supported.", ""]
    if not records and not backward:
        out += ["No results.", ""]
        return "\n".join(out)

    out += group_tables(records)
    ratio_lines = ratio_tables(records, ratio_peers)
    if ratio_lines:
        out += ["## Ratios", "",
                "Our TFLOP/s divided by the peer's at the same shape, measured in the same run "
                "(above 1× means our step is faster).", ""]
        out += ratio_lines
    if backward:
        out += [f"# Backward attention on {doc['gpu']}", ""] + provenance_lines(doc, "backward") + ["",
                "The backward pass alone: dQ, dK and dV from Q, K, V, O, L and dO. TFLOP/s "
                "counts 2.5 × the forward's FLOPs, 10·B·H·N²·d, halved when causal "
                "([conventions](../conventions.md), Backward); the time is the median of "
                "CUDA-event timings of the backward alone: O and L are made untimed (ours by a "
                "forward step, `bench_all --pass backward`; the peers' by one forward per "
                "measurement, whose saved graph each timed `torch.autograd.grad` call reuses, "
                "`peers.py --pass backward`). Extra device memory is what a backward call "
                "allocates beyond Q, K, V, O, L and dO, dQ, dK and dV included. – means not "
                "measured or not supported.", ""]
        out += group_tables(backward, "Backward: ")
        lines = ratio_tables(backward, backward_ratio_peers or [])
        if lines:
            out += ["## Backward ratios", "",
                    "Our backward TFLOP/s divided by the peer's backward at the same shape, "
                    "measured in the same run (above 1× means our step is faster).", ""]
            out += lines
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------------- main

def names(text):
    """'a, b,' -> ['a', 'b']."""
    return [x.strip() for x in text.split(",") if x.strip()]


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def write_text(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Merge benchmark and peer JSON into docs/results/<name>.json and .md.")
    p.add_argument("--bench", nargs="+", action="extend", default=[], metavar="FILE",
                   help="Google Benchmark JSON file(s) from our benchmark")
    p.add_argument("--peers", nargs="+", action="extend", default=[], metavar="FILE",
                   help="JSON file(s) from scripts/peers.py")
    p.add_argument("--gpu", help="GPU name (default: the merged file's, else the peers "
                                 "file's, else 'unknown')")
    p.add_argument("--driver", help="driver version (default: the merged file's, else "
                                    "'unknown')")
    p.add_argument("--commit", help="commit measured (default: git rev-parse --short HEAD)")
    p.add_argument("--command", help="the command line that produced the data")
    p.add_argument("--date", help="YYYY-MM-DD (default: today)")
    p.add_argument("--out-json", required=True, metavar="FILE")
    p.add_argument("--out-md", metavar="FILE", help="default: --out-json with .md")
    p.add_argument("--decode", action="store_true",
                   help="the decoding results: --bench from bench_decode, --peers from "
                        "peers.py --pass decode")
    p.add_argument("--merge", action="store_true",
                   help="keep records of --out-json whose key is not measured again")
    p.add_argument("--ratio-peers", default=DEFAULT_RATIO_PEERS,
                   help="comma-separated implementations our steps are compared with "
                        f"(default: {DEFAULT_RATIO_PEERS})")
    p.add_argument("--backward-ratio-peers", default=DEFAULT_BACKWARD_RATIO_PEERS,
                   help="the same for the backward passes "
                        f"(default: {DEFAULT_BACKWARD_RATIO_PEERS})")
    args = p.parse_args(argv)
    if not args.bench and not args.peers and not args.merge:
        p.error("nothing to do: give --bench and/or --peers (or --merge to re-render)")
    if args.date:
        try:
            datetime.date.fromisoformat(args.date)
        except ValueError:
            p.error(f"--date {args.date!r} is not YYYY-MM-DD")
    if not args.out_md:
        args.out_md = os.path.splitext(args.out_json)[0] + ".md"
    return args


def decode_main(args):
    """--decode: the decoding results, written afresh from the inputs (the HBM bandwidth they
    are divided by is their own run's), or re-rendered from --out-json."""
    if not args.bench and not args.peers:
        if not os.path.exists(args.out_json):
            sys.exit(f"make_results.py: error: --decode --merge: {args.out_json} does not exist")
        with open(args.out_json, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("kind") != "decode":
            sys.exit(f"make_results.py: error: {args.out_json} is not a decoding results file")
        decode_results.write(doc, args.out_json, args.out_md)
        return 0
    if args.merge:
        log("note: --decode writes the results afresh from this run's files (--merge only "
            "re-renders)")
    gpu = args.gpu
    if not gpu:
        for path in args.peers:
            with open(path) as f:
                gpu = json.load(f).get("gpu")
            if gpu:
                break
    header = {"gpu": gpu or "unknown", "driver": args.driver or "unknown",
              "date": args.date or datetime.date.today().isoformat(),
              "commit": args.commit or git_commit() or "unknown",
              "command": args.command or ""}
    try:
        doc = decode_results.build(args.bench, args.peers, header)
    except (decode_results.DecodeError, OSError, ValueError) as e:
        sys.exit(f"make_results.py: error: {e}")
    decode_results.write(doc, args.out_json, args.out_md)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.decode:
        return decode_main(args)
    by_key = {}  # across files, a later file's measurement replaces an earlier one's

    def add(recs, path):
        replaced = sum(1 for r in recs if key_of(r) in by_key)
        if replaced:
            log(f"  note: {path} re-measures {replaced} records of an earlier file; "
                f"keeping {path}'s")
        by_key.update((key_of(r), r) for r in recs)

    for path in args.bench:
        recs, _ = load_bench(path)
        add(dedupe(recs), path)
    peer_docs = []
    for path in args.peers:
        recs, doc = load_peers(path)
        add(dedupe(recs), path)
        peer_docs.append(doc)
    new = list(by_key.values())

    old_doc, kept = None, []
    if args.merge and os.path.exists(args.out_json):
        with open(args.out_json) as f:
            old_doc = json.load(f)
        measured = {key_of(r) for r in new}
        kept = [r for r in (normalize(x) for x in old_doc.get("results", []))
                if key_of(r) not in measured]
        # A step renamed or renumbered since the file was written (NN_slug measured now under
        # another NN or another slug) leaves rows no current program produces: drop them.
        # A mode of a step (impl+deterministic) is that step: it renames nothing.
        steps_now = {step_of(r["impl"]) for r in new if re.match(r"\d\d_", r["impl"])}
        nums_now = {i[:2]: i for i in steps_now}
        slugs_now = {i[3:]: i for i in steps_now}
        stale = {r["impl"] for r in kept if re.match(r"\d\d_", r["impl"])
                 and step_of(r["impl"]) not in steps_now
                 and (r["impl"][:2] in nums_now or step_of(r["impl"])[3:] in slugs_now)}
        if stale:
            log(f"merge: dropping the rows of {', '.join(sorted(stale))}: renamed or "
                f"renumbered (now {', '.join(sorted(steps_now))})")
            kept = [r for r in kept if r["impl"] not in stale]
        log(f"merge {args.out_json}: keeping {len(kept)} of "
            f"{len(old_doc.get('results', []))} earlier records, "
            f"{len(new)} new or re-measured")
        new += kept
    elif args.merge:
        log(f"merge: {args.out_json} does not exist yet; writing a fresh file")

    # Header: what the command line says; else, when merging, what the file said; else a
    # default (the peers' GPU, today, git HEAD). A pure re-render keeps the file's date/commit.
    old = old_doc or {}
    rerender = bool(old_doc) and not args.bench and not args.peers
    gpu = args.gpu or old.get("gpu") or next(
        (d["gpu"] for d in peer_docs if d.get("gpu")), None) or "unknown"
    for d in peer_docs:
        if d.get("gpu") and args.gpu and d["gpu"] != args.gpu:
            log(f"  note: peers were measured on {d['gpu']!r}, --gpu says {args.gpu!r}")
    doc = {
        "gpu": gpu,
        "driver": args.driver or old.get("driver") or "unknown",
        "date": args.date or (old.get("date") if rerender else None)
        or datetime.date.today().isoformat(),
        "commit": args.commit or (old.get("commit") if rerender else None)
        or git_commit() or "unknown",
        "command": args.command if args.command is not None else old.get("command", ""),
    }
    # Per pass, who measured it: the passes this run brings take this run's header; the
    # passes kept from the merged file keep theirs (its "runs" entry, else its header).
    this_run = {k: doc[k] for k in ("date", "commit", "command")}
    old_runs = old.get("runs") or {}
    runs = {}
    for kind in PASSES:
        if any(pass_of(r) == kind for r in new[:len(new) - len(kept)] if not rerender):
            runs[kind] = this_run
        elif any(pass_of(r) == kind for r in new):
            runs[kind] = old_runs.get(kind) or {k: old.get(k, "") for k in this_run}
    if len({json.dumps(v, sort_keys=True) for v in runs.values()}) > 1:
        doc["runs"] = runs
    sw = next(({k: d.get(k) for k in ("torch", "cudnn", "cuda") if d.get(k) is not None}
               for d in peer_docs if d.get("torch")), None)
    if sw is None and old_doc is not None:
        sw = old_doc.get("peers_software")
    if sw:
        doc["peers_software"] = sw
    doc["results"] = sort_records(new)

    write_text(args.out_json, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    log(f"wrote {args.out_json}: {len(doc['results'])} records")
    md = make_markdown(doc, names(args.ratio_peers), names(args.backward_ratio_peers))
    write_text(args.out_md, md)
    groups = {kind: len(group_records(of_pass(doc["results"], kind))) for kind in PASSES}
    log(f"wrote {args.out_md}: {groups['forward']} groups"
        + (f", {groups['backward']} backward groups" if groups["backward"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
