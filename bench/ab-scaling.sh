#!/usr/bin/env bash
# A/B of the scaling section on the GPU host: the same bench binary
# (BUILD_DIR, the new tree) against two builds of libuvcuda.so, interleaved
# A B A B ... for ROUNDS rounds (see ab.sh for building OLD_LIB_DIR). The
# scaling section's rows are bimodal between runs of one library, so only
# several interleaved rounds compare two libraries.
#   bench/ab-scaling.sh BUILD_DIR OLD_LIB_DIR OUT_DIR [ROUNDS] [bench options]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?build dir}; OLD=${2:?old lib dir}; OUT=${3:?out dir}; ROUNDS=${4:-3}
shift 3; [ $# -gt 0 ] && shift
mkdir -p "$OUT"
for lib in "$OLD" "$B"; do
  LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" ldd "$B/bench/uvcuda-bench" | grep -q "$lib/libuvcuda" ||
    { echo "ab-scaling.sh: $lib/libuvcuda.so.* is not the one loaded (is it there under this build's soname?)"; exit 1; }
done
run() { # tag lib [bench options]
  local tag=$1 lib=$2
  shift 2
  echo "### $tag (libuvcuda from $lib)"
  LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 120 "$B/bench/uvcuda-bench" \
    --section scaling "$@" 2>&1 | sed -n '/^ *uvcuda-auto  /p;/phases, p50/p;/^ *raw-spin  /p;/^ *memop-spin  /p;/^ *uvcuda-poll  /p;/scaling: uvcuda-auto/p'
}
for i in $(seq 1 "$ROUNDS"); do
  run "A-old round $i" "$OLD" "$@"
  run "B-new round $i" "$B" "$@"
done > "$OUT/ab-scaling.txt" 2>&1
cat "$OUT/ab-scaling.txt"
