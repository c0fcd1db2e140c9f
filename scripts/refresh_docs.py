#!/usr/bin/env python3
"""Refresh what the documentation shows from a results file: the plots and the README table.

  1. Regenerates the plots docs/images/<prefix>*.png (scripts/plots.py) from the results, and
     <prefix>decode.png from the decoding results beside them (<name>-decode.json), if any.
  2. Rewrites the README's results table, between the lines
         <!-- results:begin -->   and   <!-- results:end -->
     one row per implementation (every step registered in steps/CMakeLists.txt, then
     cublas_baseline, then the PyTorch peers), one column per (dtype, d, causal) measured,
     each cell the best TFLOP/s at N = 4096 (over the layouts measured), "–" if not measured.
  3. Fills every figure the pages (README.md, docs/*.md, docs/results/*.md) quote from a
     results file: the number right after a marker <!--SOURCE:KEY-->, which names the file
     and the figure in it (the sources and their keys: scripts/quoted_figures.py and
     docs/conventions.md, section Quoted figures), keeping the number of decimals the text
     has. Ratios and other derived figures are computed from their sources by a calc:
     marker. The ceilings (docs/results/<gpu>-ceilings.json, written by scripts/ceilings.sh)
     are one source: without that file their figures are left as they are (and it says so).
  4. With --diagrams, also renders docs/diagrams/*.dot to SVG next to the sources
     (scripts/render_diagrams.py, the one command that does it).

Standard library, plus matplotlib for the plots (without it they are skipped with a note;
/usr/bin/python3 on Debian has it with python3-matplotlib). Idempotent. --check changes
nothing and exits 1 if the README table or a quoted figure is not what the results say,
naming the page, the line, the marker, the figure quoted and the figure of the file.

Example:
  python3 scripts/refresh_docs.py                       # docs/results/h200.json, prefix h200_
  python3 scripts/refresh_docs.py --results docs/results/a100.json --prefix a100_ --no-readme
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from make_results import DTYPE_ORDER, impl_rank, is_ours, normalize, pass_of  # noqa: E402
import quoted_figures  # noqa: E402

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def log(msg):
    print(msg, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Regenerate plots and the README results table.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--results", default=os.path.join(ROOT, "docs", "results", "h200.json"),
                   help="results JSON (scripts/make_results.py)")
    p.add_argument("--prefix", default=None,
                   help="plot file prefix (default: the results file's name, e.g. h200_)")
    p.add_argument("--images", default=os.path.join(ROOT, "docs", "images"),
                   help="folder for the plots")
    p.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    p.add_argument("--n", type=int, default=4096, help="sequence length of the table")
    p.add_argument("--no-plots", action="store_true", help="leave the plots alone")
    p.add_argument("--no-readme", action="store_true", help="leave the README alone")
    p.add_argument("--ceilings", default=os.path.join(ROOT, "docs", "results",
                                                      "h200-ceilings.json"),
                   help="ceilings JSON (scripts/ceilings.sh); missing: text left as it is")
    p.add_argument("--figures-from", default=os.path.join(ROOT, "docs", "results"),
                   help="the folder of the results files the quoted figures come from")
    p.add_argument("--pages", nargs="+", default=None,
                   help="the pages whose quoted figures to fill or check "
                        "(default: README.md, docs/*.md, docs/results/*.md)")
    p.add_argument("--no-figures", "--no-ceilings", dest="no_figures", action="store_true",
                   help="leave the quoted figures alone")
    p.add_argument("--diagrams", action="store_true",
                   help="also render docs/diagrams/*.dot to SVG next to the sources")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if the README table or a quoted figure "
                        "is out of date")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------- table

def registered_steps():
    """Steps in steps/CMakeLists.txt's fa_add_step(...) lines, in file order."""
    path = os.path.join(ROOT, "steps", "CMakeLists.txt")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    return re.findall(r"^\s*fa_add_step\(\s*(\w+)\s*\)", text, re.M)


def column_key(r):
    return (r["dtype"], r["d"], r["causal"])


def column_title(key):
    dtype, d, causal = key
    return f"{dtype} d={d}" + (" causal" if causal else "")


def results_table(doc, n):
    """Markdown lines of the README table (without the markers)."""
    records = []
    for x in doc.get("results", []):
        try:
            records.append(normalize(x))
        except (KeyError, TypeError, ValueError):
            continue
    # The forward's table: a backward record (make_results.pass_of) is not a forward figure.
    at_n = [r for r in records if r["n_q"] == n and r["n_kv"] == n and pass_of(r) == "forward"]
    columns = sorted({column_key(r) for r in at_n},
                     key=lambda k: (DTYPE_ORDER.get(k[0], 9), k[0], k[1], k[2]))
    best = {}
    for r in at_n:
        k = (r["impl"], column_key(r))
        if r.get("tflops") is not None and r["tflops"] > best.get(k, -1.0):
            best[k] = r["tflops"]
    impls = {r["impl"] for r in at_n}
    ours = [s for s in registered_steps()] + sorted(i for i in impls if is_ours(i))
    ours = list(dict.fromkeys(ours))  # registered order, then any other measured step
    others = sorted((i for i in impls if not is_ours(i)), key=impl_rank)
    rows = ours + others

    gpu = doc.get("gpu", "unknown GPU")
    shapes = sorted({(r["batch"], r["heads_q"], r["d"]) for r in at_n})
    shape_note = ", ".join(f"B={b} H={h} d={d}" for b, h, d in shapes) if len(shapes) <= 4 \
        else "the FlashAttention benchmark shapes"
    run = doc.get("runs", {}).get("forward") or doc  # the forward's run, when passes differ
    provenance = ", ".join(x for x in (run.get("date"), f"latest commit {run['commit']}"
                                       if run.get("commit") else None) if x)
    lines = [f"Forward TFLOP/s on an {gpu} at N = {n} ({shape_note}), the best over the "
             f"layouts measured; – where not measured or not supported"
             + (f" ({provenance})" if provenance else "") + ". "
             "Our steps first, then the cuBLAS baseline and PyTorch's SDPA backends; each "
             "dtype's columns were measured in one run, ours and the peers together "
             "([docs/results/h200.md](docs/results/h200.md) says which run).", ""]
    if not columns:
        lines.append(f"(no results at N = {n} in the results file)")
        return lines
    header = ["implementation"] + [column_title(c) for c in columns]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * len(columns))
    for impl in rows:
        cells = []
        for c in columns:
            v = best.get((impl, c))
            cells.append("–" if v is None else f"{v:.1f}")
        name = f"`{impl}`"
        lines.append("| " + " | ".join([name] + cells) + " |")
    return lines


def with_table(readme, lines):
    if BEGIN not in readme or END not in readme or readme.index(BEGIN) > readme.index(END):
        raise ValueError(f"the README has no {BEGIN} … {END} block")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail


# ------------------------------------------------------------------------------ the rest

def make_plots(results, images, prefix):
    """The plots of the results file and, beside it, of its decoding results (NAME-decode.json,
    make_results.py --decode) when there are any."""
    import plots  # noqa: E402  (scripts/plots.py; says so itself when matplotlib is missing)
    rc = plots.main(["--results", results, "--outdir", images, "--prefix", prefix])
    decode = os.path.splitext(results)[0] + "-decode.json"
    if os.path.exists(decode):
        rc = plots.main(["--results", decode, "--outdir", images, "--prefix", prefix]) or rc
    return rc


def figure_pages():
    return ([os.path.join(ROOT, "README.md")]
            + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
            + sorted(glob.glob(os.path.join(ROOT, "docs", "results", "*.md"))))


def fill_figures(folder, ceilings, pages, check):
    """Fills (or, with check, compares) every quoted figure of the pages from its results
    file (scripts/quoted_figures.py). Returns (exit status, files changed or that would
    change); every problem is printed with its page, line, marker and values."""
    cache = {"ceilings_path": ceilings}
    changed, rc, missing = [], 0, set()
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(page, ROOT) if page.startswith(ROOT) else page
        new, problems, absent = quoted_figures.fill_text(text, folder, cache, where)
        missing |= absent
        for p in problems:
            stale = p[5] is None
            if check or not stale:
                log("refresh_docs.py: " + quoted_figures.describe(p))
            if check or not stale:
                rc = 1
        if new != text:
            changed.append(where)
            if not check:
                with open(page, "w", encoding="utf-8") as f:
                    f.write(new)
    for m in sorted(missing):
        log(f"refresh_docs.py: {m} does not exist (scripts/ceilings.sh on the GPU writes it); "
            "the figures marked with it are left as they are")
    return rc, changed


def render_diagrams():
    script = os.path.join(ROOT, "scripts", "render_diagrams.py")
    return subprocess.run([sys.executable, script]).returncode


def main(argv=None):
    args = parse_args(argv)
    rc = 0

    if not args.no_figures:
        rc, changed = fill_figures(args.figures_from, args.ceilings,
                                   args.pages or figure_pages(), args.check)
        if args.check and changed:
            log("refresh_docs.py: quoted figures out of date in " + ", ".join(changed)
                + "; run python3 scripts/refresh_docs.py")
            rc = 1
        elif changed:
            log("refresh_docs.py: updated the quoted figures in " + ", ".join(changed)
                + " (reread the sentences around them)")
        elif rc == 0:
            log("refresh_docs.py: the quoted figures are those of the results files")

    if not args.no_readme:
        with open(args.results, encoding="utf-8") as f:
            doc = json.load(f)
        with open(args.readme, encoding="utf-8") as f:
            readme = f.read()
        try:
            new = with_table(readme, results_table(doc, args.n))
        except ValueError as e:
            log(f"refresh_docs.py: {args.readme}: {e}")
            return 1
        if args.check:
            if new != readme:
                log(f"refresh_docs.py: the results table in {args.readme} is out of date; "
                    "run python3 scripts/refresh_docs.py")
                return 1
            log("refresh_docs.py: the README results table is up to date")
            return rc
        if new != readme:
            with open(args.readme, "w", encoding="utf-8") as f:
                f.write(new)
            log(f"refresh_docs.py: updated the results table in {args.readme}")
        else:
            log("refresh_docs.py: the README results table was already up to date")
    if args.check:
        return rc

    if not args.no_plots:
        prefix = args.prefix
        if prefix is None:
            prefix = os.path.splitext(os.path.basename(args.results))[0] + "_"
        rc = make_plots(args.results, args.images, prefix) or rc
    if args.diagrams:
        rc = render_diagrams() or rc
    return rc


if __name__ == "__main__":
    sys.exit(main())
