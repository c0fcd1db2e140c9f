#!/usr/bin/env python3
"""Tests of the quoted-figure markers of scripts/refresh_docs.py (scripts/quoted_figures.py)
on a small fixture: fake results files and a page that quotes them.

Registered in ctest as conventions/quoted_figures_tool. What it checks:

  1. A page with a stale figure fails --check, and the message names the page, the line, the
     marker, the figure quoted and the figure of the file; the page is left unchanged.
  2. Filling the page rewrites exactly the stale figures (decimals, count words and units as
     the page writes them; a calc: figure from its sources); --check passes afterwards.
     The benchmark (best over layouts, its time and memory, a range over lengths) and the
     cells of Markdown results tables (one table named when two hold the same cell) too;
     a backward record is seen by bench:backward: markers alone, never by a forward one;
     bench:backward@FILE: and span:backward@FILE: read a run kept apart in FILE (IMPL and
     PEER both), beside markers of h200.json on the same page.
  3. A tour that gains a column (a dtype column before "what it teaches") gives the same
     figures: columns are found by their header.
  4. A tour whose rows no longer match their header, and a marker naming a step, a column or
     a file that does not exist, fail --check loudly, naming the place; so does a PASS@FILE
     whose FILE is empty, has a folder in it (even one that exists) or is missing.

Exit status 0 when every check holds, 1 otherwise (each failure printed). Standard library.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "scripts", "refresh_docs.py")

TOUR = """# build/bin/tour on a test GPU
Problem: B=1 Hq=4 Hkv=4 Nq=1024 Nkv=1024 d=64 full fp32 bnhd, scale 0.125, inputs normal, seed 42
FLOPs 1.07e+09; the fewest bytes any pass must move 4.0 MiB; one N×N fp32 matrix 16.0 MiB

CPU reference (Eigen, double): 0.178 s

step                   what it teaches                              max|err|        ms  TFLOP/s   NxN bytes   extra mem     max N
01_naive_attention     the formula literally: S and P written       4.29e-07     0.710     1.51    32.0 MiB    32.0 MiB     68300
04_flash_attention     one fused kernel: S never leaves the chip    4.54e-07     0.137     7.86         0 B         0 B   8388607
05_tensor_cores        dtype (fp32) is not supported by step 05      skipped

max|err| is against the CPU reference.
"""

TOUR_WITH_DTYPE = TOUR.replace(
    "step                   what it teaches ",
    "step                   dtype  what it teaches ").replace(
    "01_naive_attention     the", "01_naive_attention     fp32   the").replace(
    "04_flash_attention     one", "04_flash_attention     fp32   one").replace(
    "05_tensor_cores        dtype", "05_tensor_cores        fp32   dtype")

# The tour as it prints now: each step in its own dtype (no dtype in the Problem line), two
# spaces between columns, a step that cannot run listed with its reason under the table.
TOUR_CURRENT = """# build/bin/tour on a test GPU
Problem: B=1 Hq=4 Hkv=4 Nq=1024 Nkv=1024 d=64 full bnhd, scale 0.125, inputs normal, seed 42
FLOPs 1.07e+09; one N×N fp32 matrix 16.0 MiB; the fewest bytes any pass must move: fp32 4.0 MiB bf16 2.0 MiB
Each step runs in fp32 when it supports it, else bf16 (--dtype picks one for all).

Checked: every row (4096) against the CPU reference (Eigen, double)
CPU reference (Eigen, double), fp32 inputs, 4096 rows: 0.178 s
CPU reference (Eigen, double), bf16 inputs, 4096 rows: 0.139 s

step                    dtype   what it teaches                                         max|err|         ms   TFLOP/s    NxN bytes    extra mem      max N
01_naive_attention      fp32    the formula literally: S and P written to HBM           4.29e-07      0.710      1.51     32.0 MiB     32.0 MiB      68300
04_flash_attention      fp32    one fused kernel: S never leaves the chip, only O an    4.54e-07      0.137      7.86          0 B          0 B    8388607
05_tensor_cores         bf16    tensor cores through WMMA: fp16/bf16 inputs, fp32 ac  cannot run          -         -            -            -          -
  05_tensor_cores cannot run: head_dim (64) is not supported by step 05_tensor_cores (supported: 32)

max|err| is against the CPU reference, every row.
"""

TESTS = """# ctest on a test GPU
 1/3 Test   #1: cpu/reference ........................***Failed    0.14 sec
 2/3 Test   #2: 04_flash_attention/shapes ............   Passed    1.20 sec
 3/3 Test   #3: 04_flash_attention/causal ............   Passed    1.13 sec
"""

BENCH = {"results": [
    {"impl": "04_flash_attention", "dtype": "fp32", "d": 64, "causal": False, "batch": 4,
     "heads_q": 32, "heads_kv": 32, "n_q": n, "n_kv": n, "layout": layout, "median_ms": ms,
     "tflops": tf, "extra_device_bytes": 136314880}
    for n, layout, ms, tf in ((1024, "bnhd", 0.9, 38.96), (1024, "bhnd", 1.0, 35.0),
                              (4096, "bnhd", 13.78, 39.94))] + [
    {"impl": "cublas_baseline", "dtype": "fp32", "d": 64, "causal": False, "batch": 4,
     "heads_q": 32, "heads_kv": 32, "n_q": n, "n_kv": n, "layout": "bnhd", "median_ms": ms,
     "tflops": tf, "extra_device_bytes": 8724152320}
    for n, ms, tf in ((1024, 1.4, 25.16), (4096, 19.5, 28.24))] + [
    # Backward passes, of the same impl and shapes and faster: a forward marker must not see
    # them, a backward one sees them alone.
    {"pass": "backward", "impl": "04_flash_attention", "dtype": "fp32", "d": 64,
     "causal": False, "batch": 4, "heads_q": 32, "heads_kv": 32, "n_q": n, "n_kv": n,
     "layout": "bnhd", "median_ms": ms, "tflops": tf, "extra_device_bytes": 4194304}
    for n, ms, tf in ((1024, 0.5, 88.04), (4096, 7.0, 99.94))]}

# A run kept apart (bench:backward@h200-backward-old.json:…): the same impl as h200.json's
# backward records with other figures, and a deterministic mode that h200.json lacks.
OLD_RUN_FILE = "h200-backward-old.json"
OLD_RUN = {"commit": "0000000", "results": [
    {"pass": "backward", "impl": impl, "dtype": "fp32", "d": 64, "causal": False, "batch": 4,
     "heads_q": 32, "heads_kv": 32, "n_q": n, "n_kv": n, "layout": "bnhd", "median_ms": ms,
     "tflops": tf, "extra_device_bytes": extra}
    for impl, n, ms, tf, extra in (
        ("04_flash_attention", 1024, 0.6, 70.04, 4194304),
        ("04_flash_attention", 4096, 8.0, 80.04, 4194304),
        ("04_flash_attention+deterministic", 1024, 0.7, 63.04, 1073741824),
        ("04_flash_attention+deterministic", 4096, 10.0, 64.04, 3221225472))]}

OLD = "backward@" + OLD_RUN_FILE + ":fp32:64:full:04_flash_attention"
OLD_PAGE = f"""# Kept apart

Then: <!--bench:{OLD}:4096-->1.0 TFLOP/s in <!--bench:{OLD}:4096:ms-->1.0 ms, extra
<!--bench:{OLD}+deterministic:4096:extra-->1.0 MiB deterministic, ratio
<!--calc:[bench:{OLD}+deterministic:4096]/[bench:{OLD}:4096]-->1.00×, from
<!--span:{OLD}+deterministic/04_flash_attention:1024-4096:min-->1.00 to
<!--span:{OLD}+deterministic/04_flash_attention:1024-4096:max-->1.00×, over
<!--span:{OLD}:1024-4096:min-->1.0 to <!--span:{OLD}:1024-4096:max-->1.0; now
<!--bench:backward:fp32:64:full:04_flash_attention:4096-->1.0.
"""

OLD_FILLED = [
    f"<!--bench:{OLD}:4096-->80.0 TFLOP/s",
    f"<!--bench:{OLD}:4096:ms-->8.0 ms",
    f"<!--bench:{OLD}+deterministic:4096:extra-->3.0 GiB deterministic",
    ":4096]-->0.80×, from",
    "1024-4096:min-->0.80 to", "1024-4096:max-->0.90×, over",
    f"<!--span:{OLD}:1024-4096:min-->70.0 to <!--span:{OLD}:1024-4096:max-->80.0; now",
    "<!--bench:backward:fp32:64:full:04_flash_attention:4096-->99.9.",
]

PROFILE = """# profiles

| metric | 05_tensor_cores | 06_flash_attention_2 |
|---|---|---|
| duration (µs) | 2414.2 | 1584.8 |
| pipe: xu | 12.5 | 20.8 |

| metric | 06_flash_attention_2 |
|---|---|
| duration (µs) | 1563.0 |
"""

BENCH_PAGE = """# Another chapter

Step 04 runs at <!--bench:fp32:64:full:04_flash_attention:4096-->39.0 TFLOP/s
(<!--bench:fp32:64:full:04_flash_attention:4096:ms-->13.8 ms), best over the layouts at
`N = 1024`: <!--bench:fp32:64:full:04_flash_attention:1024-->35.0; extra memory
<!--bench:fp32:64:full:04_flash_attention:4096:extra-->128.0 MiB; against cuBLAS
<!--span:fp32:64:full:04_flash_attention/cublas_baseline:1024-4096:min-->1.41–<!--span:fp32:64:full:04_flash_attention/cublas_baseline:1024-4096:max-->1.55×.
Profiles: <!--md:h200-profile.md@1:duration (µs):06_flash_attention_2-->1584.8 µs, then
<!--md:h200-profile.md@2:duration (µs):06_flash_attention_2-->1584.8 µs; the `xu` pipe at
<!--md:h200-profile.md:pipe: xu:05_tensor_cores-->12.5%.
Backward: <!--bench:backward:fp32:64:full:04_flash_attention:4096-->1.0 TFLOP/s in
<!--bench:backward:fp32:64:full:04_flash_attention:4096:ms-->1.0 ms, extra
<!--bench:backward:fp32:64:full:04_flash_attention:4096:extra-->1.0 MiB, up to
<!--span:backward:fp32:64:full:04_flash_attention:1024-4096:max-->1.0; the forward named
<!--bench:forward:fp32:64:full:04_flash_attention:4096-->1.0.
"""

BENCH_FILLED = [
    "<!--bench:fp32:64:full:04_flash_attention:4096-->39.9 TFLOP/s",
    "<!--bench:fp32:64:full:04_flash_attention:4096:ms-->13.8 ms",
    "<!--bench:fp32:64:full:04_flash_attention:1024-->39.0;",
    "<!--bench:fp32:64:full:04_flash_attention:4096:extra-->130.0 MiB",
    "1024-4096:min-->1.41–", "1024-4096:max-->1.55×",
    "<!--md:h200-profile.md@2:duration (µs):06_flash_attention_2-->1563.0 µs",
    "<!--md:h200-profile.md:pipe: xu:05_tensor_cores-->12.5%",
    "<!--bench:backward:fp32:64:full:04_flash_attention:4096-->99.9 TFLOP/s",
    "<!--bench:backward:fp32:64:full:04_flash_attention:4096:ms-->7.0 ms",
    "<!--bench:backward:fp32:64:full:04_flash_attention:4096:extra-->4.0 MiB",
    "<!--span:backward:fp32:64:full:04_flash_attention:1024-4096:max-->99.9;",
    "<!--bench:forward:fp32:64:full:04_flash_attention:4096-->39.9.",
]

STALE_PAGE = """# A chapter

The tour runs step 04 in <!--tour:Nq=1024+fp32:04_flash_attention:ms-->0.855 ms at
<!--tour:1:04_flash_attention:tflops-->20.09 TFLOP/s; step 01 needs
<!--tour:1:01_naive_attention:extra-->16.0 MiB, and the CPU reference took <!--tour:1:cpu_s-->0.21 s.

| step | ms |
|---|---|
| `01` | <!--tour:1:01_naive_attention:ms-->0.710 |

Step 04 is <!--calc:[tour:1:04_flash_attention:tflops]/[tour:1:01_naive_attention:tflops]-->5.0×
step 01. All <!--tests:count:04_flash_attention-->seven test groups passed, and
then <!--tests:failed:cpu-->zero CPU tests failed.
"""

FILLED_LINES = [
    "<!--tour:Nq=1024+fp32:04_flash_attention:ms-->0.137 ms",
    "<!--tour:1:04_flash_attention:tflops-->7.86 TFLOP/s",
    "<!--tour:1:01_naive_attention:extra-->32.0 MiB",
    "<!--tour:1:cpu_s-->0.18 s",
    "<!--tour:1:01_naive_attention:ms-->0.710 |",
    "-->5.2×",
    "All <!--tests:count:04_flash_attention-->two test groups",
]

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, flush=True)


def run(folder, page, check):
    cmd = [sys.executable, TOOL, "--no-readme", "--no-plots", "--figures-from", folder,
           "--pages", page] + (["--check"] if check else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results")
        os.mkdir(results)
        write(os.path.join(results, "h200-tour.txt"), TOUR)
        write(os.path.join(results, "h200-tests.txt"), TESTS)
        page = os.path.join(tmp, "page.md")
        write(page, STALE_PAGE)

        # 1. stale figures fail --check, named precisely, and nothing is written
        rc, out = run(results, page, check=True)
        expect(rc == 1, f"--check on a stale page exits 1 (got {rc}):\n{out}")
        expect(f"{page}:3: <!--tour:Nq=1024+fp32:04_flash_attention:ms--> quotes 0.855, the "
               "results say 0.137" in out, f"--check names page, line, marker, quoted and expected:\n{out}")
        expect("quotes seven, the results say two" in out, f"a count word is checked:\n{out}")
        expect(read(page) == STALE_PAGE, "--check leaves the page as it was")

        # 2. fill, then --check passes
        rc, out = run(results, page, check=False)
        filled = read(page)
        expect(rc == 0, f"filling exits 0 (got {rc}):\n{out}")
        for piece in FILLED_LINES:
            expect(piece in filled, f"the filled page has {piece!r}:\n{filled}")
        expect("<!--tests:failed:cpu-->one CPU tests failed" in filled,
               f"a count word is rewritten as a word:\n{filled}")
        rc, out = run(results, page, check=True)
        expect(rc == 0, f"--check after filling exits 0 (got {rc}):\n{out}")

        # 3. a new tour column moves nothing
        write(os.path.join(results, "h200-tour.txt"), TOUR_WITH_DTYPE)
        rc, out = run(results, page, check=True)
        expect(rc == 0, f"a tour with a dtype column gives the same figures (rc {rc}):\n{out}")

        # 3b. the tour's current format: the same figures, the problem named without a dtype
        write(os.path.join(results, "h200-tour.txt"), TOUR_CURRENT)
        current_page = os.path.join(tmp, "current.md")
        write(current_page, read(page).replace("Nq=1024+fp32", "Nq=1024"))
        rc, out = run(results, current_page, check=True)
        expect(rc == 0, f"the tour's current format gives the same figures (rc {rc}):\n{out}")
        write(current_page, "# Page\n\nThe fewest bytes: <!--tour:1:fewest-->4.0 MiB, one "
              "matrix <!--tour:1:matrix-->16.0 MiB, the reference <!--tour:1:cpu_s-->0.18 s.\n")
        rc, out = run(results, current_page, check=True)
        expect(rc == 0, f"the figures above the table read as printed (rc {rc}):\n{out}")
        write(os.path.join(results, "h200-tour.txt"), TOUR_WITH_DTYPE)

        # 2b. the benchmark, its ranges and the Markdown tables, filled from a fixture
        with open(os.path.join(results, "h200.json"), "w", encoding="utf-8") as f:
            json.dump(BENCH, f)
        write(os.path.join(results, "h200-profile.md"), PROFILE)
        bench_page = os.path.join(tmp, "bench.md")
        write(bench_page, BENCH_PAGE)
        rc, out = run(results, bench_page, check=True)
        expect(rc == 1 and "quotes 39.0, the results say 39.9" in out,
               f"a stale benchmark figure fails --check:\n{out}")
        rc, out = run(results, bench_page, check=False)
        filled = read(bench_page)
        expect(rc == 0, f"filling the benchmark page exits 0 (got {rc}):\n{out}")
        for piece in BENCH_FILLED:
            expect(piece in filled, f"the filled benchmark page has {piece!r}:\n{filled}")
        write(bench_page, "# Page\n\nA cell: <!--md:h200-profile.md:duration (µs):"
              "06_flash_attention_2-->1.0 here.\n")
        rc, out = run(results, bench_page, check=True)
        expect(rc == 1 and "2 cells in row 'duration (µs)'" in out,
               f"an md: figure that two tables hold fails until a table is named:\n{out}")

        # 2c. a row named by its first cells (a&b) or a header's cell (a&H=v), cells with a unit or a note after the number
        write(os.path.join(results, "ring.md"),
              "| N | mask | ms | speedup | model |\n|---:|---|---:|---:|---|\n"
              "| 64 | full | 1.5 | 1.95× | 2.0 (measured 1.5) |\n"
              "| 64 | causal | 0.8 | 1.30× | 1.1 (measured 0.8) |\n")
        write(bench_page, "# Page\n\nCausal: <!--md:ring.md:64&causal:ms-->0.1 ms, "
              "<!--md:ring.md:64&causal:speedup-->1.00×, model <!--md:ring.md:64&full:model-->9.9, "
              "<!--md:ring.md:64&ms=1.5:speedup-->1.00×.\n")
        rc, out = run(results, bench_page, check=False)
        filled = read(bench_page)
        expect(rc == 0 and "ms-->0.8 ms" in filled and "speedup-->1.30×" in filled
               and "model-->2.0," in filled
               and "ms=1.5:speedup-->1.95×." in filled,
               f"a row named by its first two cells, and 1.30× and 2.0 (measured 1.5) read as "
               f"numbers (rc {rc}):\n{out}\n{filled}")
        # 2d. a cell with thousands separators: quoted with them, or without, and used in calc
        write(os.path.join(results, "lm.md"),
              "| attention | tokens/s |\n|---|---:|\n| ours | 1,029,909 |\n| sdpa | 1,016,195 |\n")
        write(bench_page, "# Page\n\nAt <!--md:lm.md:ours:tokens/s-->1,000,000 and "
              "<!--md:lm.md:sdpa:tokens/s-->1 tokens/s, "
              "<!--calc:[md:lm.md:ours:tokens/s]-[md:lm.md:sdpa:tokens/s]-->1 more.\n")
        rc, out = run(results, bench_page, check=True)
        expect(rc == 1 and "quotes 1,000,000, the results say 1,029,909" in out
               and "quotes 1, the results say 1016195" in out,
               f"a stale figure with thousands separators fails --check, whole:\n{out}")
        rc, out = run(results, bench_page, check=False)
        filled = read(bench_page)
        expect(rc == 0 and "tokens/s-->1,029,909 and" in filled
               and "tokens/s-->1016195 tokens/s" in filled and "-->13714 more." in filled,
               f"1,029,909 is read as a number and written as the page writes it "
               f"(rc {rc}):\n{out}\n{filled}")
        rc, out = run(results, bench_page, check=True)
        expect(rc == 0, f"--check after filling exits 0 (got {rc}):\n{out}")

        # 2e. a run kept apart: bench:backward@FILE: and span:backward@FILE: read FILE, the
        # markers of h200.json on the same page still read h200.json
        with open(os.path.join(results, OLD_RUN_FILE), "w", encoding="utf-8") as f:
            json.dump(OLD_RUN, f)
        write(bench_page, OLD_PAGE)
        rc, out = run(results, bench_page, check=True)
        expect(rc == 1 and f"<!--bench:{OLD}:4096--> quotes 1.0, the results say 80.0" in out,
               f"a stale figure of a run kept apart fails --check, named:\n{out}")
        rc, out = run(results, bench_page, check=False)
        filled = read(bench_page)
        expect(rc == 0, f"filling the page of a run kept apart exits 0 (got {rc}):\n{out}")
        for piece in OLD_FILLED:
            expect(piece in filled, f"the page of a run kept apart has {piece!r}:\n{filled}")
        rc, out = run(results, bench_page, check=True)
        expect(rc == 0, f"--check after filling from a run kept apart exits 0 (got {rc}):\n{out}")

        write(bench_page, "# Page\n\nBoth: <!--md:ring.md:64:ms-->1.0 ms.\n")
        rc, out = run(results, bench_page, check=True)
        expect(rc == 1 and "2 cells in row '64'" in out,
               f"a first cell that two rows share still names no single cell:\n{out}")

        # 4. loud failures
        broken = TOUR.replace("0.137     7.86", "0.137 7.86")  # two cells run together
        write(os.path.join(results, "h200-tour.txt"), broken)
        rc, out = run(results, page, check=True)
        expect(rc == 1 and "h200-tour.txt line 9" in out and "format changed" in out,
               f"a row that no longer matches its header fails, naming the line:\n{out}")
        write(os.path.join(results, "h200-tour.txt"), TOUR)
        with open(os.path.join(tmp, "outside.json"), "w", encoding="utf-8") as f:
            json.dump(BENCH, f)
        for marker, reason in (("<!--tour:1:09_missing:ms-->1.0", "has no row 09_missing"),
                               ("<!--tour:1:04_flash_attention:watts-->1.0",
                                "unknown tour column 'watts'"),
                               ("<!--tour:1:05_tensor_cores:ms-->1.0", "was skipped"),
                               ("<!--tour:Nq=1024+bf16:04_flash_attention:ms-->1.0",
                                "0 problems have all of the words"),
                               ("<!--sweep:04_flash_attention:problems-->500",
                                "cannot read"),
                               ("<!--tour:1:04_flash_attention:ms-->", "no figure right after"),
                               ("<!--bench:backward:fp32:64:full:cublas_baseline:4096-->1.0",
                                "no cublas_baseline backward result"),
                               # PASS@FILE: a file of the results folder named without a folder;
                               # ../outside.json exists (a copy of h200.json) and is refused
                               ("<!--bench:backward@../outside.json:fp32:64:full:"
                                "04_flash_attention:4096-->99.9",
                                "backward@../outside.json: after @ a .json file of the results "
                                "folder, named without a folder"),
                               ("<!--span:backward@sub/h200.json:fp32:64:full:"
                                "04_flash_attention:1024-4096:max-->99.9",
                                "backward@sub/h200.json: after @ a .json file"),
                               ("<!--bench:backward@:fp32:64:full:04_flash_attention:4096-->99.9",
                                "backward@: after @ a .json file"),
                               ("<!--bench:backward@h200-backward-none.json:fp32:64:full:"
                                "04_flash_attention:4096-->99.9",
                                "h200-backward-none.json: No such file")):
            write(page, f"# Page\n\nA figure: {marker} here.\n")
            rc, out = run(results, page, check=True)
            expect(rc == 1 and f"{page}:3:" in out and reason in out,
                   f"{marker} fails --check with '{reason}' (rc {rc}):\n{out}")
            rc, out = run(results, page, check=False)
            expect(rc == 1, f"{marker} fails the fill too (rc {rc}):\n{out}")

    if failures:
        print(f"check_quoted_figures.py: {len(failures)} check(s) failed")
        return 1
    print("check_quoted_figures.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
