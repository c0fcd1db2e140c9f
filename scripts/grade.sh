#!/usr/bin/env bash
# grade.sh — grade a student's tree: build every exercise, run the exercises' tests, and write
# a pass/fail report per exercise (docs/instructors.md). See usage below.
set -uo pipefail
here=$PWD  # where a relative path argument starts from
cd "$(dirname "$0")/.." || exit 1
source scripts/setup.sh

usage() {
  cat <<'USAGE'
usage: scripts/grade.sh [--cpu-only]

Grades the tree this script is in (run the student's copy: cd their-tree && scripts/grade.sh).
  scripts/grade.sh              every exercise (the GPU ones, 01-11, need a CUDA device)
  scripts/grade.sh --cpu-only   exercise 00 only (the CPU one)

Writes, under <build>/grade/ (build/, or build-ci/ under CI=true; FA_BUILD_DIR=dir picks
another):
  report.md    one row per exercise: PASS, FAIL (and which test groups failed, or that it
               does not compile) or NOT GRADED (no CUDA device here, or --cpu-only)
  junit.xml    every exercise test, from ctest --output-junit, for a CI system or an LMS
  build-NN.log, ctest.log
Exits 0 when every graded exercise passes, 1 otherwise, 2 on a usage error. The student's
files are graded by the same tests as the solutions: only the files under
steps/NN_slug/exercise/ are theirs.
USAGE
}

cpu_only=0
[ $# -le 1 ] || fa_usage_error "at most one option, got $#: $*"
case "${1:-}" in
  --cpu-only) cpu_only=1 ;;
  -h|--help) usage; exit 0 ;;
  "") ;;
  -*) fa_usage_error "unknown option '$1'" ;;
  *)
    # A path: grade.sh grades its own tree, whatever the argument.
    path=$1; [[ "$path" == /* ]] || path=$here/$path
    takes="grade.sh takes no path: it grades the tree it is in ($PWD)"
    if [ ! -e "$path" ]; then
      fa_usage_error "'$1' is not an option, and no such file or directory exists; $takes"
    elif [ "$(realpath "$path")" = "$(realpath .)" ]; then
      fa_usage_error "$takes, which is '$1': run it without an argument"
    elif [ -x "$path/scripts/grade.sh" ]; then
      fa_usage_error "$takes; to grade '$1', run its own scripts/grade.sh: $1/scripts/grade.sh"
    else
      fa_usage_error "$takes; '$1' is not a copy of this tutorial either (no scripts/grade.sh)"
    fi ;;
esac

dir=$(fa_build_dir)
out="$dir/grade"
rm -rf "$out" && mkdir -p "$out"
fa_setup || exit 1
fa_configure || exit 1
# Without the CUDA toolkit only exercise 00 is configured (fa_cuda_note says why).
fa_has_cuda || { cpu_only=1; fa_cuda_note; }

exercises=()
for d in steps/*/exercise; do
  step=$(basename "$(dirname "$d")")
  [ "$cpu_only" = 1 ] && [ "${step:0:2}" != 00 ] && continue
  exercises+=("$step")
done

declare -A built
for step in "${exercises[@]}"; do
  nn=${step:0:2}
  echo "=== building exercise_$nn"
  rm -f "$dir/bin/exercise_$nn"  # an old build must not be graded in place of this one
  if cmake --build "$dir" -j "$(nproc)" --target "exercise_$nn" >"$out/build-$nn.log" 2>&1; then
    built[$nn]=1
  else
    built[$nn]=0; echo "exercise_$nn does not compile:"; grep -m5 -E "error" "$out/build-$nn.log"
  fi
done

labels="^exercise_(00)\$"
[ "$cpu_only" = 1 ] || labels="^exercise_[0-9]+\$"
echo "=== ctest -L '$labels'"
junit=$(cd "$out" && pwd)/junit.xml
ctest --test-dir "$dir" -L "$labels" -j "$(nproc)" --output-on-failure --output-junit "$junit" \
  >"$out/ctest.log" 2>&1
grep -E "Test +#[0-9]+: exercise_" "$out/ctest.log"

# One verdict per exercise from ctest's result lines, e.g.
#   3/34 Test #47: exercise_01/shapes ...............***Failed   12.3 sec
{
  echo "# Exercise grades"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git diff --quiet HEAD -- steps 2>/dev/null || echo ' (with uncommitted changes)'), build \`$dir\`."
  echo "Graded by the tests that gate the solutions (\`ctest -L exercise_NN\`); junit: \`junit.xml\`."
  echo
  echo "| exercise | verdict | tests passed | failed | skipped | TODO(exercise) left | failed groups |"
  echo "|---|---|---:|---:|---:|---:|---|"
} >"$out/report.md"
all_pass=1
for d in steps/*/exercise; do
  step=$(basename "$(dirname "$d")"); nn=${step:0:2}
  left=$(find "$d" -maxdepth 1 -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' \
           -o -name '*.h' \) -exec cat {} + | grep -c 'TODO(exercise)')
  lines=$(grep -E "Test +#[0-9]+: exercise_$nn/" "$out/ctest.log" || true)
  pass=$(grep -c ' Passed' <<<"$lines" || true)
  fail=$(grep -cE '\*\*\*(Failed|Timeout|Exception)|Not Run' <<<"$lines" || true)
  skip=$(grep -c '\*\*\*Skipped' <<<"$lines" || true)
  groups=$(grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' <<<"$lines" |
           sed -E "s/.*exercise_$nn\/([a-z_-]+).*/\1/" | tr '\n' ' ' | sed 's/ $//')
  if [ "$cpu_only" = 1 ] && [ "$nn" != 00 ]; then
    verdict="NOT GRADED (--cpu-only)"
  elif [ "${built[$nn]:-0}" = 0 ]; then
    verdict="FAIL (does not compile: build-$nn.log)"; all_pass=0
  elif [ "$fail" -gt 0 ]; then
    verdict="FAIL"; all_pass=0
  elif [ "$skip" -gt 0 ] || [ "$pass" = 0 ]; then
    verdict="NOT GRADED (no CUDA device)"
  else
    verdict="PASS"
  fi
  echo "| $step | $verdict | $pass | $fail | $skip | $left | ${groups:--} |" >>"$out/report.md"
done

echo
cat "$out/report.md"
echo
echo "report: $out/report.md   junit: $junit"
[ "$all_pass" = 1 ]
