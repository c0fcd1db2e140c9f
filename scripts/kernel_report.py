#!/usr/bin/env python3
"""What the compiler made of every step's kernels: registers, stack frame and the count of the
instructions the chapters talk about, per kernel, from cuobjdump on the step's object files.

    python3 scripts/kernel_report.py --build build-gpu --meta "CUDA 13.0, commit abc1234" \\
        --out docs/results/sm90-kernels.md

Needs cuobjdump (CUDA toolkit) and a demangler (cu++filt or c++filt). The figures depend on the
compiler and the architecture (the build's CMAKE_CUDA_ARCHITECTURES), not on a GPU: the chapters
quote them from the Markdown table this writes (one row per kernel, keyed by step and kernel).

Exit status 0, 1 when no kernel was found or a tool failed, 2 on a usage error.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

# The instructions the chapters count, by SASS opcode (the name before the first dot).
OPCODES = ["HMMA", "HGMMA", "LDSM", "LDGSTS", "UTMALDG", "SYNCS", "LDG", "STG", "LDS", "STS", "BAR", "SHFL",
           "MUFU", "FFMA"]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def demangle(names):
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names) + "\n", check=True, capture_output=True,
                         text=True).stdout.splitlines()
    return dict(zip(names, out))


def short_name(demangled):
    """fa::step07::flash_fwd_kernel<fa::step07::KernelTraits<…>, true>(fa::step07::FwdParams)
    → flash_fwd_kernel<KernelTraits<…>, true>: namespaces and the parameter list dropped."""
    name = re.sub(r"\bfa::step\d+::", "", demangled)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    depth = 0
    for i, ch in enumerate(name):  # cut at the '(' of the parameter list (outside <>)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    name = name.replace("__nv_bfloat16", "bf16").replace("__half", "f16")
    # cu++filt writes template arguments with casts: (bool)1, (int)128. Plain values, and
    # [ ] for < >, so that a row can be named in a chapter's quoted-figure marker.
    name = name.replace("(bool)1", "true").replace("(bool)0", "false").replace("(int)", "")
    name = name.replace("<unnamed>::", "").replace("<", "[").replace(">", "]")
    name = re.sub(r"\s+", " ", name).strip()
    return name[5:] if name.startswith("void ") else name


def resources(obj):
    """{mangled: (registers, stack bytes, static shared bytes)} from --dump-resource-usage."""
    res, fn = {}, None
    for line in run(["cuobjdump", "--dump-resource-usage", obj]).splitlines():
        m = re.match(r"\s*Function\s+(\S+?):?\s*$", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)", line)
        if m and fn:
            res[fn] = tuple(int(x) for x in m.groups())
            fn = None
    return res


def sass_counts(obj):
    """{mangled: {opcode: count}} from cuobjdump -sass."""
    counts, fn = {}, None
    for line in run(["cuobjdump", "-sass", obj]).splitlines():
        m = re.match(r"\s*Function\s*:\s*(\S+)", line)
        if m:
            fn = m.group(1)
            counts[fn] = {op: 0 for op in OPCODES}
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", line)
        if m and fn and m.group(1) in counts[fn]:
            counts[fn][m.group(1)] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="the build directory (default: build)")
    ap.add_argument("--meta", default="", help="a line naming compiler, commit and command")
    ap.add_argument("--out", help="Markdown file to write (default: standard output)")
    args = ap.parse_args()
    if not shutil.which("cuobjdump"):
        print("kernel_report: cuobjdump not found (it comes with the CUDA toolkit)", file=sys.stderr)
        return 1
    objs = sorted(glob.glob(os.path.join(args.build, "steps", "CMakeFiles", "step_*.dir", "**",
                                         "*.cu.o"), recursive=True))
    rows = []
    for obj in objs:
        step = re.search(r"step_(\d\d_\w+?)\.dir", obj).group(1)
        try:
            res, sass = resources(obj), sass_counts(obj)
            names = demangle(sorted(res))
        except subprocess.CalledProcessError as e:
            detail = (e.stderr or "").strip().splitlines()
            print(f"kernel_report: {' '.join(e.cmd[:2])} ... failed on {obj} (exit status "
                  f"{e.returncode}){': ' + detail[-1] if detail else ''}", file=sys.stderr)
            return 1
        for mangled, (reg, stack, shared) in res.items():
            ops = sass.get(mangled, {op: 0 for op in OPCODES})
            rows.append((step, short_name(names[mangled]), reg, stack, shared, ops))
    if not rows:
        print(f"kernel_report: no kernels in {args.build}/steps (built?)", file=sys.stderr)
        return 1
    rows.sort(key=lambda r: (r[0], r[1]))
    out = [f"# The steps' kernels as compiled ({args.meta})" if args.meta else
           "# The steps' kernels as compiled", "",
           "One row per kernel: `cuobjdump --dump-resource-usage` (registers per thread, stack "
           "frame in bytes per thread, where spilled registers live; static shared memory, which on "
           "sm_90 includes 1 KB the system reserves in every block) and "
           "the number of each SASS instruction in `cuobjdump -sass` (static counts, not "
           "executions). Written by `scripts/kernel_report.py`.", "",
           "| kernel | registers | stack (B) | static smem (B) | " + " | ".join(OPCODES) + " |",
           "|---|---|---|---|" + "---|" * len(OPCODES)]
    for step, name, reg, stack, shared, ops in rows:
        key = f"{step} {name}".replace("|", "\\|")
        out.append(f"| {key} | {reg} | {stack} | {shared} | " +
                   " | ".join(str(ops[op]) for op in OPCODES) + " |")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"kernel_report: {len(rows)} kernels → {args.out}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
