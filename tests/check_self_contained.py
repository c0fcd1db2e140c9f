#!/usr/bin/env python3
"""Check that the repository stands on its own: no tracked file cites a file the project
does not contain, and every relative link or image of a Markdown page points to a file of
the repository (so pages read on a code host have no broken link or image).

Registered in ctest as conventions/self_contained. What it checks, over the files git tracks
(or, outside a git checkout, every file but build folders):

  1. No file names the notes that once held the project's conventions (their names are
     assembled below, so this file does not name them either) or a path beside the
     repository (the folder "shared" one level up, an absolute home of a checkout): the
     conventions live in docs/conventions.md.
  2. Every relative target of a Markdown link or image, [text](path) or ![alt](path), in a
     tracked .md file, resolved from that file's folder, exists and lies inside the
     repository. Links to web addresses and to anchors of the same page are not checked.
  3. No line of a Markdown file begins with a quoted-figure marker such as <!--tour:…-->
     or <!--ceiling:…--> (scripts/refresh_docs.py, scripts/quoted_figures.py): a
     line that starts with an HTML comment is an HTML block on a code host, which would end
     the paragraph and show the rest of the line unrendered.

Exit status 0 when all is well, 1 otherwise (each problem printed). Standard library only.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORBIDDEN = [
    ("PERF" + ".md", re.compile(r"\bPERF" + r"\.md\b", re.I)),
    ("STYLE" + ".md", re.compile(r"\bSTYLE" + r"\.md\b", re.I)),
    ("../" + "shared", re.compile(r"\.\./" + r"shared\b")),
    ("/work" + "/", re.compile(r"(?<![\w.])/work" + r"/")),
]
LINK_RE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MARKER_START = re.compile(r"<!--[a-z]+:")
CODE_SPAN_RE = re.compile(r"`[^`]*`")
SKIP_DIRS = {".git", "__pycache__", "out"}


def tracked_files():
    try:
        r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                           check=True)
        files = [f for f in r.stdout.decode("utf-8", "replace").split("\0") if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        files += [os.path.relpath(os.path.join(root, n), ROOT) for n in names]
    return files


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None  # binary (images)
    return data.decode("utf-8", "replace")


def markdown_problems(rel, text):
    problems = []
    in_fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if MARKER_START.match(line):
            problems.append(f"{rel}:{n}: the line begins with a quoted-figure marker; move a word "
                            "in front of it")
        for m in LINK_RE.finditer(CODE_SPAN_RE.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a web address, mailto:, or an anchor of this page
            path = target.split("#", 1)[0].split("?", 1)[0]
            resolved = os.path.normpath(os.path.join(ROOT, os.path.dirname(rel), path))
            if os.path.commonpath([resolved, ROOT]) != ROOT:
                problems.append(f"{rel}:{n}: {target} points outside the repository")
            elif not os.path.exists(resolved):
                problems.append(f"{rel}:{n}: {target} does not exist "
                                f"({os.path.relpath(resolved, ROOT)})")
    return problems


def main():
    problems = []
    files = tracked_files()
    for rel in files:
        if rel == os.path.relpath(os.path.abspath(__file__), ROOT):
            continue
        text = read_text(os.path.join(ROOT, rel))
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for name, pattern in FORBIDDEN:
                if pattern.search(line):
                    problems.append(f"{rel}:{n}: names {name}, which is not part of the "
                                    "project (its conventions are in docs/conventions.md)")
        if rel.endswith(".md"):
            problems += markdown_problems(rel, text)
    for p in problems:
        print("error: " + p)
    print(f"check_self_contained.py: {len(files)} files checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
