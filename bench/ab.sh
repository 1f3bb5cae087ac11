#!/usr/bin/env bash
# A/B on the GPU host: the same bench and server binaries (BUILD_DIR, the
# new tree) run against two builds of libuvcuda.so, interleaved A B A B, so
# that a library change is measured against its predecessor in one run.
#   bench/ab.sh BUILD_DIR OLD_LIB_DIR OUT_DIR
# OLD_LIB_DIR holds the older libuvcuda.so, under this build's soname (e.g. `git worktree add /tmp/old
# REV && meson setup /tmp/old-build /tmp/old -Dtests=disabled
# -Dbench=disabled -Dexamples=disabled && ninja -C /tmp/old-build`). The
# public ABI must be the same: LD_LIBRARY_PATH picks the library.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?build dir}; OLD=${2:?old lib dir}; OUT=${3:?out dir}
mkdir -p "$OUT"
for lib in "$OLD" "$B"; do
  LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" ldd "$B/bench/uvcuda-bench" | grep -q "$lib/libuvcuda" ||
    { echo "ab.sh: $lib/libuvcuda.so.* is not the one loaded (is it there under this build's soname?)"; exit 1; }
done
run() { # tag lib
  echo "### $1 (libuvcuda from $2)"
  LD_LIBRARY_PATH="$2:${LD_LIBRARY_PATH:-}" timeout 120 "$B/bench/uvcuda-bench" \
    --section latency --section throughput --samples 500 2>&1 |
    sed -n '/p50 latency, us/,/^$/p;/== throughput/,/section throughput/p'
}
{
  run A-old "$OLD"; run B-new "$B"; run A-old "$OLD"; run B-new "$B"
} > "$OUT/ab-bench.txt" 2>&1
for tag in old new; do
  lib=$OLD; [ $tag = new ] && lib=$B
  mkdir -p "/tmp/ab-$tag"
  LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" timeout 150 examples/server/run-gpu.sh "$B" "/tmp/ab-$tag" > /dev/null 2>&1
  { echo "### server, libuvcuda $tag ($lib)"; cat "/tmp/ab-$tag/server-bench.md"; } >> "$OUT/ab-server.md"
done
cat "$OUT/ab-bench.txt" "$OUT/ab-server.md"
