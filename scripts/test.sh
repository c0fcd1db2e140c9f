#!/usr/bin/env bash
# test.sh — set up, build and run the whole test suite (ctest). GPU tests are reported as
# skipped, never passed, on a machine without a CUDA device. Arguments go to ctest,
# e.g. scripts/test.sh -L cpu   or   scripts/test.sh -R 04_flash
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
fa_setup
fa_build
dir=build; [ "$(fa_preset)" = default ] || dir="build-$(fa_preset)"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "$@"
