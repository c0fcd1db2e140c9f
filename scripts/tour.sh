#!/usr/bin/env bash
# tour.sh — set up, build and run the tour: every step on one problem, in one table.
# Arguments go to the tour (bin/tour --help), e.g. scripts/tour.sh --n 4096 --causal
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
fa_setup
fa_build --target tour 00_cpu_reference
dir=$(fa_build_dir)
"$dir/bin/tour" "$@"
