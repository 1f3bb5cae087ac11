#!/usr/bin/env bash
# Prints which lib/ file calls which (from the objects of a build dir) and
# fails on a cycle: a function defined in A and called in B puts A below B.
#   tools/lib-deps.sh BUILD_DIR
set -euo pipefail
dir=${1:?build dir}/libuvcuda_internal.a.p
declare -A def
for o in "$dir"/*.o; do
  f=$(basename "$o" .o); f=${f#lib_}
  for s in $(nm --defined-only "$o" | awk '$2 ~ /[TDBR]/ {print $3}'); do def[$s]=$f; done
done
edges=$(for o in "$dir"/*.o; do
  f=$(basename "$o" .o); f=${f#lib_}
  for s in $(nm --undefined-only "$o" | awk '{print $2}'); do
    [ -n "${def[$s]:-}" ] && [ "${def[$s]}" != "$f" ] && echo "$f ${def[$s]}"
  done
done | sort -u)
echo "$edges" | awk '{print "  " $1 " -> " $2}'
# tsort fails (and prints the loop) on a cycle; its output is top-down.
echo "order (top first):"
echo "$edges" | tsort | tr '\n' ' '; echo
