#!/usr/bin/env python3
"""Write the navigation line of every chapter: previous chapter · contents · next chapter.

Each chapter docs/NN-slug.md gets, right under its "# " title, one line such as

  [← Chapter 00](00-attention-and-the-memory-wall.md) · [Contents](../README.md) · [Chapter 02 →](02-tiled-matmul.md)

computed from the chapters present, so adding a chapter and running this script again links
it in both directions. Plain relative Markdown links: they work on GitHub and in the
documentation site (Doxygen resolves links between its Markdown pages). Idempotent: a second
run changes nothing. With --check, changes nothing and exits 1 if any line is missing or
stale (the docs test runs it this way).

Usage:
  python3 scripts/chapter_nav.py            # rewrite the lines
  python3 scripts/chapter_nav.py --check    # only report
"""

import argparse
import os
import re
import sys

CHAPTER_RE = re.compile(r"^(\d\d)-.*\.md$")
# A line this script wrote (or an older hand-written one of the same shape).
NAV_RE = re.compile(r"^\[(← Chapter \d+|Contents)\]\(")


def chapters(docs_dir):
    names = sorted(n for n in os.listdir(docs_dir) if CHAPTER_RE.match(n))
    return [(CHAPTER_RE.match(n).group(1), n) for n in names]


def nav_line(index, chs):
    parts = []
    if index > 0:
        num, name = chs[index - 1]
        parts.append(f"[← Chapter {num}]({name})")
    parts.append("[Contents](../README.md)")
    if index + 1 < len(chs):
        num, name = chs[index + 1]
        parts.append(f"[Chapter {num} →]({name})")
    return " · ".join(parts)


def with_nav(text, nav):
    """The chapter with `nav` as the first paragraph under its title."""
    lines = text.split("\n")
    title = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), None)
    if title is None:
        raise ValueError("no '# ' title line")
    rest = title + 1
    while rest < len(lines) and not lines[rest].strip():
        rest += 1
    if rest < len(lines) and NAV_RE.match(lines[rest]):
        rest += 1
        while rest < len(lines) and not lines[rest].strip():
            rest += 1
    return "\n".join(lines[:title + 1] + ["", nav, ""] + lines[rest:])


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description="Write each chapter's previous/contents/next line.")
    p.add_argument("--docs", default=os.path.join(os.path.dirname(here), "docs"),
                   help="the folder of the chapters (default: docs/ next to scripts/)")
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if a chapter's line is missing or stale")
    args = p.parse_args(argv)

    chs = chapters(args.docs)
    stale = []
    for i, (_, name) in enumerate(chs):
        path = os.path.join(args.docs, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            new = with_nav(text, nav_line(i, chs))
        except ValueError as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
        if new == text:
            continue
        stale.append(name)
        if not args.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    if args.check:
        if stale:
            print("chapter navigation lines missing or stale in: " + ", ".join(stale)
                  + "\n  fix: python3 scripts/chapter_nav.py", file=sys.stderr)
            return 1
        print(f"chapter_nav.py: {len(chs)} chapters, navigation lines up to date")
        return 0
    print(f"chapter_nav.py: {len(chs)} chapters, {len(stale)} updated"
          + (f" ({', '.join(stale)})" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
