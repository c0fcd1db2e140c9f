#!/usr/bin/env bash
# ring_gpu.sh — step 13 (ring attention) on a machine with two or more GPUs: builds what it
# needs, runs every test of the ring (the plan against the reference on the CPU, the C API's
# refusals, step 12's probe and split tests, whose combine the ring's merge shares, the GPU
# tests on one GPU and on two), then the benchmark, and writes the results table with the
# tests' summaries above it. (Step 12's whole suite: ctest -L decode.)
#
#   scripts/ring_gpu.sh [--build DIR] [--out FILE] [--no-build] [--bench-args "ARGS"]
#
# --build: the build folder (default build-gpu, configured Release when it does not exist
# yet). --out: the table (default docs/results/h200x2-ring.md; the JSON beside it, the model's
# plot and the measured timelines in docs/images/, scripts/plot_ring.py). --no-build: use the build as
# it is. --bench-args: more options for ring_bench.py (e.g. "--ns 131072 --reps 5").
# Nothing here may be skipped: fewer than two GPUs, no PyTorch, or a skipped test is an
# error. Exit status 0 when every test passed and the table was written, 1 otherwise, 2 on a
# bad argument. Logs: <build>/ring-logs/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
usage() {
  cat <<'USAGE'
usage: scripts/ring_gpu.sh [--build DIR] [--out FILE] [--no-build] [--bench-args "ARGS"]
  --build DIR        build folder (default build-gpu)
  --out FILE         the results table (default docs/results/h200x2-ring.md)
  --no-build         run the build as it is
  --bench-args ARGS  more options for steps/13_ring_attention/ring_bench.py
Exit status 0 all passed, 1 a failure or a skipped test, 2 a usage error.
USAGE
}
build=build-gpu out=docs/results/h200x2-ring.md no_build=0 bench_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --build|--out|--bench-args)
      [ $# -ge 2 ] || { echo "ring_gpu.sh: error: $1 needs a value" >&2; usage >&2; exit 2; }
      case "$1" in --build) build=$2 ;; --out) out=$2 ;; --bench-args) bench_args=$2 ;; esac
      shift 2 ;;
    --no-build) no_build=1; shift ;;
    *) echo "ring_gpu.sh: error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
py=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0
logs=$build/ring-logs
start=$(date +%s)
phase() { echo "=== $1 ($(($(date +%s) - start)) s)"; }

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null) || {
  echo "ring_gpu.sh: error: PyTorch is not installed for $py" >&2; exit 1; }
if [ "$gpus" -lt 2 ]; then
  echo "ring_gpu.sh: error: $gpus CUDA device(s); the ring needs 2" >&2; exit 1
fi

if [ "$no_build" = 0 ]; then
  phase "build ($build)"
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release || exit 1
  cmake --build "$build" -j "$(nproc)" --target flash_tutorial ring_dump test_capi test_cpu \
    test_capi_decode_gpu test_12_decode probe_12_decode || exit 1
fi
export FLASH_TUTORIAL_LIB=$PWD/$build/lib/libflash_tutorial.so
mkdir -p "$logs"
summary=$logs/summary.txt
: >"$summary"
status=0

phase "ctest: the plan against the reference, the C API, step 12's combine (probe, splits)"
ctest --test-dir "$build" -R '^(cpu/ring|cpu/ring_plan|capi/.*|12_decode/(probe|splits))$' \
  --output-on-failure \
  2>&1 | tee "$logs/ctest.log"
grep -E '^[0-9]+% tests passed' "$logs/ctest.log" | sed 's/^/ctest (ring plan, C API, 12_decode): /' >>"$summary"
grep -qE '^100% tests passed' "$logs/ctest.log" || status=1
grep -q 'Skipped' "$logs/ctest.log" && { echo "ring_gpu.sh: a test was skipped" >&2; status=1; }

for p in 1 2; do
  phase "GPU tests, P = $p"
  need=""
  [ "$p" = 2 ] && need="--need-ranks 2"
  # shellcheck disable=SC2086
  steps/13_ring_attention/launch.sh --nproc "$p" --timeout 600 ring_tests.py $need \
    2>&1 | tee "$logs/tests_p$p.log"
  rc=${PIPESTATUS[0]}
  grep -E '^ring_tests: ' "$logs/tests_p$p.log" | tail -1 >>"$summary"
  [ "$rc" = 0 ] || { echo "ring_gpu.sh: ring_tests.py on $p GPU(s) exited $rc" >&2; status=1; }
done

phase "benchmark"
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
steps/13_ring_attention/launch.sh --nproc 2 --timeout 600 ring_bench.py --md "$out" \
  --json "${out%.md}.json" --tests-log "$summary" \
  --command "scripts/ring_gpu.sh${bench_args:+ --bench-args \"$bench_args\"}" $bench_args \
  2>&1 | tee "$logs/bench.log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "ring_gpu.sh: the benchmark failed" >&2; status=1; }
# The model against the measurements (docs/images/<name>_model.png, chapter 13); matplotlib is
# optional here: without it the plot is left as it was, and it says so.
plot="docs/images/$(basename "${out%.md}" | tr - _)"
"$py" scripts/plot_ring.py "${out%.md}.json" --out "${plot}_model.png" \
  --timeline "${plot}_timeline.png" || echo "note: ${plot}_model.png or ${plot}_timeline.png not redrawn (plot_ring.py says which)"
phase "done: $out, logs in $logs, status $status"
exit $status
