#!/usr/bin/env bash
# Runs on the GPU host (see ../shared/gpu/README.md): builds in /tmp, runs
# the gpu suite (and the sim suites, cheap), the demo and, with --bench, the
# benchmarks. Logs and CSV go to $OUT.
#   source .gpu-deps/env.sh && test/gpu.sh [--bench] [--soak]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/uvcuda-out}
mkdir -p "$OUT"
B=/tmp/uvcuda-build
rm -rf "$B"
meson setup "$B" -Dtests=enabled -Dgpu_tests=enabled -Dbench=enabled -Dexamples=enabled \
  --buildtype=release > "$OUT/build.log" 2>&1 && meson compile -C "$B" >> "$OUT/build.log" 2>&1
rc=$?
if [ $rc != 0 ]; then tail -40 "$OUT/build.log"; exit $rc; fi
rm -f "$OUT/build.log"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/gpu-test.log" 2>&1
# Timeouts cut to a third: a hang must not eat the whole device lease.
meson test -C "$B" -v --suite gpu --num-processes 1 --timeout-multiplier 0.3 >> "$OUT/gpu-test.log" 2>&1
gpu_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):|fault \(|ERROR|child failed" "$OUT/gpu-test.log"
meson test -C "$B" --suite unit --suite sim --num-processes 8 > /tmp/sim-test.log 2>&1
echo "sim suites on the GPU host: rc=$?"; grep -E "^(Ok|Fail|Skipped|Timeout):" /tmp/sim-test.log
"$B/examples/uvcuda-demo" 2>&1 | tee "$OUT/demo.log"
for a in "$@"; do
  case "$a" in
    --bench) [ -x bench/run.sh ] && bench/run.sh "$B" "$OUT" ;;
    --soak) test/soak.sh "$B" "$OUT" "${UVCUDA_SOAK_S:-300}" 4 ;;
  esac
done
exit $gpu_rc
