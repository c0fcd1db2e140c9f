#!/usr/bin/env python3
"""Where the time of the tensor-core kernels goes: one Nsight Compute profile per kernel.

Profiles one forward launch of each subject with `ncu --set full --clock-control none` on one
problem (default: bf16, B = 4, H = 16, N = 4096, d = 128, non-causal, [B, H, N, d] inputs,
the benchmark shape of docs/conventions.md) and writes a Markdown table of the numbers the chapters discuss: tensor-
pipe utilisation, issue-slot use, occupancy, registers, shared-memory bank conflicts, the
main warp stall reasons and DRAM traffic.

Subjects: our steps (through the tour, one launch, no CPU check) and PyTorch's SDPA backends
(`torch_flash` = FlashAttention-2, `torch_cudnn`), profiled on the same shape in the same run.

    python3 scripts/ncu_profile.py --tour build/bin/tour --out-md docs/results/h200-profile.md
    python3 scripts/ncu_profile.py --tour build/bin/tour --steps 07_flash_attention_2 \
        --torch flash --d 64 --causal --out-md /tmp/p.md
"""
import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys

# (label, metric name or regular expression, scale, format). A regex row expands to one row
# per matching metric. Metrics a GPU/ncu version lacks are left out of the table.
ROWS = [
    ("duration (µs)", "gpu__time_duration.sum", 1e-3, "{:.1f}"),
    ("registers / thread", "launch__registers_per_thread", 1, "{:.0f}"),
    ("threads / block", "launch__block_size", 1, "{:.0f}"),
    ("grid (blocks)", "launch__grid_size", 1, "{:.0f}"),
    ("dynamic smem / block (KiB)", "launch__shared_mem_per_block_dynamic", 1 / 1024, "{:.1f}"),
    ("blocks / SM (occupancy limit)", "launch__occupancy_limit_registers", 1, "{:.0f}"),
    ("achieved occupancy (% of 64 warps)", "sm__warps_active.avg.pct_of_peak_sustained_active",
     1, "{:.1f}"),
    ("SM throughput (% of peak)", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1,
     "{:.1f}"),
    ("issue slots busy (%)", "smsp__issue_active.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
    ("instructions executed (M)", "smsp__inst_executed.sum", 1e-6, "{:.1f}"),
    ("tensor pipe: {}", r"^sm__pipe_tensor_op_[hg]mma_cycles_active\.avg\.pct_of_peak_sustained_active$",
     1, "{:.1f}"),
    ("tensor pipe: {}", r"^sm__inst_executed_pipe_tensor_op_[hg]mma\.avg\.pct_of_peak_sustained_active$",
     1, "{:.1f}"),
    ("pipe: {}", r"^sm__inst_executed_pipe_(alu|fma|fmaheavy|xu|lsu|uniform)\.avg\.pct_of_peak_sustained_active$",
     1, "{:.1f}"),
    ("smem load wavefronts (M)", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 1e-6,
     "{:.2f}"),
    ("smem load bank conflicts (M)", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
     1e-6, "{:.2f}"),
    ("smem store bank conflicts (M)",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 1e-6, "{:.2f}"),
    ("local memory (spill) requests", "l1tex__t_requests_pipe_lsu_mem_local_op_ld.sum", 1,
     "{:.0f}"),
    ("DRAM read (MiB)", "dram__bytes_read.sum", 1 / 2**20, "{:.1f}"),
    ("DRAM write (MiB)", "dram__bytes_write.sum", 1 / 2**20, "{:.1f}"),
    ("stall (cycles/issue): {}",
     r"^smsp__average_warps_issue_stalled_([a-z_]+)_per_issue_active\.ratio$", 1, "{:.2f}"),
]

TORCH_SNIPPET = r"""
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, n, d, causal, dtype, backend = sys.argv[1:]
b, h, n, d = int(b), int(h), int(n), int(d)
dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
with sdpa_kernel(getattr(SDPBackend, backend)):
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal == "1")
torch.cuda.synchronize()
"""

TORCH_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                  "efficient": "EFFICIENT_ATTENTION"}


def profile(ncu, cmd, kernel_regex, launch_skip=0):
    """Runs `cmd` under ncu, profiles one launch of a kernel matching kernel_regex, returns
    {metric: (value, unit)} and the kernel's name."""
    full = [ncu, "--set", "full", "--clock-control", "none", "-k", f"regex:{kernel_regex}",
            "--launch-skip", str(launch_skip), "-c", "1", "--csv", "--page", "raw",
            "--print-units", "base"] + cmd
    out = subprocess.run(full, capture_output=True, text=True)
    text = out.stdout
    start = text.find('"ID"')
    if out.returncode != 0 or start < 0:
        raise RuntimeError(f"ncu failed (exit {out.returncode}) for {' '.join(cmd)}: "
                           f"{(out.stderr or text)[-800:]}")
    rows = list(csv.reader(io.StringIO(text[start:])))
    header, units, values = rows[0], rows[1], rows[2]
    metrics = {}
    for name, unit, value in zip(header, units, values):
        try:
            metrics[name] = (float(value.replace(",", "")), unit)
        except ValueError:
            metrics[name] = (value, unit)
    kernel = metrics.get("Kernel Name", ("?", ""))[0]
    return metrics, str(kernel)


def table_rows(all_metrics):
    """[(label, name, scale, fmt)] for every ROWS entry present in at least one profile."""
    names = set()
    for m in all_metrics:
        names.update(m)
    out = []
    for label, pattern, scale, fmt in ROWS:
        if "{}" in label:
            rx = re.compile(pattern)
            for name in sorted(names):
                hit = rx.match(name)
                if hit:
                    short = hit.group(1) if rx.groups else name.split("__")[1].split(".")[0]
                    out.append((label.format(short), name, scale, fmt))
        elif pattern in names:
            out.append((label, pattern, scale, fmt))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tour", required=True, help="path to the tour program")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--steps", default="05_tensor_cores,06_mma_sync,07_flash_attention_2")
    ap.add_argument("--torch", default="flash,cudnn", help="SDPA backends; '' for none")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--meta", default="", help="GPU, driver, date, commit: first line of the md")
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-json")
    a = ap.parse_args()

    shape = (f"{a.dtype}, B={a.batch}, H={a.heads}, N={a.n}, d={a.d}, "
             f"{'causal' if a.causal else 'non-causal'}, [B, H, N, d] inputs")
    subjects = []
    for step in [s for s in a.steps.split(",") if s]:
        cmd = [a.tour, "--step", step, "--dtype", a.dtype, "--d", str(a.d), "--n", str(a.n),
               "--batch", str(a.batch), "--heads-q", str(a.heads), "--heads-kv", str(a.heads),
               "--layout", "bhnd", "--no-check", "--reps", "1", "--warmup", "0"]
        if a.causal:
            cmd.append("--causal")
        subjects.append((step, cmd, "flash|attention|kernel"))
    for backend in [s for s in a.torch.split(",") if s]:
        cmd = [a.python, "-c", TORCH_SNIPPET, str(a.batch), str(a.heads), str(a.n), str(a.d),
               "1" if a.causal else "0", a.dtype, TORCH_BACKENDS[backend]]
        subjects.append((f"torch_{backend}", cmd, "flash|fmha|sdpa|attn|cudnn"))

    profiles = {}
    for name, cmd, rx in subjects:
        print(f"profiling {name} ...", flush=True)
        try:
            profiles[name] = profile(a.ncu, cmd, rx)
            print(f"  kernel: {profiles[name][1][:120]}", flush=True)
        except RuntimeError as e:
            print(f"  skipped: {e}", flush=True)
    if not profiles:
        print("error: nothing was profiled", file=sys.stderr)
        return 1

    names = list(profiles)
    rows = table_rows([m for m, _ in profiles.values()])
    lines = [f"# Nsight Compute profile: {shape}", ""]
    if a.meta:
        lines += [a.meta, ""]
    lines += ["One launch of each kernel, `ncu --set full --clock-control none` "
              "(scripts/ncu_profile.py). Kernels:", ""]
    lines += [f"- `{n}`: `{profiles[n][1][:160]}`" for n in names] + [""]
    lines.append("| metric | " + " | ".join(names) + " |")
    lines.append("|---|" + "---|" * len(names))
    summary = {n: {} for n in names}
    for label, metric, scale, fmt in rows:
        cells = []
        for n in names:
            v = profiles[n][0].get(metric)
            if v is None or not isinstance(v[0], float):
                cells.append("–")
                continue
            cells.append(fmt.format(v[0] * scale))
            summary[n][metric] = v[0]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out_md)), exist_ok=True)
    with open(a.out_md, "w") as f:
        f.write(text)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump({"shape": shape, "meta": a.meta,
                       "kernels": {n: profiles[n][1] for n in names}, "metrics": summary}, f,
                      indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
