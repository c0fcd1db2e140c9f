#!/usr/bin/env bash
# exercise.sh — work on the exercises: steps/NN_slug/exercise/ (docs/instructors.md).
# See usage below.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

usage() {
  cat <<'USAGE'
usage: scripts/exercise.sh COMMAND [ARGS]

  list            the exercises, and how many TODO(exercise) are left
  build NN        builds exercise_NN (your files, the step's tests)
  test NN         builds it and runs its tests (ctest -L exercise_NN)
  hints NN [1-3]  the hints: all of them, or up to level 1, 2 or 3
  diff NN         compare with the solution (diff -u solution yours)
  reset NN        start over: your files are copied to <build>/exercise-backup/, the
                  exercise's are restored from git
  further [TASK]  the going-further tasks, or run one task's test

NN is the step number: 00 (the CPU exercise, no GPU needed) to 11. The build directory is
the one scripts/test.sh uses (build/, or build-ci/ under CI=true); FA_BUILD_DIR=dir picks
another.
USAGE
}

# want_args COMMAND N WHAT ARGS...: a usage error naming COMMAND unless ARGS are N words.
want_args() {
  local cmd=$1 n=$2 names=$3; shift 3
  [ $# -eq "$n" ] || fa_usage_error "'$cmd' takes $names, got $# argument(s)${*:+: $*}"
}

build() {
  fa_configure
  # Without the CUDA toolkit only exercise 00 is configured: say why instead of "no rule".
  if [ "$1" != exercise_00 ] && ! fa_has_cuda; then fa_cuda_note; exit 1; fi
  # A step this toolkit cannot build (08 and 09 need sm_90a: nvcc 12.0 or newer) has no
  # exercise target either: say so instead of "no rule to make target".
  if [ "${FA_NO_BUILD:-0}" != 1 ] &&
     ! cmake --build "$(fa_build_dir)" --target help 2>/dev/null | grep -qw -- "$1"; then
    echo "error: this build has no target $1: step ${1#exercise_} is not built with this" \
         "toolkit (steps 08 and 09 need nvcc 12.0 or newer for sm_90a; the configure" \
         "output says why)" >&2
    exit 1
  fi
  fa_build --target "$@"
}

# The exercise folder of step NN, e.g. steps/04_flash_attention/exercise.
exercise_dir() {
  local nn=$1 d
  if ! [[ "$nn" =~ ^[0-9]{2}$ ]]; then
    fa_usage_error "NN must be two digits, e.g. 04 (got '$nn')"
  fi
  for d in steps/"$nn"_*/exercise; do
    [ -d "$d" ] && { echo "$d"; return 0; }
  done
  fa_usage_error "step $nn has no exercise; these do: $(ls -d steps/*/exercise | cut -c7-8 | xargs)"
}
# The solution file an exercise file stands in for (step 00's live in reference/).
solution_of() {
  local f=$1 step; step=$(dirname "$(dirname "$f")")
  case "$step" in
    steps/00_*) echo "reference/$(basename "$f")" ;;
    *) echo "$step/$(basename "$f")" ;;
  esac
}
exercise_files() {  # the exercise's code files (not HINTS.md, nor an editor's backups)
  find "$1" -maxdepth 1 -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.h' \) |
    sort
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  list)
    want_args list 0 "no argument" "$@"
    for d in steps/*/exercise; do
      step=$(basename "$(dirname "$d")")
      mapfile -t files < <(exercise_files "$d")
      left=$(cat "${files[@]}" | grep -c 'TODO(exercise)' || true)
      printf '%s  %-22s %2d TODO(exercise) left in %s\n' "${step:0:2}" "$step" "$left" \
        "$(exercise_files "$d" | xargs -n1 basename | tr '\n' ' ')"
    done ;;
  build)
    want_args build 1 "one argument, NN" "$@"
    exercise_dir "$1" >/dev/null
    fa_setup
    build "exercise_$1" ;;
  test)
    want_args test 1 "one argument, NN" "$@"
    exercise_dir "$1" >/dev/null
    fa_setup
    build "exercise_$1"
    log="$(fa_build_dir)/exercise-$1.log"
    set +e
    ctest --test-dir "$(fa_build_dir)" -L "^exercise_$1\$" --output-on-failure 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    if grep -q '\*\*\*Skipped' "$log"; then
      # No usable device, or one the step refuses (exercises 08 and 09 off compute capability 9.0).
      echo "note: the GPU tests were skipped, not passed: this GPU (or none) cannot run them;"
      echo "      the SKIPPED line above says why"
    elif [ "$rc" = 0 ]; then
      echo "exercise $1: all tests pass. Compare with the solution: scripts/exercise.sh diff $1"
    fi
    exit "$rc" ;;
  hints)
    if [ $# -lt 1 ] || [ $# -gt 2 ]; then
      fa_usage_error "'hints' takes NN and an optional level, got $# argument(s)${*:+: $*}"
    fi
    d=$(exercise_dir "$1")
    # The levels this exercise's HINTS.md has ("### Level N" headings outside code blocks).
    levels=$(awk '/^```/ { fence = !fence } !fence && /^### Level [0-9]+/ { print $3 + 0 }' \
               "$d/HINTS.md" | sort -nu | tr '\n' ' ' | sed 's/ $//')
    level=${2:-${levels##* }}
    if ! [[ " $levels " == *" $level "* ]]; then
      fa_usage_error "hint '$level' does not exist: exercise $1 has hint levels" \
                     "${levels%% *} to ${levels##* }"
    fi
    # "### Level N" starts a hint of level N; a "#"/"##" heading ends it, except "## Common
    # mistakes", which counts as level 3. (Outside code blocks: "# x" in an example is no
    # heading.)
    awk -v max="$level" '/^```/ { fence = !fence }
                         !fence && /^### Level [0-9]/ { lvl = $3 + 0 }
                         !fence && /^##? / { lvl = /^## Common mistakes/ ? 3 : 0 }
                         lvl <= max { print }' "$d/HINTS.md" ;;
  diff)
    want_args diff 1 "one argument, NN" "$@"
    d=$(exercise_dir "$1"); rc=0
    for f in $(exercise_files "$d"); do diff -u "$(solution_of "$f")" "$f" || rc=$?; done
    [ $rc -le 1 ] || exit $rc ;;
  reset)
    want_args reset 1 "one argument, NN" "$@"
    d=$(exercise_dir "$1")
    backup="$(fa_build_dir)/exercise-backup/$1-$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$backup"
    mapfile -t files < <(exercise_files "$d")
    cp "${files[@]}" "$backup/"
    git checkout HEAD -- "$d"
    echo "exercise $1 reset from git; your files were copied to $backup/" ;;
  further)
    # The tasks are the hidden test cases of tests/test_going_further.cpp:
    #   TEST_CASE("going further, step 04: head dim 96", "[.going-further][04-d96]")
    cases=$(tr '\n' ' ' <tests/test_going_further.cpp |
            grep -oE 'TEST_CASE\("going further, [^"]*", *"\[\.going-further\]\[[^]]*\]"' |
            sed -E 's/TEST_CASE\("going further, ([^"]*)", *"\[\.going-further\]\[([^]]*)\]"/\2\t\1/')
    tasks=$(cut -f1 <<<"$cases")
    if [ $# -eq 0 ]; then
      echo "going-further tasks (docs/instructors.md); run one with: scripts/exercise.sh further TASK"
      sed 's/^/  /' <<<"$cases" | expand -t 12
      exit 0
    fi
    [ $# -eq 1 ] || fa_usage_error "'further' takes at most one TASK, got $#: $*"
    task=$1
    if ! grep -qx -- "$task" <<<"$tasks"; then
      fa_usage_error "no task '$task'; the tasks: ${tasks//$'\n'/ }"
    fi
    step=$(basename steps/"${task:0:2}"_*)
    fa_setup
    build "test_$step"
    "$(fa_build_dir)/bin/test_$step" "[$task]" ;;
  -h|--help|help) usage; exit 0 ;;
  "") fa_usage_error "no command given" ;;
  *) fa_usage_error "unknown command '$cmd'" ;;
esac
