#!/usr/bin/env python3
"""The figures the pages quote from docs/results/, filled in or checked from those files.

Used by scripts/refresh_docs.py (the one command: `python3 scripts/refresh_docs.py` fills,
`--check` only compares). A quoted figure is the number right after a marker

    <!--SOURCE:KEY-->NUMBER

and the marker names where the number comes from. The sources (files in the results
folder, docs/results/ unless told otherwise):

  ceiling:NAME                 h200-ceilings.json, figure NAME (bf16_tflops, copy_tbps, …);
                               while that file does not exist these are left as they are
  tour:P:STEP:COLUMN           h200-tour.txt, problem P (the words of its 'Problem:' line
                               joined by +, e.g. Nq=4096+causal+fp32, naming one problem;
                               or 1, 2, … in file order), the row of
                               STEP, the column COLUMN: err (max|err|), ms, tflops, nxn
                               (NxN bytes), extra (extra mem), maxn (max N); the column is
                               found by its header, so new columns do not move it
  tour:P:FIGURE                the same problem's lines above the table: cpu_s (CPU
                               reference seconds), stream_err, stream_rel (streaming model
                               errors), matrix (one N×N fp32 matrix), fewest (fewest bytes),
                               gpu_mem (the GPU's memory), free_mem (its free memory)
  bench:DTYPE:D:MASK:IMPL:N[:F] h200.json, best TFLOP/s over the layouts of IMPL's forward
                               pass at N_q = N_kv = N, head dim D, MASK full or causal; taken
                               at one decimal, as h200.md and the README table print it;
                               with :ms the median time of that result, with :extra its
                               extra device memory as h200.md prints it
  bench:backward:DTYPE:…       the same of IMPL's backward pass (its records carry "pass":
                               "backward"); bench:forward:DTYPE:… is bench:DTYPE:…; a
                               step's deterministic mode is the IMPL NN_slug+deterministic
  bench:backward@FILE:DTYPE:…  the same read from FILE, a JSON file of the results folder
                               named without a folder (a run kept apart, e.g.
                               h200-backward-aa3c280.json), instead of h200.json;
                               bench:forward@FILE:… likewise
  span:DTYPE:D:MASK:IMPL[/PEER]:NLO-NHI:min|max
                               the least or greatest bench: TFLOP/s of IMPL (or ratio to PEER,
                               PEER@DTYPE for a peer in another dtype) over the lengths
                               NLO…NHI in h200.json; D and MASK may list several, joined by +
                               (64+128, full+causal); span:backward:… over the backward,
                               span:backward@FILE:… over FILE's (IMPL and PEER both from it)
  decode:DTYPE:D:IMPL:B:HQ:HKV:N:LAYOUT[:F]
                               h200-decode.json, the decoding record of IMPL with head dim D,
                               batch B, H_q = HQ, H_kv = HKV, cache length N, LAYOUT contiguous
                               or pageP; our step's with the split rule's choice, or with
                               LAYOUT@S its record forced to S splits. F: tbps (K+V TB/s, the
                               default, taken at two decimals as h200-decode.md prints it),
                               pct (% of the HBM read bandwidth of the same run), ms (median
                               time) or splits
  decode:hbm                   h200-decode.json, the HBM read bandwidth measured in that run,
                               TB/s
  tests:WHAT:GROUP             h200-tests.txt: WHAT is count, passed, failed or skipped,
                               GROUP the part of the test names before "/" (cpu,
                               01_naive_attention, …) or all
  sweep:STEP:WHAT              h200-sweep.txt, STEP's problems or failed
  sanitizer:WHAT               h200-sanitizer.txt: runs (tool runs listed), errors (runs
                               with errors, from its summary line)
  exercises:WHAT               h200-exercises.txt: count (exercises listed), violations,
                               or COLUMN:WORD, the exercises whose COLUMN (diff, compiles,
                               skeleton, solution) reads WORD (skeleton:fails, …)
  further:count|failed         h200-going-further.txt: the tasks listed, and those whose test
                               failed (Catch2's summary says so; a crash has none)
  pyapi:STEP:DTYPE:rel|L:min|max
                               h200-python-api.txt: the least or greatest relative error of
                               O (rel) or error of L over STEP's rows in DTYPE (bfloat16, …)
  traffic:IMPL:FIELD           h200-traffic.json, the result of IMPL, numeric FIELD
                               (dram_read_bytes, dram_write_bytes, analytic_bytes)
  md:FILE:ROW:COLUMN           a Markdown table of results FILE (h200-profile.md, …): the
                               row whose first cell is ROW, the column headed COLUMN; the
                               pair must name one cell of the file (md:FILE@T:ROW:COLUMN:
                               one cell of its T-th table, 1, 2, … in file order); ROW may
                               name the first cells of the row joined by & (131072&causal&
                               zigzag), a part HEADER=VALUE the cell under that header
                               (full&GPUs=8); a cell such as 1.95×, 30%, 1,029,909 or 126.1
                               (measured 119.7) gives its number
  calc:EXPR                    arithmetic (+ - * /, parentheses, min(), max(), numbers) on
                               sources written in brackets, e.g. calc:[bench:…:4096]/[bench:…:4096]

A number is written with as many decimals as the page shows; a count written as a word
("eight") stays a word; a number the page writes with thousands separators (1,029,909)
keeps them; a figure the file prints with a unit or an exponent (32.0 MiB, 4.29e-07) is
copied as printed. A source that cannot be read (file missing, step, column
or row not found, a table whose layout is not what this module expects) is an error that
names the page, the line, the marker and the reason: it never passes silently.
"""

import ast
import decimal
import json
import operator
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_results import human_bytes  # noqa: E402  (the byte format of h200.md)

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen", "twenty"]
_WORD_ALT = "|".join(WORDS + [w.capitalize() for w in WORDS])
GROUPED = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 1,029,909: a number with thousands separators
VALUE = (r"(?:" + GROUPED + r"(?!\d)"
         r"|\d+(?:\.\d+)?(?:e[-+]?\d+)?(?: (?:B|KiB|MiB|GiB|TiB)\b)?"
         r"|(?:" + _WORD_ALT + r")\b)")
MARKER_RE = re.compile(r"<!--([a-z]+):([^<>]*?)-->(" + VALUE + ")?")
CODE_RE = re.compile(r"^```.*?^```|`[^`\n]+`", re.M | re.S)
KINDS = ("ceiling", "tour", "bench", "span", "pyapi", "tests", "sweep", "sanitizer", "exercises", "further",
         "traffic", "decode",
         "md", "calc")


class SourceError(Exception):
    """A source that cannot give the figure (the message says why)."""


class Missing(Exception):
    """A source file that does not exist yet and may be absent (the ceilings)."""


class Count(int):
    """A count: written as digits or as a word, as the page has it."""


class Text(str):
    """A figure copied as the results file prints it."""


def _read(folder, name):
    path = os.path.join(folder, name)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise SourceError(f"cannot read {os.path.relpath(path, ROOT)}: {e.strerror}")


def _number(text, what):
    try:
        return float(text)
    except ValueError:
        raise SourceError(f"{what} reads {text!r}, not a number: has the file's format changed?")


# ------------------------------------------------------------------------------ the tour

TOUR_COLUMNS = {"err": "max|err|", "ms": "ms", "tflops": "TFLOP/s", "nxn": "NxN bytes",
                "extra": "extra mem", "maxn": "max N"}
TOUR_NUMERIC = {"ms", "tflops"}
TOUR_FIGURES = {
    "cpu_s": (r"^CPU reference \([^)]*\)(?:, fp32 inputs, \d+ rows)?: ([\d.]+) s$", float),
    "stream_err": (r"^CPU streaming model .*max\|err\| (\S+), rel", Text),
    "stream_rel": (r"^CPU streaming model .*, rel (\S+) ", Text),
    "matrix": (r"one N×N fp32 matrix (\S+ \S+)(?:;|$)", Text),
    "fewest": (r"the fewest bytes any pass must move:? (?:fp32 )?(\S+ \S+)(?:;| bf16|$)", Text),
    "gpu_mem": (r"^GPU: .*, ([\d.]+ [KMGT]iB)\)$", Text),
    "free_mem": (r"free memory \(([\d.]+ [KMGT]iB)[,)]", Text),
}
SPLIT = re.compile(r"\s{2,}")


def parse_tour(text, name="h200-tour.txt"):
    """[{"head": [lines above the table], "rows": {step: {header: cell}}}, …] in file order.
    Cells are split on runs of two or more spaces and matched to the header's names; a row
    that does not split into as many cells as the header (and is not a skipped step) is an
    error naming its line."""
    problems, current, header = [], None, None
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("Problem:"):
            current = {"head": [line], "rows": {}, "line": no}
            problems.append(current)
            header = None
            continue
        if current is None:
            continue
        if line.startswith("step ") and "ms" in SPLIT.split(line.strip()):
            header = SPLIT.split(line.strip())
            continue
        if header is None:
            current["head"].append(line)
            continue
        if not line.strip() or line.startswith("  "):
            # The table ends at the first blank line, or at the indented notes under it
            # (a step that cannot run, or was timed fewer times, and why).
            header = None
            continue
        cells = SPLIT.split(line.strip())
        step = cells[0]
        if cells[-1] == "skipped":
            current["rows"][step] = None
            continue
        if len(cells) != len(header):
            raise SourceError(f"{name} line {no}: {len(cells)} cells where the header has "
                              f"{len(header)} ({', '.join(header)}): has the format changed?")
        current["rows"][step] = dict(zip(header, cells))
    if not problems:
        raise SourceError(f"{name} has no 'Problem:' line: has the format changed?")
    for p in problems:
        if not p["rows"]:
            raise SourceError(f"{name} line {p['line']}: no table of steps under this problem")
    return problems


def tour_figure(folder, args, cache):
    if "tour" not in cache:
        cache["tour"] = parse_tour(_read(folder, "h200-tour.txt"))
    problems = cache["tour"]
    if len(args) not in (2, 3) or not args[0]:
        raise SourceError("expected tour:P:STEP:COLUMN or tour:P:FIGURE")
    p = args[0]
    if p.isdigit():
        if not 1 <= int(p) <= len(problems):
            raise SourceError(f"h200-tour.txt has problems 1 to {len(problems)}, not {p}")
        prob = problems[int(p) - 1]
    else:  # words of the Problem: line, joined by +, e.g. Nq=4096+causal+fp32
        words = set(p.split("+"))
        matches = [q for q in problems if words <= set(q["head"][0].split())]
        if len(matches) != 1:
            raise SourceError(f"h200-tour.txt: {len(matches)} problems have all of the words "
                              f"{', '.join(sorted(words))} in their 'Problem:' line; the "
                              "marker must name exactly one")
        prob = matches[0]
    if len(args) == 2:
        if args[1] not in TOUR_FIGURES:
            raise SourceError(f"unknown tour figure {args[1]!r} (known: "
                              f"{', '.join(TOUR_FIGURES)})")
        pattern, kind = TOUR_FIGURES[args[1]]
        for line in prob["head"]:
            m = re.search(pattern, line)
            if m:
                return kind(m.group(1))
        raise SourceError(f"h200-tour.txt problem {p}: no line gives {args[1]}: has the "
                          "format changed?")
    step, col = args[1], args[2]
    if col not in TOUR_COLUMNS:
        raise SourceError(f"unknown tour column {col!r} (known: {', '.join(TOUR_COLUMNS)})")
    if step not in prob["rows"]:
        raise SourceError(f"h200-tour.txt problem {p} has no row {step}")
    row = prob["rows"][step]
    if row is None:
        raise SourceError(f"h200-tour.txt problem {p}: {step} was skipped")
    header = TOUR_COLUMNS[col]
    if header not in row:
        raise SourceError(f"h200-tour.txt has no column headed {header!r} (it has: "
                          f"{', '.join(row)}): has the format changed?")
    cell = row[header]
    if col in TOUR_NUMERIC:
        return _number(cell, f"h200-tour.txt problem {p}, {step}, {header}")
    if col == "maxn":
        if not cell.isdigit():
            raise SourceError(f"h200-tour.txt problem {p}, {step}, {header} reads {cell!r}, "
                              "not a count: has the format changed?")
        return Count(cell)
    return Text(cell)


# ------------------------------------------------------------------------ the benchmark

PASSES = ("forward", "backward")
BENCH_FILE = "h200.json"
RUN_FILE = re.compile(r"[A-Za-z0-9][\w.+-]*\.json", re.ASCII)  # PASS@FILE: a file of the folder


def _pass(args):
    """(pass, results file, the other arguments): a leading forward or backward names the pass
    (no dtype is called so); without it the forward, as every marker written before the backward
    meant. PASS@FILE reads FILE, a run kept apart in the results folder, instead of h200.json."""
    word, at, name = args[0].partition("@") if args else ("", "", "")
    if word not in PASSES:
        return "forward", BENCH_FILE, args
    if at and not RUN_FILE.fullmatch(name):
        raise SourceError(f"{args[0]}: after @ a .json file of the results folder, named "
                          f"without a folder (backward@h200-backward-aa3c280.json), not {name!r}")
    return word, name or BENCH_FILE, args[1:]


def _bench_records(folder, name, cache):
    """The records of the results file name (h200.json or a run kept apart), read once."""
    key = "bench" if name == BENCH_FILE else "bench@" + name
    if key not in cache:
        try:
            doc = json.loads(_read(folder, name))
        except ValueError as e:
            raise SourceError(f"{name} is not JSON: {e}")
        records = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(records, list) or not all(
                isinstance(r, dict) and str(r.get("n_q", "")).isdigit() for r in records):
            raise SourceError(f"{name} has no list \"results\" of records with a length n_q")
        cache[key] = records
    return cache[key]


def bench_figure(folder, args, cache):
    kind, name, args = _pass(args)
    if len(args) not in (5, 6):
        raise SourceError("expected bench:[backward:]DTYPE:D:MASK:IMPL:N[:ms|extra]")
    dtype, d, mask, impl, n = args[:5]
    field = args[5] if len(args) == 6 else "tflops"
    if (mask not in ("full", "causal") or not d.isdigit() or not n.isdigit()
            or field not in ("tflops", "ms", "extra")):
        raise SourceError("expected bench:DTYPE:D:full|causal:IMPL:N[:ms|extra], D and N "
                          "numbers")
    best = None
    for r in _bench_records(folder, name, cache):
        try:
            if (str(r.get("pass", "forward")) == kind and str(r["impl"]) == impl
                    and str(r["dtype"]).lower() == dtype
                    and int(r["d"]) == int(d) and bool(r["causal"]) == (mask == "causal")
                    and int(r["n_q"]) == int(n) and int(r["n_kv"]) == int(n)
                    and r.get("tflops") is not None):
                if best is None or float(r["tflops"]) > float(best["tflops"]):
                    best = r
        except (KeyError, TypeError, ValueError):
            raise SourceError(f"{name} has a result without the usual fields: {r!r:.120}")
    if best is None:
        raise SourceError(f"{name} has no {impl} {kind} result for {dtype} d={d} {mask} "
                          f"N={n}")
    if field == "ms":
        return float(best["median_ms"])
    if field == "extra":
        return Text(human_bytes(best.get("extra_device_bytes")))
    return float(f"{float(best['tflops']):.1f}")


def span_figure(folder, args, cache):
    """The least or the greatest, over the lengths N measured from NLO to NHI (and over
    every head dim and mask listed, joined by +), of IMPL's TFLOP/s or of the ratio IMPL/PEER,
    each figure taken at one decimal as bench: takes it."""
    kind, name, args = _pass(args)
    if len(args) != 6 or args[5] not in ("min", "max") or "-" not in args[4]:
        raise SourceError("expected span:[backward:]DTYPE:D[+D]:MASK[+MASK]:IMPL[/PEER]:"
                          "NLO-NHI:min|max")
    dtype, ds, masks, impls, ns, which = args
    lo, _, hi = ns.partition("-")
    if not lo.isdigit() or not hi.isdigit():
        raise SourceError(f"span: {ns!r} is not a range of lengths NLO-NHI")
    impl, _, peer = impls.partition("/")
    peer, _, peer_dtype = peer.partition("@")  # PEER@DTYPE: the peer in another dtype
    lengths = sorted({int(r["n_q"]) for r in _bench_records(folder, name, cache)
                      if str(r.get("impl")) == impl and str(r.get("pass", "forward")) == kind
                      and int(lo) <= int(r["n_q"]) <= int(hi)})
    if not lengths:
        raise SourceError(f"{name} has no {impl} {kind} result with {lo} <= N <= {hi}")
    word = kind if name == BENCH_FILE else f"{kind}@{name}"  # bench:'s pass word, same file
    values = []
    for d in ds.split("+"):
        for mask in masks.split("+"):
            for n in lengths:
                a = bench_figure(folder, [word, dtype, d, mask, impl, str(n)], cache)
                if peer:
                    b = bench_figure(folder, [word, peer_dtype or dtype, d, mask, peer, str(n)],
                                     cache)
                    values.append(a / b)
                else:
                    values.append(a)
    return min(values) if which == "min" else max(values)


# ------------------------------------------------------------------- the logs of counts

TEST_LINE = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(\*{3})?(\w+)")


def tests_figure(folder, args, cache):
    if len(args) != 2 or args[0] not in ("count", "passed", "failed", "skipped"):
        raise SourceError("expected tests:count|passed|failed|skipped:GROUP")
    if "tests" not in cache:
        outcomes = {}
        for line in _read(folder, "h200-tests.txt").splitlines():
            m = TEST_LINE.match(line)
            if m:
                outcomes[m.group(1)] = m.group(3).lower()
        if not outcomes:
            raise SourceError("h200-tests.txt lists no test outcome: has the format changed?")
        cache["tests"] = outcomes
    what, group = args
    names = [t for t in cache["tests"] if group == "all" or t.split("/")[0] == group]
    if not names:
        raise SourceError(f"h200-tests.txt has no test of group {group!r}")
    if what == "count":
        return Count(len(names))
    return Count(sum(1 for t in names if cache["tests"][t] == what))


def sweep_figure(folder, args, cache):
    if len(args) != 2 or args[1] not in ("problems", "failed"):
        raise SourceError("expected sweep:STEP:problems|failed")
    for line in _read(folder, "h200-sweep.txt").splitlines():
        m = re.match(r"^(\S+)\s+(\d+) problems, (\d+) failed$", line)
        if m and m.group(1) == args[0]:
            return Count(m.group(2) if args[1] == "problems" else m.group(3))
    raise SourceError(f"h200-sweep.txt has no line '{args[0]}  N problems, M failed'")


def sanitizer_figure(folder, args, cache):
    text = _read(folder, "h200-sanitizer.txt")
    if args == ["runs"]:
        n = len(re.findall(r"^(?:memcheck|racecheck|initcheck|synccheck)\s.*\brc=\d+",
                           text, re.M))
        if not n:
            raise SourceError("h200-sanitizer.txt lists no run: has the format changed?")
        return Count(n)
    if args == ["errors"]:
        m = re.search(r"^sanitize: (\d+) runs? with errors", text, re.M)
        if not m:
            raise SourceError("h200-sanitizer.txt has no 'sanitize: N runs with errors' line")
        return Count(m.group(1))
    raise SourceError("expected sanitizer:runs or sanitizer:errors")


def exercises_figure(folder, args, cache):
    text = _read(folder, "h200-exercises.txt")
    if args == ["violations"]:
        m = re.search(r"^check_exercises: (\d+) violation", text, re.M)
        if m:
            return Count(m.group(1))
        if re.search(r"^check_exercises: (?:all|no violation)", text, re.M):
            return Count(0)
        raise SourceError("h200-exercises.txt has no 'check_exercises:' summary line")
    rows, header = [], None
    for line in text.splitlines():
        cells = SPLIT.split(line.strip())
        if cells[:2] == ["ex", "step"]:
            header = cells
        elif header and re.fullmatch(r"\d\d", cells[0]):
            if len(cells) != len(header):
                raise SourceError(f"h200-exercises.txt: the row {line.strip()!r} does not match "
                                  f"the header ({', '.join(header)}): has the format changed?")
            rows.append(dict(zip(header, cells)))
    if not rows:
        raise SourceError("h200-exercises.txt has no table of exercises: has the format changed?")
    if args == ["count"]:
        return Count(len(rows))
    if len(args) == 2 and args[0] in header[2:]:
        # exercises:COLUMN:WORD, the rows whose COLUMN begins with WORD (skeleton:fails, …)
        return Count(sum(1 for r in rows if r[args[0]].split()[0].lower() == args[1].lower()))
    raise SourceError("expected exercises:count, exercises:violations or exercises:COLUMN:WORD "
                      f"(COLUMN one of {', '.join(header[2:])})")


def further_figure(folder, args, cache):
    text = _read(folder, "h200-going-further.txt")
    sections = re.split(r"^== going further ", text, flags=re.M)[1:]
    if not sections:
        raise SourceError("h200-going-further.txt has no '== going further' section: has the "
                          "format changed?")
    if args == ["count"]:
        return Count(len(sections))
    if args == ["failed"]:
        # a task's test "fails" when Catch2 reports a failed test case (not a crash: it ends
        # with its summary line)
        return Count(sum(1 for sec in sections
                         if re.search(r"^test cases: *\d+ \| (?:\d+ passed \| )?\d+ failed", sec,
                                      re.M)))
    raise SourceError("expected further:count or further:failed")


def pyapi_figure(folder, args, cache):
    if len(args) != 4 or args[2] not in ("rel", "L") or args[3] not in ("min", "max"):
        raise SourceError("expected pyapi:STEP:DTYPE:rel|L:min|max")
    step, dtype, what, which = args
    values = []
    for line in _read(folder, "h200-python-api.txt").splitlines():
        m = re.match(r"^(\S+)\s+(\S+)\s+\S+ causal=\w+: rel err (\S+), L err (\S+)", line)
        if m and m.group(1) == step and m.group(2) == dtype:
            values.append(_number(m.group(3) if what == "rel" else m.group(4),
                                  f"h200-python-api.txt, {step} {dtype}"))
    if not values:
        raise SourceError(f"h200-python-api.txt has no measured row of {step} in {dtype}")
    return min(values) if which == "min" else max(values)


def traffic_figure(folder, args, cache):
    if len(args) != 2:
        raise SourceError("expected traffic:IMPL:FIELD")
    try:
        doc = json.loads(_read(folder, "h200-traffic.json"))
    except ValueError as e:
        raise SourceError(f"h200-traffic.json is not JSON: {e}")
    for r in doc.get("results", []):
        if r.get("impl") == args[0]:
            v = r.get(args[1])
            if not isinstance(v, (int, float)):
                raise SourceError(f"h200-traffic.json: {args[0]} has no number {args[1]}")
            return float(v)
    raise SourceError(f"h200-traffic.json has no result of {args[0]}")


DECODE_FIELDS = ("tbps", "pct", "ms", "splits")


def decode_figure(folder, args, cache):
    if "decode" not in cache:
        try:
            cache["decode"] = json.loads(_read(folder, "h200-decode.json"))
        except ValueError as e:
            raise SourceError(f"h200-decode.json is not JSON: {e}")
    doc = cache["decode"]
    if args == ["hbm"]:
        try:
            return float(doc["hbm"]["tbps"])
        except (KeyError, TypeError, ValueError):
            raise SourceError("h200-decode.json has no hbm.tbps")
    if len(args) not in (8, 9) or (len(args) == 9 and args[8] not in DECODE_FIELDS):
        raise SourceError("expected decode:hbm or decode:DTYPE:D:IMPL:B:HQ:HKV:N:LAYOUT[@S]"
                          f"[:{'|'.join(DECODE_FIELDS)}]")
    dtype, d, impl, b, hq, hkv, n, layout = args[:8]
    field = args[8] if len(args) == 9 else "tbps"
    layout, _, forced = layout.partition("@")
    if not all(x.isdigit() for x in (d, b, hq, hkv, n)) or (forced and not forced.isdigit()):
        raise SourceError(f"decode: D, B, HQ, HKV, N{' and S' if forced else ''} must be numbers")
    want = {"dtype": dtype, "d": int(d), "impl": impl, "batch": int(b), "heads_q": int(hq),
            "heads_kv": int(hkv), "cache": int(n), "layout": layout}
    found = []
    for r in doc.get("results", []):
        try:
            if all(r[k] == v for k, v in want.items()) and (
                    (r["splits"] == int(forced) and r["rule"] is False) if forced
                    else r["rule"] is not False):
                found.append(r)
        except KeyError:
            raise SourceError(f"h200-decode.json has a result without the usual fields: "
                              f"{r!r:.120}")
    what = ":".join(args[:8])
    if len(found) != 1:
        raise SourceError(f"h200-decode.json has {len(found)} records of {what}"
                          + (" (several q_len: not one figure)" if found else ""))
    r = found[0]
    if field == "pct":
        return 100.0 * float(r["hbm_fraction"])
    if field == "ms":
        return float(r["median_ms"])
    if field == "splits":
        return Count(int(r["splits"]))
    return float(f"{float(r['tbps']):.2f}")


def _md_cells(line):
    return [c.strip().strip("`").strip() for c in line.strip().strip("|").split("|")]


def _row_matches(cells, header, keys):
    """Whether a table row is the one `keys` name: the k-th key the row's k-th cell, or, as
    HEADER=VALUE, the cell under that header."""
    for k, key in enumerate(keys):
        name, eq, value = key.partition("=")
        if eq and name.strip() in header:
            i = header.index(name.strip())
            if i >= len(cells) or cells[i] != value.strip():
                return False
        elif k >= len(cells) or cells[k] != key:
            return False
    return True


def md_figure(folder, args, cache):
    if len(args) > 3:  # a row name with colons in it ("pipe: xu"); the column has none
        args = [args[0], ":".join(args[1:-1]), args[-1]]
    name, _, nth = args[0].partition("@") if args else ("", "", "")
    if len(args) != 3 or not name.endswith(".md") or (nth and not nth.isdigit()):
        raise SourceError("expected md:FILE.md:ROW:COLUMN or md:FILE.md@TABLE:ROW:COLUMN")
    row, col = args[1], args[2]
    keys = row.split("&")  # a&b: the row whose first two cells are a and b; a&GPUs=8 …
    if os.sep in name or "/" in name:
        raise SourceError(f"{name}: a file of the results folder, named without a folder")
    lines = _read(folder, name).splitlines()
    found, header, table = [], None, 0
    for no, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = _md_cells(line)
        if header is None:
            header = cells
            table += 1
            continue
        if nth and table != int(nth):
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        if cells and _row_matches(cells, header, keys) and col in header:
            i = header.index(col)
            if i < len(cells):
                found.append((no, cells[i]))
    if len(found) != 1:
        raise SourceError(f"{name}" + (f" table {nth}" if nth else "")
                          + f": {len(found)} cells in row {row!r}, column {col!r}"
                          + (" (lines " + ", ".join(str(n) for n, _ in found) + ")"
                             if found else "") + "; the pair must name exactly one")
    cell = found[0][1]
    if re.fullmatch(GROUPED, cell):
        cell = cell.replace(",", "")
    try:
        return float(cell)
    except ValueError:
        pass
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(?:×|%|\(.*\))", cell)  # 1.95×, 30%, 5.2 (…)
    return float(m.group(1)) if m else Text(cell)


# -------------------------------------------------------------------------- arithmetic

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.USub: operator.neg}
REF_RE = re.compile(r"\[([a-z]+:[^\[\]]+)\]")


def _eval(node):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("min", "max") and node.args and not node.keywords):
        return (min if node.func.id == "min" else max)(_eval(a) for a in node.args)
    raise SourceError("calc takes numbers, + - * /, parentheses, min() and max() only")


def calc_figure(folder, args, cache):
    expr = ":".join(args)
    values = []

    def ref(m):
        v = figure(m.group(1), folder, cache)
        if isinstance(v, Text):
            raise SourceError(f"[{m.group(1)}] is {v!r}, not a number")
        values.append(float(v))
        return f"({float(v)!r})"

    arithmetic = REF_RE.sub(ref, expr)
    try:
        tree = ast.parse(arithmetic, mode="eval")
    except SyntaxError:
        raise SourceError(f"calc:{expr} is not arithmetic on [source] references")
    try:
        return _eval(tree)
    except ZeroDivisionError:
        raise SourceError(f"calc:{expr} divides by zero")


def ceiling_figure(folder, args, cache, ceilings=None):
    path = ceilings or os.path.join(folder, "h200-ceilings.json")
    if not os.path.exists(path):
        raise Missing(os.path.relpath(path, ROOT))
    if len(args) != 1:
        raise SourceError("expected ceiling:NAME")
    with open(path, encoding="utf-8") as f:
        figures = json.load(f).get("figures", {})
    fig = figures.get(args[0])
    if not isinstance(fig, dict) or not isinstance(fig.get("value"), (int, float)):
        raise SourceError(f"{os.path.relpath(path, ROOT)} has no figure {args[0]} (it has: "
                          f"{', '.join(sorted(figures)) or 'none'})")
    return float(fig["value"])


SOURCES = {"tour": tour_figure, "bench": bench_figure, "tests": tests_figure,
           "sweep": sweep_figure, "sanitizer": sanitizer_figure,
           "exercises": exercises_figure, "further": further_figure, "span": span_figure,
           "pyapi": pyapi_figure, "traffic": traffic_figure, "decode": decode_figure,
           "md": md_figure,
           "calc": calc_figure, "ceiling": ceiling_figure}


def figure(source, folder, cache):
    """The value a marker's SOURCE:KEY names (float, Count or Text)."""
    kind, _, key = source.partition(":")
    if kind not in SOURCES:
        raise SourceError(f"unknown source {kind!r} (known: {', '.join(SOURCES)})")
    if kind == "ceiling":
        return ceiling_figure(folder, key.split(":"), cache, cache.get("ceilings_path"))
    return SOURCES[kind](folder, key.split(":"), cache)


# ------------------------------------------------------------------------------ writing

def render(value, quoted):
    """value written the way the page writes the quoted figure."""
    if isinstance(value, Text):
        return str(value)
    if quoted and quoted.lower() in WORDS:
        if isinstance(value, float) and not value.is_integer():
            raise SourceError(f"the page writes {quoted!r} but the figure is {value}")
        n = int(value)
        if not 0 <= n < len(WORDS):
            return str(n)
        word = WORDS[n]
        return word.capitalize() if quoted[0].isupper() else word
    if isinstance(value, Count):
        return str(int(value))
    decimals = len(quoted.split(".")[1]) if quoted and "." in quoted else 0
    # halves round away from zero, as a reader rounds (496.5 → 497), not to even
    step = decimal.Decimal(1).scaleb(-decimals)
    rounded = decimal.Decimal(repr(float(value))).quantize(step, decimal.ROUND_HALF_UP)
    return f"{rounded:,f}" if quoted and "," in quoted else str(rounded)


def fill_text(text, folder, cache, where):
    """(new text, problems, missing files). problems are the lines to print: a marker whose
    source fails, a marker with no number after it, or (what --check reports) a quoted
    figure that differs from its source."""
    problems, missing, out, pos = [], set(), [], 0
    code = [(c.start(), c.end()) for c in CODE_RE.finditer(text)]
    for m in MARKER_RE.finditer(text):
        if m.group(1) not in KINDS or any(a <= m.start() < b for a, b in code):
            continue  # not a marker, or one shown in code (how markers are written)
        line = text.count("\n", 0, m.start()) + 1
        marker = f"<!--{m.group(1)}:{m.group(2)}-->"
        quoted = m.group(3)
        if quoted is None:
            problems.append((where, line, marker, None, None, "no figure right after the marker"))
            continue
        try:
            value = figure(f"{m.group(1)}:{m.group(2)}", folder, cache)
            expected = render(value, quoted)
        except Missing as e:
            missing.add(str(e))
            continue
        except SourceError as e:
            problems.append((where, line, marker, quoted, None, str(e)))
            continue
        if expected != quoted:
            problems.append((where, line, marker, quoted, expected, None))
            out.append(text[pos:m.start(3)])
            out.append(expected)
            pos = m.end(3)
    out.append(text[pos:])
    return "".join(out), problems, missing


def describe(problem):
    where, line, marker, quoted, expected, error = problem
    if error:
        return f"{where}:{line}: {marker}" + (f" {quoted}" if quoted else "") + f": {error}"
    return f"{where}:{line}: {marker} quotes {quoted}, the results say {expected}"
