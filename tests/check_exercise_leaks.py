#!/usr/bin/env python3
"""Check that no chapter prints the answer to its exercise before the exercise.

Registered in ctest as conventions/exercise_leaks (host-only, no build needed). For every
exercise steps/NN_slug/exercise/<file>, the solution is steps/NN_slug/<file> (reference/<file>
for step 00); the two differ only inside the exercise's TODO(exercise) blocks and its
NOTE(exercise) ones (scripts/check_exercises.sh enforces that). The solution's lines of those blocks are the lines
the exercise removed: the "-" side of `diff solution exercise`. None of them may appear
verbatim in chapter docs/NN-*.md before its "## Exercise" heading: the chapter explains the
idea, the exercise asks the student to write it. After the heading (the exercise itself,
going further) anything goes.

What counts as a solution line, and how lines are compared:
  * A trailing // comment is dropped, then ALL whitespace is removed, from the solution line
    and from the chapter text alike; a line counts as printed when it is a substring of the
    chapter text so normalised (so a line split over two lines, re-indented or quoted in
    backticks inside a sentence is still found).
  * Lines that are not an answer on their own are skipped:
      - blank lines, lines of braces and punctuation only, preprocessor lines (#pragma unroll);
      - pure comments (// …, /* …, * …): the chapter is meant to explain the idea in words;
      - lines with fewer than MIN_CHARS non-space characters (`v = red[0];`, `}`), which
        recur everywhere;
      - a call without arguments (`__syncthreads();`): it names a function and computes
        nothing; where such a call goes is the lesson, not the line;
      - a declaration without an initialiser (`FragAcc rows;`) and a function's head
        (`__device__ float quad_max(float v) {`): they name, they do not compute;
      - a plain counting loop head (`for (int r = 0; r < kRows; ++r)`), without a body on
        the same line: every loop of the book starts like that.
    Everything else (an assignment, a return with a value, a call with arguments, a loop
    that is not a plain count, a loop with its body on the line) is an answer line.

usage: tests/check_exercise_leaks.py [--show-lines] [--root DIR]
  --show-lines  also print, per exercise, every solution line that is checked
  --root DIR    the repository to check (default: the one holding this file)

It first checks itself on a small made-up repository (a line printed before the exercise is
found, the same line after it is not, trivial lines are skipped), then checks the project.
Exit status 0 when no chapter prints a solution line early, 1 otherwise (each one printed
with the chapter's line and the solution's file and line), 2 on a usage error.
Standard library only.
"""

import difflib
import glob
import os
import re
import sys
import tempfile

MIN_CHARS = 12
EXERCISE_HEADING = re.compile(r"^## Exercise\b")
CODE_EXTS = (".cu", ".cuh", ".cpp", ".h")

COUNTING_LOOP = re.compile(
    r"^for\(int(\w+)=[^;]+;\1(<|<=|>|>=)[^;]+;(\+\+\1|\1\+\+|--\1|\1--|\1[+-]=[^;()]+)\)\{?$")
NO_ARG_CALL = re.compile(r"^[\w:.>-]+\(\);$")
BARE_DECL = re.compile(r"^(const\s+)?[\w:]+(<[^<>=;]*>)?[\s*&]+\w+(\[[\w+*/ ]+\])*;$")
FUNC_HEAD = re.compile(r"^[\w:<>,*&\s]+\([^;=]*\)\s*(const)?\s*\{?$")
CONTROL = re.compile(r"^(for|if|while|switch|return|else)\b")


def strip_comment(line):
    """The code of a line, without a trailing // comment (no // occurs in a string here)."""
    return line.split("//", 1)[0].rstrip()


def squeeze(text):
    return re.sub(r"\s+", "", text)


def skip_reason(line):
    """Why a solution line is not checked (None: it is an answer line)."""
    s = line.strip()
    if not s:
        return "blank"
    if s.startswith(("//", "/*", "*")):
        return "comment"
    if s.startswith("#"):
        return "preprocessor"
    code = strip_comment(s)
    if not re.search(r"\w", code):
        return "punctuation"
    if len(squeeze(code)) < MIN_CHARS:
        return "short"
    if NO_ARG_CALL.match(squeeze(code)):
        return "call without arguments"
    if BARE_DECL.match(code):
        return "declaration"
    if FUNC_HEAD.match(code) and not CONTROL.match(code):
        return "function head"
    if COUNTING_LOOP.match(squeeze(code)):
        return "counting loop head"
    return None


def solution_of(root, exercise_file):
    step = os.path.basename(os.path.dirname(os.path.dirname(exercise_file)))
    name = os.path.basename(exercise_file)
    if step.startswith("00_"):
        return os.path.join(root, "reference", name)
    return os.path.join(root, "steps", step, name)


def removed_lines(solution, exercise):
    """(line number in the solution, text) of each line the exercise removed."""
    with open(solution, encoding="utf-8") as f:
        a = f.read().splitlines()
    with open(exercise, encoding="utf-8") as f:
        b = f.read().splitlines()
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            out.extend((i + 1, a[i]) for i in range(i1, i2))
    return out


def chapter_before_exercise(path):
    """The chapter's lines before its "## Exercise" heading (outside code blocks), and the
    heading's line number; None for the number when the chapter has no such heading."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    fence = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and EXERCISE_HEADING.match(line):
            return lines[: n - 1], n
    return lines, None


def find(needle, lines):
    """The 1-based line where the whitespace-free needle starts in lines, or None."""
    text, line_of = [], []
    for n, line in enumerate(lines, 1):
        s = squeeze(line)
        text.append(s)
        line_of.extend([n] * len(s))
    pos = "".join(text).find(needle)
    return None if pos < 0 else line_of[pos]


def check(root, show_lines=False, out=print):
    """Checks the repository at root; returns the number of problems (each printed)."""
    problems = 0
    exercises = sorted(glob.glob(os.path.join(root, "steps", "[0-9][0-9]_*", "exercise")))
    if not exercises:
        out(f"check_exercise_leaks: no steps/NN_*/exercise folder under {root}")
        return 1
    for ex_dir in exercises:
        step = os.path.basename(os.path.dirname(ex_dir))
        nn = step[:2]
        chapters = sorted(glob.glob(os.path.join(root, "docs", f"{nn}-*.md")))
        if len(chapters) != 1:
            out(f"exercise {nn}: expected one chapter docs/{nn}-*.md, found {len(chapters)}")
            problems += 1
            continue
        chapter = chapters[0]
        rel_ch = os.path.relpath(chapter, root)
        before, heading = chapter_before_exercise(chapter)
        if heading is None:
            out(f"{rel_ch}: no '## Exercise' heading, so the exercise's place is unknown")
            problems += 1
            continue
        checked = 0
        for ex_file in sorted(os.listdir(ex_dir)):
            if not ex_file.endswith(CODE_EXTS):
                continue
            ex_path = os.path.join(ex_dir, ex_file)
            sol = solution_of(root, ex_path)
            rel_sol = os.path.relpath(sol, root)
            if not os.path.isfile(sol):
                out(f"{os.path.relpath(ex_path, root)}: its solution {rel_sol} does not exist")
                problems += 1
                continue
            for n, line in removed_lines(sol, ex_path):
                reason = skip_reason(line)
                if show_lines:
                    out(f"  {nn} {rel_sol}:{n}: {'skip (' + reason + ')' if reason else 'CHECK'}"
                        f": {line.strip()}")
                if reason:
                    continue
                checked += 1
                at = find(squeeze(strip_comment(line)), before)
                if at is not None:
                    problems += 1
                    out(f"{rel_ch}:{at}: prints a line of exercise {nn}'s solution before "
                        f"'## Exercise' (line {heading}): {line.strip()}  [{rel_sol}:{n}]")
        if checked == 0:
            out(f"exercise {nn}: no solution line left to check (all trivial?): the check "
                f"would be empty")
            problems += 1
        elif show_lines:
            out(f"exercise {nn}: {checked} solution line(s) checked against {rel_ch} "
                f"up to line {heading}")
    return problems


def self_test():
    """The checker on a made-up repository: it must find what it is meant to find."""
    solution = ("void f(float* a, float* l, float m_old, float m_ref, int d) {\n"
                "  const float alpha = expf(m_old - m_ref);  // the factor\n"
                "  for (int t = 0; t < d; ++t)\n"
                "    a[t] *= alpha;\n"
                "  __syncthreads();\n"
                "}\n")
    exercise = ("void f(float* a, float* l, float m_old, float m_ref, int d) {\n"
                "  // TODO(exercise): the rescale.\n"
                "  const float alpha = 1.f;\n"
                "}\n")
    cases = [  # (chapter text, expected number of problems)
        ("# 00\nThe factor is `const float alpha =\nexpf(m_old - m_ref);` here.\n"
         "## Exercise\n", 1),
        ("# 00\n```\n## Exercise\n    a[t]  *=  alpha;\n```\n## Exercise\n", 1),
        ("# 00\nfor (int t = 0; t < d; ++t) and __syncthreads();\n## Exercise\n"
         "const float alpha = expf(m_old - m_ref);\n", 0),
        ("# 00\nno heading at all\n", 1),
    ]
    failures = []
    for text, want in cases:
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "steps", "00_x", "exercise"))
            os.makedirs(os.path.join(root, "reference"))
            os.makedirs(os.path.join(root, "docs"))
            for path, body in (("reference/k.cpp", solution),
                               ("steps/00_x/exercise/k.cpp", exercise),
                               ("docs/00-x.md", text)):
                with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                    f.write(body)
            got = check(root, out=lambda _msg: None)
            if got != want:
                failures.append(f"self-test: chapter {text!r}: {got} problem(s), expected {want}")
    return failures


def main(argv):
    show, root = False, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--show-lines":
            show = True
        elif a == "--root":
            if not args:
                print("check_exercise_leaks: --root needs a directory", file=sys.stderr)
                return 2
            root = args.pop(0)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"check_exercise_leaks: unknown argument '{a}' (see --help)", file=sys.stderr)
            return 2
    failures = self_test()
    for f in failures:
        print(f)
    if failures:
        return 1
    problems = check(root, show_lines=show)
    if problems:
        print(f"check_exercise_leaks: {problems} problem(s): explain the idea in the chapter "
              "instead of printing the solution's line before the exercise")
        return 1
    print("check_exercise_leaks: OK (no chapter prints its exercise's solution early)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
