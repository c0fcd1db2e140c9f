#!/usr/bin/env python3
"""cli_refusals.py — every program refuses bad input the same way, without a GPU.

Runs one program (tour, a step's program, 00_cpu_reference, bench_all, a bench_NN, sweep,
variants_07, variants_11, ceilings, a backward step's bench_NN, bench_decode, variants_12,
hbm_layouts) with each bad input of its table below and
checks: exit status 2, exactly one "error:" line on stderr, and that line names the option
and its accepted range (a regex); and that --help still exits 0. For the tour, also a long
sequence that it must accept: it checks sampled rows, says so, and stays within bounded host
memory and time (the full reference would need 2·N² doubles per head, 34 GB here). ctest
runs one entry per program (label "cli"):

    tests/cli_refusals.py <bin dir> <program>
"""
import os
import re
import resource
import subprocess
import sys
import time

INT = r"1 to 2147483647"
STEP_PROGRAM = "04_flash_attention"  # a step's own program: the tour for that step only

# program -> [(arguments, regex the error line must match)]
TOUR = [
    ("--n 0", r"--n: Value 0 not in range " + INT),
    ("--n abc", r"--n: Value abc not in range " + INT),
    ("--n 3000000000", r"--n: Value 3000000000 not in range " + INT),
    ("--n -5", r"--n: Value -5 not in range " + INT),
    ("--n-q 0", r"--n-q: Value 0 not in range " + INT),
    ("--n-kv 2.5", r"--n-kv: Value 2.5 not in range " + INT),
    ("--n 5 --n-q 4", r"--n-q excludes --n"),
    ("-b 0", r"--batch: Value 0 not in range " + INT),
    ("--heads-q 0", r"--heads-q: Value 0 not in range " + INT),
    ("--heads-kv x", r"--heads-kv: Value x not in range " + INT),
    ("--heads-q 6 --heads-kv 4", r"heads_q \(6\) must be a multiple of heads_kv \(4\)"),
    ("--d 0", r"--d: Value 0 not in range 1 to 256"),
    ("--d 300", r"--d: Value 300 not in range 1 to 256"),
    ("--n 1000000 --heads-q 64 --heads-kv 64 --d 64",
     r"tensor size .* exceeds the 32-bit index limit of 2147483647"),
    ("--dtype fp64", r"--dtype: fp64 not in \{fp32,fp16,bf16\}"),
    ("--layout nhd", r"--layout: nhd not in \{bnhd,bhnd\}"),
    ("--dist uniform", r"--dist: uniform not in \{normal,shifted,large\}"),
    ("--seed -1", r"--seed: Value -1 not in range 0 to 18446744073709551615"),
    ("--seed 18446744073709551616", r"--seed: Value 18446744073709551616 not in range 0 to"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 100000"),
    ("--warmup -1", r"--warmup: Value -1 not in range 0 to 100000"),
    ("--no-such-option", r"--no-such-option"),
]
TOUR_ALL_STEPS = TOUR + [
    ("--step 42", r"--step: 42 is not a registered step; known: 01_naive_attention"),
    ("--step 04 --d 48", r"--step \(04\) cannot run this problem: head_dim \(48\) is not "
                         r"supported by step 04_flash_attention \(supported: 16 32 64 128\)"),
    ("--step 05 --dtype fp32", r"--step \(05\) cannot run this problem: dtype \(fp32\) is not "
                               r"supported by step 05_tensor_cores \(supported: fp16, bf16\)"),
    ("--step 06 --d 32", r"--step \(06\) cannot run this problem: head_dim \(32\) is not "
                         r"supported by step 06_mma_sync \(supported: 64 128\)"),
    ("--step cublas_baseline --dtype bf16", r"dtype \(bf16\) is not supported by cublas_baseline"),
    ("--dtype fp16 --d 48", r"no step can run this problem"),
]
STEP_TOUR = TOUR + [
    ("--d 48", r"no step can run this problem"),
    ("--dtype bf16", r"no step can run this problem"),
    ("--step 05", r"--step: 05 is not a registered step; known: 04_flash_attention"),
]
CPU_REFERENCE = [
    ("--n 0", r"--n: Value 0 not in range 1 to 8192"),
    ("--n 9000", r"--n: Value 9000 not in range 1 to 8192"),
    ("--n abc", r"--n: Value abc not in range 1 to 8192"),
    # CLI11 2.1 would read these as octal (8) and hex (16): only plain decimal is taken.
    ("--n 010", r"--n: Value 010 not in range 1 to 8192 \(plain decimal integers only\)"),
    ("--n 0x10", r"--n: Value 0x10 not in range 1 to 8192 \(plain decimal integers only\)"),
    ("--seed 0xFFFFFFFFFFFFFFFFFF", r"--seed: Value 0xFFFFFFFFFFFFFFFFFF not in range 0 to 18446744073709551615"),
    ("--batch 0", r"--batch: Value 0 not in range " + INT),
    ("--heads -2", r"--heads: Value -2 not in range " + INT),
    ("--d 257", r"--d: Value 257 not in range 1 to 256"),
    ("--seed x", r"--seed: Value x not in range 0 to"),
    ("--batch 100000 --heads 100 --n 1000", r"exceeds the 32-bit index limit of 2147483647"),
]
BENCH = [
    ("--ns 0", r"--ns: Value 0 not in range " + INT),
    ("--ns -5", r"--ns: Value -5 not in range " + INT),
    ("--ns abc", r"--ns: Value abc not in range " + INT),
    ("--ns 1024,0", r"--ns: Value 0 not in range " + INT),
    ("--dims 0", r"--dims: Value 0 not in range 1 to 256"),
    ("--dims 300", r"--dims: Value 300 not in range 1 to 256"),
    ("--min-time -1", r"--min-time: Value -1 not in range 0.001"),
    ("--min-time 0", r"--min-time: Value 0 not in range 0.001"),
    ("--causal maybe", r"--causal: maybe not in \{off,on,both\}"),
    ("--dtype f32", r"--dtype: f32 not in \{fp32,fp16,bf16\}"),
    ("--layout x", r"--layout: x not in \{bnhd,bhnd\}"),
    ("--tokens 0", r"--tokens: Value 0 not in range " + INT),
    ("--hidden -1", r"--hidden: Value -1 not in range " + INT),
    ("--baseline maybe", r"--baseline: maybe not in"),
    ("--only 99", r"--only: 99 is not a registered step; known:"),
    ("--ns 3000000 --tokens 1", r"--ns 3000000 with --dims 64: tensor size .* exceeds"),
    ("--no-such-flag", r"unknown option --no-such-flag"),
    ("--benchmark_min_time=abc", r"--benchmark_min_time \(abc\) must be seconds"),
    ("--pass sideways", r"--pass: sideways not in \{forward,backward\}"),
]
BENCH_ALL = BENCH + [
    ("--only 04 --dims 48", r"no step can run the requested shapes"),
    ("--only 05", r"no step can run the requested shapes"),  # fp32 by default
    ("--dtype bf16 --dims 48", r"no step can run the requested shapes"),
    ("--only 10", r"no step can run the requested shapes"),  # step 10 has no forward pass
    ("--pass backward --only 04",
     r"no step with a backward pass can run the requested shapes \(--ns, --dims, --dtype, "
     r"--only\)"),
    ("--deterministic", r"--deterministic: only with --pass backward"),
    ("--pass backward --only 10 --deterministic",  # step 10's dQ has no deterministic mode
     r"no step with a backward pass can run the requested shapes"),
]
BENCH_STEP = BENCH + [
    ("--dims 48", r"no step can run the requested shapes"),
    ("--dtype fp16", r"no step can run the requested shapes"),
    ("--pass backward", r"--pass backward: no step of this program has a backward pass"),
]
SWEEP = [
    ("--count 0", r"--count: Value 0 not in range 1 to 1000000"),
    ("--count -1", r"--count: Value -1 not in range 1 to 1000000"),
    ("--count abc", r"--count: Value abc not in range 1 to 1000000"),
    ("--only 999999", r"--only: Value 999999 not in range 0 to 499"),
    ("--count 10 --only 10", r"--only: Value 10 not in range 0 to 9"),
    ("--only -1", r"--only: Value -1 not in range 0 to"),
    ("--seed -1", r"--seed: Value -1 not in range 0 to"),
]
VARIANTS = [
    ("--d 32", r"--d: 32 not in \{64,128\}"),
    ("--d 64,48", r"--d: 48 not in \{64,128\}"),
    ("--ns 1000", r"--ns: Value 1000 does not divide 16384"),
    ("--ns 0", r"--ns: Value 0 not in range 1 to 16384"),
    ("--ns 32768", r"--ns: Value 32768 not in range 1 to 16384"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 10000"),
    ("--warmup x", r"--warmup: Value x not in range 0 to 10000"),
]

# A backward step's timing program (bench_NN for a step with a backward pass only).
BENCH_BACKWARD = [
    ("-n 0", r"--n: Value 0 not in range " + INT),
    ("--heads-q 6 --heads-kv 4", r"heads_q \(6\) must be a multiple of heads_kv \(4\)"),
    ("--d 96", r"head_dim \(96\) is not supported by step 11_backward_tc \(supported: 64 128\)"),
    ("--dtype fp32", r"dtype \(fp32\) is not supported by step 11_backward_tc"),
    ("--layout nhd", r"--layout: nhd not in \{bnhd,bhnd\}"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 10000"),
    ("--warmup -1", r"--warmup: Value -1 not in range 0 to 1000"),
    ("--queue-ahead-cycles -5", r"--queue-ahead-cycles: Value -5 not in range 0 to"),
    ("--bogus", r"--bogus"),
]

# The decoding benchmark: its options, and the problems they make (each refusal names the
# option, its value and the limit; a shape past the decoding cache limit is not timed, said on
# a "not timed:" line, and the rest of the grid runs).
BENCH_DECODE = [
    ("--batches 0", r"--batches: Value 0 not in range " + INT),
    ("--batches 1,x", r"--batches: Value x not in range " + INT),
    ("--caches -4", r"--caches: Value -4 not in range " + INT),
    ("--caches 2 --q-len 4", r"--caches \(2\) must be at least --q-len \(4\)"),
    ("--heads-q 0", r"--heads-q: Value 0 not in range " + INT),
    ("--heads-kv 6", r"--heads-kv 6 --dims 128: heads_q \(32\) must be a multiple of "
                     r"heads_kv \(6\)"),
    ("--dims 300", r"--dims: Value 300 not in range 1 to 256"),
    ("--dims 96", r"no decoding step can run the requested shapes"),
    ("--dtype fp32", r"no decoding step can run the requested shapes"),
    ("--dtype fp8", r"--dtype: fp8 not in \{fp32,fp16,bf16\}"),
    ("--q-len 0", r"--q-len: Value 0 not in range 1 to 16"),
    ("--q-len 17", r"--q-len: Value 17 not in range 1 to 16"),
    ("--page-sizes 8", r"--page-sizes: Value 8 not in range 16 to 256"),
    ("--page-sizes 64,512", r"--page-sizes: Value 512 not in range 16 to 256"),
    ("--splits 0", r"--splits: Value 0 not in range 1 to 128"),
    ("--splits 1,129", r"--splits: Value 129 not in range 1 to 128"),
    ("--split-sweep maybe", r"--split-sweep: maybe not in"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 100000"),
    ("--warmup -1", r"--warmup: Value -1 not in range 0 to 1000"),
    ("--hbm-gib 0", r"--hbm-gib: Value 0 not in range 1 to 64"),
    ("--hbm-gib 65", r"--hbm-gib: Value 65 not in range 1 to 64"),
    ("--hbm-reps 0", r"--hbm-reps: Value 0 not in range 1 to 10000"),
    ("--max-cache-gib 0", r"--max-cache-gib: Value 0 not in range 1 to 1024"),
    ("--batches 8 --caches 32768 --max-cache-gib 1",
     r"--batches 8 --caches 32768 --heads-q 32 --heads-kv 32 --dims 128: the K and V caches "
     r"need 4\.0 GiB, more than --max-cache-gib \(1\)"),
    # 2^34 elements per cache: past the forward's 32-bit limit, within the decoding one (2^40),
    # refused by the memory cap alone.
    ("--batches 64 --caches 65536 --heads-kv 32",
     r"--batches 64 --caches 65536 --heads-q 32 --heads-kv 32 --dims 128: the K and V caches "
     r"need 64\.0 GiB, more than --max-cache-gib \(40\)"),
    # 2^48 elements: past the decoding limit, not timed; nothing left to time.
    ("--batches 65536 --caches 1048576 --heads-kv 32", r"no decoding step can run the "
                                                        r"requested shapes"),
    ("--batches 1 --caches 2000000000 --heads-kv 1 --dims 64",
     r"n_max \(2000000000\) exceeds the limit of 1073741824 rows per sequence"),
    ("--queue-ahead-cycles -1", r"--queue-ahead-cycles: Value -1 not in range 0 to"),
    ("--benchmark_min_time=abc", r"--benchmark_min_time \(abc\) must be seconds"),
    ("--no-such-flag", r"unknown option --no-such-flag"),
]

# Step 12's configurations (steps/12_decode/variants/variants.cpp): the decoding benchmark's
# shape options, which configurations and registered steps, and Google Benchmark's flags.
VARIANTS_12 = [
    ("--variants s9w9", r"--variants: s9w9 not in \{s3w4,s2w4,s2w8,s3w8,m2w4,m3w4,m3w4r,m3w4b,m2w4b,m4w4b,m3w4p1,m3w4p2,m2w4p2,m3w4e,m3w4s,m2w4s,m2w4s2,h23s,m3w4sp,m3w4spl1,m3w4spl2,m3w4spa,m3w4spam,m3w4spac2,m3w4spac4,m3w4spac8,m3w4spah2,m3w4spah4,m3w4spah4f,m3w4spt,m2w4spt,m3w4spas,m3w4spts,m3w4spaz,m3w4spae,m3w4spte\}"),
    ("--steps 07", r"--steps: 07 not in \{12_decode,12_decode_v2,none\}"),
    ("--batches 0", r"--batches: Value 0 not in range " + INT),
    ("--caches x", r"--caches: Value x not in range " + INT),
    ("--heads-kv 5", r"--heads-kv 5: heads_q \(32\) must be a multiple of heads_kv \(5\)"),
    ("--page-sizes 8", r"--page-sizes: Value 8 not in range 16 to 256"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 100000"),
    ("--warmup -1", r"--warmup: Value -1 not in range 0 to 1000"),
    ("--hbm-gib 65", r"--hbm-gib: Value 65 not in range 1 to 64"),
    ("--batches 8 --caches 32768 --max-cache-gib 1",
     r"--batches 8 --caches 32768 --heads-q 32 --heads-kv 32: the K and V caches need 4\.0 GiB, "
     r"more than --max-cache-gib \(1\)"),
    ("--batches 64 --caches 65536", r"--heads-kv 32: the K and V caches need 64\.0 GiB, more "
                                    r"than --max-cache-gib \(40\)"),
    ("--batches 65536 --caches 1048576",
     r"the K/V cache's 281474976710656 elements exceed the decoding limit of 1099511627776 "
     r"elements"),
    ("--queue-ahead-cycles -1", r"--queue-ahead-cycles: Value -1 not in range 0 to"),
    ("--benchmark_min_time=abc", r"--benchmark_min_time \(abc\) must be seconds"),
    ("--no-such-flag", r"unknown option --no-such-flag"),
]

CEILINGS = [
    ("--size 10", r"--size: Value 10 not in range 64 to 32768"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 10000"),
    ("--copy-mib abc", r"--copy-mib: Value abc not in range 1 to 65536"),
    ("--bogus", r"--bogus"),
]

HBM_LAYOUTS = [
    ("--caches 32", r"--caches: Value 32 not in range 64 to"),
    ("--caches 200", r"--caches: 200 must be a multiple of 64"),
    ("--batches 0", r"--batches: Value 0 not in range 1 to 65535"),
    ("--heads-kv 70000", r"--heads-kv: Value 70000 not in range 1 to 65535"),
    ("--heads-per-block 3", r"--heads-per-block: 3 not in \{1,2,4\}"),
    ("--starts diagonal", r"--starts: diagonal not in \{aligned,spread,sequences\}"),
    ("--heads-kv 6 --heads-per-block 1,4",
     r"--heads-per-block 4: must divide every --heads-kv \(6\)"),
    ("--reps 0", r"--reps: Value 0 not in range 1 to 10000"),
    ("--hbm-gib 65", r"--hbm-gib: Value 65 not in range 1 to 64"),
    ("--batches 64 --heads-kv 64 --caches 65536",
     r"--batches 64 --heads-kv 64 --caches 65536: K and V need 128\.0 GiB, more than "
     r"--max-cache-gib \(40\)"),
    ("--bogus", r"--bogus"),
]

# program -> [(arguments, regex stdout must match)]: accepted, exit status 0, with at most
# MAX_RSS_MIB of host memory and MAX_SECONDS (a GPU, if present, runs one fast step).
ACCEPTS = {
    "tour": [("--n 46000 --d 16 --step 04 --reps 1 --warmup 0",
              r"Checked: \d+ of 184000 rows, sampled: \d+ rows of each of the 4 \(batch, head\)")],
}
# program -> [arguments] that must not be refused (no status 2, no "error:" line): Google
# Benchmark's own flags pass through the bench programs' command line.
NOT_REFUSED = {
    "bench_decode": ["--benchmark_filter=^nothing$",
                     "--batches 1 --caches 4096 --page-sizes 64 --splits 1,2 "
                     "--benchmark_filter=^nothing$"],
    "bench_all": ["--ns 512 --dims 64 --benchmark_filter=^nothing$",
                  "--pass backward --ns 512 --dims 64 --benchmark_filter=^nothing$",
                  "--pass backward --deterministic --dtype bf16 --ns 512 --dims 64 "
                  "--benchmark_filter=^nothing$"],
    "bench_" + STEP_PROGRAM: ["--ns 512 --dims 64 --causal off --benchmark_filter=^nothing$"],
    "variants_12": ["--benchmark_filter=^nothing$",
                    "--variants s2w4 --steps none --batches 1 --caches 4096 --page-sizes 16,256"],
}
MAX_RSS_MIB = 1536
MAX_SECONDS = 120

CASES = {
    "tour": TOUR_ALL_STEPS,
    STEP_PROGRAM: STEP_TOUR,
    "00_cpu_reference": CPU_REFERENCE,
    "bench_all": BENCH_ALL,
    "bench_" + STEP_PROGRAM: BENCH_STEP,
    "sweep": SWEEP,
    "variants_07": VARIANTS,
    "variants_11": VARIANTS,  # the same program (steps/harness/variants_table.h), backward
    "ceilings": CEILINGS,
    "bench_11_backward_tc": BENCH_BACKWARD,
    "bench_decode": BENCH_DECODE,
    "variants_12": VARIANTS_12,
    "hbm_layouts": HBM_LAYOUTS,
}


# CLI11 words a range "1 to 8192" (2.1) or "[1 - 8192]" (2.3 and later); the patterns use
# the first form, and the error line is read in it.
RANGE_RE = re.compile(r"\[(-?[0-9.e+]+) - (-?[0-9.e+]+)\]")


def normalized(line):
    return RANGE_RE.sub(r"\1 to \2", line)


def run(exe, args):
    return subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        sys.exit("usage: cli_refusals.py <bin dir> <program>; programs: " + ", ".join(CASES))
    bin_dir, program = sys.argv[1], sys.argv[2]
    exe = os.path.join(bin_dir, program)
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: not built")
    failures = []
    for args, pattern in CASES[program]:
        r = run(exe, args.split())
        errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
        why = []
        if r.returncode != 2:
            why.append(f"exit status {r.returncode}, expected 2")
        if len(errors) != 1:
            why.append(f"{len(errors)} 'error:' lines on stderr, expected 1")
        elif not re.search(pattern, normalized(errors[0])):
            why.append(f"error line does not match /{pattern}/")
        if "passed" in r.stdout:
            why.append("stdout says something passed")
        if why:
            failures.append(f"{program} {args}: {'; '.join(why)}\n    stderr: {r.stderr.strip()!r}")
        else:
            print(f"ok   {program} {args}: {errors[0]}")
    for args, pattern in ACCEPTS.get(program, []):
        t0 = time.monotonic()
        r = run(exe, args.split())
        seconds = time.monotonic() - t0
        rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        why = []
        if r.returncode != 0:
            why.append(f"exit status {r.returncode}, expected 0")
        if not re.search(pattern, r.stdout):
            why.append(f"stdout does not match /{pattern}/")
        if rss_mib > MAX_RSS_MIB:
            why.append(f"max RSS {rss_mib:.0f} MiB, limit {MAX_RSS_MIB}")
        if seconds > MAX_SECONDS:
            why.append(f"took {seconds:.0f} s, limit {MAX_SECONDS}")
        if why:
            failures.append(f"{program} {args}: {'; '.join(why)}\n    stderr: {r.stderr.strip()[-400:]!r}")
        else:
            print(f"ok   {program} {args}: accepted, {seconds:.1f} s, max RSS {rss_mib:.0f} MiB")
    for args in NOT_REFUSED.get(program, []):
        r = run(exe, args.split())
        if r.returncode == 2 or "error:" in r.stderr:
            failures.append(f"{program} {args}: refused (exit status {r.returncode})\n"
                            f"    stderr: {r.stderr.strip()!r}")
        else:
            print(f"ok   {program} {args}: not refused (exit status {r.returncode})")
    h = run(exe, ["--help"])
    if h.returncode != 0 or "Usage:" not in h.stdout:
        failures.append(f"{program} --help: exit status {h.returncode}, expected 0 with the usage")
    else:
        print(f"ok   {program} --help: exit status 0")
    for f in failures:
        print("FAIL " + f)
    total = (len(CASES[program]) + len(ACCEPTS.get(program, [])) +
             len(NOT_REFUSED.get(program, [])) + 1)
    print(f"{program}: {total - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
