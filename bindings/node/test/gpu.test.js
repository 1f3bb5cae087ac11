'use strict';
// gpu suite: the real driver and a real GPU. Where there is none (no driver,
// no device, or the loaded driver is uvcuda's simulation) every test is
// skipped: under `node --test` (npm test) through test(name, { skip }), and
// when run directly by Meson's gpu suite (UVCUDA_TEST_GPU=1, not under
// node --test) by exit code 77, which Meson shows as skipped.
// UVCUDA_GPU_TEST_ON_SIM=1 runs it on the simulation anyway, to check the
// test itself; the results then say nothing about a GPU.

const nodeTest = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const http = require('node:http');
const { Worker } = require('node:worker_threads');
const { driver, gpuSkip } = require('./env');

const onSim = driver.ok && driver.simulated && process.env.UVCUDA_GPU_TEST_ON_SIM === '1';
const skip = onSim ? false : gpuSkip;
if (skip && process.env.UVCUDA_TEST_GPU === '1' && !process.env.NODE_TEST_CONTEXT) {
  console.log(`1..0 # SKIP ${skip}`);
  process.exit(77);
}

/** node:test's test(name, [options], fn), skipped without a GPU. */
function test(name, options, fn) {
  if (typeof options === 'function') [options, fn] = [{}, options];
  return nodeTest(name, { ...options, skip: skip || options.skip }, fn);
}

const { uvcuda, setup, grid, fnv1a, bytes, runChild, lastJson } = require('./common');
const info = skip ? {} : uvcuda.driverInfo();
const k = skip ? {} : setup();
const { dev } = k;
if (!skip) console.log(`# ${dev.name}, compute capability ${dev.computeCapability.join('.')}, ` +
            `driver ${info.driverVersion}, memops64 ${info.memops64}`);

test('a real device and driver', { skip: onSim && 'on the simulation' }, () => {
  assert.equal(info.simulated, false);
  assert.ok(info.driverVersion >= 12000);
  assert.doesNotMatch(dev.name, /simulated/);
  assert.ok(dev.computeCapability[0] >= 7);
});

test('64 MiB round trip through device memory', async () => {
  const s = dev.createStream();
  const src = bytes(64 << 20, 11);
  const m = dev.alloc(src.length);
  await s.copyToDevice(m, src);
  const dst = await s.copyFromDevice(new Uint8Array(src.length), m);
  assert.ok(Buffer.compare(Buffer.from(dst.buffer), Buffer.from(src.buffer)) === 0);
});

test('uvcuda_add_u32 on 16 Mi elements gives the right bytes', async () => {
  const s = dev.createStream();
  const n = 16 << 20;
  const a = new Uint32Array(n);
  for (let i = 0; i < n; i++) a[i] = (i * 2654435761) >>> 0;
  const m = dev.alloc(a.byteLength);
  await s.copyToDevice(m, a);
  await s.launch(k.add, grid(n), 256, [m, n, 12345]);
  await s.launch(k.add, grid(n), 256, [m, n, 1]);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  let bad = -1;
  for (let i = 0; i < n; i++) {
    if (out[i] !== ((a[i] + 12346) >>> 0)) { bad = i; break; }
  }
  assert.equal(bad, -1, `element ${bad}: ${out[bad]} != ${a[bad]} + 12346`);
});

test('uvcuda_checksum_u8 over 8 MiB matches FNV-1a in JS', async () => {
  const s = dev.createStream();
  const data = bytes(8 << 20, 5);
  const din = dev.alloc(data.length);
  const dout = dev.alloc(4);
  await s.copyToDevice(din, data);
  await s.launch(k.checksum, 1, 1, [din, data.length, dout]);
  const out = await s.copyFromDevice(new Uint32Array(1), dout);
  assert.equal(out[0], fnv1a(data));
});

test('copies with offsets, memset and device-to-device copies', async () => {
  const s = dev.createStream();
  const src = bytes(1 << 20, 17);
  const a = dev.alloc(src.length);
  const b = dev.alloc(src.length + 4096);
  await s.copyToDevice(a, src);
  await s.memset(b, 0x5c);
  await s.copyDevice(b, a, 1000, 4096, 77);
  const out = await s.copyFromDevice(new Uint8Array(b.byteLength), b);
  assert.deepEqual(out.subarray(4096, 5096), src.subarray(77, 1077));
  assert.ok(out.subarray(0, 4096).every((v) => v === 0x5c));
  assert.ok(out.subarray(5096).every((v) => v === 0x5c));
});

test('a 20 ms kernel: the promise waits for it, the JS thread does not', async () => {
  const s = dev.createStream();
  let turns = 0;
  let spinning = true;
  const spin = () => { turns++; if (spinning) setImmediate(spin); };
  setImmediate(spin);
  const t0 = process.hrtime.bigint();
  await s.launch(k.sleep, 1, 1, [20_000_000n]);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  spinning = false;
  assert.ok(ms >= 19, `resolved after ${ms} ms`);
  assert.ok(turns > 100, `only ${turns} event-loop turns in ${ms} ms`);
});

test('1,000 concurrent launches on one buffer add up exactly', async () => {
  const s = dev.createStream();
  const n = 1 << 16;
  const m = dev.alloc(4 * n);
  await s.memset(m, 0);
  const ps = [];
  for (let i = 0; i < 1000; i++) ps.push(s.launch(k.add, grid(n), 256, [m, n, 1]));
  await Promise.all(ps);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  assert.ok(out.every((v) => v === 1000), `got ${out[0]}`);
});

function get(port) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ body, ms: Number(process.hrtime.bigint() - t0) / 1e6 }));
    }).on('error', reject);
  });
}

test('an HTTP server on loopback keeps answering while 1,000 GPU promises are pending', async () => {
  const server = http.createServer((req, res) => res.end('ok'));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  try {
    const streams = Array.from({ length: 10 }, () => dev.createStream());
    const n = 1 << 14;
    const bufs = streams.map(() => dev.alloc(4 * n));
    await Promise.all(streams.map((s, i) => s.memset(bufs[i], 0)));
    let settled = 0;
    const ps = [];
    const t0 = process.hrtime.bigint();
    for (let r = 0; r < 100; r++) {
      for (let j = 0; j < streams.length; j++) {
        // 5 ms kernels, an add after every tenth: ~0.5 s of GPU work per stream
        ps.push(streams[j].launch(k.sleep, 1, 1, [5_000_000n]).then(() => { settled++; }));
        if (r % 10 === 9) {
          ps.push(streams[j].launch(k.add, grid(n), 256, [bufs[j], n, 1])
            .then(() => { settled++; }));
        }
      }
    }
    const enqMs = Number(process.hrtime.bigint() - t0) / 1e6;
    const pending = uvcuda.stats().pending;
    // the pool is free too: fs calls are not stuck behind GPU waits
    const f0 = process.hrtime.bigint();
    await fs.promises.stat(__filename);
    const fsMs = Number(process.hrtime.bigint() - f0) / 1e6;
    const lat = [];
    while (settled < ps.length) {
      const r = await get(port);
      assert.equal(r.body, 'ok');
      lat.push(r.ms);
    }
    await Promise.all(ps);
    const winMs = Number(process.hrtime.bigint() - t0) / 1e6;
    lat.sort((a, b) => a - b);
    const p = (q) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(q * lat.length))] : NaN);
    console.log(`# ${pending} promises pending (enqueued in ${enqMs.toFixed(1)} ms, all settled ` +
                `after ${winMs.toFixed(1)} ms); ${lat.length} HTTP answers meanwhile: ` +
                `p50 ${p(0.5).toFixed(2)} ms, p99 ${p(0.99).toFixed(2)} ms, ` +
                `max ${p(1).toFixed(2)} ms; fs.stat ${fsMs.toFixed(2)} ms`);
    assert.ok(pending >= 1000, `only ${pending} pending`);
    assert.ok(lat.length >= 20, `only ${lat.length} HTTP answers`);
    assert.ok(p(1) < 100, `slowest HTTP answer ${p(1)} ms`);
    assert.ok(fsMs < 100, `fs.stat took ${fsMs} ms`);
    const outs = await Promise.all(streams.map((s, i) =>
      s.copyFromDevice(new Uint32Array(n), bufs[i])));
    for (const out of outs) assert.ok(out.every((v) => v === 10));
  } finally {
    server.close();
  }
});

test('freeing device memory while kernels run stalls neither the JS thread nor launches', async () => {
  // cuMemFree waits for the device (280 ms behind a 300 ms kernel on the
  // H200, and launches from other threads wait with it): device memory
  // comes from the stream-ordered allocator, freed with cuMemFreeAsync.
  const { monitorEventLoopDelay } = require('node:perf_hooks');
  const { forceGc } = require('./common');
  const s = dev.createStream();
  const s2 = dev.createStream();
  const probe = dev.alloc(64);
  if (!onSim) assert.equal(probe.streamOrdered, true, 'this device should have memory pools');
  const busy = s.launch(k.sleep, 1, 1, [300_000_000n]); // 300 ms
  await new Promise((r) => setTimeout(r, 20));
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await new Promise((r) => setTimeout(r, 5)); // the histogram's timer is running
  let worst = 0;
  const timed = (f) => {
    const t0 = process.hrtime.bigint();
    const v = f();
    worst = Math.max(worst, Number(process.hrtime.bigint() - t0) / 1e6);
    return v;
  };
  const launches = [];
  for (let i = 0; i < 8; i++) {
    timed(() => dev.alloc(16 << 20).free());
    timed(() => dev.alloc(16 << 20)); // dropped: the GC frees it
    launches.push(timed(() => s2.launch(k.add, 1, 16, [probe, 16, 1])));
  }
  forceGc(); // finalizers of the dropped ones
  await new Promise((r) => setTimeout(r, 30));
  forceGc();
  launches.push(timed(() => s2.launch(k.add, 1, 16, [probe, 16, 1])));
  await Promise.all(launches);
  h.disable();
  await busy;
  const maxDelay = h.max / 1e6;
  console.log(`# slowest alloc/free/launch call ${worst.toFixed(2)} ms; ` +
              `max event-loop delay ${maxDelay.toFixed(1)} ms`);
  if (onSim) return; // the simulation fills new memory on the JS thread: slow, not a GPU
  assert.ok(worst < 50, `a call took ${worst} ms`);
  assert.ok(maxDelay < 100, `event loop stalled ${maxDelay} ms`);
});

test('a raw stream handle (BigInt) from elsewhere, and the legacy default stream', async () => {
  const other = dev.createStream(); // stands in for another addon's stream
  const m = dev.alloc(4 * 1024);
  const s = uvcuda.Stream.fromHandle(other.handle);
  await s.memset(m, 0);
  other.launch(k.sleep, 1, 1, [5_000_000n]);
  other.launch(k.add, grid(1024), 256, [m, 1024, 3]);
  await uvcuda.fence(other.handle);
  const out = await s.copyFromDevice(new Uint32Array(1024), m);
  assert.ok(out.every((v) => v === 3));
  const legacy = uvcuda.Stream.fromHandle(1n, dev);
  await legacy.launch(k.add, grid(1024), 256, [m, 1024, 1]);
  await uvcuda.fence(1n, dev);
  const out2 = await legacy.copyFromDevice(new Uint32Array(1024), m);
  assert.ok(out2.every((v) => v === 4));
});

test('every completion strategy gives the right bytes on the GPU', async () => {
  const strategies = ['auto', 'reactor', 'hostfn', 'poll'];
  if (info.hostTaskSync) strategies.push('hostfn-spin', 'hostfn-block');
  for (const completion of strategies) {
    const res = await runChild(`
      uvcuda.configure({ completion: ${JSON.stringify(completion)} });
      const k = common.setup();
      const s = k.dev.createStream();
      const n = 1 << 20, m = k.dev.alloc(4 * n);
      (async () => {
        await s.memset(m, 0);
        const ps = [];
        for (let i = 0; i < 100; i++) ps.push(s.launch(k.add, common.grid(n), 256, [m, n, 2]));
        await Promise.all(ps);
        const out = await s.copyFromDevice(new Uint32Array(n), m);
        console.log(JSON.stringify({ ok: out.every((v) => v === 200),
                                     completion: uvcuda.stats().completion }));
      })();`);
    assert.equal(res.status, 0, res.stderr);
    assert.deepEqual(lastJson(res), { ok: true, completion });
  }
});

test('a device fault rejects with CUDA_ERROR_ILLEGAL_ADDRESS (child process)', async () => {
  const res = await runChild(`
    const k = common.setup();
    const a = k.dev.createStream(), b = k.dev.createStream();
    (async () => {
      const long = b.launch(k.sleep, 1, 1, [500_000_000n]);
      const r = await Promise.allSettled([a.launch(k.fault, 1, 1, []), a.fence(), long]);
      console.log(JSON.stringify(r.map((x) => x.status === 'rejected' ?
        [x.reason.code, x.reason.errno] : 'resolved')));
    })();`);
  assert.equal(res.signal, null, res.stderr);
  const out = lastJson(res);
  assert.deepEqual(out.slice(0, 2), [['CUDA_ERROR_ILLEGAL_ADDRESS', -20700],
                                     ['CUDA_ERROR_ILLEGAL_ADDRESS', -20700]]);
  assert.deepEqual(out[2], ['CUDA_ERROR_ILLEGAL_ADDRESS', -20700]);
});

test('four worker threads on the GPU', async () => {
  const common = path.join(__dirname, 'common.js');
  const runs = [1, 2, 3, 4].map((v) => new Promise((resolve, reject) => {
    const w = new Worker(`
      const common = require(${JSON.stringify(common)});
      const k = common.setup();
      const s = k.dev.createStream();
      const n = 1 << 20, m = k.dev.alloc(4 * n);
      (async () => {
        await s.memset(m, 0);
        for (let i = 0; i < 50; i++) s.launch(k.add, common.grid(n), 256, [m, n, ${v}]);
        const out = await s.copyFromDevice(new Uint32Array(n), m);
        require('node:worker_threads').parentPort.postMessage(out.every((x) => x === 50 * ${v}));
      })();`, { eval: true });
    let ok = false;
    w.on('message', (m) => { ok = m; });
    w.on('error', reject);
    w.on('exit', (code) => resolve({ ok, code }));
  }));
  for (const r of await Promise.all(runs)) assert.deepEqual(r, { ok: true, code: 0 });
});

test('process.exit() with GPU work pending (child process)', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(64 << 20);
    s.launch(k.sleep, 1, 1, [3_000_000_000n]);
    s.copyFromDevice(new Uint8Array(64 << 20), m);
    for (let i = 0; i < 100; i++) s.fence();
    setTimeout(() => process.exit(3), 50);`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 3, res.stderr);
});

// ---- device faults, recovery, abort, buffers, workers (GPU) --------------

test('a fault: health, the fault event, then reset() recovers or says to restart (child process)', async () => {
  // On the H200 with driver 580 the driver kept a fault for the life of
  // the process (new work failed with CUDA_ERROR_ILLEGAL_ADDRESS after
  // cuDevicePrimaryCtxReset): reset() must then reject saying so, and
  // health must stay faulted. Where the driver recovers, a verified round
  // trip must work. Either is a pass; which one is printed.
  const res = await runChild(`
    const { once } = require('node:events');
    const k = common.setup();
    const out = { events: [] };
    k.dev.on('fault', (e) => out.events.push(e.code));
    out.before = k.dev.health;
    const a = k.dev.createStream(), b = k.dev.createStream();
    (async () => {
      const r = await Promise.allSettled([b.launch(k.sleep, 1, 1, [500_000_000n]),
        a.launch(k.fault, 1, 1, []), a.fence()]);
      out.pending = r.map((x) => x.status === 'rejected' ? x.reason.code : 'resolved');
      out.health = k.dev.health;
      if (out.events.length === 0) await once(k.dev, 'fault');
      out.reset = await k.dev.reset().then(() => ({ ok: true }),
        (e) => ({ ok: false, code: e.code, message: e.message, ordinal: e.ordinal }));
      out.after = k.dev.health;
      if (out.reset.ok) {
        const mod = k.dev.loadModule(common.ptx);
        const add = mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
        const s = k.dev.createStream();
        const n = 1 << 20;
        const src = new Uint32Array(n).map((_, i) => i * 3);
        const m = k.dev.alloc(src.byteLength);
        await s.copyToDevice(m, src);
        await s.launch(add, common.grid(n), 256, [m, n, 5]);
        const got = await s.copyFromDevice(new Uint32Array(n), m);
        out.roundTrip = got.every((v, i) => v === src[i] + 5);
      }
      console.log(JSON.stringify(out));
      process.exit(0);
    })();`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  const out = lastJson(res);
  const illegal = 'CUDA_ERROR_ILLEGAL_ADDRESS';
  assert.equal(out.before, 'healthy');
  assert.deepEqual(out.pending, [illegal, illegal, illegal]);
  assert.equal(out.health, illegal);
  assert.deepEqual(out.events, [illegal]);
  if (out.reset.ok) {
    console.log('# reset(): this driver recovered from the fault; round trip verified');
    assert.equal(out.after, 'healthy');
    assert.equal(out.roundTrip, true);
  } else {
    console.log(`# reset(): this driver keeps the fault (${out.reset.code}); ` +
                'the process must be restarted, as reset() says');
    assert.equal(out.reset.code, illegal);
    assert.equal(out.reset.ordinal, 0);
    assert.match(out.reset.message, /restart the process/);
    assert.equal(out.after, illegal);
  }
});

test('getFunction checks signatures against the driver\'s parameter count', () => {
  const count = { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' };
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 'u32']), count);
  assert.throws(() => k.mod.getFunction('uvcuda_fault', ['u32']), count);
  assert.equal(k.mod.getFunction('uvcuda_checksum_u8', ['ptr', 'u32', 'ptr']).name,
    'uvcuda_checksum_u8');
});

test('an abort rejects at once while the kernel runs on; its result lands', async () => {
  const s = dev.createStream();
  const n = 1 << 16;
  const m = dev.alloc(4 * n);
  await s.memset(m, 0);
  const ac = new AbortController();
  const order = [];
  s.launch(k.sleep, 1, 1, [200_000_000n]);
  const p = s.launch(k.add, grid(n), 256, [m, n, 9], { signal: ac.signal })
    .catch((e) => { order.push(e.name); });
  const after = s.fence().then(() => order.push('fence'));
  ac.abort();
  await p;
  await after;
  assert.deepEqual(order, ['AbortError', 'fence']);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  assert.ok(out.every((v) => v === 9));
});

test('copyFromDevice into a buffer transferred meanwhile rejects and writes nothing', async () => {
  const s = dev.createStream();
  const m = dev.alloc(1 << 20);
  await s.memset(m, 7);
  s.launch(k.sleep, 1, 1, [100_000_000n]);
  const dst = new Uint8Array(1 << 20);
  const p = s.copyFromDevice(dst, m);
  const moved = new Uint8Array(structuredClone(dst.buffer, { transfer: [dst.buffer] }));
  await assert.rejects(p, { code: 'ERR_INVALID_STATE' });
  await s.fence();
  assert.ok(moved.every((v) => v === 0));
});

test('a terminated worker with a 3 s kernel pending exits before a 1 s kernel started after it', async () => {
  const common = path.join(__dirname, 'common.js');
  const res = await runChild(`
    const { Worker } = require('node:worker_threads');
    const k = common.setup();
    const s = k.dev.createStream(), s2 = k.dev.createStream();
    const w = new Worker(\`
      const { parentPort } = require('node:worker_threads');
      const common = require(${JSON.stringify(common)});
      const k = common.setup();
      const s = k.dev.createStream();
      const m = k.dev.alloc(64 << 20);
      s.launch(k.sleep, 1, 1, [3_000_000_000n]);
      s.copyFromDevice(new Uint8Array(64 << 20), m);
      parentPort.postMessage('running');
      setInterval(() => {}, 1000);\`, { eval: true });
    const order = [];
    w.on('message', () => {
      s.launch(k.sleep, 1, 1, [1_000_000_000n]).then(() => {
        order.push('main kernel');
        console.log(JSON.stringify(order));
        process.exit(0);
      });
      w.terminate();
    });
    w.on('exit', () => {
      order.push('worker exit');
      s2.fence().then(() => order.push('after'));
    });`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), ['worker exit', 'after', 'main kernel']);
});

test('CUDA objects refuse postMessage', () => {
  const { MessageChannel } = require('node:worker_threads');
  const { port1, port2 } = new MessageChannel();
  try {
    for (const o of [dev, dev.createStream(), dev.alloc(16), k.mod, k.add]) {
      assert.throws(() => port1.postMessage(o), { name: 'DataCloneError' });
    }
  } finally {
    port1.close();
    port2.close();
  }
});

test('how long the copy calls hold the JS thread behind a 200 ms kernel (printed, not asserted)', async () => {
  // CUDA's API synchronization rules say a device-to-pageable-host copy
  // returns only once the copy is done, so copyFromDevice (its buffer is
  // malloc'ed, pageable) may hold the JS thread until the kernel ahead of
  // it ends. Measured here for the record; not a pass/fail criterion.
  const s = dev.createStream();
  const m = dev.alloc(1 << 20);
  await s.memset(m, 1);
  const time = (f) => {
    const t0 = process.hrtime.bigint();
    const p = f();
    return [Number(process.hrtime.bigint() - t0) / 1e6, p];
  };
  s.launch(k.sleep, 1, 1, [200_000_000n]);
  const [toMs, p1] = time(() => s.copyToDevice(m, new Uint8Array(1 << 20)));
  await p1;
  s.launch(k.sleep, 1, 1, [200_000_000n]);
  const [fromMs, p2] = time(() => s.copyFromDevice(new Uint8Array(1 << 20), m));
  await p2;
  console.log(`# behind a 200 ms kernel: the copyToDevice call took ${toMs.toFixed(2)} ms, ` +
              `the copyFromDevice call ${fromMs.toFixed(2)} ms (1 MiB each)`);
});
