#!/usr/bin/env python3
"""The decoding results: bench_decode's Google Benchmark JSON and peers.py --pass decode's
records merged into one file and its tables (scripts/make_results.py --decode runs this).

Inputs
  bench_decode JSON   entries named impl/dtype/dD/BB/HqH/HkvH/qQ/NN/layout/splits, layout
                      contiguous or pageP, splits ruleS (the split rule chose S) or splitsS
                      (forced to S), Google Benchmark's suffixes (iterations:R, manual_time)
                      after them; counters median_ms, kv_bytes, tbps; the HBM read bandwidth
                      in its context (hbm_read_tbps, hbm_read_bytes, hbm_read_median_ms,
                      hbm_read_method).
  peers JSON          peers.py --pass decode: records with the same shape fields, layout
                      contiguous, no split count; "skipped" lists the refusals.

Output JSON: {"kind": "decode", "gpu", "driver", "date", "commit", "command",
"peers_software", "hbm": {"tbps", "bytes", "median_ms", "method"}, "timed", "results":
[records], "skipped": [the peers' refusals]}; a record is {impl, dtype, d, batch, heads_q,
heads_kv, q_len, cache, layout, splits, rule, median_ms, kv_bytes, tbps, hbm_fraction}, with
splits null for a peer and rule true for the rule's choice, false for a forced count, null
for a peer. hbm_fraction is tbps over the HBM read bandwidth of the same run.

Output Markdown: the header (GPU, driver, date, commit, command, the measured HBM read
bandwidth), then per (dtype, d, q_len): K+V TB/s and % of that bandwidth per shape (ours in
every layout with the rule's split count, each peer), the ratios (ours against each peer,
paged against contiguous), and the split rule's table (every forced split count next to the
rule's choice, the best one marked).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_perf  # noqa: E402

PEER_ORDER = ["torch_cudnn", "torch_flash", "torch_efficient", "torch_math"]
# A peer timed on K and V in the step's cache layout (peers.py --kv-layouts bnhd) is named the
# backend + BNHD and shown right after the backend.
BNHD = "_bnhd"
SHAPE = ("dtype", "d", "batch", "heads_q", "heads_kv", "q_len", "cache")
NAME_RE = re.compile(r"^(?P<impl>[^/]+)/(?P<dtype>fp16|bf16|fp32)/d(?P<d>\d+)/B(?P<batch>\d+)/"
                     r"Hq(?P<heads_q>\d+)/Hkv(?P<heads_kv>\d+)/q(?P<q_len>\d+)/N(?P<cache>\d+)/"
                     r"(?P<layout>contiguous|page\d+)(?:/(?P<kind>rule|splits)(?P<splits>\d+))?"
                     r"(?:/.*)?$")


class DecodeError(Exception):
    """An input that cannot be read as decoding results (the message names it)."""


def log(msg):
    print(msg, flush=True)


def is_ours(impl):
    return re.match(r"^\d+_", impl) is not None


def parse_name(name):
    """A record's fields from its name, or None when it is not a decoding record's name."""
    m = NAME_RE.match(name)
    if not m:
        return None
    rec = {k: m.group(k) for k in ("impl", "dtype", "layout")}
    rec.update({k: int(m.group(k)) for k in ("d", "batch", "heads_q", "heads_kv", "q_len",
                                             "cache")})
    if m.group("kind"):
        rec["splits"] = int(m.group("splits"))
        rec["rule"] = m.group("kind") == "rule"
    else:
        rec["splits"] = rec["rule"] = None
    return rec


def finish(rec, hbm_tbps):
    """kv_bytes, tbps and hbm_fraction made consistent: the bytes from the shape, TB/s from
    the median time, the fraction from the run's HBM bandwidth."""
    kv = fa_perf.decode_kv_bytes(rec["batch"], rec["heads_kv"], rec["cache"], rec["d"],
                                 rec["dtype"])
    given = rec.get("kv_bytes")
    if given is not None and abs(float(given) - kv) > 0.5:
        raise DecodeError(f"{record_label(rec)}: kv_bytes {given} is not {kv:.0f} "
                          "(B·N·H_kv·d·2·element size)")
    rec["kv_bytes"] = kv
    rec["median_ms"] = float(rec["median_ms"])
    if not rec["median_ms"] > 0:
        raise DecodeError(f"{record_label(rec)}: median_ms {rec['median_ms']} is not positive")
    rec["tbps"] = kv / (rec["median_ms"] * 1e-3) / 1e12
    rec["hbm_fraction"] = rec["tbps"] / hbm_tbps
    keep = SHAPE + ("impl", "layout", "splits", "rule", "median_ms", "kv_bytes", "tbps",
                    "hbm_fraction", "gqa", "note", "hbm_wait_ms", "hbm_wait_gave_up")
    return {k: rec[k] for k in ("impl",) + tuple(k for k in keep if k != "impl") if k in rec}


def record_label(rec):
    splits = "" if rec.get("splits") is None else (
        f"/{'rule' if rec.get('rule') else 'splits'}{rec['splits']}")
    return (f"{rec['impl']}/{rec['dtype']}/d{rec['d']}/B{rec['batch']}/Hq{rec['heads_q']}/"
            f"Hkv{rec['heads_kv']}/q{rec['q_len']}/N{rec['cache']}/{rec['layout']}{splits}")


def key_of(rec):
    return tuple(rec[k] for k in ("impl",) + SHAPE + ("layout", "splits", "rule"))


def load_bench(path):
    """(records without the HBM fields, the HBM figure) of one bench_decode JSON file."""
    with open(path) as f:
        doc = json.load(f)
    ctx = doc.get("context", {})
    try:
        hbm = {"tbps": float(ctx["hbm_read_tbps"]), "bytes": int(ctx.get("hbm_read_bytes", 0)),
               "median_ms": float(ctx.get("hbm_read_median_ms", 0)),
               "method": ctx.get("hbm_read_method", "")}
    except (KeyError, ValueError):
        raise DecodeError(f"{path}: no hbm_read_tbps in the context: not bench_decode's output")
    if not hbm["tbps"] > 0:
        raise DecodeError(f"{path}: hbm_read_tbps {hbm['tbps']} is not positive")
    found = []
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        name = b.get("name", "")
        if b.get("error_occurred"):
            log(f"  note: {name}: stopped by an error ({b.get('error_message', '')})")
            continue
        rec = parse_name(name)
        if rec is None or rec["splits"] is None:
            raise DecodeError(f"{path}: {name!r} is not impl/dtype/dD/BB/HqH/HkvH/qQ/NN/"
                              "layout/ruleS|splitsS")
        if "median_ms" not in b:
            raise DecodeError(f"{path}: {name}: no median_ms counter")
        rec["median_ms"] = b["median_ms"]
        rec["kv_bytes"] = b.get("kv_bytes")
        found.append(rec)
    log(f"bench {path}: {len(found)} records, HBM read {hbm['tbps']:.3f} TB/s")
    return found, hbm, ctx.get("decode_timed", "")


def load_peers(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("pass") != "decode":
        raise DecodeError(f"{path}: pass {doc.get('pass')!r}, not decode (peers.py --pass "
                          "decode writes it)")
    found = []
    for i, r in enumerate(doc.get("results", [])):
        try:
            rec = {k: int(r[k]) for k in ("d", "batch", "heads_q", "heads_kv", "q_len", "cache")}
            rec.update(impl=str(r["impl"]), dtype=str(r["dtype"]), layout=str(r["layout"]),
                       splits=None, rule=None, median_ms=r["median_ms"],
                       kv_bytes=r.get("kv_bytes"))
            if r.get("gqa") == "expanded":  # the backend refused enable_gqa (peers.py)
                rec.update(gqa="expanded", note=str(r.get("note", "")))
            # peers.py's wait for HBM reads at speed before the shape (none: --no-hbm-wait)
            if r.get("hbm_wait_ms") is not None:
                rec["hbm_wait_ms"] = float(r["hbm_wait_ms"])
            if r.get("hbm_wait_gave_up"):
                rec["hbm_wait_gave_up"] = True
        except (KeyError, TypeError, ValueError) as e:
            raise DecodeError(f"{path}: result {i}: "
                              + (f"no field {e}" if isinstance(e, KeyError) else str(e)))
        found.append(rec)
    skipped = [dict(s) for s in doc.get("skipped", []) if s.get("pass") == "decode"]
    log(f"peers {path}: {len(found)} records, {len(skipped)} skipped")
    return found, doc, skipped


def build(bench_paths, peer_paths, header):
    """The results document from the input files; header: gpu, driver, date, commit,
    command (filled in by the caller)."""
    records, hbm, timed, skipped, peer_docs = [], None, "", [], []
    for path in bench_paths:
        recs, h, t = load_bench(path)
        if hbm is None:
            hbm, timed = h, t
        elif abs(h["tbps"] - hbm["tbps"]) > 1e-9:
            log(f"  note: {path} measured HBM at {h['tbps']:.3f} TB/s; the first file's "
                f"{hbm['tbps']:.3f} TB/s is the yardstick")
        records += recs
    if hbm is None:
        raise DecodeError("no bench_decode file (--bench): the HBM read bandwidth of the run "
                          "is measured there")
    for path in peer_paths:
        recs, doc, sk = load_peers(path)
        records += recs
        skipped += sk
        peer_docs.append(doc)
    by_key = {}
    for r in records:
        r = finish(r, hbm["tbps"])
        if key_of(r) in by_key:
            log(f"  note: {record_label(r)} measured twice; keeping the later")
        by_key[key_of(r)] = r
    doc = dict(kind="decode", **header)
    sw = next(({k: d.get(k) for k in ("torch", "cudnn", "cuda") if d.get(k) is not None}
               for d in peer_docs if d.get("torch")), None)
    if sw:
        doc["peers_software"] = sw
    doc["hbm"] = hbm
    doc["timed"] = timed
    doc["results"] = sorted(by_key.values(), key=sort_key)
    doc["skipped"] = skipped
    return doc


def layout_rank(layout):
    return -1 if layout == "contiguous" else int(layout[4:])


def impl_rank(impl):
    if is_ours(impl):
        return (0, impl)
    base = impl[:-len(BNHD)] if impl.endswith(BNHD) else impl
    return (1, PEER_ORDER.index(base) if base in PEER_ORDER else len(PEER_ORDER), base,
            impl != base)


def sort_key(r):
    return (r["dtype"], r["d"], r["q_len"], r["batch"], -r["heads_kv"], r["cache"],
            impl_rank(r["impl"]), layout_rank(r["layout"]), r["rule"] is False,
            r["splits"] or 0)


# ------------------------------------------------------------------------------ markdown

def table(header, rows):
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" if i < 3 else "---:"
                                                            for i in range(len(header))) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def cell(r):
    if r is None:
        return "–"
    mark = (" †" if r.get("gqa") == "expanded" else "") + (" ‡" if r.get("hbm_wait_gave_up")
                                                          else "")
    return f"{r['tbps']:.2f} ({100 * r['hbm_fraction']:.0f}%){mark}"


def ratio(a, b):
    return "–" if a is None or b is None else f"{a['tbps'] / b['tbps']:.2f}×"


def code(text):
    return f"`{text}`"


def make_markdown(doc, image=None):
    """The page; `image` (a path relative to the page) names the plot after the header. It is
    named, not embedded: the documentation build keeps the pages' images in one folder, where a
    results page's relative path does not lead (chapter 12 shows the plot)."""
    hbm = doc["hbm"]
    out = [f"# Decoding on {doc['gpu']}", "",
           f"- GPU: {doc['gpu']}", f"- Driver: {doc['driver']}"]
    if doc.get("peers_software"):
        sw = doc["peers_software"]
        out.append(f"- Peers: PyTorch {sw.get('torch', '?')}, cuDNN {sw.get('cudnn', '?')}"
                   + (f", CUDA {sw['cuda']}" if sw.get("cuda") else ""))
    out += [f"- Date: {doc['date']}", f"- Commit: {code(doc['commit'])}",
            f"- Command: {code(doc['command'])}" if doc.get("command") else "- Command: –",
            f"- HBM read bandwidth, measured in this run: {hbm['tbps']:.2f} TB/s "
            f"({hbm.get('method') or 'streaming read'}, {fa_perf.human_bytes(hbm['bytes'])} "
            f"read in {hbm['median_ms']:.3f} ms, the median run)", "",
            "One decoding step: every sequence of the batch attends with its q_len new queries "
            "to its N keys and values ([conventions](../conventions.md), Decoding). What is "
            "timed: "
            f"{doc.get('timed') or 'the attention'}; the peers are PyTorch's "
            "`scaled_dot_product_attention` with one backend forced, q [B, H_q, q_len, d] "
            "against K and V [B, H_kv, N, d] with `enable_gqa=True` where H_q ≠ H_kv"
            + (" (a peer named `…_bnhd`: K and V made as [B, N, H_kv, d], the step's cache "
               "layout, and passed as their [B, H_kv, N, d] views; the others: K and V made as "
               "[B, H_kv, N, d], the layout PyTorch's kernels expect)"
               if any(r["impl"].endswith(BNHD) for r in doc["results"]) else "")
            + ", measured in the same run "
            "with the same GPU spin before each call. TB/s is the K and V bytes the step must "
            "read, B·N·H_kv·d·2·element size, over the median time (10¹² bytes/s); the "
            "percentage is that over the HBM read bandwidth above. Ours is shown with the "
            "split rule's choice of split count (column *splits*), contiguous and paged "
            "(`pageP`: pages of P rows, shuffled in the pool). – means not measured; a peer "
            "that refused a shape is listed under the table with its message.", ""]
    if image:
        out += [f"The plot of these figures: `docs/images/{os.path.basename(image)}` (K+V TB/s "
                "against the cache length, per batch and H_kv), shown in "
                "[chapter 12](../12-decode.md).", ""]
    recs = doc["results"]
    groups = {}
    for r in recs:
        groups.setdefault((r["dtype"], r["d"], r["q_len"]), []).append(r)
    for (dtype, d, q_len), rs in sorted(groups.items()):
        out += group_tables(dtype, d, q_len, rs, doc.get("skipped", []))
    return "\n".join(out).rstrip() + "\n"


def group_tables(dtype, d, q_len, rs, skipped):
    title = f"{dtype}, d = {d}, q_len = {q_len}"
    shapes = sorted({(r["batch"], r["heads_q"], r["heads_kv"], r["cache"]) for r in rs},
                    key=lambda s: (s[0], -s[2], s[3]))
    ours = sorted({r["impl"] for r in rs if is_ours(r["impl"])})
    layouts = sorted({r["layout"] for r in rs if is_ours(r["impl"]) and r["rule"]},
                     key=layout_rank)
    peers = sorted({r["impl"] for r in rs if not is_ours(r["impl"])}, key=impl_rank)
    index = {}
    for r in rs:
        index[(r["impl"], r["batch"], r["heads_q"], r["heads_kv"], r["cache"], r["layout"],
               r["rule"], r["splits"] if r["rule"] is False else None)] = r

    def get(impl, s, layout, rule=True, splits=None):
        if not is_ours(impl):
            rule, splits = None, None
        return index.get((impl, s[0], s[1], s[2], s[3], layout, rule, splits))

    def label(s):
        return [str(s[0]), f"{s[1]}/{s[2]}", str(s[3])]

    refusals = [x for x in skipped if x.get("dtype") == dtype and int(x.get("d", 0)) == d
                and int(x.get("q_len", 0)) == q_len]
    refused = {(x["impl"], (int(x["batch"]), int(x["heads_q"]), int(x["heads_kv"]),
                            int(x["cache"]))) for x in refusals}
    peers = sorted(set(peers) | {x["impl"] for x in refusals}, key=impl_rank)
    out = [f"## {title}: K+V bytes read per second", "",
           "TB/s (% of the measured HBM read bandwidth).", ""]
    header = ["B", "H_q/H_kv", "N"]
    for impl in ours:
        header += ["splits"] + [f"{impl} {lay}" for lay in layouts]
    header += peers
    rows = []
    for s in shapes:
        row = label(s)
        for impl in ours:
            rule = get(impl, s, "contiguous")
            row.append(str(rule["splits"]) if rule else "–")
            row += [cell(get(impl, s, lay)) for lay in layouts]
        row += [cell(get(p, s, "contiguous")) if get(p, s, "contiguous")
                or (p, s) not in refused else "skipped" for p in peers]
        rows.append(row)
    out += table(header, rows) + [""]
    expanded = [r for r in rs if r.get("gqa") == "expanded"]
    if expanded:
        out += ["† K and V expanded to H_q heads before the call (untimed), the backend having "
                "refused `enable_gqa`; it then reads them H_q / H_kv times over, and TB/s still "
                "counts the cache's bytes once:", ""]
        out += [f"- {r['impl']}, B = {r['batch']}, H_q/H_kv = {r['heads_q']}/{r['heads_kv']}, "
                f"N = {r['cache']}: {r.get('note', '')}" for r in expanded]
        out.append("")
    gave_up = [r for r in rs if r.get("hbm_wait_gave_up")]
    if gave_up:
        out += ["‡ timed although the wait for HBM reads at speed before the shape gave up "
                "(`peers.py`: its probe still read below the run's yardstick when the wait's "
                "time was spent), so the figure may be low:", ""]
        out += [f"- {r['impl']}, B = {r['batch']}, H_q/H_kv = {r['heads_q']}/{r['heads_kv']}, "
                f"N = {r['cache']}, {r['layout']}: waited {r.get('hbm_wait_ms', 0):.0f} ms"
                for r in gave_up]
        out.append("")
    if refusals:
        out += ["Not measured (the peer refused the shape or ran out of memory):", ""]
        out += [f"- {x['impl']}, B = {x['batch']}, H_q/H_kv = {x['heads_q']}/{x['heads_kv']}, "
                f"N = {x['cache']}: {x.get('reason', '')}" for x in refusals]
        out.append("")

    header, rows = ["B", "H_q/H_kv", "N"], []
    for impl in ours:
        header += [f"{impl} / {p}" for p in peers]
        header += [f"{lay} / contiguous" for lay in layouts if lay != "contiguous"]
    for s in shapes:
        row = label(s)
        for impl in ours:
            mine = get(impl, s, "contiguous")
            row += [ratio(mine, get(p, s, "contiguous")) for p in peers]
            row += [ratio(get(impl, s, lay), mine) for lay in layouts if lay != "contiguous"]
        rows.append(row)
    if len(header) > 3:
        out += [f"### {title}: ratios", "",
                "Ours (the rule's split count, contiguous cache) over each peer, and each paged "
                "layout over the contiguous cache (above 1× means faster).", ""]
        out += table(header, rows) + [""]

    for impl in ours:
        forced = sorted({r["splits"] for r in rs if r["impl"] == impl and r["rule"] is False})
        if not forced:
            continue
        out += [f"### {title}: the split rule of {impl}", "",
                "TB/s of the contiguous cache with the split count forced, next to the rule's "
                "choice; *best* is the fastest forced count, and *rule / best* the rule's TB/s "
                "over it.", ""]
        header = ["B", "H_q/H_kv", "N", "rule"] + [str(x) for x in forced] + ["best",
                                                                              "rule / best"]
        rows = []
        for s in shapes:
            rule = get(impl, s, "contiguous")
            cells = {x: get(impl, s, "contiguous", False, x) for x in forced}
            have = [c for c in cells.values() if c]
            best = max(have, key=lambda c: c["tbps"]) if have else None
            row = label(s) + [f"{rule['splits']}: {rule['tbps']:.2f}" if rule else "–"]
            row += [f"{cells[x]['tbps']:.2f}" if cells[x] else "–" for x in forced]
            row += [f"{best['splits']}: {best['tbps']:.2f}" if best else "–",
                    ratio(rule, best)]
            rows.append(row)
        out += table(header, rows) + [""]
    return out


def write_text(path, text):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def plot_path(out_json):
    """Where plots.py puts the plot of out_json (NAME-decode.json): NAME_decode.png in the
    images folder beside the results folder (docs/images/h200_decode.png)."""
    stem = os.path.basename(out_json)
    stem = stem[:-len("-decode.json")] if stem.endswith("-decode.json") else os.path.splitext(
        stem)[0]
    folder = os.path.join(os.path.dirname(os.path.abspath(out_json)), os.pardir, "images")
    return os.path.normpath(os.path.join(folder, f"{stem}_decode.png"))


def write(doc, out_json, out_md):
    """Writes the JSON and the page; the page names the plot if it has been drawn (plots.py
    after this, then make_results.py --decode --merge to re-render, names it)."""
    write_text(out_json, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    log(f"wrote {out_json}: {len(doc['results'])} records, {len(doc['skipped'])} skipped")
    png = plot_path(out_json)
    image = (os.path.relpath(png, os.path.dirname(os.path.abspath(out_md))).replace(os.sep, "/")
             if os.path.exists(png) else None)
    write_text(out_md, make_markdown(doc, image))
    log(f"wrote {out_md}" + (f" (showing {image})" if image else ""))


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(
        description="Print the Markdown of a decoding results file (make_results.py --decode "
                    "writes both; this renders the .md of an existing .json).")
    p.add_argument("results", help="a decoding results JSON (docs/results/h200-decode.json)")
    args = p.parse_args(argv)
    try:
        with open(args.results, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        p.error(f"{args.results}: {e}")
    if doc.get("kind") != "decode":
        p.error(f"{args.results} is not a decoding results file (no \"kind\": \"decode\")")
    sys.stdout.write(make_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
