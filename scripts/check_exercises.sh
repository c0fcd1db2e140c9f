#!/usr/bin/env bash
# check_exercises.sh — every exercise is a working exercise (see usage below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source scripts/setup.sh

usage() {
  cat <<'USAGE'
usage: scripts/check_exercises.sh [--cpu-only]

Checks that every exercise is a working exercise:
  1. it matches its solution except at the lesson: in `diff solution exercise` every changed
     block carries a TODO(exercise) marker (so a solution edited later shows up here), or a
     NOTE(exercise) one where the exercise must differ for another reason that the note
     gives, and it has its HINTS.md;
  2. it compiles (the target "exercises");
  3. wherever its tests can run here (exercise 00 everywhere, the GPU exercises on a machine
     with a CUDA device) the skeleton FAILS them, by wrong values rather than by a crash or
     a hang (a skeleton that passes is a broken exercise), and the solution PASSES the same
     tests.

  scripts/check_exercises.sh              all of it (the GPU parts need a device)
  scripts/check_exercises.sh --cpu-only   GPU exercises compiled only, not run (CI)

Prints one line per exercise and exits 1 on any violation, 2 on a usage error. The build
directory is the one scripts/test.sh uses (build/, or build-ci/ under CI=true);
FA_BUILD_DIR=dir picks another.
USAGE
}

cpu_only=0
[ $# -le 1 ] || fa_usage_error "at most one option, got $#: $*"
case "${1:-}" in
  --cpu-only) cpu_only=1 ;;
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) fa_usage_error "unknown option '$1'" ;;
esac

dir=$(fa_build_dir)
logs="$dir/check-exercises"
mkdir -p "$logs"
fa_setup || exit 1
fa_configure || exit 1

violations=0
declare -A drift built skeleton solution
violation() { echo "VIOLATION: $*"; violations=$((violations + 1)); }

exercises=()
for d in steps/*/exercise; do exercises+=("$(basename "$(dirname "$d")")"); done

# 1. Only the lesson differs. diff -U0 prints one "@@" block per changed region; each must
# add a line with the marker (TODO(exercise), or NOTE(exercise) for a difference that is not
# the lesson, explained on that line and the ones after it).
solution_of() {
  case "$1" in
    00_*) echo "reference/$(basename "$2")" ;;
    *) echo "steps/$1/$(basename "$2")" ;;
  esac
}
for step in "${exercises[@]}"; do
  nn=${step:0:2}; drift[$nn]=ok
  [ -f "steps/$step/exercise/HINTS.md" ] || { violation "exercise $nn has no HINTS.md"; drift[$nn]=FAIL; }
  for f in $(find "steps/$step/exercise" -maxdepth 1 -type f \( -name '*.cu' -o -name '*.cuh' \
                -o -name '*.cpp' -o -name '*.h' \) | sort); do
    sol=$(solution_of "$step" "$f")
    if [ ! -f "$sol" ]; then violation "$f has no solution file $sol"; drift[$nn]=FAIL; continue; fi
    grep -q 'TODO(exercise)' "$f" || { violation "$f has no TODO(exercise) marker"; drift[$nn]=FAIL; }
    bad=$(diff -U0 "$sol" "$f" | awk '
      /^@@/ { if (hunk != "" && !marked) print hunk; hunk = $0; marked = 0; next }
      /^\+.*(TODO|NOTE)\(exercise\)/ { marked = 1 }
      END { if (hunk != "" && !marked) print hunk }')
    if [ -n "$bad" ]; then
      violation "$f differs from $sol outside the lesson (blocks without TODO(exercise) or NOTE(exercise)):"
      sed 's/^/    /' <<<"$bad"
      echo "    see: diff -u $sol $f"
      drift[$nn]=FAIL
    fi
  done
done

# 2. Everything compiles: each exercise on its own, so that one broken exercise does not hide
# the others; the solutions' test programs, for step 3.
for step in "${exercises[@]}"; do
  nn=${step:0:2}
  if [ "$nn" != 00 ] && ! fa_has_cuda; then
    built[$nn]="no nvcc"; continue  # not configured: the build has no CUDA toolkit
  fi
  if cmake --build "$dir" -j "$(nproc)" --target "exercise_$nn" >"$logs/build-$nn.log" 2>&1; then
    built[$nn]=ok
  else
    built[$nn]=FAIL; violation "exercise_$nn does not compile (see $logs/build-$nn.log)"
    tail -20 "$logs/build-$nn.log" | sed 's/^/    /'
  fi
done

# 3. The skeleton fails, the solution passes.
#   Skeleton: the exercise program stops at its first failed check (--abort); 0 means it
#   passed (a broken exercise), 77 no device. A CUDA error (an out-of-bounds access, say) or
#   a signal means it failed for the wrong reason, a hang is stopped by the timeout: both are
#   violations too, since an exercise must fail by computing wrong values.
#   Solution: the step's own ctest entries (cpu/reference and cpu/streaming for step 00).
crash_re='illegal memory access|illegal address|illegal instruction|misaligned address'
crash_re+='|unspecified launch failure|launch timed out|hardware stack error'
for step in "${exercises[@]}"; do
  nn=${step:0:2}
  skeleton[$nn]="-"; solution[$nn]="-"
  [ "${built[$nn]}" = ok ] || continue
  if [ "$nn" != 00 ] && [ "$cpu_only" = 1 ]; then
    skeleton[$nn]="not run (--cpu-only)"; solution[$nn]="not run (--cpu-only)"; continue
  fi
  log="$logs/skeleton-$nn.log"
  timeout 900 "$dir/bin/exercise_$nn" --abort >"$log" 2>&1
  rc=$?
  if [ $rc = 77 ]; then
    skeleton[$nn]="skipped: no CUDA device"; solution[$nn]="skipped: no CUDA device"; continue
  elif [ $rc = 0 ]; then
    skeleton[$nn]="PASSES"; violation "the skeleton of exercise $nn passes its tests (see $log)"
  elif [ $rc = 124 ]; then
    skeleton[$nn]="HANGS"; violation "the skeleton of exercise $nn ran past 900 s (see $log)"
  elif [ $rc -ge 128 ] || grep -qiE "$crash_re" "$log"; then
    skeleton[$nn]="CRASHES"
    violation "the skeleton of exercise $nn fails by crashing, not by wrong values (rc=$rc, see $log)"
    grep -m3 -iE "$crash_re" "$log" | sed 's/^/    /'
  else
    skeleton[$nn]="fails (ok)"
  fi

  if [ "$nn" = 00 ]; then
    target=test_cpu; select=(-R '^cpu/(reference|streaming)$')
  else
    target="test_$step"; select=(-L "^$step\$")
  fi
  log="$logs/solution-$nn.log"
  if ! cmake --build "$dir" -j "$(nproc)" --target "$target" >"$log" 2>&1; then
    solution[$nn]="does not compile"; violation "the solution of step $nn does not compile (see $log)"
    continue
  fi
  ctest --test-dir "$dir" "${select[@]}" -j "$(nproc)" --output-on-failure >>"$log" 2>&1
  rc=$?
  if grep -qE '\*\*\*Skipped' "$log"; then
    solution[$nn]="skipped: no CUDA device"
  elif [ $rc = 0 ] && grep -q '100% tests passed' "$log"; then
    solution[$nn]="passes (ok)"
  else
    solution[$nn]="FAILS"; violation "the solution of step $nn fails its tests (see $log)"
  fi
done

echo
printf '%-4s %-22s %-7s %-9s %-26s %s\n' ex step diff compiles skeleton solution
for step in "${exercises[@]}"; do
  nn=${step:0:2}
  printf '%-4s %-22s %-7s %-9s %-26s %s\n' "$nn" "$step" "${drift[$nn]}" "${built[$nn]}" \
    "${skeleton[$nn]}" "${solution[$nn]}"
done
echo
if [ $violations -gt 0 ]; then
  echo "check_exercises: $violations violation(s) (logs in $logs/)"
  fa_cuda_note || true
  exit 1
fi
fa_cuda_note || true
echo "check_exercises: OK"
