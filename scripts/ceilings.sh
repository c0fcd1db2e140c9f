#!/usr/bin/env bash
# ceilings.sh — measure this GPU's ceilings (bin/ceilings: cuBLAS bf16, fp16, fp32 SGEMM and
# TF32 matrix products, device-to-device copy bandwidth) and keep them in
# docs/results/<name>-ceilings.json, which the chapters cite (docs/conventions.md, Ceilings).
# Then `python3 scripts/refresh_docs.py --ceilings docs/results/<name>-ceilings.json` copies
# the figures into the chapters' text.
#
#   scripts/ceilings.sh                      # name from the GPU (NVIDIA H200 -> h200)
#   scripts/ceilings.sh --name h200 -- --reps 50
#   options: --name NAME  --out FILE;  arguments after -- go to bin/ceilings
#
# Exit status: bin/ceilings's (77 without a usable CUDA device: nothing is written).
set -euo pipefail
cd "$(dirname "$0")/.."
name="" out="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "ceilings.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

source scripts/setup.sh
fa_setup
fa_build --target ceilings
bin="$(fa_build_dir)/bin/ceilings"

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
if [ -z "$name" ]; then
  # "NVIDIA H200" -> "h200", "NVIDIA GeForce RTX 4090" -> "geforce-rtx-4090"
  name=$(echo "${gpu:-unknown}" | sed -e 's/^NVIDIA //' | tr '[:upper:]' '[:lower:]' \
         | sed -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//')
fi
[ -n "$out" ] || out="docs/results/${name}-ceilings.json"
commit=${FA_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
command="scripts/ceilings.sh${name:+ --name $name}${extra[*]:+ -- ${extra[*]}}"

tmp="$out.tmp"
set +e
"$bin" --out "$tmp" --commit "$commit" --driver "$driver" --command "$command" "${extra[@]}"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  rm -f "$tmp"
  echo "ceilings.sh: bin/ceilings exited with status $rc; $out not written" >&2
  exit "$rc"
fi
mv "$tmp" "$out"
echo "ceilings.sh: wrote $out"
