#!/usr/bin/env bash
# Builds and runs the demo (examples/demo.c). On a machine without a GPU it
# runs on the simulated driver and says so. Installs its packages as root.
set -euo pipefail
cd "$(dirname "$0")/.."
UVCUDA_CI_SANITIZE=0 UVCUDA_BUILD_DIR=${UVCUDA_BUILD_DIR:-build-demo} \
  UVCUDA_SKIP_TESTS=1 test/ci.sh >/dev/null
exec "${UVCUDA_BUILD_DIR:-build-demo}/examples/uvcuda-demo"
