#!/usr/bin/env bash
# The npm package end to end, the way Node users get it (test/ci.sh runs
# this; it also runs alone):
#   1. npm ci (pinned tools from the npm registry, a local cache), the
#      type test of index.d.ts (tsc --strict over test/types/usage.mts, no
#      @types/node), the prebuild (prebuildify:
#      prebuilds/linux-x64/node.napi.glibc.node), npm pack
#   2. the tarball installed into an empty directory with NO compiler on
#      PATH: require('uvcuda') and import { openDevice } from 'uvcuda'
#   3. the tarball installed with --build-from-source into another one
#      (node-gyp compiles it) with the CUDA Toolkit out of sight (no
#      CUDA_PATH, CPATH or C_INCLUDE_PATH; no compile line or dependency
#      names it), and the package's own `npm test` there, on uvcuda's
#      simulated driver
#   4. the sample addon examples/node-addon: built with node-gyp against
#      the installed package and with Meson (uvcuda as a subproject),
#      tested both ways on the simulated driver
#
#   bindings/node/ci.sh
#   UVCUDA_LIBCUDA=build/test/sim/libsimcuda.so bindings/node/ci.sh   # reuse a build
#
# Needs node >= 18 and npm (the npm registry reachable), python3, make, a
# C compiler, Node's headers (those next to node, else node-gyp downloads
# them), meson, ninja, libuv and cmocka headers (the Meson builds). Without
# UVCUDA_LIBCUDA it builds the simulated driver with Meson first.
set -euo pipefail
cd "$(dirname "$0")"
pkg=$PWD
repo=$(cd ../.. && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/uvcuda-node-ci.XXXXXX")
trap 'rm -rf "$work"' EXIT

step() { printf '\n=== node ci: %s\n' "$*"; }

export npm_config_cache=${UVCUDA_NPM_CACHE:-$work/npm-cache}
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
# node-gyp: Node's own headers (uv.h included) from next to the node
# binary when it has them: no download from nodejs.org.
node_prefix=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
if [ -f "$node_prefix/include/node/node_api.h" ] && [ -f "$node_prefix/include/node/uv.h" ]; then
  export npm_config_nodedir=$node_prefix
fi

# The simulated driver (a test tool: no GPU here).
if [ -z "${UVCUDA_LIBCUDA:-}" ]; then
  step "simulated driver (Meson)"
  meson setup "$work/meson" "$repo" -Dtests=enabled -Dnapi=disabled -Dexamples=disabled \
    -Dbench=disabled -Dgpu_tests=disabled >/dev/null
  meson compile -C "$work/meson" simcuda >/dev/null
  export UVCUDA_LIBCUDA=$work/meson/test/sim/libsimcuda.so
fi
UVCUDA_LIBCUDA=$(readlink -f "$UVCUDA_LIBCUDA")
sim=$UVCUDA_LIBCUDA
# Nothing below may fall back on the repository's own addon builds.
unset UVCUDA_LIBCUDA UVCUDA_NODE_ADDON UVCUDA_TEST_PTX

# What a build that used the CUDA Toolkit leaves in a log or in its
# dependency files (deps/uvcuda/include is not it).
toolkit_seen() {
  grep -E '/usr/local/cuda|[^v]cuda/include|/cuda\.h|cudaTypedefs' /dev/null "$@"
}

step "1. npm ci, type test, prebuild, npm pack"
rm -rf build prebuilds uvcuda-*.tgz
npm ci --ignore-scripts --no-save >/dev/null
npm run --silent typecheck
echo "index.d.ts, index.d.mts: test/types/usage.{mts,cts} compile with tsc --strict, no @types/node"
npm run --silent prebuildify
npm pack --silent --pack-destination "$work" >/dev/null
tgz=$(ls "$work"/uvcuda-*.tgz)
tar tzf "$tgz" > "$work/files"
grep -qx 'package/prebuilds/linux-x64/node.napi.glibc.node' "$work/files"
grep -qx 'package/deps/uvcuda/include/uvcuda/napi.h' "$work/files"
grep -qx 'package/deps/uvcuda/support/simprobe.c' "$work/files"
grep -qx 'package/sources.txt' "$work/files"
grep -qx 'package/deps/uvcuda/support/drvtab.c' "$work/files"
grep -qx 'package/deps/uvcuda/support/drvtab.h' "$work/files"
grep -qx 'package/kernels/kernels.ptx' "$work/files"
grep -qx 'package/LICENSE' "$work/files"
echo "packed $(basename "$tgz"): $(wc -l < "$work/files") files"

step "2. install with no compiler on PATH: require and import"
mkdir -p "$work/nocc/bin" "$work/app-prebuilt"
for t in node npm npx sh; do ln -s "$(command -v "$t")" "$work/nocc/bin/$t"; done
(
  cd "$work/app-prebuilt"
  export PATH=$work/nocc/bin
  for t in cc gcc g++ c++ clang make; do
    if command -v "$t" >/dev/null; then echo "$t is on PATH" >&2; exit 1; fi
  done
  echo '{ "name": "app", "version": "1.0.0", "private": true }' > package.json
  npm install --no-save "$tgz"
  test ! -e node_modules/uvcuda/build   # nothing was compiled
  node -e "require('uvcuda')"
  node --input-type=module -e "import { openDevice } from 'uvcuda'; if (typeof openDevice !== 'function') process.exit(1)"
  node -e "const u = require('uvcuda'); console.log('require: uvcuda', u.version, 'openDevice', typeof u.openDevice)"
  node --input-type=module -e "import { openDevice } from 'uvcuda'; console.log('import: openDevice', typeof openDevice)"
  UVCUDA_LIBCUDA=$sim node -e "console.log('simulated driver:', require('uvcuda').driverInfo().simulated)"
)

step "3. install --build-from-source (node-gyp), then the package's npm test"
mkdir -p "$work/app-built"
(
  cd "$work/app-built"
  echo '{ "name": "app", "version": "1.0.0", "private": true }' > package.json
  # No CUDA Toolkit: lib/cuda-api.h declares the driver API. gyp's
  # dependency files (build/**/*.d) hold each compile line and every
  # header it read.
  if ! env -u CPATH -u C_INCLUDE_PATH CUDA_PATH=/nonexistent \
      npm install --no-save "$tgz" --build-from-source --foreground-scripts \
      > "$work/build.log" 2>&1; then
    cat "$work/build.log"
    exit 1
  fi
  test -f node_modules/uvcuda/build/Release/uvcuda.node
  deps=$(find node_modules/uvcuda/build -name '*.o.d')
  lines=$(cat $deps | grep -c '^cmd_')
  [ "$lines" -gt 20 ]   # the addon's files, the helper and lib/
  if toolkit_seen "$work/build.log" $deps; then
    echo "the addon's build used the CUDA Toolkit" >&2
    exit 1
  fi
  echo "built from source without the CUDA Toolkit: $lines compile lines, none names it"
  node -e "
    const p = require('node-gyp-build').path(require('node:path').dirname(require.resolve('uvcuda/package.json')));
    if (!p.endsWith('/build/Release/uvcuda.node')) { console.error('loads', p); process.exit(1); }
    console.log('loads', p);"
  cd node_modules/uvcuda
  UVCUDA_LIBCUDA=$sim npm test
)

step "4. the sample addon: node-gyp against the installed package"
cp -r "$repo/examples/node-addon" "$work/sample"
rm -rf "$work/sample/build" "$work/sample/node_modules" "$work/sample/subprojects"
(
  cd "$work/sample"
  # As its author would, against the tarball: uvcuda (its prebuild), then
  # the sample's own install script, node-gyp rebuild.
  npm pkg set "dependencies.uvcuda=file:$tgz"
  env -u CPATH -u C_INCLUDE_PATH CUDA_PATH=/nonexistent npm install
  test -f build/Release/example.node
  if toolkit_seen $(find build -name '*.o.d'); then
    echo "the sample's build used the CUDA Toolkit" >&2
    exit 1
  fi
  UVCUDA_LIBCUDA=$sim npm test
)

step "4. the sample addon: Meson, uvcuda as a subproject"
(
  cd "$work/sample"
  rm -rf build node_modules package-lock.json
  mkdir subprojects
  ln -s "$repo" subprojects/uvcuda
  meson setup build >/dev/null
  meson compile -C build >/dev/null
  UVCUDA_LIBCUDA=$sim EXAMPLE_ADDON=$PWD/build/example.node node --test test.js
)

# The dev tree as it was: no prebuild or node-gyp build left behind.
rm -rf build prebuilds
step "ok"
