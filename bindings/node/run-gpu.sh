#!/usr/bin/env bash
# On the GPU host (test/gpu.sh --node): the settle benchmark, uvcuda promises
# against napi_create_async_work + cuStreamSynchronize, in one process, with
# the addon built in BUILD_DIR. The node-gpu tests run in the gpu suite.
#   bindings/node/run-gpu.sh BUILD_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:?build dir}
OUT=${2:?out dir}
mkdir -p "$OUT"
export UVCUDA_NODE_ADDON="$B/bindings/node/uvcuda.node"
export UVCUDA_TEST_PTX="$PWD/support/kernels.ptx"
if [ ! -f "$UVCUDA_NODE_ADDON" ]; then echo "node: addon not built at $UVCUDA_NODE_ADDON"; exit 1; fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > "$OUT/node-settle.md" 2>&1
timeout 120 node bindings/node/bench/settle.js >> "$OUT/node-settle.md" 2>&1
rc=$?
cat "$OUT/node-settle.md"
exit $rc
