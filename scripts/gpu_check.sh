#!/usr/bin/env bash
# gpu_check.sh — the GPU owner's check: build, run every test (none may be skipped), the tour,
# the benchmarks of every step with the cuBLAS baseline, PyTorch's SDPA backends on the same
# shapes, the same for the backward pass (the steps that have one, the backends' autograd;
# the steps' deterministic mode too, bench_all --deterministic),
# and write docs/results/<name>.json and .md (and the plots, if matplotlib is there); then the
# decoding benchmark (bin/bench_decode) with PyTorch's backends on the same decoding steps,
# into docs/results/<name>-decode.json and .md and docs/images/<name>_decode.png.
#
# See usage below.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

usage() {
  cat <<'USAGE'
usage: scripts/gpu_check.sh [OPTION...]

  (no option)          everything, on the benchmark shapes of docs/conventions.md
                       (N = 512 to 16384; takes a few minutes)
  --quick              N = 1024 and 4096 only
  --dtypes LIST        comma-separated, of fp32, bf16, fp16 (default: all three)
  --name NAME          the results' name: docs/results/NAME.md and .json (default: h200)
  --logs DIR           where the logs go (default: build-gpu/logs)
  --skip-tests  --skip-bench  --skip-peers  --skip-traffic  --skip-mutants
  --skip-backward      no backward benchmarks (bench_all --pass backward, with and without
                       --deterministic) and no backward
                       peers (peers.py --pass backward); with --skip-bench or --skip-peers
                       the backward's part goes too
  --skip-forward       the same for the forward pass: with --skip-tests and the other
                       --skip options, the backward's benchmarks alone, merged into the
                       results beside the forward's already there
  --skip-decode        no decoding benchmark (bin/bench_decode) and no decoding peers
                       (peers.py --pass decode): docs/results/NAME-decode.md and .json
                       and docs/images/NAME_decode.png are left as they are
  --skip-ceilings      (bin/ceilings: docs/results/NAME-ceilings.json)
  --skip-large-tour    (the tour at N = 16384 and 65536: docs/results/NAME-tour-large.txt)
  --bench-args "..."   more options for bench_all;  --peer-args "...": for scripts/peers.py
                       (both passes);  --decode-args "...": for bench_decode and
                       peers.py --pass decode alike: only the options both take
                       (--batches, --caches, --heads-q, --heads-kv, --q-len, --dims,
                       --reps, --warmup, --queue-ahead-cycles)
Builds in build-gpu/ (FA_BUILD_DIR=dir picks another). Exit status 2 on a usage error.
USAGE
}

orig_args="$*"
mutants=1 dtypes=fp32,bf16,fp16 name=h200 logs=build-gpu/logs quick=0 tests=1 ceilings=1 large_tour=1 bench=1 peers=1 forward=1 backward=1 traffic=1 decode=1 bench_args="" peer_args="" decode_args=""
# value OPTION ARGS...: the value following OPTION, or a usage error when there is none.
value() { [ $# -ge 2 ] || fa_usage_error "option $1 needs a value"; printf '%s' "$2"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$(value "$@"); shift ;;
    --logs) logs=$(value "$@"); shift ;;
    --quick) quick=1 ;;
    --dtypes) dtypes=$(value "$@"); shift ;;
    --skip-tests) tests=0 ;;
    --skip-bench) bench=0 ;;
    --skip-peers) peers=0 ;;
    --skip-backward) backward=0 ;;
    --skip-forward) forward=0 ;;
    --skip-traffic) traffic=0 ;;
    --skip-decode) decode=0 ;;
    --skip-mutants) mutants=0 ;;
    --skip-ceilings) ceilings=0 ;;
    --skip-large-tour) large_tour=0 ;;
    --bench-args) bench_args=$(value "$@"); shift ;;
    --peer-args) peer_args=$(value "$@"); shift ;;
    --decode-args) decode_args=$(value "$@"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) fa_usage_error "unknown option '$1'" ;;
  esac
  shift
done
for dt in ${dtypes//,/ }; do
  case "$dt" in fp32|bf16|fp16) ;; *) fa_usage_error "--dtypes: '$dt' is not one of fp32, bf16, fp16" ;; esac
done
[ -n "${dtypes//,/}" ] || fa_usage_error "--dtypes ('$dtypes') names no dtype"
build=${FA_BUILD_DIR:-build-gpu}
mkdir -p "$logs" docs/results
# The results step reads every bench-*.json (bench-backward-*.json included), peers.json and
# peers-backward.json in $logs: only this run's may be there.
# The decoding files are named apart (decode-*.json), out of reach of that glob.
rm -f "$logs"/bench-*.json "$logs"/peers.json "$logs"/peers-backward.json "$logs"/decode-*.json
py=python3
step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
commit=${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "GPU: $gpu, driver $driver, commit $commit, $(date -u +%Y-%m-%dT%H:%MZ)"

step "configure and build ($build)"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$logs/configure.log"
cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
echo "built"

status=0
step "the kernels as compiled (registers, stack, SASS instruction counts)"
cuda=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
$py scripts/kernel_report.py --build "$build" --out "docs/results/$name-kernels.md" \
    --meta "CUDA $cuda, $(date -u +%Y-%m-%d), commit $commit, scripts/gpu_check.sh" || status=1

if [ "$tests" = 1 ]; then
  step "tests (every GPU test must run: none skipped)"
  set +e
  ctest --test-dir "$build" -j 8 --output-on-failure -LE exercise 2>&1 | tee "$logs/ctest.log" | grep -E "tests passed|tests failed|Test +#.*(Failed|Skipped|Not Run)|\*\*\*"
  set -e
  # The docs tests need Doxygen, Graphviz and Chromium, which CI has and a GPU machine may
  # not: their skips are no gap.
  if grep -E "Skipped|Not Run" "$logs/ctest.log" | grep -qv "docs/"; then
    echo "FAIL: some tests were skipped"; status=1
  fi
  grep -q "100% tests passed" "$logs/ctest.log" || { echo "FAIL: not every test passed"; status=1; }
  # The committed copy names paths relative to the repository, never this machine's.
  { echo "# ctest -j8 --output-on-failure -LE exercise on $gpu, driver $driver, $(date -u +%Y-%m-%d), commit $commit (scripts/gpu_check.sh)"
    sed -e "s|$PWD/||g" -e "s|$PWD|.|g" "$logs/ctest.log"; } >"docs/results/$name-tests.txt"
fi

if [ "$tests" = 1 ]; then
  step "exercises: each skeleton fails its tests (by wrong values), each solution passes"
  set +e
  FA_BUILD_DIR="$build" scripts/check_exercises.sh 2>&1 | tee "$logs/exercises.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  set -e
fi

if [ "$mutants" = 1 ]; then
  step "mutants: the tests must fail on broken kernels"
  { echo "# scripts/mutation_check.sh on $gpu, driver $driver, $(date -u +%Y-%m-%d), commit $commit"
    scripts/mutation_check.sh; } 2>&1 | tee "docs/results/$name-mutants.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi

step "the C API through Python (scripts/flash_tutorial.py) against PyTorch"
PYTHONUNBUFFERED=1 FLASH_TUTORIAL_LIB="$build/lib/libflash_tutorial.so" $py scripts/check_python_api.py 2>&1 | tee "$logs/python_api.log" || status=1

step "greedy generation through our paged KV cache against PyTorch SDPA (scripts/generate.py)"
PYTHONUNBUFFERED=1 FLASH_TUTORIAL_LIB="$build/lib/libflash_tutorial.so" $py scripts/generate.py 2>&1 | tee "$logs/generate.log" || status=1

step "tour"
"$build/bin/tour" | tee "$logs/tour.log" || status=1
"$build/bin/tour" --n 4096 --heads-q 8 --heads-kv 8 --causal | tee -a "$logs/tour.log" || status=1
"$build/bin/tour" --n 4096 --heads-q 8 --heads-kv 2 --d 128 --dtype bf16 | tee -a "$logs/tour.log" || status=1

if [ "$large_tour" = 1 ]; then
  # Issue-sized problems: the reference check samples query rows above the tour's threshold,
  # so each run takes seconds of CPU, not minutes; wall time is recorded for each.
  step "tour at large N (wall time of each run)"
  { echo "# bin/tour at large N on $gpu, driver $driver, $(date -u +%Y-%m-%d), commit $commit (scripts/gpu_check.sh)"
    for args in "--n 16384 -b 4 --heads-q 16 --d 128 --dtype bf16" "--n 65536 -b 1 --heads-q 8 --d 64"; do
      echo; echo "\$ bin/tour $args"
      t0=$(date +%s%N)
      # shellcheck disable=SC2086
      "$build/bin/tour" $args 2>&1 || status=1
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      printf "wall time: %d.%03d s\n" $((ms / 1000)) $((ms % 1000))
    done; } >"docs/results/$name-tour-large.txt" 2>&1
  cat "docs/results/$name-tour-large.txt"
fi

if [ "$ceilings" = 1 ]; then
  step "ceilings (cuBLAS matrix products, device-to-device copy)"
  FA_BUILD_DIR="$build" scripts/ceilings.sh --name "$name" 2>&1 | tee "$logs/ceilings.log" || status=1
fi

ns="512,1024,2048,4096,8192,16384"; [ "$quick" = 1 ] && ns="1024,4096"
if [ "$bench" = 1 ] && [ "$forward" = 1 ]; then
  step "benchmarks (ours and the cuBLAS baseline)"
  for dt in ${dtypes//,/ }; do
    # shellcheck disable=SC2086
    "$build/bin/bench_all" --ns "$ns" --dtype "$dt" $bench_args \
        --benchmark_out="$logs/bench-$dt.json" --benchmark_out_format=json 2>&1 | tee "$logs/bench-$dt.log"
  done
fi
if [ "$bench" = 1 ] && [ "$backward" = 1 ]; then
  step "backward benchmarks (every step with a backward pass; O and L from a forward step)"
  # Each dtype twice: the default mode, then the deterministic one (records named
  # impl+deterministic) of the steps that offer it.
  for dt in ${dtypes//,/ }; do
    for mode in default deterministic; do
      out="bench-backward-$dt"; flag=""
      [ "$mode" = deterministic ] && out="bench-backward-det-$dt" && flag="--deterministic"
      set +e
      # shellcheck disable=SC2086
      "$build/bin/bench_all" --pass backward $flag --ns "$ns" --dtype "$dt" $bench_args \
          --benchmark_out="$logs/$out.json" --benchmark_out_format=json 2>&1 | tee "$logs/$out.log"
      rc=${PIPESTATUS[0]}
      set -e
      # Status 2 is a refusal before anything ran: no backward step takes $dt (step 10 is
      # fp32 only, and has no deterministic mode), said in the log; that is no failure. Any
      # other non-zero status is.
      if [ "$rc" = 2 ]; then
        echo "note: no $mode backward benchmark in $dt: $(grep '^error:' "$logs/$out.log" | head -1)"
        rm -f "$logs/$out.json"
      elif [ "$rc" != 0 ]; then
        echo "FAIL: bench_all --pass backward $flag --dtype $dt exited with status $rc"; status=1
      fi
    done
  done
fi
if [ "$traffic" = 1 ]; then
  step "HBM traffic per step (ncu)"
  $py scripts/ncu_traffic.py --tour "$build/bin/tour" --block-m 128 \
      --meta "$gpu, driver $driver, $(date -u +%Y-%m-%d), commit $commit, scripts/gpu_check.sh" --out-md "docs/results/$name-traffic.md" \
      --out-json "docs/results/$name-traffic.json" 2>&1 | tee "$logs/traffic.log" || status=1
fi
if [ "$peers" = 1 ] && [ "$forward" = 1 ]; then
  step "peers: PyTorch SDPA backends, same shapes"
  q=""; [ "$quick" = 1 ] && q="--quick"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 $py scripts/peers.py $q --dtypes "$dtypes" $peer_args --out "$logs/peers.json" 2>&1 | tee "$logs/peers.log"
fi
if [ "$peers" = 1 ] && [ "$backward" = 1 ]; then
  step "peers: the backward of PyTorch's SDPA backends and of torch_naive, same shapes"
  q=""; [ "$quick" = 1 ] && q="--quick"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 $py scripts/peers.py --pass backward $q --dtypes "$dtypes" $peer_args --out "$logs/peers-backward.json" 2>&1 | tee "$logs/peers-backward.log"
fi

if [ "$decode" = 1 ] && [ "$bench" = 1 ]; then
  step "decoding benchmark (bin/bench_decode: the HBM read bandwidth, then every decoding step)"
  set +e
  # shellcheck disable=SC2086
  "$build/bin/bench_decode" $decode_args --benchmark_out="$logs/decode-bench.json" \
      --benchmark_out_format=json 2>&1 | tee "$logs/decode-bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAIL: bench_decode"; status=1; }
  set -e
fi
if [ "$decode" = 1 ] && [ "$peers" = 1 ]; then
  step "peers: PyTorch's SDPA backends on the same decoding steps"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 $py scripts/peers.py --pass decode --kv-layouts bhnd,bnhd $decode_args --out "$logs/decode-peers.json" 2>&1 | tee "$logs/decode-peers.log"
fi

step "results"
if [ -f "$logs/decode-bench.json" ]; then
  dargs=(--bench "$logs/decode-bench.json")
  [ -f "$logs/decode-peers.json" ] && dargs+=(--peers "$logs/decode-peers.json")
  $py scripts/make_results.py --decode "${dargs[@]}" --gpu "$gpu" --driver "$driver" \
      --commit "$commit" --date "$(date -u +%Y-%m-%d)" --command "scripts/gpu_check.sh $orig_args" \
      --out-json "docs/results/$name-decode.json" --out-md "docs/results/$name-decode.md" || status=1
  # The plot, then the page again: it shows the plot once it is drawn.
  $py scripts/plots.py --results "docs/results/$name-decode.json" --outdir docs/images --prefix "${name}_" || true
  $py scripts/make_results.py --decode --merge --out-json "docs/results/$name-decode.json" \
      --out-md "docs/results/$name-decode.md" || status=1
elif [ "$decode" = 1 ]; then
  echo "note: no decoding results written: bin/bench_decode did not run (it measures the HBM read bandwidth they are divided by)"
fi
args=()
for f in "$logs"/bench-*.json; do [ -f "$f" ] && args+=(--bench "$f"); done
[ -f "$logs/peers.json" ] && args+=(--peers "$logs/peers.json")
[ -f "$logs/peers-backward.json" ] && args+=(--peers "$logs/peers-backward.json")
if [ ${#args[@]} -gt 0 ]; then
  $py scripts/make_results.py "${args[@]}" --merge --gpu "$gpu" --driver "$driver" \
      --commit "$commit" --date "$(date -u +%Y-%m-%d)" \
      --command "scripts/gpu_check.sh $orig_args" \
      --out-json "docs/results/$name.json" --out-md "docs/results/$name.md"
  $py scripts/plots.py --results "docs/results/$name.json" --outdir docs/images --prefix "${name}_" || true
fi
[ "$status" = 0 ] && echo "GPU check: OK" || echo "GPU check: FAILED (see $logs)"
exit $status
