#!/usr/bin/env bash
# The Python package on the GPU host: builds the extension in /tmp, runs the
# GPU checks (PyTorch streams and kernels, stock asyncio; uvloop too where
# installed), the await-latency benchmark and the HTTP benchmark. Logs and
# results go to $OUT (default /tmp/uvcuda-py-out).
#
#   source .gpu-deps/env.sh && bindings/python/run-gpu.sh [--quick] [--no-bench]
#
# Needs: python3 >= 3.11 (PYTHON=... for another), PyTorch for the checks and
# the torch benchmark, meson, ninja, gcc, libuv (from .gpu-deps). Python's
# headers: the interpreter's where it has them, else the ones carried in
# bindings/python/.py-headers (made here by tools/carry-headers.sh: the
# extension targets the stable ABI, so 3.11's headers build a module that
# 3.12 loads), else a prebuilt bindings/python/.py-prebuilt/_uvcuda.abi3.so
# (built here, linked to libuv.so.1; tools/carry-prebuilt.sh). PY_HEADERS=
# carried or prebuilt takes that way on purpose. The run takes under 3
# minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/uvcuda-py-out}
PY=${PYTHON:-python3}
B=/tmp/uvcuda-py-build
SITE=/tmp/uvcuda-py-site
quick=0 bench=1
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --no-bench) bench=0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
log=$OUT/python-gpu.log
: > "$log"
say() { echo "$@" | tee -a "$log"; }

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
  date -u
  "$PY" --version
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  git -C "$ROOT" log --oneline -1 2>/dev/null; } | tee -a "$log"

# ---- build ----------------------------------------------------------------
inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
# PY_HEADERS=carried / prebuilt: take that way even where Python.h is there.
case ${PY_HEADERS:-} in carried|prebuilt) inc=/nonexistent ;; esac
opt=()
if [ -f "$inc/Python.h" ]; then
  say "build: against $inc"
elif [ "${PY_HEADERS:-}" != prebuilt ] && [ -f bindings/python/.py-headers/include/Python.h ]; then
  opt=(-Dpython_include="$ROOT/bindings/python/.py-headers/include")
  say "build: no Python.h for $PY; against the carried headers ($(grep -m1 PY_VERSION\  bindings/python/.py-headers/include/patchlevel.h | awk '{print $3}'))"
fi
rm -rf "$B" "$SITE"
mkdir -p "$SITE/uvcuda"
if { [ -f "$inc/Python.h" ] || [ ${#opt[@]} -gt 0 ]; } &&
   meson setup "$B" bindings/python --buildtype=release "${opt[@]}" >> "$log" 2>&1 &&
   ninja -C "$B" >> "$log" 2>&1; then
  cp "$B"/_uvcuda*.so "$SITE/uvcuda/"
elif [ -f bindings/python/.py-prebuilt/_uvcuda.abi3.so ]; then
  say "build: failed or no headers; using bindings/python/.py-prebuilt/_uvcuda.abi3.so"
  cp bindings/python/.py-prebuilt/_uvcuda.abi3.so "$SITE/uvcuda/"
else
  tail -30 "$log"
  say "build failed: no Python headers? (see the header of this script)"
  exit 1
fi
cp bindings/python/src/uvcuda/*.py bindings/python/src/uvcuda/*.pyi \
   bindings/python/src/uvcuda/py.typed "$SITE/uvcuda/"
export PYTHONPATH="$SITE:$ROOT/bindings/python/tests:$ROOT/bindings/python/bench${PYTHONPATH:+:$PYTHONPATH}"
for k in support/kernels.ptx test/common/kernels.ptx; do
  [ -f "$k" ] && { export UVCUDA_TEST_PTX="$ROOT/$k"; break; }
done
"$PY" -c 'import uvcuda, sys; print("uvcuda", uvcuda.__version__, uvcuda._uvcuda.__file__, "libuv", uvcuda.uv_version()); print(uvcuda.driver_info())' 2>&1 | tee -a "$log"

# ---- GPU checks -----------------------------------------------------------
rc=0
kinds=asyncio
"$PY" -c 'import uvloop' 2>/dev/null && kinds="asyncio uvloop"
say "== gpu checks ($kinds)"
timeout 600 "$PY" bindings/python/tests/gpu_checks.py $kinds 2>&1 | tee "$OUT/python-gpu-checks.log" | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

# ---- benchmarks -----------------------------------------------------------
if [ $bench = 1 ]; then
  backend=ptx
  "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && backend=torch
  q=()
  [ $quick = 1 ] && q=(--quick)
  say "== await latency (ptx and $backend)"
  timeout 120 "$PY" bindings/python/bench/latency.py --backend ptx --n 2000 --out "$OUT" 2>&1 | tee -a "$log" || rc=1
  if [ $backend = torch ]; then
    timeout 120 "$PY" bindings/python/bench/latency.py --backend torch --n 2000 --out "$OUT" 2>&1 | tee -a "$log" || rc=1
  fi
  say "== HTTP benchmark ($backend)"
  timeout 300 "$PY" bindings/python/bench/run.py --backend $backend "${q[@]}" --out "$OUT" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
say "python run-gpu: rc=$rc"
exit $rc
