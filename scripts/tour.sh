#!/usr/bin/env bash
# tour.sh — set up, build and run the tour: every step on one problem, in one table.
# Arguments go to the tour (bin/tour --help), e.g. scripts/tour.sh --n 4096 --causal
# Without the CUDA toolkit: chapter 00's program, the CPU part (bin/00_cpu_reference --help).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
fa_setup
fa_configure
dir=$(fa_build_dir)
if fa_has_cuda; then
  fa_build --target tour 00_cpu_reference
  "$dir/bin/tour" "$@"
else
  fa_build --target 00_cpu_reference
  "$dir/bin/00_cpu_reference" "$@"
  fa_cuda_note || true
fi
