#!/usr/bin/env bash
# Runs uvcuda-bench once and plots it:
#   bench/run.sh BUILD_DIR OUT_DIR
# writes OUT_DIR/bench.txt (what it printed), OUT_DIR/bench.csv (every
# measurement), OUT_DIR/latency.png and OUT_DIR/scaling.png. The bench is
# bounded by its own section deadlines and watchdog (~4 min at most with
# default samples); `timeout 420` is the last resort. Extra arguments go to
# the bench (e.g. --quick, --section latency).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [bench options]" >&2
  exit 2
fi
build=$1
out=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
bench="$build/bench/uvcuda-bench"
if [ ! -x "$bench" ]; then
  echo "run.sh: $bench not built (meson setup BUILD -Dbench=enabled)" >&2
  exit 1
fi
mkdir -p "$out"
timeout -k 10 420 "$bench" --csv "$out/bench.csv" "$@" 2>&1 | tee "$out/bench.txt"
rc=${PIPESTATUS[0]}
case $rc in
  0) ;;
  124|137) echo "run.sh: uvcuda-bench hit the 420 s limit (rc=$rc); bench.csv has what it measured" | tee -a "$out/bench.txt" ;;
  *) echo "run.sh: uvcuda-bench exited with rc=$rc" | tee -a "$out/bench.txt" ;;
esac
if [ -s "$out/bench.csv" ]; then
  if ! python3 "$here/plot.py" "$out/bench.csv" "$out"; then
    echo "run.sh: plotting failed (python3 with matplotlib needed); the CSV and text are in $out"
  fi
else
  echo "run.sh: no CSV to plot"
fi
exit $rc
