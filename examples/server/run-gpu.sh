#!/usr/bin/env bash
# uvcuda-server on a GPU host: the end-to-end checks against the real driver,
# then uvcuda futures vs uv_queue_work + cuStreamSynchronize with ~1k
# requests in flight, as one table. Bounded: every step has a timeout, and a
# step starts only while the whole run stays under BUDGET_S (default 88 s).
#
#   source .gpu-deps/env.sh && examples/server/run-gpu.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR: a meson build with -Dexamples=enabled. Writes two files:
# OUT_DIR/server-bench.md (the table) and OUT_DIR/server-bench.log (details).
# Env: BUDGET_S; DURATION_S (load per row, default 3); SKIP_E2E=1;
# DRY_RUN_SIM=1 runs everything on the simulated driver, to check this
# script where there is no GPU (the numbers are then meaningless, and the
# table says so).
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
B=$1
OUT=$2
S="$B/examples/server"
BUDGET_S=${BUDGET_S:-88}
DURATION_S=${DURATION_S:-3}
T0=$(date +%s)
mkdir -p "$OUT"
MD="$OUT/server-bench.md"
LOG="$OUT/server-bench.log"
TMP=$(mktemp -d /tmp/uvcuda-server-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
: > "$LOG"

elapsed() { echo $(($(date +%s) - T0)); }
say() { echo "$*" | tee -a "$LOG"; }

for f in uvcuda-server uvcuda-load uvcuda-server-e2e; do
  if [ ! -x "$S/$f" ]; then
    say "missing $S/$f: build with meson -Dexamples=enabled first"
    exit 2
  fi
done

GPU_FLAG=--gpu
REQUIRE=--require-gpu
HOST="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
if [ "${DRY_RUN_SIM:-0}" = 1 ]; then
  GPU_FLAG=
  REQUIRE=
  export UVCUDA_LIBCUDA=${UVCUDA_LIBCUDA:-$B/test/sim/libsimcuda.so}
  HOST="SIMULATED driver ($UVCUDA_LIBCUDA)"
  say "DRY_RUN_SIM=1: everything runs on the simulated driver; these are not GPU numbers"
fi
{
  echo "host: ${HOST:-?}; $(nproc) CPUs; $(date -u)"
} >> "$LOG"

# ---- 1. end-to-end checks (the gpu suite's cases, run directly) -----------
E2E_END_S=40 # the checks end by then
e2e_rc=0
if [ "${SKIP_E2E:-0}" != 1 ]; then
  say "== end-to-end checks"
  for run in load:uvcuda malformed:uvcuda limits:uvcuda shutdown:uvcuda \
             load:threadpool shutdown:threadpool load:once; do
    c=${run%%:*}
    m=${run##*:}
    if [ $(($(elapsed) + 20)) -gt $E2E_END_S ]; then
      say "e2e $c/$m: SKIPPED (time budget)"
      continue
    fi
    # shellcheck disable=SC2086
    timeout -k 2 20 "$S/uvcuda-server-e2e" "$S/uvcuda-server" "$S/uvcuda-load" \
      "$c" "$m" $GPU_FLAG > "$TMP/e2e.log" 2>&1
    rc=$?
    grep -E "^e2e " "$TMP/e2e.log" | grep -v ": PASS$" >> "$LOG"
    case $rc in
      0) say "e2e $c/$m: PASS" ;;
      77) say "e2e $c/$m: SKIPPED ($(tail -1 "$TMP/e2e.log"))"; e2e_rc=77 ;;
      *) say "e2e $c/$m: FAIL (rc $rc)"; tail -15 "$TMP/e2e.log" | tee -a "$LOG"; e2e_rc=1 ;;
    esac
    [ $rc = 77 ] && break
  done
fi

# ---- 2. the comparison --------------------------------------------------
# Each row: a fresh server, 1000 idle pings, then 4 client threads x 64
# connections x depth 16 = 1024 requests in flight for DURATION_S, with one
# ping at a time every 1 ms from its own connection and client thread.
# shellcheck disable=SC2206 # $REQUIRE: one word or none
SERVER_COMMON=(--port 0 $REQUIRE --streams 16 --slots 2048 --slot-bytes 16384
               --large-slots 4 --max-request 1048576 --max-conns 512 --pipeline 64
               --max-sleep-us 100000)
CLIENT_COMMON=(--threads 4 --conns 64 --depth 16 --requests 1000000
               --duration-s "$DURATION_S" --idle-pings 1000 --ping-interval-us 1000
               --timeout-s $((DURATION_S + 8)))
ROW_MAX=$((8 + DURATION_S + 10 + 6)) # start + client + stop, at worst
ROWS=()

row() { # workload label UV_THREADPOOL_SIZE "server args" "client args"
  local wl=$1 label=$2 tps=$3 sargs=$4 cargs=$5 pf="$TMP/port" spid port res busy rc src
  if [ $(($(elapsed) + ROW_MAX)) -gt "$BUDGET_S" ]; then
    say "row $wl / $label: SKIPPED (time budget)"
    return
  fi
  rm -f "$pf"
  # shellcheck disable=SC2086
  UV_THREADPOOL_SIZE=$tps "$S/uvcuda-server" "${SERVER_COMMON[@]}" --port-file "$pf" \
    $sargs > "$TMP/server.out" 2> "$TMP/server.err" &
  spid=$!
  for _ in $(seq 80); do
    [ -s "$pf" ] && break
    kill -0 $spid 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$pf" ]; then
    say "row $wl / $label: the server did not start"
    cat "$TMP/server.out" "$TMP/server.err" | tail -5 | tee -a "$LOG"
    kill -KILL $spid 2>/dev/null
    wait $spid 2>/dev/null
    return
  fi
  port=$(cat "$pf")
  # shellcheck disable=SC2086
  timeout -k 2 $((DURATION_S + 10)) "$S/uvcuda-load" --port "$port" "${CLIENT_COMMON[@]}" \
    --label "$label" $cargs > "$TMP/client.out" 2> "$TMP/client.err"
  rc=$?
  kill -TERM $spid 2>/dev/null
  for _ in $(seq 50); do
    kill -0 $spid 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $spid 2>/dev/null; then
    say "row $wl / $label: the server did not exit within 5 s of SIGTERM"
    kill -KILL $spid 2>/dev/null
  fi
  wait $spid
  src=$?
  {
    echo "---- $wl / $label (UV_THREADPOOL_SIZE=$tps; server: $sargs; client: $cargs)"
    cat "$TMP/server.out" "$TMP/server.err" "$TMP/client.out"
    head -20 "$TMP/client.err"
    echo "client rc=$rc server rc=$src"
  } >> "$LOG"
  res=$(grep '^RESULT' "$TMP/client.out")
  busy=$(grep -o 'busy under load [0-9.]*%' "$TMP/server.err" | grep -o '[0-9.]*%')
  if [ -z "$res" ]; then
    say "row $wl / $label: no result (client rc $rc, server rc $src)"
    return
  fi
  if [ $rc != 0 ] || [ $src != 0 ]; then
    say "row $wl / $label: client rc $rc, server rc $src (see the log)"
  fi
  say "row $wl / $label: $(cut -c1-200 <<< "$res")"
  ROWS+=("$wl|$label|$res|${busy:-?}")
}

val() { # "RESULT ... key=value ..." key
  local kv
  for kv in $1; do
    if [ "${kv%%=*}" = "$2" ]; then
      echo "${kv#*=}"
      return
    fi
  done
  echo "?"
}

say "== uvcuda vs threadpool: 1024 requests in flight, ${DURATION_S} s per row"
MIX="--op mix --size 4096"
SLEEP="--op sleep --sleep-us 1000"
# The main pair first: rows the time budget cuts come from the end.
row "mix 4 KiB" uvcuda 4 "" "$MIX"
row "mix 4 KiB" threadpool 4 "--threadpool" "$MIX"
row "sleep 1 ms" uvcuda 4 "" "$SLEEP"
row "sleep 1 ms" threadpool 4 "--threadpool" "$SLEEP"
row "mix 4 KiB" uvcuda-once 4 "--await once" "$MIX"
row "mix 4 KiB" uvcuda-batch8 4 "--batch 8" "$MIX"
row "mix 4 KiB" threadpool-16 16 "--threadpool" "$MIX"
row "sleep 1 ms" threadpool-16 16 "--threadpool" "$SLEEP"

{
  echo "## uvcuda-server: uvcuda futures vs uv_queue_work + cuStreamSynchronize"
  echo
  if [ "${DRY_RUN_SIM:-0}" = 1 ]; then
    echo "**DRY RUN ON THE SIMULATED DRIVER: these are not GPU numbers.**"
    echo
  fi
  echo "${HOST:-?}, $(nproc) CPUs, $(date -u +%Y-%m-%d). Server: one loop thread, 16"
  echo "streams. Client: 4 threads x 64 connections x depth 16 = 1024 requests in flight"
  echo "for ${DURATION_S} s per row, every reply verified. Ping: one at a time every 1 ms on its"
  echo "own connection and client thread; idle = 1000 pings before the load, same server."
  echo "mix = checksum (uvcuda_checksum_u8) and add (uvcuda_add_u32) alternately;"
  echo "sleep = a 1 ms kernel (uvcuda_sleep_ns) per request, GPU-bound: 16 streams allow"
  echo "16 k req/s, 4 threads 4 k req/s."
  echo
  echo "| workload | server | req/s | MiB/s | p50 µs | p99 µs | ping idle p99 µs | ping p99 µs under load (mean in flight) | ratio (target ≤ 1.2) | server loop busy under load | wrong replies |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r wl label res busy <<< "$r"
    ratio=$(val "$res" ratio)
    ok=$(awk -v r="$ratio" 'BEGIN { print (r + 0 > 0 && r + 0 <= 1.2) ? "met" : "missed" }')
    case $label in
      uvcuda) srv="uvcuda, a future per step" ;;
      uvcuda-once) srv="uvcuda, one future per request" ;;
      uvcuda-batch8) srv="uvcuda, a future per step, --batch 8" ;;
      threadpool) srv="threadpool, 4 threads" ;;
      threadpool-16) srv="threadpool, 16 threads" ;;
      *) srv=$label ;;
    esac
    echo "| $wl | $srv | $(val "$res" rps) | $(val "$res" mibps) | $(val "$res" p50_us) | $(val "$res" p99_us) | $(val "$res" ping_idle_p99_us) | $(val "$res" ping_load_p99_us) ($(val "$res" inflight)) | $ratio ($ok) | $busy | $(val "$res" bad) |"
  done
  echo
  case $e2e_rc in
    0) echo "End-to-end checks: every case run passed." ;;
    77) echo "End-to-end checks: skipped (no real GPU)." ;;
    *) echo "End-to-end checks: FAILURES, see server-bench.log." ;;
  esac
  echo "Total $(elapsed) s."
} > "$MD"
cat "$MD"
echo "(table: $MD; details: $LOG)"
[ $e2e_rc = 1 ] && exit 1
exit 0
