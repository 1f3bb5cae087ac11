#!/usr/bin/env bash
# Runs on the GPU host (see ../shared/gpu/README.md). Builds in /tmp (once
# per machine), then does the steps asked for, in order; logs and results go
# to $OUT.
#   source .gpu-deps/env.sh && test/gpu.sh [steps...]
# steps:
#   --tests            the gpu suite (+ the sim suites there, cheap) and the demo
#   --tests-quick      the gpu suite without contract-gpu (~330 s)
#   --contract[=F]     test-contract on the GPU (cases whose label contains F),
#                      with a backtrace on a crash, to $OUT/contract-gpu.log
#   --bench[=S,S]      bench/run.sh, all sections or the ones named (with
#                      $BENCH_ARGS, e.g. "--samples 300")
#   --server           examples/server/run-gpu.sh (uvcuda vs thread pool)
#   --node             the Node.js gpu tests and the settle benchmark
#   --facts[=G,G]      bench/facts/run.sh (plain-driver experiments), groups as named
#   --fork-probe       test/gpu-probe/forkprobe.py: what the driver answers in a
#                      child forked after cuInit, to $OUT/forkprobe.txt
#   --ab=OLD_SRC       build the library at OLD_SRC (a source tree of an older
#                      revision) and run bench/ab.sh and bench/ab-server.sh
#                      (ROUNDS, default 3) against it, interleaved
#   --scaling-ab=OLD_SRC[,N]
#                      bench/ab-scaling.sh against the library at OLD_SRC, N
#                      interleaved rounds (default 2), adaptive off then on
#   --ab-adaptive      ab-server.sh today vs adaptive only (ROUNDS, default 3)
#   --ab-server=OLD_SRC ab-server.sh: the library at OLD_SRC, this build with
#                      adaptive off (twice: an A/A pair) and on (ROUNDS,
#                      default 2), the server's CPU per request on each line
#   --ab-server-libs=TAG:SRC[,TAG:SRC]
#                      ab-server.sh: the library at each source tree SRC, then
#                      this build's default twice (new, new-aa: an A/A pair),
#                      interleaved (ROUNDS, default 2; CONNS/DEPTH as there)
#   --node-http[=OLD_SRC]
#                      the Node HTTP benchmark (bindings/node/bench/http: 1 ms
#                      kernels; needs its node_modules carried along): this
#                      build's addon twice (A/A), the addon of the tree at
#                      OLD_SRC (run from that tree, with this tree's app.js
#                      and run.js copied into it), the thread pool; CPU per
#                      request on each line; NODE_TAGS="new old" runs only
#                      those
#   --python           bindings/python/run-gpu.sh: the Python package built
#                      here, its GPU tests with PyTorch's streams and its
#                      asyncio benchmark
#   --ab-adapt=N,TAG:SRC[,TAG:SRC]
#                      N interleaved rounds of the adapt and delivery sections
#                      (bench/ab-adapt.sh): this build ("new") against the
#                      library built from each source tree SRC
#   --tput[=N]         N rounds (default 2) of the throughput section, adaptive
#                      off then on
#   --repeat=N,S[,S]   N rounds of the bench sections named (e.g. adapt,delivery),
#                      each round to $OUT/repeat-rI, its target lines printed
#   --t20[=N]          what #20 still needs: the throughput and scaling sections
#                      with adaptive off and on (UVCUDA_ADAPTIVE), N rounds of
#                      throughput (default 2), then ab-server.sh today vs adaptive
#                      (ROUNDS, default 3), interleaved
#   --soak-start[=S]   start the soak (default 300 s) detached; survives this command
#   --soak-wait        wait for a started soak, copy its log to $OUT
# No step: --tests.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/uvcuda-out}
mkdir -p "$OUT"
B=/tmp/uvcuda-build
[ $# -eq 0 ] && set -- --tests
napi=disabled
[ -n "${NODE_INCLUDE_DIR:-}" ] && [ -d bindings/node ] && napi=enabled

if [ ! -f "$B/.built" ]; then
  rm -rf "$B"
  meson setup "$B" -Dtests=enabled -Dgpu_tests=enabled -Dbench=enabled -Dexamples=enabled \
    -Dnapi=$napi --buildtype=release > "$OUT/build.log" 2>&1 &&
    meson compile -C "$B" >> "$OUT/build.log" 2>&1
  rc=$?
  if [ $rc != 0 ]; then tail -40 "$OUT/build.log"; exit $rc; fi
  rm -f "$OUT/build.log"
  touch "$B/.built"
fi

# The library at source tree $1 (an older revision's, or a variant; tests,
# bench and examples off), once, into $2, for the A/B steps.
build_lib() {
  local real so b=$2-build
  [ -f "$2/.built" ] && return 0
  rm -rf "$b" "$2"
  # shellcheck disable=SC2086 # LIB_OPTS: more meson options, e.g. -Dprofile=true
  meson setup "$b" "$1" -Dtests=disabled -Dbench=disabled -Dexamples=disabled \
    --buildtype=release ${LIB_OPTS:-} > "$OUT/ab-build.log" 2>&1 &&
    meson compile -C "$b" >> "$OUT/ab-build.log" 2>&1 ||
    { tail -20 "$OUT/ab-build.log"; return 1; }
  mkdir -p "$2"
  cp -a "$b"/libuvcuda.so* "$2/"
  # Older revisions' soname was libuvcuda.so.0: the binaries of this build
  # look for theirs (libuvcuda.so.0.Y), so it names the old library too.
  real=$(cd "$2" && ls libuvcuda.so.*.*.* | head -1)
  so=$(LC_ALL=C readelf -d "$B/libuvcuda.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [ -n "$so" ] && [ ! -e "$2/$so" ] && ln -s "$real" "$2/$so"
  touch "$2/.built"
}

# The library at each TAG:SRC of the comma-separated list $1, once each,
# into /tmp/uvcuda-lib-TAG; `built` gets TAG:DIR for each. Fails at the
# first that does not build.
build_libs() {
  local spec tag srcs
  built=()
  IFS=, read -ra srcs <<< "$1"
  for spec in "${srcs[@]}"; do
    tag=${spec%%:*}
    build_lib "${spec#*:}" "/tmp/uvcuda-lib-$tag" || return 1
    built+=("$tag:/tmp/uvcuda-lib-$tag")
  done
}

# The library at OLD_SRC, into /tmp/uvcuda-old.
build_old() { build_lib "$1" /tmp/uvcuda-old; }

# The server A/B of this build with adaptive off (today) and on.
ab_adaptive() {
  bench/ab-server.sh "$B" "$OUT" "${ROUNDS:-3}" today:"$B":auto:0 adaptive:"$B":auto:1
}

# $1 rounds of the throughput section, adaptive off then on.
tput_rounds() {
  local r A d
  for r in $(seq 1 "$1"); do
    for A in 0 1; do
      d="$OUT/t20-tput-r$r-a$A"
      UVCUDA_ADAPTIVE=$A bench/run.sh "$B" "$d" --section throughput > /dev/null 2>&1
      grep -E "^ *(raw-launch|uvcuda-auto)|10k in flight" "$d/bench.txt" | sed "s/^/round $r adaptive=$A: /"
    done
  done
}

status=0
for a in "$@"; do
  case "$a" in
    --tests)
      { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } \
        > "$OUT/gpu-test.log" 2>&1
      # Timeouts cut to a third: a hang must not eat the device lease.
      meson test -C "$B" -v --suite gpu --num-processes 1 --timeout-multiplier 0.3 \
        >> "$OUT/gpu-test.log" 2>&1 || status=1
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):|fault \(|ERROR|child failed|^# (pass|fail|skip)" \
        "$OUT/gpu-test.log"
      meson test -C "$B" --suite unit --suite sim --num-processes 8 > /tmp/sim-test.log 2>&1
      echo "sim suites on the GPU host: rc=$?"; grep -E "^(Ok|Fail|Skipped|Timeout):" /tmp/sim-test.log
      "$B/examples/uvcuda-demo" 2>&1 | tee "$OUT/demo.log"
      ;;
    --tests-quick)
      # The gpu suite but contract-gpu (~330 s): for a call that also measures.
      { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } \
        > "$OUT/gpu-test.log" 2>&1
      # From introspection: `meson test --list` ignores --suite on the GPU
      # host's Meson, and no names would run every test (run 12).
      names=$(meson introspect --tests "$B" | python3 -c 'import json, sys
print(" ".join(t["name"] for t in json.load(sys.stdin)
               if any(s.split(":")[-1] == "gpu" for s in t["suite"]) and t["name"] != "contract-gpu"))')
      if [ -z "$names" ]; then echo "tests-quick: no gpu tests found" | tee -a "$OUT/gpu-test.log"; status=1; continue; fi
      # shellcheck disable=SC2086
      meson test -C "$B" -v --num-processes 1 --timeout-multiplier 0.3 $names \
        >> "$OUT/gpu-test.log" 2>&1 || status=1
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):|ERROR|^# (pass|fail|skip)" \
        "$OUT/gpu-test.log"
      ;;
    --contract*)
      f=${a#--contract}; f=${f#=}
      { nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
        date -u; grep -E "MemTotal|MemAvailable" /proc/meminfo; } >> "$OUT/contract-gpu.log" 2>&1
      # GPU and host memory every 0.5 s while it runs (the 64-context cases
      # once got CUDA_ERROR_OUT_OF_MEMORY from cuCtxCreate).
      ( while sleep 0.5; do
          echo "mem $(date +%T.%N | cut -c1-12) gpu_used_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)" \
            "host_avail_kib=$(awk '/MemAvailable/{print $2}' /proc/meminfo)"
        done ) > "$OUT/contract-mem.log" 2>&1 &
      sampler=$!
      UVCUDA_TEST_GPU=1 UVCUDA_TEST_BACKTRACE=1 "$B/test/test-contract" --gpu ${f:+"$f"} \
        >> "$OUT/contract-gpu.log" 2>&1 || status=1
      kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
      grep -E "^contract:|^crash" "$OUT/contract-gpu.log"
      ;;
    --bench) bench/run.sh "$B" "$OUT" ;;
    --bench=*)
      args=()
      IFS=, read -ra secs <<< "${a#--bench=}"
      for s in "${secs[@]}"; do args+=(--section "$s"); done
      bench/run.sh "$B" "$OUT" "${args[@]}" ${BENCH_ARGS:-}
      ;;
    --server) timeout 150 examples/server/run-gpu.sh "$B" "$OUT" || status=1 ;;
    --node)
      if [ "$napi" = enabled ] && [ -x bindings/node/run-gpu.sh ]; then
        timeout 150 bindings/node/run-gpu.sh "$B" "$OUT" || status=1
      else
        echo "node: not built (no NODE_INCLUDE_DIR or no bindings/node/run-gpu.sh)"
      fi
      ;;
    --facts*)
      g=${a#--facts}; g=${g#=}
      OUT=$OUT bash bench/facts/run.sh ${g//,/ } > /dev/null 2>&1
      cat "$OUT/driver-facts.txt"
      ;;
    --ab=*)
      build_old "${a#--ab=}" || { status=1; continue; }
      bench/ab.sh "$B" /tmp/uvcuda-old "$OUT" || status=1
      bench/ab-server.sh "$B" "$OUT" "${ROUNDS:-3}" \
        old:/tmp/uvcuda-old:auto new:"$B":auto || status=1
      ;;
    --scaling-ab=*)
      v=${a#--scaling-ab=}; old=${v%%,*}; n=2; [ "$v" != "$old" ] && n=${v#*,}
      build_old "$old" || { status=1; continue; }
      for A in 0 1; do
        UVCUDA_ADAPTIVE=$A bench/ab-scaling.sh "$B" /tmp/uvcuda-old "$OUT/scaling-ab-a$A" "$n" > /dev/null 2>&1 || status=1
        grep -E "^###|seen -> callback|scaling: uvcuda-auto" "$OUT/scaling-ab-a$A/ab-scaling.txt" | sed "s/^/adaptive=$A: /"
      done
      ;;
    --ab-adaptive) ab_adaptive || status=1 ;;
    --ab-server=*)
      build_lib "${a#--ab-server=}" /tmp/uvcuda-lib-old || { status=1; continue; }
      bench/ab-server.sh "$B" "$OUT" "${ROUNDS:-2}" old:/tmp/uvcuda-lib-old:auto \
        today:"$B":auto:0 today-aa:"$B":auto:0 adaptive:"$B":auto:1 || status=1
      ;;
    --node-http*)
      # uvcuda's variant with this build's addon (twice: an A/A pair) and,
      # with =OLD_SRC, the addon of the tree at OLD_SRC; the thread-pool
      # baseline once.
      old=${a#--node-http}; old=${old#=}
      if [ "$napi" != enabled ] || [ ! -d bindings/node/bench/http/node_modules ]; then
        echo "node-http: not run (no addon, or no node_modules in bindings/node/bench/http)"
        continue
      fi
      addons=(new:"$B/bindings/node/uvcuda.node" new-aa:"$B/bindings/node/uvcuda.node")
      if [ -n "$old" ]; then
        if [ ! -f /tmp/uvcuda-node-old/bindings/node/uvcuda.node ]; then
          meson setup /tmp/uvcuda-node-old "$old" -Dnapi=enabled -Dtests=disabled \
            -Dbench=disabled -Dexamples=disabled --buildtype=release > "$OUT/node-old-build.log" 2>&1 &&
            meson compile -C /tmp/uvcuda-node-old >> "$OUT/node-old-build.log" 2>&1 ||
            { tail -20 "$OUT/node-old-build.log"; status=1; continue; }
        fi
        addons=(old:/tmp/uvcuda-node-old/bindings/node/uvcuda.node "${addons[@]}")
        cp bindings/node/bench/http/app.js bindings/node/bench/http/run.js "$old/bindings/node/bench/http/"
      fi
      here=$PWD/bindings/node/bench/http
      for spec in "${addons[@]}" pool:; do
        tag=${spec%%:*}; addon=${spec#*:}; v=uvcuda; dir=$here
        # NODE_TAGS="new old": only those (a short call).
        [ -n "${NODE_TAGS:-}" ] && [[ " $NODE_TAGS " != *" $tag "* ]] && continue
        [ "$tag" = pool ] && { v=pool; addon="$B/bindings/node/uvcuda.node"; }
        # The old addon with its own tree's index.js (and this tree's
        # app.js/run.js copied there, for the CPU per request).
        [ "$tag" = old ] && dir=$old/bindings/node/bench/http
        (cd "$dir" && NODE_PATH="$here/node_modules" \
          UVCUDA_NODE_ADDON="$addon" \
          UVCUDA_POOL_ADDON="$B/bindings/node/bench/http/uvcuda_pool.node" \
          timeout 100 node run.js --variants $v --duration 4 --warmup 1 --kernel-us 1000 \
            --out "$OUT/node-http-$tag" > "$OUT/node-http-$tag.txt" 2>&1) || status=1
        grep -E "^\| $v |^counts per|FAILED" "$OUT/node-http-$tag.txt" | sed "s/^/$tag: /"
      done
      ;;
    --python)
      if [ -x bindings/python/run-gpu.sh ]; then
        OUT=$OUT timeout "${PY_TIMEOUT:-280}" bindings/python/run-gpu.sh || status=1
      else
        echo "python: bindings/python/run-gpu.sh is missing"
      fi
      ;;
    --fork-probe)
      timeout 60 python3 test/gpu-probe/forkprobe.py 2>&1 | tee "$OUT/forkprobe.txt" ;;
    --t20*)
      n=${a#--t20}; n=${n#=}; n=${n:-2}
      tput_rounds "$n"
      for A in 0 1; do
        d="$OUT/t20-scaling-a$A"
        UVCUDA_ADAPTIVE=$A bench/run.sh "$B" "$d" --section scaling > /dev/null 2>&1
        grep -E "seen -> callback|scaling: uvcuda-auto" "$d/bench.txt" | sed "s/^/adaptive=$A: /"
      done
      ab_adaptive || status=1
      ;;
    --ab-adapt=*)
      # N rounds of the adapt and delivery sections, this build's library
      # (tag "new") against the libraries at other source trees, interleaved.
      v=${a#--ab-adapt=}; n=${v%%,*}
      build_libs "${v#*,}" || { status=1; continue; }
      libs=(new:"$B" "${built[@]}")
      DELIVERY=1 bench/ab-adapt.sh "$B" "$OUT/ab-adapt" "$n" "${libs[@]}" > "$OUT/ab-adapt.txt" 2>&1 || status=1
      for f in "$OUT"/ab-adapt/r*.txt; do
        grep -E "^  adapt (rep|mixed|bimodal)|^ +floor here|^ +A/A: |rounds, same path" "$f" | sed "s|^|$(basename "$f" .txt): |"
      done
      ;;
    --ab-server-libs=*)
      build_libs "${a#--ab-server-libs=}" || { status=1; continue; }
      bench/ab-server.sh "$B" "$OUT" "${ROUNDS:-2}" "${built[@]/%/:auto}" \
        new:"$B":auto new-aa:"$B":auto || status=1
      ;;
    --tput*)
      n=${a#--tput}; n=${n#=}; tput_rounds "${n:-2}"
      ;;
    --repeat=*)
      v=${a#--repeat=}; n=${v%%,*}; args=()
      IFS=, read -ra secs <<< "${v#*,}"
      for s in "${secs[@]}"; do args+=(--section "$s"); done
      for r in $(seq 1 "$n"); do
        d="$OUT/repeat-r$r"
        bench/run.sh "$B" "$d" "${args[@]}" > /dev/null 2>&1 || status=1
        grep -E "^  round |pooled over|^  (adapt|delivery)[ :]|^ *workload |^  (raw-spin|uvcuda-today|uvcuda-adaptive) |per block|phases, p50" "$d/bench.txt" | grep -v "not measured$" | sed "s/^/round $r: /"
      done
      ;;
    --soak-start*)
      secs=${a#--soak-start}; secs=${secs#=}; secs=${secs:-300}
      rm -f /tmp/uvcuda-soak.txt /tmp/uvcuda-soak.done
      setsid bash -c "test/soak.sh '$B' /tmp '$secs' 4 > /dev/null 2>&1; cp /tmp/soak.txt /tmp/uvcuda-soak.txt; touch /tmp/uvcuda-soak.done" \
        < /dev/null > /dev/null 2>&1 &
      echo "soak started for $secs s"
      ;;
    --soak-wait)
      for _ in $(seq 1 560); do [ -f /tmp/uvcuda-soak.done ] && break; sleep 1; done
      if [ -f /tmp/uvcuda-soak.txt ]; then cp /tmp/uvcuda-soak.txt "$OUT/soak.txt"; tail -12 "$OUT/soak.txt"
      else echo "soak: no result (not finished?)"; cp /tmp/soak.txt "$OUT/soak.txt" 2>/dev/null; status=1; fi
      ;;
    *) echo "unknown step $a" >&2; exit 2 ;;
  esac
done
exit $status
