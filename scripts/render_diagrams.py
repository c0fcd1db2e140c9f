#!/usr/bin/env python3
"""Render every Graphviz diagram docs/diagrams/NAME.dot to docs/diagrams/NAME.svg, the image
the pages show (docs/diagrams.md, the chapters) on a code host and on the documentation site.

  python3 scripts/render_diagrams.py            # re-render them all (after editing a .dot)
  python3 scripts/render_diagrams.py --check    # change nothing; fail if an SVG is stale

The SVG is drawn by `dot -Tsvg:cairo`, which turns the text into outlines, so the picture looks
the same in every browser whatever fonts it has. Its first line after the XML declaration
records the SHA-256 of the .dot source and the Graphviz version that drew it.

--check (the ctest docs/diagrams) re-renders each source into a temporary folder and fails
when a .dot has no SVG, when an SVG's recorded hash is not its source's (the source was edited
without re-rendering), or, when this machine's Graphviz is the recorded one, when the SVG is
not byte for byte what dot draws now. With another Graphviz version the drawing itself cannot
be compared (layout and glyphs differ between versions): then the hashes are still checked,
and the byte comparison is reported as skipped (exit 77) with the two versions named.

Exit status: 0 good; 1 stale or failed; 2 usage; 77 skipped (dot missing, or another version).
Standard library only.
"""

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = 77
STAMP_RE = re.compile(r"<!-- rendered by scripts/render_diagrams\.py from (\S+) "
                      r"sha256=([0-9a-f]{64}) with (.*?) -->")


def log(msg):
    print(msg, flush=True)


def dot_version(dot):
    r = subprocess.run([dot, "-V"], capture_output=True, text=True)
    text = (r.stderr or r.stdout).strip()
    m = re.search(r"graphviz version [^\n]*", text, re.I)
    return " ".join(m.group(0).split()) if m else text.splitlines()[0] if text else "unknown"


def source_hash(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def render(dot, version, src_path, out_path):
    """Draws one diagram into out_path with its stamp; raises RuntimeError on failure."""
    r = subprocess.run([dot, "-Tsvg:cairo", src_path], capture_output=True, text=True)
    if r.returncode != 0 or r.stderr.strip() or "<svg" not in r.stdout:
        raise RuntimeError(f"dot -Tsvg:cairo failed on {os.path.relpath(src_path, ROOT)}: "
                           + (r.stderr.strip() or f"exit status {r.returncode}"))
    svg = r.stdout
    name = "docs/diagrams/" + os.path.basename(src_path)
    stamp = (f"<!-- rendered by scripts/render_diagrams.py from {name} "
             f"sha256={source_hash(src_path)} with {version} -->\n")
    head, sep, rest = svg.partition("?>\n")
    svg = head + sep + stamp + rest if sep and head.startswith("<?xml") else stamp + svg
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(svg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main(argv=None):
    p = argparse.ArgumentParser(description="Render docs/diagrams/*.dot to SVG next to them.")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if a committed SVG does not match its source")
    p.add_argument("--dot", default="dot", help="Graphviz's dot program (default: on PATH)")
    p.add_argument("--diagrams", default=os.path.join(ROOT, "docs", "diagrams"),
                   help="the folder of the .dot sources and their SVGs")
    args = p.parse_args(argv)

    dot = shutil.which(args.dot) or (args.dot if os.path.isfile(args.dot) else None)
    if dot is None:
        log(f"skipped: Graphviz's dot ({args.dot}) is not installed; on Debian/Ubuntu: "
            "apt-get install graphviz")
        return SKIP
    sources = sorted(glob.glob(os.path.join(args.diagrams, "*.dot")))
    if not sources:
        log(f"render_diagrams.py: no .dot files in {args.diagrams}")
        return 1
    version = dot_version(dot)

    if not args.check:
        for src in sources:
            target = os.path.splitext(src)[0] + ".svg"
            try:
                render(dot, version, src, target)
            except RuntimeError as e:
                log(f"render_diagrams.py: {e}")
                return 1
            log(f"wrote {os.path.relpath(target, ROOT)}")
        log(f"render_diagrams.py: {len(sources)} diagrams rendered with {version}")
        return 0

    problems, other_versions = [], set()
    with tempfile.TemporaryDirectory(prefix="fa-diagrams-") as tmp:
        for src in sources:
            rel = os.path.relpath(src, ROOT)
            committed = os.path.splitext(src)[0] + ".svg"
            if not os.path.exists(committed):
                problems.append(f"{rel} has no SVG next to it")
                continue
            fresh = os.path.join(tmp, os.path.basename(committed))
            try:
                render(dot, version, src, fresh)
            except RuntimeError as e:
                problems.append(str(e))
                continue
            old = read(committed)
            stamp = STAMP_RE.search(old)
            if stamp is None:
                problems.append(f"{os.path.relpath(committed, ROOT)} has no render stamp")
            elif stamp.group(2) != source_hash(src):
                problems.append(f"{os.path.relpath(committed, ROOT)} was rendered from another "
                                f"version of {rel}")
            elif stamp.group(3) != version:
                other_versions.add(stamp.group(3))
            elif read(fresh) != old:
                problems.append(f"{os.path.relpath(committed, ROOT)} differs from what "
                                f"{version} draws from {rel}")
    for line in problems:
        log("error: " + line)
    if problems:
        log(f"render_diagrams.py: {len(problems)} stale or missing SVGs; run "
            "python3 scripts/render_diagrams.py and commit the SVGs")
        return 1
    if other_versions:
        log(f"skipped: the SVGs match their sources' hashes, but they were drawn with "
            f"{', '.join(sorted(other_versions))} and this machine has {version}, so the "
            "drawings themselves were not compared")
        return SKIP
    log(f"render_diagrams.py: {len(sources)} SVGs match their sources ({version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
