#!/usr/bin/env bash
# scripts_cli.sh — the scripts' usage errors (ctest -L cli; no GPU, no build): each bad
# argument gives exit status 2 and a message naming what was wrong; a few good arguments
# show the checks are not refusing everything. scripts/test.sh is run on a stand-in build
# folder holding one trivial test (FA_BUILD_DIR, FA_NO_BUILD=1): nothing is built.
#   tests/scripts_cli.sh [SOURCE_DIR]
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 1
export FA_NO_INSTALL=1
failures=0 cases=0

# expect STATUS TEXT... -- COMMAND...: COMMAND exits with STATUS and its output (stdout and
# stderr) contains each TEXT (a fixed string), or does not when TEXT starts with "!".
expect() {
  local status=$1; shift
  local texts=()
  while [ "$1" != -- ]; do texts+=("$1"); shift; done
  shift
  local out rc ok=1 t
  out=$("$@" 2>&1 </dev/null); rc=$?
  cases=$((cases + 1))
  [ "$rc" = "$status" ] || ok=0
  for t in "${texts[@]}"; do
    if [[ "$t" == '!'* ]]; then
      grep -qF -- "${t:1}" <<<"$out" && ok=0
    else
      grep -qF -- "$t" <<<"$out" || ok=0
    fi
  done
  if [ "$ok" = 1 ]; then
    echo "ok    $*  (exit $rc)"
  else
    failures=$((failures + 1))
    echo "FAIL  $*  (exit $rc, expected $status; wanted:$(printf ' [%s]' "${texts[@]}"))"
    sed 's/^/      | /' <<<"$out" | head -20
  fi
}

echo "--- scripts/test.sh: a filter that selects no test is an error"
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
echo 'add_test(cli_stand_in "/bin/true")' >"$fake/CTestTestfile.cmake"
export FA_BUILD_DIR=$fake FA_NO_BUILD=1
expect 2 "test.sh: error: the filter selected no test (ctest -LE exercise -R nonexistent)" \
  -- scripts/test.sh -R nonexistent
expect 2 "error: the filter selected no test" -- scripts/test.sh -L no_such_label
expect 0 "ctest: 1 passed, 0 failed, 0 skipped" -- scripts/test.sh -R cli_stand_in
expect 0 "usage: scripts/test.sh" -- scripts/test.sh --help
unset FA_BUILD_DIR FA_NO_BUILD

echo "--- scripts/exercise.sh"
expect 2 "exercise.sh: error: unknown command 'bogus'" "usage: scripts/exercise.sh" \
  -- scripts/exercise.sh bogus
expect 2 "error: no command given" "usage: scripts/exercise.sh" -- scripts/exercise.sh
expect 2 "error: hint '4' does not exist: exercise 03 has hint levels 1 to 3" \
  -- scripts/exercise.sh hints 03 4
expect 2 "error: hint 'x' does not exist" -- scripts/exercise.sh hints 03 x
expect 2 "error: 'hints' takes NN and an optional level, got 3 argument(s): 03 1 2" \
  -- scripts/exercise.sh hints 03 1 2
expect 2 "error: 'build' takes one argument, NN, got 0 argument(s)" -- scripts/exercise.sh build
expect 2 "error: 'list' takes no argument, got 1 argument(s): 03" -- scripts/exercise.sh list 03
expect 2 "error: NN must be two digits, e.g. 04 (got '3')" -- scripts/exercise.sh diff 3
expect 2 "error: step 99 has no exercise; these do: 00" -- scripts/exercise.sh diff 99
expect 2 "error: no task 'no_such_task'; the tasks:" -- scripts/exercise.sh further no_such_task
expect 0 "### Level 1" "!### Level 2" -- scripts/exercise.sh hints 03 1
expect 0 "### Level 2" "!### Level 3" -- scripts/exercise.sh hints 03 2
expect 0 "### Level 3" -- scripts/exercise.sh hints 03
expect 0 "usage: scripts/exercise.sh" -- scripts/exercise.sh --help

echo "--- scripts/grade.sh, scripts/check_exercises.sh"
expect 2 "grade.sh: error: '/some/path' is not an option, and no such file or directory exists;" \
  "grade.sh takes no path: it grades the tree it is in" "usage: scripts/grade.sh [--cpu-only]" \
  "!sed -n" "!set -uo" -- scripts/grade.sh /some/path
expect 2 "grade.sh takes no path" "is not a copy of this tutorial either" -- scripts/grade.sh /
expect 2 "grade.sh: error: unknown option '--bogus'" -- scripts/grade.sh --bogus
expect 2 "grade.sh: error: at most one option, got 2: --cpu-only x" \
  -- scripts/grade.sh --cpu-only x
expect 0 "usage: scripts/grade.sh" -- scripts/grade.sh --help
expect 2 "check_exercises.sh: error: unknown option '--bogus'" \
  "usage: scripts/check_exercises.sh" -- scripts/check_exercises.sh --bogus

echo "--- scripts/gpu_check.sh, scripts/sanitize.sh, scripts/mutation_check.sh, scripts/setup.sh"
expect 2 "gpu_check.sh: error: unknown option '--bogus'" "usage: scripts/gpu_check.sh" \
  -- scripts/gpu_check.sh --bogus
expect 2 "gpu_check.sh: error: option --name needs a value" -- scripts/gpu_check.sh --name
expect 2 "gpu_check.sh: error: --dtypes: 'fp8' is not one of fp32, bf16, fp16" \
  -- scripts/gpu_check.sh --dtypes fp32,fp8
expect 2 "gpu_check.sh: error: unknown option '--skip-backwards'" -- scripts/gpu_check.sh --skip-backwards
expect 0 "--skip-backward" "--skip-forward" "--skip-decode" "--decode-args" -- scripts/gpu_check.sh --help
expect 2 "gpu_check.sh: error: option --decode-args needs a value" -- scripts/gpu_check.sh --decode-args
expect 2 "sanitize.sh: error: the build folder '/nonexistent' has no bin/tour" \
  -- scripts/sanitize.sh /nonexistent
expect 2 "sanitize.sh: error: at most one argument, the build folder; got 2: a b" \
  -- scripts/sanitize.sh a b
expect 2 "mutation_check.sh: error: no argument expected, got 1: x" -- scripts/mutation_check.sh x
expect 2 "setup.sh: error: this file is sourced, not run" -- scripts/setup.sh

echo "--- scripts/train_lm.py, scripts/plot_lm.py (argument checks only: neither trains nor plots)"
expect 2 "argument --attention: invalid choice: 'bogus'" -- scripts/train_lm.py --attention bogus
expect 2 "--d-model (500) must be a multiple of --heads (8)" -- scripts/train_lm.py --d-model 500
expect 2 "argument --steps: 0 must be at least 1" -- scripts/train_lm.py --steps 0
expect 2 "argument --lr: -1.0 must be finite and > 0" -- scripts/train_lm.py --lr -1
expect 2 "--warmup (300) must be in 0 .. --steps - 1 (299)" -- scripts/train_lm.py --warmup 300
expect 2 "--text: no file matches '/nonexistent/*.md'" -- scripts/train_lm.py --text '/nonexistent/*.md'
expect 0 "usage: scripts/train_lm.py" -- scripts/train_lm.py --help
expect 2 "--profile-steps (300) must be below --steps (300)" \
  -- scripts/train_lm.py --profile p.txt --profile-steps 300
expect 2 "--profile: a validation at step 250 would fall inside the profiled steps 241 .. 300" \
  -- scripts/train_lm.py --profile p.txt --profile-steps 60
expect 2 "/nonexistent.json: cannot be read as a train_lm.py log" \
  -- scripts/plot_lm.py /nonexistent.json
expect 2 "argument --smooth: invalid int value: 'x'" -- scripts/plot_lm.py --smooth x a.json
expect 2 "usage: scripts/plot_lm.py" "the following arguments are required: logs" \
  -- scripts/plot_lm.py
expect 0 "usage: scripts/plot_lm.py" -- scripts/plot_lm.py --help

echo "--- scripts/grid_order.py (argument checks, and the model's figures without a plot)"
expect 2 "--n (100) must be a positive multiple of 128 (the key tile)" -- scripts/grid_order.py --n 100
expect 2 "--sms (0) must be at least 1" -- scripts/grid_order.py --sms 0
expect 2 "--tokens (1000) must be a multiple of --n (4096)" -- scripts/grid_order.py --tokens 1000
expect 0 "key tile fastest (grid x = key tile): the last CTA ends at 564.0, 6.9% past it" \
  -- scripts/grid_order.py --n 4096 --d 128
expect 0 "usage: scripts/grid_order.py" -- scripts/grid_order.py --help

echo "--- scripts/generate.py (argument checks only: it generates on a GPU)"
expect 2 "argument --new-tokens: 0 must be at least 1" -- scripts/generate.py --new-tokens 0
expect 2 "argument --prompt-lens: '3,x' is not a comma-separated list of integers" \
  -- scripts/generate.py --prompt-lens 3,x
expect 2 "argument --prompt-lens: '5,0': every length must be at least 1" \
  -- scripts/generate.py --prompt-lens 5,0
expect 2 "--page-size (8) must be in [16, 256]" -- scripts/generate.py --page-size 8
expect 2 "--d-model (500) must be a multiple of --heads (8)" -- scripts/generate.py --d-model 500
expect 2 "argument --dtype: invalid choice: 'fp32'" -- scripts/generate.py --dtype fp32
expect 0 "usage: scripts/generate.py" "--allow-ties" -- scripts/generate.py --help

echo "--- scripts/ring_gpu.sh, steps/13_ring_attention/launch.sh (argument checks only)"
expect 2 "ring_gpu.sh: error: unknown argument '--bogus'" "usage: scripts/ring_gpu.sh" \
  -- scripts/ring_gpu.sh --bogus
expect 2 "ring_gpu.sh: error: --out needs a value" -- scripts/ring_gpu.sh --out
expect 0 "usage: scripts/ring_gpu.sh" -- scripts/ring_gpu.sh --help
expect 2 "launch.sh: --nproc: x is not a positive integer" \
  -- steps/13_ring_attention/launch.sh --nproc x ring_tests.py
expect 2 "launch.sh: --timeout: 0 is not a positive integer" \
  -- steps/13_ring_attention/launch.sh --timeout 0 ring_tests.py
expect 2 "launch.sh: program nope.py not found" -- steps/13_ring_attention/launch.sh nope.py
expect 2 "launch.sh: no program given" -- steps/13_ring_attention/launch.sh
expect 0 "launch.sh [--nproc P]" -- steps/13_ring_attention/launch.sh --help
expect 2 "ring_bench.py: error: --min-ms (nan) must be a number of at least 0" \
  -- python3 steps/13_ring_attention/ring_bench.py --min-ms nan
expect 2 "ring_bench.py: error: --reps (0) must be a number of at least 1" \
  -- python3 steps/13_ring_attention/ring_bench.py --reps 0
expect 2 "--ns and --predict need at least one value" \
  -- python3 steps/13_ring_attention/ring_bench.py --ns none

echo "--- every script is executable and starts with its interpreter"
for f in scripts/*.sh scripts/*.py; do
  cases=$((cases + 1))
  first=$(head -1 "$f")
  want="#!/usr/bin/env bash"; [[ "$f" == *.py ]] && want="#!/usr/bin/env python3"
  if [ -x "$f" ] && [ "$first" = "$want" ]; then
    echo "ok    $f"
  else
    failures=$((failures + 1))
    echo "FAIL  $f: $([ -x "$f" ] || echo "not executable; ")first line '$first', wanted '$want'"
  fi
done

echo "scripts_cli: $cases cases, $failures failed"
[ "$failures" = 0 ]
