#!/bin/sh
# The addon's own objects (src/*.c) define no global symbol outside their
# prefixes: uvn_ (the addon), uvcuda_napi_ (the promise helper) and
# Node-API's entry points. (uvcuda.map hides all but the last from the
# linked addon, so its objects are where a stray name shows.)
#   test/symbols.sh NM OBJDIR    OBJDIR: Meson's private directory of uvcuda.node
set -eu
nm=$1
dir=$2
set -- "$dir"/src_*.o
if [ ! -e "$1" ]; then
  echo "no objects of src/ in $dir" >&2
  exit 1
fi
bad=$("$nm" -g --defined-only "$@" | awk 'NF == 3 { print $3 }' |
  grep -Ev '^(uvn_|uvcuda_napi_|napi_register_module_v|node_api_module_get_api_version_v)' || true)
if [ -n "$bad" ]; then
  echo "globals without the addon's prefix (uvn_):"
  echo "$bad"
  exit 1
fi
echo "$# objects of src/: every global is uvn_*, uvcuda_napi_* or Node-API's entry point"
