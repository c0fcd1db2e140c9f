#!/usr/bin/env bash
# launch.sh — starts one of step 13's programs with one process per GPU under torchrun
# (torch.distributed's launcher: its rendezvous, so the same program runs across nodes with
# torchrun's --nnodes and --rdzv-endpoint in place of --standalone).
#
#   steps/13_ring_attention/launch.sh [--nproc P] [--timeout S] PROGRAM [ARGS...]
#
# PROGRAM is ring_tests.py or ring_bench.py (in this folder) or a path. --nproc: processes, one
# per GPU (default: every GPU). --timeout: seconds before the whole job is stopped (default
# 600). Exit status: the program's; 77 (skipped) without PyTorch or with fewer GPUs than
# processes, checked before anything starts; 2 on a bad argument.
# Every process gets NCCL_NVLS_ENABLE=0 (NVLink SHARP off: the machines this runs on need it),
# FLASH_TUTORIAL_LIB (the first build*/lib/libflash_tutorial.so unless set) and a bounded
# NCCL wait (TORCH_NCCL_ASYNC_ERROR_HANDLING: a rank stuck past the process group's timeout
# aborts, and torchrun stops the others).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
usage() { sed -n '5,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
nproc=""
timeout_s=600
while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --nproc) [ $# -ge 2 ] || { echo "launch.sh: --nproc needs a value" >&2; usage >&2; exit 2; }
             nproc=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || { echo "launch.sh: --timeout needs a value" >&2; usage >&2; exit 2; }
               timeout_s=$2; shift 2 ;;
    -*) echo "launch.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "launch.sh: no program given" >&2; usage >&2; exit 2; }
for v in ${nproc:+"--nproc=$nproc"} "--timeout=$timeout_s"; do
  case "${v#*=}" in
    ''|*[!0-9]*|0*) echo "launch.sh: ${v%%=*}: ${v#*=} is not a positive integer" >&2
                    usage >&2; exit 2 ;;
  esac
done
given=$1; shift
prog=$given
[ -f "$prog" ] || prog="$here/$given"
[ -f "$prog" ] || { echo "launch.sh: program $given not found" >&2; usage >&2; exit 2; }

py=${PYTHON:-python3}
gpus=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null) || {
  echo "SKIPPED: PyTorch is not installed for $py"; exit 77; }
nproc=${nproc:-$gpus}
if [ "$gpus" -lt 1 ] || [ "$gpus" -lt "$nproc" ]; then
  echo "SKIPPED: $gpus CUDA device(s), $nproc process(es) asked for"; exit 77
fi

export NCCL_NVLS_ENABLE=0
export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [ -z "${FLASH_TUTORIAL_LIB:-}" ]; then
  for lib in "$root"/build*/lib/libflash_tutorial.so; do
    [ -f "$lib" ] && { export FLASH_TUTORIAL_LIB=$lib; break; }
  done
fi
exec timeout --signal=TERM --kill-after=30 "$timeout_s" \
  "$py" -m torch.distributed.run --standalone --nproc-per-node="$nproc" "$prog" "$@"
