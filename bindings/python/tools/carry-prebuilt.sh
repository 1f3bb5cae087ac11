#!/usr/bin/env bash
# Builds the stable-ABI extension here and leaves it in
# bindings/python/.py-prebuilt/_uvcuda.abi3.so (ignored by git), for a host
# that can't build it (run-gpu.sh's last resort). It links libuv.so.1: the
# host must provide one (.gpu-deps does).
#   bindings/python/tools/carry-prebuilt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
b=$(mktemp -d)
meson setup "$b" . --buildtype=release >/dev/null
ninja -C "$b" >/dev/null
mkdir -p .py-prebuilt
cp "$b/_uvcuda.abi3.so" .py-prebuilt/
rm -rf "$b"
echo "bindings/python/.py-prebuilt/_uvcuda.abi3.so"
