#!/usr/bin/env node
'use strict';
// The benchmark's HTTP app (run.js starts it; it can also run alone).
//
//   node app.js [--variant uvcuda|pool] [--port N] [--streams 8]
//               [--kernel-us 1000] [--elements 256] [--pool-addon PATH]
//               [--completion MODE] [--copy-out together|after]
//
// Listens on 127.0.0.1 only (port: --port, else $PORT, else ephemeral) and
// prints one line `READY {json}` with the port once it listens. Routes:
//   GET /gpu     one GPU round trip: copy `elements` u32 in, uvcuda_sleep_ns
//                (--kernel-us; 0: no sleep kernel), uvcuda_add_u32, copy
//                out, check every element; over --streams streams,
//                round-robin. 200 {"ok":true}, or 500 on an error or a
//                wrong result.
//   GET /nogpu   no GPU work: a small JSON.
//   GET /stats   this process's figures since the last reset (event-loop
//                delay from perf_hooks.monitorEventLoopDelay, GPU route
//                counters and timings); /stats?reset=1 resets after reading.
// --variant uvcuda: the binding's promises (stream.copyToDevice, launch,
//   copyFromDevice, all enqueued at once in stream order, awaited together;
//   --copy-out after: copyFromDevice enqueued once the kernels are done).
//   The host arrays are ordinary (pageable) memory: on a real driver a
//   device-to-host cuMemcpyDtoHAsync into pageable memory returns only once
//   the copy is done, i.e. after the work queued before it on the stream;
//   the /stats "enqueueUs" figures show what that costs the JS thread.
// --variant pool: the same work on the same streams and memory through
//   uvcuda_pool.node (pool-addon/): napi_create_async_work, whose execute
//   callback enqueues it and blocks in cuStreamSynchronize on a libuv pool
//   thread (UV_THREADPOOL_SIZE, 4 by default).
// SIGTERM / SIGINT / the parent's IPC channel closing: stop accepting, wait
// for GPU work in flight (10 s at most), print `FINAL {json}`, exit 0 (1 if
// any GPU request failed).

const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { monitorEventLoopDelay, createHistogram } = require('node:perf_hooks');
const { parseArgs, findPtx, findPoolAddon, summarize, SIM_NOTE } = require('./common');

const args = parseArgs(process.argv.slice(2));
const variant = args.get('variant', 'uvcuda');
if (variant !== 'uvcuda' && variant !== 'pool') {
  console.error(`app: --variant uvcuda|pool, not ${variant}`);
  process.exit(2);
}
const port = args.num('port', Number(process.env.PORT || 0));
const nstreams = Math.max(1, Math.floor(args.num('streams', 8)));
const kernelUs = args.num('kernel-us', 1000);
const elements = Math.max(1, Math.floor(args.num('elements', 256)));
const completion = args.get('completion', null);
const copyOut = args.get('copy-out', 'together');
if (copyOut !== 'together' && copyOut !== 'after') {
  console.error(`app: --copy-out together|after, not ${copyOut}`);
  process.exit(2);
}
const copyOutAfter = variant === 'uvcuda' && copyOut === 'after';

const uvcuda = require(path.join(__dirname, '..', '..'));
if (completion) uvcuda.configure({ completion });

const ptxPath = findPtx();
if (!ptxPath) {
  console.error('app: kernels.ptx not found (set UVCUDA_TEST_PTX)');
  process.exit(1);
}
const ptx = fs.readFileSync(ptxPath, 'utf8');

const info = uvcuda.driverInfo();
const dev = uvcuda.openDevice(0);
const mod = dev.loadModule(ptx);
const sleepK = mod.getFunction('uvcuda_sleep_ns', ['u64']);
const addK = mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
const streams = Array.from({ length: nstreams }, () => dev.createStream());
const sleepNs = BigInt(Math.round(kernelUs * 1000));
const bytes = elements * 4;
const grid = Math.ceil(elements / 256);

let pool = null;
let poolPath = null;
if (variant === 'pool') {
  const { found, tried } = findPoolAddon(args.get('pool-addon', null));
  if (!found) {
    console.error('app: uvcuda_pool.node not found; tried:\n  ' + tried.join('\n  ') +
                  '\nBuild it (meson compile, or node-gyp rebuild in pool-addon/) or set UVCUDA_POOL_ADDON.');
    process.exit(1);
  }
  poolPath = found;
  pool = require(found);
  // The driver uvcuda loaded (same path: dlopen returns the same library,
  // so the streams, memory and primary context are shared).
  pool.init(info.path, ptx, 0);
}

// Device buffers: one per request in flight, reused (allocation is
// synchronous and may wait for the device: none in the request path once
// the pool is warm). Both variants use the same pool.
const freeMem = [];
let deviceBuffers = 0;
function newMem() {
  deviceBuffers++;
  return dev.alloc(bytes);
}
function takeMem() {
  return freeMem.length ? freeMem.pop() : newMem();
}
for (let i = 0; i < Math.max(64, 4 * nstreams); i++) freeMem.push(newMem());

// ---- figures ------------------------------------------------------------

const eld = monitorEventLoopDelay({ resolution: 1 });
eld.enable();
let enqueueNs = createHistogram(); // a GPU request's time in the enqueue calls (JS thread)
let serviceNs = createHistogram(); // GPU request start to result checked
let counters;
let cpu0 = process.cpuUsage();
// uvcuda's own share of the wait, from its stats (cumulative there).
const COUNTS = ['started', 'completedSpin', 'completedReactor', 'reactorWakeups', 'predicted',
                'predictHit', 'predictLate', 'prewakes', 'reactorPolls', 'reactorSleeps'];
const waitStats = () => (variant === 'uvcuda' ? uvcuda.stats() : { reactorCpuNs: 0, spinNs: 0 });
let wait0 = waitStats();
function resetCounters() {
  counters = { gpuOk: 0, gpuErrors: 0, checkFailures: 0, nogpu: 0, maxInflight: inflight };
  cpu0 = process.cpuUsage(); // the whole process: every thread, uvcuda's reactor too
  wait0 = waitStats();
  enqueueNs = createHistogram();
  serviceNs = createHistogram();
  eld.reset();
}
let inflight = 0;
let totalGpuErrors = 0;
let lastError = null;
resetCounters();
const started = Date.now();

function stats() {
  const wait = waitStats();
  return {
    variant,
    simulated: info.simulated,
    note: info.simulated ? SIM_NOTE : undefined,
    uptimeS: (Date.now() - started) / 1000,
    eventLoopDelayMs: summarize(eld, 1e6),
    gpu: { ok: counters.gpuOk, errors: counters.gpuErrors, checkFailures: counters.checkFailures,
           inflight, maxInflight: counters.maxInflight, deviceBuffers, lastError },
    nogpu: counters.nogpu,
    enqueueUs: summarize(enqueueNs, 1e3),
    serviceUs: summarize(serviceNs, 1e3),
    cpuUs: (({ user, system }) => user + system)(process.cpuUsage(cpu0)),
    // Since the last reset: the reactor thread's CPU, and the JS thread's
    // time between two spinning passes (it never slept: the spin's share).
    reactorCpuUs: variant === 'uvcuda' ? (wait.reactorCpuNs - wait0.reactorCpuNs) / 1e3 : null,
    spinUs: variant === 'uvcuda' ? (wait.spinNs - wait0.spinNs) / 1e3 : null,
    // Since the last reset: what the waits did (futures started, seen done
    // by the spin and by the reactor, its wake-ups of the loop, passes and
    // sleeps).
    waitCounts: variant === 'uvcuda' ? Object.fromEntries(COUNTS.map((k) => [k, wait[k] - wait0[k]])) : null,
  };
}

// ---- the GPU round trip ---------------------------------------------------

let rr = 0;
let reqId = 0;

function settleAll(ops) {
  return Promise.allSettled(ops).then((rs) => {
    const bad = rs.find((r) => r.status === 'rejected');
    if (bad) throw bad.reason;
  });
}

async function gpuRequest() {
  const id = ++reqId;
  const s = streams[rr++ % nstreams];
  const input = new Uint32Array(elements);
  const output = new Uint32Array(elements);
  const base = Math.imul(id, 2654435761) >>> 0;
  for (let i = 0; i < elements; i++) input[i] = (base + i) >>> 0;
  const value = (id & 0xffff) + 1;
  const mem = takeMem();
  inflight++;
  if (inflight > counters.maxInflight) counters.maxInflight = inflight;
  const t0 = process.hrtime.bigint();
  let syncNs = 0n; // time the JS thread spent in the enqueue calls
  try {
    let done;
    if (pool) {
      done = pool.roundTrip(s.handle, mem.ptr, input, output, sleepNs, value);
    } else {
      // Everything enqueued at once (stream order keeps it right), one
      // promise per operation, awaited together; allSettled: the memory
      // goes back to the pool only once none of them is pending. With
      // --copy-out after, the copy back is enqueued once the kernels are
      // done (and timed as enqueue work too).
      const ops = [s.copyToDevice(mem, input)];
      if (sleepNs > 0n) ops.push(s.launch(sleepK, 1, 1, [sleepNs]));
      ops.push(s.launch(addK, grid, 256, [mem, elements, value]));
      if (!copyOutAfter) ops.push(s.copyFromDevice(output, mem));
      done = settleAll(ops);
      if (copyOutAfter) {
        done = done.then(() => {
          const t2 = process.hrtime.bigint();
          const p = s.copyFromDevice(output, mem);
          syncNs += process.hrtime.bigint() - t2;
          return p;
        });
      }
    }
    syncNs += process.hrtime.bigint() - t0;
    await done;
    enqueueNs.record(Math.max(1, Number(syncNs)));
    serviceNs.record(Math.max(1, Number(process.hrtime.bigint() - t0)));
  } finally {
    inflight--;
    freeMem.push(mem);
  }
  for (let i = 0; i < elements; i++) {
    if (output[i] !== ((input[i] + value) >>> 0)) {
      const e = new Error(`wrong result at ${i}: ${output[i]} != ${input[i]} + ${value}`);
      e.code = 'ECHECK';
      throw e;
    }
  }
}

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = req.url;
  if (url === '/nogpu') {
    counters.nogpu++;
    send(res, 200, JSON.stringify({ ok: true, route: 'nogpu', n: counters.nogpu }));
  } else if (url === '/gpu') {
    gpuRequest().then(
      () => {
        counters.gpuOk++;
        send(res, 200, '{"ok":true,"route":"gpu"}');
      },
      (err) => {
        if (err && err.code === 'ECHECK') counters.checkFailures++;
        else counters.gpuErrors++;
        totalGpuErrors++;
        lastError = String(err && (err.stack || err));
        if (totalGpuErrors <= 5) console.error('app: /gpu failed:', err);
        send(res, 500, JSON.stringify({ ok: false, error: String(err && err.message) }));
      });
  } else if (url === '/stats' || url === '/stats?reset=1') {
    const body = JSON.stringify(stats());
    if (url.endsWith('reset=1')) resetCounters();
    send(res, 200, body);
  } else {
    send(res, 404, '{"ok":false,"error":"not found"}');
  }
});
server.keepAliveTimeout = 30000;

server.listen(port, '127.0.0.1', () => {
  const ready = {
    port: server.address().port,
    pid: process.pid,
    variant,
    simulated: info.simulated,
    driverPath: info.path,
    driverVersion: info.driverVersion,
    device: dev.name,
    streams: nstreams,
    kernelUs,
    elements,
    copyOut: variant === 'uvcuda' ? copyOut : 'n/a (one pool task)',
    completion: uvcuda.stats().completion,
    threadpool: Number(process.env.UV_THREADPOOL_SIZE || 4),
    poolAddon: poolPath,
    node: process.version,
    uv: process.versions.uv,
  };
  console.log('READY ' + JSON.stringify(ready));
});

let stopping = false;
function shutdown(why) {
  if (stopping) return;
  stopping = true;
  server.close();
  if (server.closeAllConnections) server.closeAllConnections();
  const deadline = Date.now() + 10000;
  const wait = setInterval(() => {
    if (inflight > 0 && Date.now() < deadline) return;
    clearInterval(wait);
    const final = { why, ...stats(), totalGpuErrors, uvcudaStats: uvcuda.stats() };
    console.log('FINAL ' + JSON.stringify(final));
    if (inflight === 0) {
      for (const m of freeMem) m.free();
      for (const s of streams) s.destroy();
    }
    eld.disable();
    process.exitCode = totalGpuErrors || inflight ? 1 : 0;
    if (process.connected) process.disconnect();
    // Nothing else should hold the loop; exit anyway if something does.
    setTimeout(() => process.exit(), 2000).unref();
  }, 5);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('disconnect', () => shutdown('parent gone'));
