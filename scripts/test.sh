#!/usr/bin/env bash
# test.sh — set up, build and run the whole test suite (ctest). GPU tests are reported as
# skipped, never passed, on a machine without a CUDA device. See usage below.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

usage() {
  cat <<'USAGE'
usage: scripts/test.sh [CTEST_OPTION...]

Installs what is missing, builds (build/, or build-ci/ under CI=true; FA_BUILD_DIR=dir picks
another; FA_NO_BUILD=1 runs the tests of the build as it is) and runs ctest. Options go to
ctest (ctest --help), e.g.
  scripts/test.sh -L cpu          the CPU tests
  scripts/test.sh -R 04_flash     one step's tests
The exercises' tests (label "exercise": the skeletons fail until solved) are left out unless
you pick labels yourself: scripts/test.sh -L exercise_00 (scripts/exercise.sh).
A filter that selects no test is an error (exit status 2), not a pass.
USAGE
}
for a in "$@"; do
  case "$a" in -h|--help) usage; exit 0 ;; esac
done

fa_setup
fa_build
dir=$(fa_build_dir)
# The exercises stay out unless labels are picked (-L); a label the user excludes (-LE X)
# is excluded together with them (one -LE "exercise|X": ctest keeps only the last -LE).
labels=(-LE exercise)
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -LE|--label-exclude) [ ${#labels[@]} -gt 0 ] && labels=(-LE "exercise|${2:-}") || args+=("$1" "${2:-}"); shift ;;
    --label-exclude=*) [ ${#labels[@]} -gt 0 ] && labels=(-LE "exercise|${1#*=}") || args+=("$1") ;;
    -LE?*) [ ${#labels[@]} -gt 0 ] && labels=(-LE "exercise|${1#-LE}") || args+=("$1") ;;
    -L|--label-regex) labels=(); args+=("$1" "${2:-}"); shift ;;
    -L?*|--label-regex=*) labels=(); args+=("$1") ;;
    *) args+=("$1") ;;
  esac
  shift
done
set -- "${args[@]+"${args[@]}"}"
# Asked for exercises: they are not in the default build.
if [ ${#labels[@]} = 0 ] && [[ " $* " == *exercise* ]]; then fa_build --target exercises; fi
log="$dir/ctest-last.log"
set +e
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$(nproc)" "${labels[@]}" "$@" \
  2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if grep -q '^No tests were found' "$log"; then
  echo "test.sh: error: the filter selected no test (ctest ${labels[*]:+${labels[*]} }$*);" \
       "list the tests with: ctest --test-dir $dir -N" >&2
  exit 2
fi
# One plain closing line, so that skipped GPU tests are never read as passed.
passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed' "$log" || true)
failed=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' "$log" \
         | grep -cv 'Not Run (Disabled)' || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
[ "$skipped" -gt 0 ] && echo "note: $skipped tests were skipped (GPU tests without a usable CUDA" \
  "device, docs tests without their tools: their output says which); they did not pass"
echo "ctest: $passed passed, $failed failed, $skipped skipped"
fa_cuda_note || true
exit "$rc"
