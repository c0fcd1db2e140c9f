#!/usr/bin/env bash
# format.sh — lay out every C++ and CUDA source of the project with clang-format
# (.clang-format at the top: Google's style at 100 columns).
#
#   scripts/format.sh           # format every tracked .cpp, .cu, .cuh and .h in place
#   scripts/format.sh --check   # change nothing; list the files it would change, exit 1 if any
#
# The vendored tests/catch.hpp is left as it is. Output differs between clang-format
# versions; CI checks with Debian 12's (clang-format 14).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'USAGE'
usage: scripts/format.sh [--check]

  (no option)   format every tracked C++ and CUDA source in place
  --check       change nothing; name each file that is not formatted, exit 1 if any
Exit status 2 on a usage error.
USAGE
}

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h|--help) usage; exit 0 ;;
  *) echo "format.sh: error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "format.sh: error: one argument at most" >&2; usage >&2; exit 2; }
command -v clang-format >/dev/null 2>&1 || {
  echo "format.sh: error: clang-format not found (on Debian/Ubuntu: apt-get install clang-format)" >&2
  exit 1
}

mapfile -t files < <(git ls-files '*.cpp' '*.cu' '*.cuh' '*.h' | grep -v '^tests/catch\.hpp$')
if [ "$check" = 0 ]; then
  clang-format -i "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files with $(clang-format --version)"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format "$f" | cmp -s - "$f"; then
    echo "not formatted: $f (run scripts/format.sh)"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "format.sh: $bad of ${#files[@]} files are not formatted ($(clang-format --version))"
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted ($(clang-format --version))"
