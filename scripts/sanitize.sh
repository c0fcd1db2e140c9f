#!/usr/bin/env bash
# sanitize.sh — compute-sanitizer's memcheck, racecheck, initcheck and synccheck over every
# registered GPU step and each head dim it is compiled for (tour --list), on small awkward
# shapes (tails, N_q != N_kv, causal, GQA, both layouts).
#   scripts/sanitize.sh [build-dir]      → prints one line per (tool, step, shape); exit 1 on any error
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tour="$build/bin/tour"
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
