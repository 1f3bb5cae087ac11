#!/usr/bin/env bash
# Builds uvcuda and runs the CPU test suites (unit, sim; gpu shows as
# skipped without a GPU). Installs what it needs on Debian/Ubuntu (as root).
# The main build hides the CUDA Toolkit: nothing but the drift test of
# lib/cuda-api.h needs it, which a small build of its own runs where the
# toolkit is found.
#   test/ci.sh            # plain build + all suites
#   UVCUDA_CI_SANITIZE=0 test/ci.sh   # skip the ASan/UBSan, TSan, valgrind passes
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v python3 >/dev/null || need+=(python3)
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists 'libuv >= 1.44' 2>/dev/null || need+=(libuv1-dev)
pkg-config --exists cmocka 2>/dev/null || need+=(libcmocka-dev)
if [ "${UVCUDA_CI_SANITIZE:-1}" = 1 ]; then
  command -v valgrind >/dev/null || need+=(valgrind)
fi
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then echo "missing: ${need[*]} (run as root to install)" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

build=${UVCUDA_BUILD_DIR:-build}
rm -rf "$build"
napi=disabled
[ -f /usr/include/node/node_api.h ] && command -v node >/dev/null && napi=enabled
# Without the CUDA Toolkit, as a contributor without one builds: no
# CUDA_PATH, no CPATH-style paths, a toolkit dir that does not exist. Every
# program and suite builds (--werror) and runs; the drift test skips.
notk=(env -u CUDA_PATH -u CPATH -u C_INCLUDE_PATH)
"${notk[@]}" meson setup "$build" --werror -Dcudatoolkit=/nonexistent -Dtests=enabled \
  -Dgpu_tests=enabled -Dbench=enabled -Dexamples=enabled -Dnapi=$napi
"${notk[@]}" meson compile -C "$build"
[ "${UVCUDA_SKIP_TESTS:-0}" = 1 ] && exit 0
# The Node HTTP bench's load generator (autocannon, pinned): its quick run
# on the simulation is a test of suite sim, skipped without it.
if [ "$napi" = enabled ] && command -v npm >/dev/null; then
  (cd bindings/node/bench/http && npm ci --no-audit --no-fund --loglevel=error)
fi
"${notk[@]}" meson test -C "$build" -v --print-errorlogs --num-processes 2
# A sim suite that ran nothing (the simulated driver not built, every test
# skipped) passes meson test: count the sim tests that passed.
python3 - "$build/meson-logs/testlog.json" <<'EOF'
import json, sys
ok = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    # "uvcuda:sim+fuzz / fuzz-lifecycle-sim" (newer Meson: a "suite" list too)
    suites = t.get('suite') or t['name'].split(' / ')[0].split(':')[-1].split('+')
    if 'sim' in suites and t.get('result') == 'OK':
        ok += 1
print('ci: %d tests of suite sim passed (CUDA Toolkit hidden)' % ok)
sys.exit(0 if ok > 0 else 'ci: suite sim ran no test')
EOF

# ---- The drift test of lib/cuda-api.h, against the CUDA Toolkit's headers
# (found as meson.build says: -Dcudatoolkit, $CUDA_PATH, /usr/local/cuda).
rm -rf "$build-tk"
meson setup "$build-tk" --werror -Dtests=enabled -Dgpu_tests=disabled -Dbench=disabled \
  -Dexamples=disabled -Dnapi=disabled >/dev/null
if grep -q 'CUDA Toolkit headers not found' "$build-tk/meson-logs/meson-log.txt"; then
  echo "ci: no CUDA Toolkit here: the drift test of lib/cuda-api.h is not run"
else
  meson compile -C "$build-tk" test-cuda-api
  meson test -C "$build-tk" --no-rebuild -v --print-errorlogs cuda-api-drift
fi

# ---- C consumers (test/consumers/ci.sh) ------------------------------------
# consumer.c built through pkg-config, CMake find_package and a Meson
# subproject against the library built without the CUDA Toolkit, each run on
# this build's simulated driver.
test/consumers/ci.sh "$build"
# ----------------------------------------------------------------------------

# ---- Node.js npm package (bindings/node/ci.sh, owned with bindings/node):
# prebuild + npm pack, install with no compiler on PATH (require/import),
# install --build-from-source + the package's npm test on the simulated
# driver, the sample addon (node-gyp and Meson). Runs where the Node addon
# is built (node, npm and Node's headers present); tools come from the npm
# registry, pinned in bindings/node/package-lock.json.
if [ "$napi" = enabled ] && command -v npm >/dev/null; then
  node_need=()
  command -v python3 >/dev/null || node_need+=(python3)
  command -v make >/dev/null || node_need+=(make)
  command -v g++ >/dev/null || node_need+=(g++) # node-gyp links with $CXX
  if ((${#node_need[@]})); then
    apt-get update -qq
    apt-get install -y -qq "${node_need[@]}" >/dev/null
  fi
  UVCUDA_LIBCUDA="$(readlink -f "$build")/test/sim/libsimcuda.so" bindings/node/ci.sh
fi
# ---- end of the Node.js block

# ---- Python package (bindings/python, owned with bindings/python) ---------
# Debian's python3 (uvloop, meson-python and pytest are its packages; a
# python3 earlier on PATH may not see them). The package is built offline
# both ways: `pip install bindings/python` into one venv, a wheel into
# another; the pytest suites run on the wheel's install, on stock asyncio and
# uvloop, against this build's simulated driver; mypy --strict checks the
# package and the benchmark, pycodestyle (PEP 8, 99 columns) the Python
# files; the HTTP benchmark's quick run proves it works (simulation, not a
# GPU measurement).
py_need=()
for p in python3-mesonpy python3-pytest python3-uvloop python3-dev python3-venv \
         python3-pip mypy python3-pycodestyle; do
  dpkg -s "$p" >/dev/null 2>&1 || py_need+=("$p")
done
if ((${#py_need[@]})); then
  if [ "$(id -u)" != 0 ]; then echo "missing: ${py_need[*]} (run as root to install)" >&2; exit 1; fi
  apt-get update -qq
  apt-get install -y -qq "${py_need[@]}" >/dev/null
fi
pyci=$(readlink -f "$build")/python
rm -rf "$pyci"
/usr/bin/python3 -m venv --system-site-packages "$pyci/venv-src"
/usr/bin/python3 -m venv --system-site-packages "$pyci/venv-wheel"
"$pyci/venv-src/bin/pip" install -q --no-index --no-build-isolation --no-deps bindings/python
"$pyci/venv-wheel/bin/pip" wheel -q --no-index --no-build-isolation --no-deps \
  --config-settings=setup-args=--werror bindings/python -w "$pyci/dist"
"$pyci/venv-wheel/bin/pip" install -q --no-index --no-deps "$pyci"/dist/uvcuda-*-abi3-*.whl
(cd bindings/python && MYPYPATH=src mypy --strict --cache-dir "$pyci/mypy-cache" src/uvcuda bench)
(cd bindings/python && /usr/bin/python3 -m pycodestyle --max-line-length=99 src bench tests tools)
py_sim="$(readlink -f "$build")/test/sim/libsimcuda.so"
if [ -f "$py_sim" ]; then
  (cd "$pyci" && UVCUDA_LIBCUDA="$py_sim" venv-src/bin/python -c \
    'import uvcuda; print("uvcuda", uvcuda.__version__, uvcuda.driver_info()["simulated"])')
  (cd bindings/python && UVCUDA_LIBCUDA="$py_sim" "$pyci/venv-wheel/bin/python" -m pytest \
    -q -p no:cacheprovider -o faulthandler_timeout=300 tests)
  (cd bindings/python/bench && UVCUDA_LIBCUDA="$py_sim" "$pyci/venv-wheel/bin/python" run.py --quick)
  if [ "${UVCUDA_CI_SANITIZE:-1}" = 1 ]; then
    # The extension under ASan+UBSan (CPython itself is not instrumented:
    # the runtimes are preloaded, leak detection off; tracemalloc-based leak
    # tests run in the suite).
    meson setup "$pyci/asan" bindings/python -Db_sanitize=address,undefined \
      -Db_lundef=false -Dbuildtype=debug >/dev/null
    meson compile -C "$pyci/asan" >/dev/null
    mkdir -p "$pyci/asan-site/uvcuda"
    cp bindings/python/src/uvcuda/* "$pyci/asan/"_uvcuda*.so "$pyci/asan-site/uvcuda/"
    (cd bindings/python && LD_PRELOAD="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" \
      ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      PYTHONPATH="$pyci/asan-site" UVCUDA_LIBCUDA="$py_sim" /usr/bin/python3 -m pytest \
      -q -p no:cacheprovider -o faulthandler_timeout=600 tests)
  fi
else
  echo "python: no simulated driver in $build (CUDA Toolkit headers missing): tests skipped"
fi
# ---- end of the Python block

# The same suites under ASan+UBSan, TSan and valgrind (C tests only: the
# Node suite runs node itself, which is not ours to instrument). The
# lifecycle fuzzer (suite sim) runs in every pass; the short soak is left
# out of TSan/valgrind, where its 6 s of timed load measures the tool. The
# TSan pass also builds the bench and runs bench-quick-sim (suite sim): its
# threads (watchdog, flag thread, wake sender) share state with the loop.
# No suite asserts a time bound; UVCUDA_TEST_SLOW only stretches watchdogs.
if [ "${UVCUDA_CI_SANITIZE:-1}" = 1 ]; then
  export UVCUDA_TEST_SLOW=1
  rm -rf "$build-asan"
  meson setup "$build-asan" --werror -Dtests=enabled -Dexamples=disabled -Dbench=disabled \
    -Db_sanitize=address,undefined -Db_lundef=false
  meson compile -C "$build-asan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C "$build-asan" -v --print-errorlogs --num-processes 2 --suite unit --suite sim
  rm -rf "$build-tsan"
  meson setup "$build-tsan" --werror -Dtests=enabled -Dexamples=disabled -Dbench=enabled \
    -Db_sanitize=thread -Db_lundef=false
  meson compile -C "$build-tsan"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    meson test -C "$build-tsan" -v --print-errorlogs --num-processes 1 --suite unit --suite sim \
    --no-suite soak
  if command -v valgrind >/dev/null; then
    rm -rf "$build-vg"
    meson setup "$build-vg" -Dtests=enabled -Dexamples=disabled -Dbench=disabled
    meson compile -C "$build-vg"
    meson test -C "$build-vg" -v --print-errorlogs --num-processes 2 --setup valgrind \
      --suite unit --suite sim --no-suite soak
  fi
fi
