#!/usr/bin/env python3
"""Check the built documentation site: links, images, chapter pages, and a look in a browser.

Registered in ctest as docs/browser (label docs) after the docs/build test has built the site
(cmake --build build --target docs). What it checks:

  1. Every chapter docs/NN-*.md has its navigation line (scripts/chapter_nav.py --check).
  2. Every local href and src in every HTML file of the site exists (file and, for links into
     a page, the #anchor): no broken internal link, no missing image or stylesheet.
  3. The main page, every chapter and the diagrams page exist; each chapter page links to
     its previous and next chapter and to the contents; every image they show is non-empty;
     every committed picture (docs/images/*.png, docs/diagrams/*.svg) is shown by a page.
  4. Headless Chromium opens each of those pages and takes a 1280 × 2000 screenshot
     (<screenshots>/<page>.png, kept for a person to look at); each must be a PNG of that
     size that is not blank.

Exit status: 0 all good; 1 something is broken (each problem is printed); 77 skipped (ctest
reports it as skipped, not passed): with --skip REASON (the site could not be built here), or
when no Chromium is installed (after checks 1-3 have passed).

Standard library only. Example:
  python3 tests/check_docs.py --html-dir build/docs/html --screenshots build/docs/screenshots
"""

import argparse
import concurrent.futures
import html.parser
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zlib

SKIP = 77
CHAPTER_RE = re.compile(r"^(\d\d)-.*\.md$")
WIDTH, HEIGHT = 1280, 2000
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--virtual-time-budget=5000",  # let the side tree's scripts finish
                  f"--window-size={WIDTH},{HEIGHT}"]


def log(msg):
    print(msg, flush=True)


def parse_args(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description="Check the built documentation site.")
    p.add_argument("--html-dir", help="the site (build/docs/html)")
    p.add_argument("--screenshots", help="folder for the PNG screenshots "
                   "(default: <html-dir>/../screenshots)")
    p.add_argument("--source-dir", default=os.path.dirname(here), help="repository root")
    p.add_argument("--chromium", help="the browser (default: the first of "
                   + ", ".join(CHROMIUM_NAMES) + " on PATH)")
    p.add_argument("--timeout", type=int, default=90, help="seconds per screenshot")
    p.add_argument("--skip", metavar="REASON", help="print REASON and exit 77 (skipped)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- HTML parsing

class Page(html.parser.HTMLParser):
    """The local references, anchors, title and images of one HTML file."""

    REF_ATTRS = {"a": ("href",), "link": ("href",), "img": ("src",), "script": ("src",),
                 "iframe": ("src",), "source": ("src",), "object": ("data",)}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.refs = []      # (tag, url)
        self.ids = set()
        self.images = []    # img src values
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for attr in self.REF_ATTRS.get(tag, ()):
            if a.get(attr):
                self.refs.append((tag, a[attr].strip()))
        if tag == "img" and a.get("src"):
            self.images.append(a["src"].strip())
        if tag == "div" and "title" in (a.get("class") or "").split():
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "div":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data


def parse(path):
    p = Page()
    with open(path, encoding="utf-8", errors="replace") as f:
        p.feed(f.read())
    p.title = " ".join(p.title.split())
    return p


def is_external(url):
    scheme = urllib.parse.urlsplit(url).scheme
    return scheme not in ("", "file")


def resolve(page_path, url):
    """(local file, fragment) that `url` in `page_path` points to."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file":
        target = urllib.parse.unquote(parts.path)
    elif parts.path:
        target = os.path.normpath(os.path.join(os.path.dirname(page_path),
                                               urllib.parse.unquote(parts.path)))
    else:
        target = page_path
    return target, urllib.parse.unquote(parts.fragment)


def check_links(html_dir):
    """Problems with local links; also returns the parsed pages."""
    problems, pages = [], {}
    for root, _, files in os.walk(html_dir):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(root, name)
                pages[path] = parse(path)
    for path, page in sorted(pages.items()):
        rel = os.path.relpath(path, html_dir)
        for tag, url in page.refs:
            if is_external(url) or url.startswith("#") and tag != "a":
                continue
            target, fragment = resolve(path, url)
            if not os.path.exists(target):
                problems.append(f"{rel}: <{tag}> {url!r}: {os.path.relpath(target, html_dir)} "
                                "does not exist")
            elif fragment and target.endswith(".html") and target in pages \
                    and fragment not in pages[target].ids:
                problems.append(f"{rel}: <{tag}> {url!r}: no anchor #{fragment} in "
                                f"{os.path.relpath(target, html_dir)}")
    return problems, pages


# ---------------------------------------------------------------------------- the pages

def first_heading(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# "):
                return " ".join(line[2:].split())
    return None


def find_page(pages, title):
    for path, page in pages.items():
        if page.title == title:
            return path
    return None


def local_targets(path, page):
    return {resolve(path, url)[0] for tag, url in page.refs
            if tag == "a" and not is_external(url)}


def unused_pictures(src, pages):
    """A problem for every committed picture that no page of the site shows."""
    shown = {os.path.basename(urllib.parse.urlsplit(url).path)
             for page in pages.values() for url in page.images if not is_external(url)}
    problems = []
    for folder, ext in (("images", ".png"), ("diagrams", ".svg")):
        path = os.path.join(src, "docs", folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith(ext) and name not in shown:
                problems.append(f"docs/{folder}/{name} is shown by no page: embed it where its "
                                "idea is explained (every committed picture must be used)")
    return problems


def check_pages(src, html_dir, pages):
    """(problems, [(label, html path)]) for the main page, the chapters, the diagrams page."""
    problems = []
    wanted = []
    index = os.path.join(html_dir, "index.html")
    if index in pages:
        wanted.append(("index", index))
    else:
        problems.append("index.html (the main page, README.md) is missing")

    docs = os.path.join(src, "docs")
    chapter_files = sorted(n for n in os.listdir(docs) if CHAPTER_RE.match(n))
    chapter_pages = []
    for name in chapter_files:
        title = first_heading(os.path.join(docs, name))
        path = find_page(pages, title) if title else None
        if path is None:
            problems.append(f"docs/{name}: no page titled {title!r} in the site")
        chapter_pages.append(path)
        if path:
            wanted.append((os.path.splitext(name)[0], path))
    for i, path in enumerate(chapter_pages):
        if path is None:
            continue
        targets = local_targets(path, pages[path])
        expect = {"contents": index}
        if i > 0 and chapter_pages[i - 1]:
            expect["previous chapter"] = chapter_pages[i - 1]
        if i + 1 < len(chapter_pages) and chapter_pages[i + 1]:
            expect["next chapter"] = chapter_pages[i + 1]
        for what, target in expect.items():
            if target not in targets:
                problems.append(f"docs/{chapter_files[i]}: its page does not link to the "
                                f"{what} ({os.path.relpath(target, html_dir)})")

    diagrams_md = os.path.join(docs, "diagrams.md")
    if os.path.exists(diagrams_md):
        path = find_page(pages, first_heading(diagrams_md))
        if path is None:
            problems.append("docs/diagrams.md: no page for it in the site")
        else:
            wanted.append(("diagrams", path))
            if not pages[path].images:
                problems.append("docs/diagrams.md: its page shows no image")

    problems += unused_pictures(src, pages)

    for label, path in wanted:
        for src_url in pages[path].images:
            if is_external(src_url):
                continue
            target, _ = resolve(path, src_url)
            if os.path.exists(target) and os.path.getsize(target) == 0:
                problems.append(f"{label}: image {src_url} is empty")
    return problems, wanted


# ------------------------------------------------------------------------------ browser

def find_chromium(explicit):
    if explicit:
        return shutil.which(explicit) or (explicit if os.path.exists(explicit) else None)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def png_info(path):
    """(width, height, distinct byte values in the first decoded rows) of a PNG, or None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    try:
        raw = zlib.decompressobj().decompress(idat, 4 << 20)
    except zlib.error:
        return width, height, 0
    return width, height, len(set(raw))


def screenshot(chromium, url, png, timeout):
    with tempfile.TemporaryDirectory(prefix="fa-docs-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
               f"--screenshot={png}", url]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"chromium timed out after {timeout} s"
    info = png_info(png)
    if info is None:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return f"no screenshot (exit {r.returncode}): " + " | ".join(tail)
    w, h, distinct = info
    if (w, h) != (WIDTH, HEIGHT):
        return f"screenshot is {w} × {h}, expected {WIDTH} × {HEIGHT}"
    if distinct < 8:
        return "screenshot is blank"
    return None


def take_screenshots(chromium, wanted, out_dir, timeout):
    os.makedirs(out_dir, exist_ok=True)
    jobs = {}
    problems = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
        for label, path in wanted:
            png = os.path.join(out_dir, f"{label}.png")
            if os.path.exists(png):
                os.remove(png)
            url = "file://" + urllib.parse.quote(os.path.abspath(path))
            jobs[ex.submit(screenshot, chromium, url, png, timeout)] = (label, png)
        for fut in concurrent.futures.as_completed(jobs):
            label, png = jobs[fut]
            err = fut.result()
            if err:
                problems.append(f"{label}: {err}")
            else:
                log(f"  screenshot {png}")
    return problems


# --------------------------------------------------------------------------------- main

def main(argv=None):
    args = parse_args(argv)
    if args.skip:
        log(f"skipped: {args.skip}")
        return SKIP
    if not args.html_dir:
        log("check_docs.py: --html-dir is required")
        return 2
    html_dir = os.path.abspath(args.html_dir)
    src = os.path.abspath(args.source_dir)
    if not os.path.isfile(os.path.join(html_dir, "index.html")):
        log(f"check_docs.py: {html_dir}/index.html is missing: build the site first "
            "(cmake --build build --target docs)")
        return 1

    problems = []
    nav = subprocess.run([sys.executable, os.path.join(src, "scripts", "chapter_nav.py"),
                          "--docs", os.path.join(src, "docs"), "--check"],
                         capture_output=True, text=True)
    if nav.returncode != 0:
        problems.append((nav.stderr or nav.stdout).strip())

    link_problems, pages = check_links(html_dir)
    problems += link_problems
    page_problems, wanted = check_pages(src, html_dir, pages)
    problems += page_problems
    log(f"check_docs.py: {len(pages)} HTML files, "
        f"{sum(len(p.refs) for p in pages.values())} references checked, "
        f"{len(wanted)} pages to look at")
    if problems:
        for p in problems:
            log("error: " + p)
        log(f"check_docs.py: {len(problems)} problems")
        return 1

    chromium = find_chromium(args.chromium)
    if chromium is None:
        log("links, images and chapter pages are fine; screenshots skipped: no Chromium "
            "found (Debian/Ubuntu: apt-get install chromium)")
        return SKIP
    shots = args.screenshots or os.path.join(os.path.dirname(html_dir), "screenshots")
    problems = take_screenshots(chromium, wanted, shots, args.timeout)
    if problems:
        for p in problems:
            log("error: " + p)
        return 1
    log(f"check_docs.py: all good; {len(wanted)} screenshots in {shots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
