#!/usr/bin/env python3
"""Refresh what the documentation shows from a results file: the plots and the README table.

  1. Regenerates the plots docs/images/<prefix>*.png (scripts/plots.py) from the results.
  2. Rewrites the README's results table, between the lines
         <!-- results:begin -->   and   <!-- results:end -->
     one row per implementation (every step registered in steps/CMakeLists.txt, then
     cublas_baseline, then the PyTorch peers), one column per (dtype, d, causal) measured,
     each cell the best TFLOP/s at N = 4096 (over the layouts measured), "–" if not measured.
  3. Fills the measured ceilings (docs/results/<gpu>-ceilings.json, written by
     scripts/ceilings.sh) into the text of README.md, docs/*.md and docs/results/*.md
     wherever a number follows a marker <!--ceiling:NAME-->, NAME one of the figures
     of the file (bf16_tflops, fp16_tflops, fp32_tflops, tf32_tflops, copy_tbps), keeping
     the number of decimals the text has. Without that file the text is left as it is (and
     it says so). Floors the chapters compute from a ceiling are not recomputed: it lists
     the files it changed so they can be reread.
  4. With --diagrams, also renders docs/diagrams/*.dot to SVG next to the sources
     (scripts/render_diagrams.py, the one command that does it).

Standard library, plus matplotlib for the plots (without it they are skipped with a note;
/usr/bin/python3 on Debian has it with python3-matplotlib). Idempotent. --check changes
nothing and exits 1 if the README table is not what the results say.

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
from make_results import DTYPE_ORDER, impl_rank, is_ours, normalize  # noqa: E402

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
    p.add_argument("--no-ceilings", action="store_true", help="leave the ceiling figures alone")
    p.add_argument("--diagrams", action="store_true",
                   help="also render docs/diagrams/*.dot to SVG next to the sources")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if the README table or a ceiling figure "
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
    at_n = [r for r in records if r["n_q"] == n and r["n_kv"] == n]
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
    provenance = ", ".join(x for x in (doc.get("date"), f"latest commit {doc['commit']}"
                                       if doc.get("commit") else None) if x)
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
    import plots  # noqa: E402  (scripts/plots.py; says so itself when matplotlib is missing)
    return plots.main(["--results", results, "--outdir", images, "--prefix", prefix])


CEILING_RE = re.compile(r"(<!--ceiling:(\w+)-->)(\d+(?:\.\d+)?)")


def ceiling_pages():
    return ([os.path.join(ROOT, "README.md")]
            + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
            + sorted(glob.glob(os.path.join(ROOT, "docs", "results", "*.md"))))


def fill_ceilings(path, check):
    """Copies the figures of the ceilings file into the marked numbers of the pages.
    Returns (exit status, files that changed or, with check, would change)."""
    if not os.path.exists(path):
        log(f"refresh_docs.py: {os.path.relpath(path, ROOT)} does not exist (scripts/ceilings.sh "
            "on the GPU writes it); the ceiling figures in the text are left as they are")
        return 0, []
    with open(path, encoding="utf-8") as f:
        figures = json.load(f).get("figures", {})
    changed, unknown = [], set()

    def fill(m):
        name = m.group(2)
        fig = figures.get(name)
        if not isinstance(fig, dict) or not isinstance(fig.get("value"), (int, float)):
            unknown.add(name)
            return m.group(0)
        decimals = len(m.group(3).split(".")[1]) if "." in m.group(3) else 0
        return f"{m.group(1)}{fig['value']:.{decimals}f}"

    for page in ceiling_pages():
        with open(page, encoding="utf-8") as f:
            text = f.read()
        new = CEILING_RE.sub(fill, text)
        if new != text:
            changed.append(os.path.relpath(page, ROOT))
            if not check:
                with open(page, "w", encoding="utf-8") as f:
                    f.write(new)
    if unknown:
        log(f"refresh_docs.py: {os.path.relpath(path, ROOT)} has no figure "
            + ", ".join(sorted(unknown)) + f" (it has: {', '.join(sorted(figures)) or 'none'})")
        return 1, changed
    return 0, changed


def render_diagrams():
    script = os.path.join(ROOT, "scripts", "render_diagrams.py")
    return subprocess.run([sys.executable, script]).returncode


def main(argv=None):
    args = parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        doc = json.load(f)
    rc = 0

    if not args.no_ceilings:
        rc, changed = fill_ceilings(args.ceilings, args.check)
        if args.check and changed:
            log("refresh_docs.py: ceiling figures out of date in " + ", ".join(changed)
                + "; run python3 scripts/refresh_docs.py")
            rc = 1
        elif changed:
            log("refresh_docs.py: updated the ceiling figures in " + ", ".join(changed)
                + " (reread the floors computed from them there)")

    if not args.no_readme:
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
