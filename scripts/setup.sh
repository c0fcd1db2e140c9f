#!/usr/bin/env bash
# setup.sh — make sure the build's dependencies are present. Sourced, not run: the other
# scripts start with `source scripts/setup.sh` and call its functions (fa_setup, fa_build,
# fa_build_dir, fa_usage_error); running it by itself only says so.
#
# Installs missing Debian/Ubuntu packages when it may (root, or sudo without a password);
# otherwise prints the exact apt line. Without the CUDA toolkit (nvcc) the CPU chapter is built
# and run, and fa_cuda_note says that the GPU steps were not, and how to get the toolkit.
# Idempotent: a second run finds everything and does nothing. FA_NO_INSTALL=1 never installs;
# FA_NO_BUILD=1 builds nothing and uses the build folder as it is (fa_build).

fa_packages="cmake g++ make python3 libeigen3-dev catch2 libbenchmark-dev libcli11-dev"

fa_setup() {
  [ "${FA_NO_BUILD:-0}" = 1 ] && return 0  # nothing is built: nothing to check or install
  # The CUDA toolkit: nvcc on PATH, or in the usual place. Without it only the CPU chapter
  # is built (the top-level CMakeLists.txt; fa_cuda_note says so after the build).
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi

  if ! command -v dpkg >/dev/null 2>&1; then
    echo "note: not a Debian/Ubuntu system; make sure these are installed: $fa_packages" >&2
    return 0
  fi
  local missing=""
  for p in $fa_packages; do
    # A tool on PATH counts however it was installed (CMake from Kitware or pip, say).
    case "$p" in cmake|g++|make|python3) command -v "$p" >/dev/null 2>&1 && continue ;; esac
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0

  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else sudo="none"; fi
  fi
  if [ "${FA_NO_INSTALL:-0}" = 1 ] || [ "$sudo" = none ]; then
    echo "Missing packages:$missing. Install them with:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y$missing" >&2
    echo "(trying to build anyway: they may be installed some other way)" >&2
    return 0
  fi
  echo "Installing:$missing"
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq$missing; } >/dev/null; then
    echo "warning: apt-get could not install$missing; trying to build anyway" >&2
  fi
  return 0
}

# The preset: "ci" (sm_90 only) under CI, otherwise "default" (this machine's GPU).
fa_preset() {
  if [ -n "${FA_PRESET:-}" ]; then echo "$FA_PRESET"; elif [ "${CI:-}" = true ]; then echo ci; else echo default; fi
}

# The build folder: FA_BUILD_DIR if set, else the preset's (build/, build-ci/, ...).
fa_build_dir() {
  if [ -n "${FA_BUILD_DIR:-}" ]; then echo "$FA_BUILD_DIR"
  elif [ "$(fa_preset)" = default ]; then echo build
  else echo "build-$(fa_preset)"; fi
}

# Configures the build folder once (incremental afterwards).
fa_configure() {
  local dir; dir=$(fa_build_dir)
  [ -f "$dir/CMakeCache.txt" ] && return 0
  if [ -n "${FA_BUILD_DIR:-}" ]; then cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  else cmake --preset "$(fa_preset)" >/dev/null; fi
}

# Configures if needed and builds the given targets (all without any). With FA_NO_BUILD=1,
# only checks that the build folder exists.
fa_build() {
  if [ "${FA_NO_BUILD:-0}" = 1 ]; then
    [ -d "$(fa_build_dir)" ] && return 0
    echo "error: FA_NO_BUILD=1 but the build folder '$(fa_build_dir)' does not exist" >&2
    return 1
  fi
  fa_configure || return 1
  cmake --build "$(fa_build_dir)" -j "$(nproc)" "$@"
}

# Says, once, that the build has no GPU steps because CMake found no nvcc, and how to get
# them; says nothing when the GPU steps were built. Returns 0 when they were, 1 otherwise.
fa_has_cuda() {
  ! grep -q '^FA_CUDA:INTERNAL=OFF' "$(fa_build_dir)/CMakeCache.txt" 2>/dev/null
}
fa_cuda_note() {
  fa_has_cuda && return 0
  cat >&2 <<'MSG'
note: CUDA toolkit not found (no nvcc): the GPU steps (01-13), their tests and benchmarks, the
  tour and the C API were not built; the CPU chapter (reference, chapter 00, exercise 00, the
  CPU tests) and the docs were. For the GPU steps install CUDA 12.4 or newer from NVIDIA's
  repository (https://developer.nvidia.com/cuda-downloads), e.g. on Debian 12 / Ubuntu
  22.04 / 24.04:  sudo apt-get install cuda-toolkit
  then remove the build folder and run this command again.
MSG
  return 1
}

# A usage error, the same in every script: "<script>: error: <what was wrong>", then the
# script's usage (its function `usage`), on stderr; exit status 2.
fa_usage_error() {
  echo "$(basename "$0"): error: $*" >&2
  usage >&2
  exit 2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "setup.sh: error: this file is sourced, not run: source scripts/setup.sh, then call" \
       "fa_setup or fa_build (scripts/test.sh and scripts/tour.sh do)" >&2
  exit 2
fi
