#!/usr/bin/env bash
# GPU soak on the GPU host: BUILD_DIR OUT_DIR [seconds=300] [loops=4].
set -uo pipefail
B=$1; OUT=$2; S=${3:-300}; L=${4:-4}
timeout $((S + 60)) "$B/test/uvcuda-soak" "$S" "$L" 2>&1 | tee "$OUT/soak.txt"
