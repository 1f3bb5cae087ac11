#!/usr/bin/env bash
# A/B of the TCP server's main row (mix 4 KiB, a future per step, 1024 in
# flight, 3 s) across library builds and strategies, interleaved over
# ROUNDS rounds, on the GPU host. Each line gives the server process's CPU
# per request (every thread: the loop, uvcuda's reactor, the driver's),
# from /proc between the server's readiness and the end of the load. Each VARIANT is TAG:LIBDIR:COMPLETION[:A]
# (LIBDIR holds libuvcuda.so under this build's soname; COMPLETION sets UVCUDA_COMPLETION; A, 0 or
# 1, sets UVCUDA_ADAPTIVE, unset by default). CONNS and DEPTH (default 64
# and 16: 1024 in flight, the loop thread saturated) set the load's shape:
# CONNS=8 DEPTH=1 is a steady light load, where the server waits on the
# GPU between requests and what a wait costs shows in CPU per request.
#   bench/ab-server.sh BUILD_DIR OUT_DIR ROUNDS VARIANT...
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?build dir}; OUT=${2:?out dir}; ROUNDS=${3:?rounds}; shift 3
S="$B/examples/server"
mkdir -p "$OUT"
TMP=$(mktemp -d)
HZ=$(getconf CLK_TCK)
# utime + stime of process $1, in clock ticks (all its threads).
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
for v in "$@"; do
  IFS=: read -r tag lib comp _ <<< "$v"
  got=$(LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" ldd "$S/uvcuda-server" | grep -o '=> [^ ]*libuvcuda[^ ]*')
  echo "$tag: $got" | tee -a "$OUT/ab-server.txt"
  case "$got" in *"$lib/libuvcuda"*) ;; *) echo "ab-server.sh: $tag does not load $lib"; exit 1 ;; esac
done
for r in $(seq 1 "$ROUNDS"); do
  for v in "$@"; do
    IFS=: read -r tag lib comp adapt <<< "$v"
    rm -f "$TMP/port"
    LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}" UVCUDA_COMPLETION=$comp UV_THREADPOOL_SIZE=4 \
      env ${adapt:+UVCUDA_ADAPTIVE=$adapt} "$S/uvcuda-server" --port 0 ${REQUIRE---require-gpu} --streams 16 --slots 2048 --slot-bytes 16384 \
      --large-slots 4 --max-request 1048576 --max-conns 512 --pipeline 64 --max-sleep-us 100000 \
      --port-file "$TMP/port" > "$TMP/s.out" 2> "$TMP/s.err" &
    spid=$!
    for _ in $(seq 80); do [ -s "$TMP/port" ] && break; sleep 0.1; done
    c0=$(ticks $spid)
    res=$(timeout 20 "$S/uvcuda-load" --port "$(cat "$TMP/port" 2>/dev/null || echo 1)" \
      --threads 4 --conns "${CONNS:-64}" --depth "${DEPTH:-16}" --requests 1000000 --duration-s 3 --idle-pings 300 \
      --ping-interval-us 1000 --timeout-s 11 --label "$tag" --op mix --size 4096 --quiet 2>&1 | grep '^RESULT')
    c1=$(ticks $spid)
    kill -TERM $spid 2>/dev/null; wait $spid 2>/dev/null
    # KEEP_ERR=1: the server's stderr (its exit lines; a -Dprofile=true
    # library's step times) to OUT.
    [ "${KEEP_ERR:-0}" = 1 ] && cp "$TMP/s.err" "$OUT/server-$tag-r$r.err"
    reqs=$(grep -o 'reqs=[0-9]*' <<< "$res" | cut -d= -f2)
    cpu=$(awk -v d=$((c1 - c0)) -v hz="$HZ" -v n="${reqs:-0}" \
      'BEGIN { if (n > 0) printf "server CPU %.2f us/req", d * 1e6 / hz / n; else print "server CPU -" }')
    busy=$(grep -o 'busy under load [0-9.]*%' "$TMP/s.err")
    adapt=$(grep -o 'adaptive: [0-9]* predicted[^;]*' "$TMP/s.err")
    # Of it, over the server's whole run (its stats at exit): the loop's
    # time in uvcuda's spin and the reactor thread's CPU, per request; and
    # what the wait did, per request: futures started, seen done by the
    # loop's spin and by the reactor, loop wake-ups it rang, its passes
    # (polls) and its sleeps. One pass over the line, the two parts split
    # by a tab.
    IFS=$'\t' read -r split counts < <(awk -v n="${reqs:-0}" '/uvcuda-server: futures:/ {
        for (i = 1; i <= NF; i++) {
          if ($(i + 1) == "ms" && $(i + 2) ~ /^spinning/) spin = $i
          if ($i == "CPU" && $(i - 1) == "reactor") rcpu = $(i + 1)
          if ($(i + 1) == "started,") st = $i
          if ($(i + 1) == "seen" && $(i + 2) == "spinning,") sp = $i
          if ($(i + 2) == "the" && $(i + 3) ~ /^reactor/) re = $i
          if ($(i + 1) == "reactor" && $(i + 2) ~ /^wakeups/) wk = $i
          if ($(i + 1) ~ /^polls/) po = $i
          if ($(i + 1) ~ /^sleeps/) sl = $i }
        if (n > 0) printf "loop spin %.2f, reactor %.2f us/req\tper req: %.2f futures, %.2f seen spinning, %.2f by the reactor, %.2f wakeups, %.2f reactor polls, %.2f sleeps\n", spin * 1e3 / n, rcpu * 1e3 / n, st / n, sp / n, re / n, wk / n, po / n, sl / n }' "$TMP/s.err")
    echo "round $r $tag ($comp, $lib, ${CONNS:-64}x${DEPTH:-16} in flight): ${res:-no result} [$cpu${split:+ ($split)}; $busy${adapt:+; $adapt}${counts:+; $counts}]" | tee -a "$OUT/ab-server.txt"
  done
done
rm -rf "$TMP"
