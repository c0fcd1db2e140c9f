#!/usr/bin/env bash
# sanitize.sh — compute-sanitizer's memcheck, racecheck, initcheck and synccheck over every
# registered GPU step and each head dim it is compiled for (tour --list), on small awkward
# shapes (tails, N_q != N_kv, causal, GQA, both layouts).
# See usage below.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source scripts/setup.sh
usage() {
  cat <<'USAGE'
usage: scripts/sanitize.sh [BUILD_DIR]

Runs compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on BUILD_DIR/bin/tour
(default BUILD_DIR: build) for every step and head dim: one line per (tool, step, shape).
Needs a CUDA device. Exits 1 on any sanitizer error, 2 on a usage error.
COMPUTE_SANITIZER=path picks the compute-sanitizer binary.
USAGE
}
case "${1:-}" in -h|--help) usage; exit 0 ;; esac
[ $# -le 1 ] || fa_usage_error "at most one argument, the build folder; got $#: $*"
build=${1:-build}
tour="$build/bin/tour"
[ -x "$tour" ] || fa_usage_error "the build folder '$build' has no bin/tour" \
                                 "(build it: cmake --build $build --target tour)"
cs=${COMPUTE_SANITIZER:-compute-sanitizer}
shapes=(
  "--n-q 77 --n-kv 129 --heads-q 4 --heads-kv 2 --causal"
  "--n-q 129 --n-kv 17 --heads-q 2 --heads-kv 2 --causal --layout bhnd"
  "--n 1 --heads-q 3 --heads-kv 1 --layout bhnd"
)
errors=0
while read -r step dtype d; do
  for tool in memcheck racecheck initcheck synccheck; do
    for shape in "${shapes[@]}"; do
      # initcheck and synccheck are slow and shape-independent in what they look for: one shape.
      [[ "$tool" == initcheck || "$tool" == synccheck ]] && [[ "$shape" != "${shapes[0]}" ]] && continue
      # shellcheck disable=SC2086
      out=$("$cs" --tool "$tool" --error-exitcode 3 "$tour" --step "$step" --dtype "$dtype" \
              --d "$d" $shape --batch 1 --reps 1 --warmup 0 </dev/null 2>&1)
      rc=$?
      summary=$(grep -m1 "ERROR SUMMARY" <<<"$out" || echo "no summary")
      [[ "$tool" == racecheck ]] && summary=$(grep -m1 "RACECHECK SUMMARY" <<<"$out" || echo "$summary")
      printf '%-10s %-22s %-5s d=%-4s %-62s rc=%d  %s\n' "$tool" "$step" "$dtype" "$d" "$shape" "$rc" "$summary"
      if [ $rc -ne 0 ]; then errors=$((errors + 1)); grep -m20 -E "=========" <<<"$out" | head -20; fi
    done
  done
done < <("$tour" --list)
echo "sanitize: $errors runs with errors"
[ $errors -eq 0 ]
