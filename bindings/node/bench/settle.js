#!/usr/bin/env node
'use strict';
// Promise-settle latency: uvcuda (stream.launch / stream.fence, settled from
// the uvcuda loop callback) against the way addons do it today,
// napi_create_async_work whose execute runs the launch and a blocking
// cuStreamSynchronize on a libuv pool thread (stream.launchOnThreadPool /
// stream.fenceOnThreadPool), in the same process, interleaved.
//
//   node bindings/node/bench/settle.js [--quick] [--json FILE]
//        [--completion auto|reactor|hostfn|poll|...] [--iters N]
//
// Latency is measured from the call to the moment the awaiting code runs
// again (process.hrtime around `await`). With a kernel of D µs, the
// "overhead" column is latency - D. CPU is process.cpuUsage() (all threads:
// the pool thread's blocking synchronize, uvcuda's reactor thread) per
// operation. The sleep kernel (uvcuda_sleep_ns, kernels/kernels.ptx)
// spins on %globaltimer; on the simulated driver it is a host sleep, so
// numbers from the simulation say nothing about a GPU.

const fs = require('node:fs');
const path = require('node:path');
const os = require('node:os');

const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const quick = flag('--quick');
const jsonOut = opt('--json', null);
const completion = opt('--completion', null);
const iters = Number(opt('--iters', quick ? 40 : 2000));

const uvcuda = require(path.join(__dirname, '..'));
if (completion) uvcuda.configure({ completion });

// The test kernels: $UVCUDA_TEST_PTX, else the package's copy
// (kernels/kernels.ptx), else the repository's (support/kernels.ptx).
const ptxPath = [
  process.env.UVCUDA_TEST_PTX,
  path.join(__dirname, '..', 'kernels', 'kernels.ptx'),
  path.join(__dirname, '..', '..', '..', 'support', 'kernels.ptx'),
].find((p) => p && fs.existsSync(p));
if (!ptxPath) {
  console.error('settle: kernels.ptx not found (set UVCUDA_TEST_PTX)');
  process.exit(1);
}

function pct(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

function summarize(samplesUs) {
  const s = Float64Array.from(samplesUs).sort();
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return { n: s.length, p50: pct(s, 50), p90: pct(s, 90), p99: pct(s, 99), mean,
           min: s[0], max: s[s.length - 1] };
}

const now = () => process.hrtime.bigint();
const us = (t0, t1) => Number(t1 - t0) / 1000;

async function main() {
  const info = uvcuda.driverInfo();
  const dev = uvcuda.openDevice(0);
  const mod = dev.loadModule(fs.readFileSync(ptxPath, 'utf8'));
  const sleep = mod.getFunction('uvcuda_sleep_ns', ['u64']);
  const stream = dev.createStream();
  const st = uvcuda.stats();

  const methods = {
    uvcuda: {
      fence: () => stream.fence(),
      kernel: (ns) => stream.launch(sleep, 1, 1, [ns]),
    },
    'async_work+sync': {
      fence: () => stream.fenceOnThreadPool(),
      kernel: (ns) => stream.launchOnThreadPool(sleep, 1, 1, [ns]),
    },
  };

  // Warm up both paths (JIT, pool threads, timelines, reactor).
  for (let i = 0; i < (quick ? 10 : 200); i++) {
    for (const m of Object.values(methods)) {
      await m.fence();
      await m.kernel(1000n);
    }
  }

  const rows = [];
  // Sequential: one operation at a time, the two methods interleaved in
  // blocks so drift (clocks, other load) hits both alike.
  const cases = [
    { name: 'fence, idle stream', d: 0, run: (m) => m.fence() },
    ...(quick ? [0, 100] : [0, 10, 100, 1000]).map((d) => ({
      name: `kernel ${d} µs`, d, run: (m) => m.kernel(BigInt(d * 1000)),
    })),
  ];
  for (const c of cases) {
    const n = c.d >= 1000 ? Math.max(20, Math.floor(iters / 4)) : iters;
    const samples = { uvcuda: [], 'async_work+sync': [] };
    const cpu = { uvcuda: 0, 'async_work+sync': 0 };
    const block = 20;
    for (let done = 0; done < n; done += block) {
      for (const [name, m] of Object.entries(methods)) {
        const c0 = process.cpuUsage();
        for (let i = 0; i < block && done + i < n; i++) {
          const t0 = now();
          await c.run(m);
          samples[name].push(us(t0, now()));
        }
        const dc = process.cpuUsage(c0);
        cpu[name] += dc.user + dc.system;
      }
    }
    for (const name of Object.keys(methods)) {
      const s = summarize(samples[name]);
      rows.push({ case: c.name, method: name, kernelUs: c.d, ...s,
                  overheadP50: s.p50 - c.d, cpuUsPerOp: cpu[name] / s.n });
    }
  }

  // Concurrent: K streams, one 1 ms kernel each, all awaited together. (A
  // GPU runs kernels of at most CUDA_DEVICE_MAX_CONNECTIONS streams, 8 by
  // default, at once; more streams share hardware queues.)
  const conc = [];
  const rounds = quick ? 3 : 20;
  const kernelUs = 1000;
  for (const K of quick ? [4, 16] : [8, 64]) {
    const kstreams = Array.from({ length: K }, () => dev.createStream());
    for (const [name, how] of [
      ['uvcuda', (s) => s.launch(sleep, 1, 1, [BigInt(kernelUs * 1000)])],
      ['async_work+sync', (s) => s.launchOnThreadPool(sleep, 1, 1, [BigInt(kernelUs * 1000)])],
    ]) {
      const walls = [];
      const c0 = process.cpuUsage();
      for (let r = 0; r < rounds; r++) {
        const t0 = now();
        await Promise.all(kstreams.map(how));
        walls.push(us(t0, now()));
      }
      const dc = process.cpuUsage(c0);
      const s = summarize(walls);
      conc.push({ method: name, streams: K, kernelUs, rounds, wallP50: s.p50, wallMax: s.max,
                  cpuUsPerOp: (dc.user + dc.system) / (rounds * K) });
    }
    kstreams.forEach((s) => s.destroy());
  }

  const after = uvcuda.stats();
  const header = {
    date: new Date().toISOString(),
    node: process.version,
    uv: process.versions.uv,
    host: os.hostname(),
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0] && os.cpus()[0].model,
    threadpool: Number(process.env.UV_THREADPOOL_SIZE || 4),
    driverVersion: info.driverVersion,
    simulated: info.simulated,
    device: dev.name,
    completion: st.completion,
    spinBudgetUs: st.spinBudgetNs / 1000,
    iters,
    completedSpin: after.completedSpin,
    completedReactor: after.completedReactor,
    completedHostfn: after.completedHostfn,
  };

  const f = (x) => (Number.isFinite(x) ? x.toFixed(1) : '-');
  const out = [];
  out.push(`# uvcuda promise-settle latency (${header.simulated ? 'SIMULATED driver: not a GPU measurement' : header.device})`);
  out.push('');
  out.push(`node ${header.node} (libuv ${header.uv}), driver ${header.driverVersion}, ` +
           `completion ${header.completion}, spin budget ${header.spinBudgetUs} µs, ` +
           `UV_THREADPOOL_SIZE ${header.threadpool}, ${header.cpus} CPUs (${header.cpuModel})`);
  out.push('');
  out.push('| case | method | n | p50 µs | p90 µs | p99 µs | mean µs | p50 - kernel µs | CPU µs/op |');
  out.push('|---|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    out.push(`| ${r.case} | ${r.method} | ${r.n} | ${f(r.p50)} | ${f(r.p90)} | ${f(r.p99)} | ` +
             `${f(r.mean)} | ${f(r.overheadP50)} | ${f(r.cpuUsPerOp)} |`);
  }
  out.push('');
  out.push(`Concurrent: K streams x one ${kernelUs} µs kernel each, awaited together, ` +
           `${rounds} rounds`);
  out.push('');
  out.push('| streams | method | wall p50 µs | wall max µs | CPU µs/op |');
  out.push('|---:|---|---:|---:|---:|');
  for (const c of conc) {
    out.push(`| ${c.streams} | ${c.method} | ${f(c.wallP50)} | ${f(c.wallMax)} | ` +
             `${f(c.cpuUsPerOp)} |`);
  }
  out.push('');
  out.push(`uvcuda completions: ${header.completedSpin} in the spin, ` +
           `${header.completedReactor} by the reactor, ${header.completedHostfn} by host functions`);
  console.log(out.join('\n'));
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify({ header, rows, concurrent: conc }, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
