#!/usr/bin/env bash
# Runs the driver-facts experiments on a GPU host; one process each.
# run.sh [experiment-group...]; groups: visibility spread blocking capture
# capture-self recover wake
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
cc -O2 -I/usr/local/cuda/include driver-facts.c -o /tmp/driver-facts \
  -L/usr/local/cuda/lib64/stubs -lcuda -lpthread || exit 1
cc -O2 -I/usr/local/cuda/include wake-facts.c -o /tmp/wake-facts \
  -L/usr/local/cuda/lib64/stubs -lcuda -lpthread || exit 1
f=/tmp/driver-facts
[ $# -eq 0 ] && set -- visibility spread blocking capture recover
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
  for g in "$@"; do case $g in
  visibility) timeout 20 $f fault-visibility ;;
  spread) for n in 1 4; do for b in 0 1; do timeout 20 $f fault-spread $n $b; done; done ;;
  blocking) timeout 20 $f blocking 0; timeout 20 $f blocking 1 ;;
  capture)
    for m in global thread relaxed; do
      for c in none query-private event-query memhostalloc memhostregister streamcreate eventcreate write-other-stream streamgetid; do
        timeout 20 $f capture $m $c
      done
    done
    for c in query-private event-query memhostalloc memhostregister write-other-stream; do timeout 20 $f capture global $c relaxed; done ;;
  capture-self)
    for m in global thread relaxed; do
      for c in getid getctx iscapturing query-private event-query memhostregister; do
        timeout 20 $f capture-self $m $c; timeout 20 $f capture-self $m $c relax
      done
    done ;;
  recover) for h in reset release create; do timeout 20 $f recover $h; done ;;
  wake)
    timeout 60 /tmp/wake-facts sleep
    for l in 0 50 200 1000 2000; do timeout 60 /tmp/wake-facts wait $l; done ;;
  esac; done
} 2>&1 | tee "$OUT/driver-facts.txt"
