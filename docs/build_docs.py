#!/usr/bin/env python3
"""Build the documentation site with Doxygen; fail on any warning.

Run by the CMake target `docs` (cmake --build build --target docs); it can also be run by
hand:  python3 docs/build_docs.py --output-dir build/docs   (then open build/docs/html/index.html)

What it does, in order:
  1. Writes the pages that are generated from the source tree into <output>/pages/:
     steps.md ("The code of each step") and one page per folder steps/NN_slug/ with the
     step's one-line lesson, its entry point and every source file of the folder, listed.
  2. Copies every diagram's committed SVG, docs/diagrams/NAME.svg (drawn from NAME.dot by
     scripts/render_diagrams.py; the ctest docs/diagrams checks it matches its source), to
     <output>/html/diagrams/NAME.svg, renders NAME.png there with Graphviz and copies NAME.dot
     there, so that a page shows it as ![...](diagrams/NAME.svg) both on the site and, the
     pages being in docs/, on a code host.
  3. Writes <output>/Doxyfile from docs/Doxyfile.in: README.md as the main page, the chapters
     docs/NN-*.md in reading order, the other docs/*.md (diagrams.md first), the results
     pages docs/results/*.md, the generated pages, then the headers of common/, reference/
     and steps/harness/.
  4. Runs Doxygen into <output>/html and fails (exit 1) if it printed or logged any warning.
     The site is rebuilt from scratch each time, so nothing stale survives.
  5. Points links to an anchor of another page, [warp](glossary.md#warp), at that page's
     HTML file (Doxygen 1.9 converts [x](glossary.md) but not the form with an anchor).

Standard library only.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

CHAPTER_RE = re.compile(r"^(\d\d)-.*\.md$")
STEP_DIR_RE = re.compile(r"^(\d\d)_\w+$")
SOURCE_EXTS = (".cu", ".cuh", ".cpp", ".h", ".py", ".sh")
# Pages of measured results (docs/results/*.md) are shown on the site too.
RESULT_PAGES = os.path.join("docs", "results", "*.md")
API_DIRS = ("common", "reference", "steps/harness")


def log(msg):
    print(msg, flush=True)


def parse_args(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description="Build the HTML documentation with Doxygen.")
    p.add_argument("--source-dir", default=os.path.dirname(here),
                   help="repository root (default: the folder above docs/)")
    p.add_argument("--output-dir", required=True,
                   help="where Doxyfile, pages/ and html/ go (e.g. build/docs)")
    p.add_argument("--doxygen", default="doxygen", help="the doxygen program")
    p.add_argument("--dot", default="dot", help="Graphviz's dot program")
    p.add_argument("--stamp", help="file to touch after a clean build (for build systems)")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------- chapters

def chapters(src):
    """docs/NN-*.md, in reading order (by NN, then name)."""
    docs = os.path.join(src, "docs")
    names = sorted(n for n in os.listdir(docs) if CHAPTER_RE.match(n))
    return [os.path.join(docs, n) for n in names]


def other_pages(src):
    """docs/*.md that are not chapters: diagrams.md first, then the others by name."""
    docs = os.path.join(src, "docs")
    names = sorted((n for n in os.listdir(docs)
                    if n.endswith(".md") and not CHAPTER_RE.match(n)),
                   key=lambda n: (n != "diagrams.md", n))
    return [os.path.join(docs, n) for n in names]


def first_heading(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# "):
                return re.sub(r"\s*\{#[^}]*\}\s*$", "", line[2:].strip())
    return os.path.basename(path)


# ------------------------------------------------------------------- generated step pages

def step_dirs(src):
    root = os.path.join(src, "steps")
    return sorted(os.path.join(root, n) for n in os.listdir(root)
                  if STEP_DIR_RE.match(n) and os.path.isdir(os.path.join(root, n)))


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def header_comment(text):
    """The leading // comment block of a source file, without the slashes (of a Python module,
    its docstring's first line)."""
    if text.startswith('"""'):
        return [text[3:].splitlines()[0].strip()]
    lines = []
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:][1:] if line[2:].startswith(" ") else line[2:])
    return lines


def entry_point(folder, files):
    """The file that registers the step (FA_REGISTER_STEP) or, for the CPU step, has main(),
    or for a step driven from Python (step 13), the module that uses torch.distributed."""
    for marker, exts in (("FA_REGISTER_STEP(", SOURCE_EXTS), ("FA_REGISTER_DECODE_STEP(",
                                                              SOURCE_EXTS),
                         ("int main(", SOURCE_EXTS), ("torch.distributed", (".py",))):
        for f in files:
            if f.endswith(exts) and marker in read(os.path.join(folder, f)):
                return f
    return files[0] if files else None


def step_page(src, folder, chapter_files):
    """(page label, markdown) of one step folder."""
    name = os.path.basename(folder)
    number = name[:2]
    label = "step_" + number
    files = sorted(f for f in os.listdir(folder) if f.endswith(SOURCE_EXTS))
    entry = entry_point(folder, files)
    if entry is None:
        return label, (f"# Step {number} {{#{label}}}\n\n"
                       f"Folder `steps/{name}/` has no sources yet.\n")
    entry_text = read(os.path.join(folder, entry))
    head = header_comment(entry_text)
    title = head[0].rstrip(".") if head and head[0].strip() else f"Step {number} — {name}"
    lesson = re.search(r'\blesson\s*=\s*"((?:[^"\\]|\\.)*)"', entry_text)
    others = [f for f in files if f != entry]

    out = [f"# {title} {{#{label}}}", ""]
    facts = [f"Folder `steps/{name}/`."]
    chapter = next((c for c in chapter_files if os.path.basename(c).startswith(number + "-")),
                   None)
    if chapter:
        facts.append(f"Chapter: [{first_heading(chapter)}]({chapter}).")
    out += [" ".join(facts), ""]
    decode = "FA_REGISTER_DECODE_STEP(" in entry_text
    if lesson:
        info = "DecodeStepInfo" if decode else "StepInfo"
        out += [f"What it teaches (its `{info}::lesson`): *{lesson.group(1)}*.", ""]
    if decode:
        out += [f"Entry point: `{entry}`. Its `FA_REGISTER_DECODE_STEP` line adds the step to "
                "the registry of decoding steps (fa::DecodeStepInfo, fa::decode_steps()); its "
                "tests find it there and launch it through fa::run_decode, which validates the "
                "decoding problem and the split count and then calls the step's `run`.", ""]
    elif "FA_REGISTER_STEP(" in entry_text:
        out += [f"Entry point: `{entry}`. Its `FA_REGISTER_STEP` line adds the step to the "
                "registry (fa::StepInfo, fa::steps()); the tests, the benchmark, the tour and "
                "the C API find it there and launch it through fa::run_step, which validates "
                "the problem and then calls the step's `run`.", ""]
    elif entry.endswith(".py"):
        out += [f"Entry point: `{entry}`, Python on PyTorch: one process per GPU under "
                "torchrun (torch.distributed, NCCL); its kernels run through the C API "
                "(steps/harness/flash_tutorial.h).", ""]
    else:
        out += [f"Entry point: `{entry}`, a program (no GPU code).", ""]
    if others:
        out += ["Files: " + ", ".join(f"`{f}`" for f in [entry] + others) + ".", ""]
    for f in [entry] + others:
        out += [f"## {f}", "", f"\\include{{lineno}} {name}/{f}", ""]
    return label, "\n".join(out)


def write_step_pages(src, pages_dir, chapter_files):
    labels, paths = [], []
    for folder in step_dirs(src):
        label, text = step_page(src, folder, chapter_files)
        path = os.path.join(pages_dir, f"{label}.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        labels.append(label)
        paths.append(path)
    index = ["# The code of each step {#steps}", "",
             "Every chapter has one folder under `steps/`. These pages show each folder's "
             "source in full, entry point first, with line numbers; names of the shared "
             "API (common/, reference/) link to its reference.", ""]
    index += [f"- \\subpage {label}" for label in labels]
    index.append("")
    path = os.path.join(pages_dir, "steps.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(index))
    return [path] + paths


# ------------------------------------------------------------------------------- diagrams

def render_diagrams(src, html_dir, dot):
    dots = sorted(glob.glob(os.path.join(src, "docs", "diagrams", "*.dot")))
    if not dots:
        return []
    out_dir = os.path.join(html_dir, "diagrams")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for path in dots:
        stem = os.path.splitext(os.path.basename(path))[0]
        shutil.copy(path, os.path.join(out_dir, os.path.basename(path)))  # the source too
        # The SVG is the committed one, so the site shows exactly what a code host shows.
        svg = os.path.splitext(path)[0] + ".svg"
        if not os.path.exists(svg):
            raise RuntimeError(f"{os.path.relpath(path, src)} has no SVG next to it: run "
                               "python3 scripts/render_diagrams.py and commit the SVG")
        shutil.copy(svg, os.path.join(out_dir, f"{stem}.svg"))
        written.append(os.path.join(out_dir, f"{stem}.svg"))
        target = os.path.join(out_dir, f"{stem}.png")
        r = subprocess.run([dot, "-Tpng", "-Gdpi=96", "-o", target, path],
                           capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            raise RuntimeError(f"dot failed on {os.path.relpath(path, src)}:\n"
                               + (r.stderr.strip() or f"exit status {r.returncode}"))
        written.append(target)
    return written


# ------------------------------------------------------------------------ post-processing

ESCAPED_TT = re.compile(r"&lt;tt&gt;(.*?)&lt;/tt&gt;")
TITLE_TAG = re.compile(r"<title>(.*?)</title>", re.S)


def fix_code_in_headings(html_dir):
    """Doxygen 1.9.4 escapes a `code span` in a Markdown heading: the page shows the text
    "<tt>name</tt>" instead of the name in a fixed-width font. Turn it back into code in the
    pages and into plain text in the side tree (which inserts titles as text) and in the
    browser tab's <title>. Newer Doxygen versions emit no such text; then nothing changes.
    Returns the number of files changed."""
    changed = 0
    for root, _, files in os.walk(html_dir):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".html"):
                text = read(path)
                new = TITLE_TAG.sub(lambda m: "<title>" + ESCAPED_TT.sub(r"\1", m.group(1))
                                    + "</title>", text)
                new = ESCAPED_TT.sub(r"<code>\1</code>", new)
            elif name.startswith("navtree") and name.endswith(".js"):
                text = read(path)
                new = re.sub(r"</?tt>", "", text)
            else:
                continue
            if new != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                changed += 1
    return changed


MD_ANCHOR_LINK = re.compile(r'href="([^":#]+\.md)#([^"]+)"')


def page_html_name(src, md_path):
    """The HTML file Doxygen writes for a Markdown page: index.html for the main page
    (README.md), md_<path with every other character than a letter or digit made _>.html
    for the others (docs/07-flash-attention-2.md -> md_docs_07_flash_attention_2.html)."""
    rel = os.path.relpath(md_path, src)
    if rel == "README.md":
        return "index.html"
    return "md_" + re.sub(r"[^A-Za-z0-9]", "_", os.path.splitext(rel)[0]) + ".html"


def fix_md_anchor_links(src, html_dir, md_pages):
    """Doxygen 1.9.4 turns a link to a page, [x](glossary.md), into a link to its HTML file,
    but leaves a link to an anchor in it, [warp](glossary.md#warp), pointing at the .md
    file, which the site does not have. Point those at the page's HTML file too, keeping the
    anchor: the same Markdown then works on a code host and on the site. Links that newer
    Doxygen versions already convert are left alone. Returns the number of links changed."""
    by_html = {page_html_name(src, p): p for p in md_pages}
    changed = 0
    for name, md in by_html.items():
        path = os.path.join(html_dir, name)
        if not os.path.exists(path):
            continue
        text = read(path)

        def repl(m):
            nonlocal changed
            target = os.path.normpath(os.path.join(os.path.dirname(md), m.group(1)))
            html = page_html_name(src, target)
            if not os.path.exists(os.path.join(html_dir, html)):
                return m.group(0)  # not a page of the site: tests/check_docs.py reports it
            changed += 1
            return f'href="{html}#{m.group(2)}"'

        new = MD_ANCHOR_LINK.sub(repl, text)
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    return changed


# -------------------------------------------------------------------------------- doxygen

def doxyfile(src, out, inputs):
    template = read(os.path.join(src, "docs", "Doxyfile.in"))
    text = template.replace("@SOURCE_DIR@", src).replace("@OUTPUT_DIR@", out)
    text += "\n# Appended by docs/build_docs.py: the pages in reading order, then the API.\n"
    text += "INPUT = " + " \\\n        ".join(f'"{p}"' for p in inputs) + "\n"
    return text


def api_headers(src):
    headers = []
    for d in API_DIRS:
        headers += sorted(glob.glob(os.path.join(src, d, "*.h")))
    return headers


def main(argv=None):
    args = parse_args(argv)
    src = os.path.abspath(args.source_dir)
    out = os.path.abspath(args.output_dir)
    html = os.path.join(out, "html")
    pages = os.path.join(out, "pages")
    if args.stamp and os.path.exists(args.stamp):
        os.remove(args.stamp)
    for d in (html, pages):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(pages)
    os.makedirs(html)

    chapter_files = chapters(src)
    inputs = [os.path.join(src, "README.md")] + chapter_files
    inputs += other_pages(src)
    inputs += sorted(glob.glob(os.path.join(src, RESULT_PAGES)),
                     key=lambda p: os.path.splitext(p)[0])  # h200.md before h200-*.md
    inputs += write_step_pages(src, pages, chapter_files)
    inputs += api_headers(src)

    try:
        diagrams = render_diagrams(src, html, args.dot)
    except (OSError, RuntimeError) as e:
        log(f"build_docs.py: {e}")
        return 1

    config = os.path.join(out, "Doxyfile")
    with open(config, "w", encoding="utf-8") as f:
        f.write(doxyfile(src, out, inputs))
    warn_log = os.path.join(out, "doxygen-warnings.log")
    if os.path.exists(warn_log):
        os.remove(warn_log)
    r = subprocess.run([args.doxygen, config], cwd=src, capture_output=True, text=True)
    printed = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    logged = read(warn_log).splitlines() if os.path.exists(warn_log) else []
    logged = [ln for ln in logged if ln.strip()]
    problems = logged + [ln for ln in printed if re.search(r"warning|error", ln, re.I)]
    if r.returncode != 0 or problems:
        for ln in printed + logged:
            log(ln)
        log(f"build_docs.py: Doxygen {'failed' if r.returncode else 'warned'} "
            f"({len(problems)} warning lines); the documentation must build without any "
            f"(config: {config})")
        return 1

    fix_code_in_headings(html)
    fix_md_anchor_links(src, html, [p for p in inputs if p.endswith(".md")])
    log(f"build_docs.py: {len(chapter_files)} chapters, {len(diagrams) // 2} diagrams, "
        f"{len(inputs)} inputs, no warnings -> {os.path.join(html, 'index.html')}")
    if args.stamp:
        with open(args.stamp, "w") as f:
            f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
