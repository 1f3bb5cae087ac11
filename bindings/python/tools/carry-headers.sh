#!/usr/bin/env bash
# Copies this machine's CPython >= 3.11 headers into bindings/python/.py-headers
# (ignored by git), for a host without Python.h (the GPU host): the extension
# is built for the stable ABI (Py_LIMITED_API 3.11), so 3.11's headers build a
# module that 3.12 and later load. run-gpu.sh uses them where the host's
# Python has no headers.
#   bindings/python/tools/carry-headers.sh [/usr/include/python3.11]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')}
[ -f "$src/Python.h" ] || { echo "no Python.h in $src" >&2; exit 1; }
dst=.py-headers/include
rm -rf .py-headers
mkdir -p "$dst"
cp -r "$src"/. "$dst"/
# Debian's pyconfig.h includes the multiarch one by a path of its own: flatten.
multi=$(find /usr/include -path "*/$(basename "$src")/pyconfig.h" -not -path "$src/*" | head -1)
if [ -n "$multi" ] && grep -q 'linux-gnu' "$dst/pyconfig.h"; then
  cp "$multi" "$dst/pyconfig.h"
fi
echo "$(basename "$src") headers in bindings/python/$dst ($(du -sh .py-headers | cut -f1))"
