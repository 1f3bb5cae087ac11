#!/usr/bin/env bash
# A/B/... of the adapt section (and, with DELIVERY=1, the delivery
# section) across builds of libuvcuda.so: the same bench binary (BUILD_DIR)
# runs against each library in turn, N rounds, the order rotated each round,
# so that drift falls on every library alike.
#   bench/ab-adapt.sh BUILD_DIR OUT_DIR N TAG:LIBDIR [TAG:LIBDIR...]
# Each LIBDIR holds a libuvcuda.so under this build's soname (see ab.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?build dir}; OUT=${2:?out dir}; N=${3:?rounds}; shift 3
mkdir -p "$OUT"
libs=("$@")
k=${#libs[@]}
for spec in "${libs[@]}"; do
  lib=${spec#*:}
  LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" ldd "$B/bench/uvcuda-bench" | grep -q "$lib/libuvcuda" ||
    { echo "ab-adapt.sh: $lib/libuvcuda.so.* is not the one loaded"; exit 1; }
done
secs=(--section adapt)
[ "${DELIVERY:-0}" = 1 ] && secs+=(--section delivery)
for r in $(seq 1 "$N"); do
  for i in $(seq 0 $((k - 1))); do
    spec=${libs[$(((i + r - 1) % k))]}
    tag=${spec%%:*}; lib=${spec#*:}
    d="$OUT/r$r-$tag"
    LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 300 "$B/bench/uvcuda-bench" \
      --csv "$d.csv" "${secs[@]}" > "$d.txt" 2>&1
    grep -E "^ *workload |^  uvcuda-adaptive |^  uvcuda-today(-aa)? |^  raw-spin |^  memop-spin |per block|phases, p50|pooled over" "$d.txt" |
      sed "s/^/r$r $tag: /"
  done
done
