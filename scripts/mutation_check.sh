#!/usr/bin/env bash
# mutation_check.sh — shows that the GPU tests fail when a kernel is broken.
#
# Copies the tree, plants one bug at a time in step 01 (an off-by-one in the causal mask,
# a missing max subtraction, a wrong GQA head), rebuilds that step's tests and runs them.
# Every mutant must be caught (the tests fail); the script fails if any mutant survives.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source scripts/setup.sh
usage() {
  cat <<'USAGE'
usage: scripts/mutation_check.sh

Plants one bug at a time in a copy of step 01 and checks that its GPU tests catch each one
(needs a CUDA device). Exits 1 if a mutant survives, 2 on a usage error. No options.
USAGE
}
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) fa_usage_error "no argument expected, got $#: $*" ;;
esac
work=${TMPDIR:-/tmp}/fa-mutants
file=steps/01_naive_attention/naive_attention.cu
declare -A mutants=(
  [causal_off_by_one]='s/s\[row + j\] = j < kv_end(p, i)/s[row + j] = j <= kv_end(p, i)/'
  [no_max_subtraction]='s/const float m_safe = m == -INFINITY ? 0.f : m;/const float m_safe = 0.f;/'
  [wrong_gqa_head]='s|(h / p.group) \* p.kvs.head + j \* p.kvs.row|(h % p.group) * p.kvs.head + j * p.kvs.row|'
)
survived=0
for name in "${!mutants[@]}"; do
  rm -rf "$work/$name" && mkdir -p "$work/$name"
  tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$work/$name"
  sed -i "${mutants[$name]}" "$work/$name/$file"
  if cmp -s "$file" "$work/$name/$file"; then echo "mutant $name: pattern not found"; survived=1; continue; fi
  (cd "$work/$name" && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null &&
     cmake --build build -j "$(nproc)" --target test_01_naive_attention >/dev/null) || { echo "mutant $name: build failed"; survived=1; continue; }
  if "$work/$name/build/bin/test_01_naive_attention" >"$work/$name.log" 2>&1; then
    echo "mutant $name: SURVIVED (the tests passed)"; survived=1
  else
    echo "mutant $name: caught — $(grep -m1 -E 'test cases:' "$work/$name.log")"
    # The copy's own path is of no use in the report: the test file's path from the tree's root.
    grep -m1 -E "rel_err|mismatches|FAILED" "$work/$name.log" | sed "s#$work/$name/##; s/^/    /"
  fi
done
exit $survived
