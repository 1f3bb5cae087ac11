'use strict';
// Every API path on the simulated driver, checked by the bytes that come
// back: data in, kernels (uvcuda_add_u32, uvcuda_checksum_u8) run by the
// simulation, data out, compared.

const assert = require('node:assert/strict');
const { test, simSkip, uvcuda, setup, grid, fnv1a, bytes, runChild, lastJson } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

test('driverInfo reports the loaded driver', () => {
  const info = uvcuda.driverInfo();
  assert.equal(info.simulated, true);
  assert.ok(info.driverVersion >= 12000);
  assert.ok(info.deviceCount >= 1);
  assert.equal(uvcuda.deviceCount(), info.deviceCount);
  assert.equal(typeof info.path, 'string');
  assert.match(uvcuda.version, /^\d+\.\d+\.\d+$/);
});

test('Device: ordinal, name, compute capability; new Device is openDevice', () => {
  assert.equal(dev.ordinal, 0);
  assert.match(dev.name, /simulated/);
  assert.deepEqual(dev.computeCapability, [9, 0]);
  const d2 = new uvcuda.Device(0);
  assert.ok(d2 instanceof uvcuda.Device);
  assert.equal(d2.name, dev.name);
  assert.equal(new uvcuda.Device().ordinal, 0);
});

test('objects point at their owners', () => {
  const s = dev.createStream();
  const m = dev.alloc(64);
  assert.equal(s.device, dev);
  assert.equal(m.device, dev);
  assert.equal(k.mod.device, dev);
  assert.equal(k.add.module, k.mod);
  assert.equal(k.add.name, 'uvcuda_add_u32');
  assert.deepEqual(k.add.signature, ['ptr', 'u32', 'u32']);
  // readonly, as typed: one frozen array, the same at every read
  assert.equal(k.add.signature, k.add.signature);
  assert.ok(Object.isFrozen(k.add.signature));
  assert.equal(m.byteLength, 64);
  assert.equal(typeof m.ptr, 'bigint');
  assert.notEqual(m.ptr, 0n);
  assert.equal(typeof s.handle, 'bigint');
  assert.equal(s.owned, true);
  assert.equal(s.destroyed, false);
  assert.equal(m.freed, false);
  m.free();
  s.destroy();
  assert.equal(m.freed, true);
  assert.equal(s.destroyed, true);
});

test('every asynchronous call returns a Promise', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  const host = new Uint8Array(16);
  const ps = [
    s.copyToDevice(m, host),
    s.copyFromDevice(host, m),
    s.copyDevice(m, m, 8, 8, 0),
    s.memset(m, 1),
    s.launch(k.add, 1, 4, [m, 4, 1]),
    s.fence(),
    s.fenceOnThreadPool(),
    s.launchOnThreadPool(k.add, 1, 4, [m, 4, 1]),
    uvcuda.fence(s),
    uvcuda.fence(s.handle),
  ];
  for (const p of ps) assert.ok(p instanceof Promise);
  await Promise.all(ps);
});

test('copy round trip: 1 MiB Uint8Array in and out', async () => {
  const s = dev.createStream();
  const src = bytes(1 << 20, 7);
  const m = dev.alloc(src.length);
  assert.equal(await s.copyToDevice(m, src), undefined);
  const dst = new Uint8Array(src.length);
  const back = await s.copyFromDevice(dst, m);
  assert.equal(back, dst, 'copyFromDevice resolves with its dst');
  assert.deepEqual(dst, src);
});

test('copies accept Buffer, DataView, ArrayBuffer, typed subarrays and offsets', async () => {
  const s = dev.createStream();
  const m = dev.alloc(256);
  await s.memset(m, 0);
  // Buffer at device offset 16
  await s.copyToDevice(m, Buffer.from([1, 2, 3, 4]), 16);
  // DataView over the middle of an ArrayBuffer, at offset 32
  const ab = new ArrayBuffer(16);
  new Uint8Array(ab).set([9, 9, 5, 6, 7, 8, 9, 9]);
  await s.copyToDevice(m, new DataView(ab, 2, 4), 32);
  // subarray with a byteOffset, at 48
  const big = Uint8Array.from({ length: 32 }, (_, i) => 100 + i);
  await s.copyToDevice(m, big.subarray(10, 14), 48);
  // plain ArrayBuffer at 64; Float64Array at 128
  await s.copyToDevice(m, new Uint8Array([42, 43]).buffer, 64);
  await s.copyToDevice(m, new Float64Array([Math.PI, -2.5]), 128);

  const all = await s.copyFromDevice(new Uint8Array(256), m);
  assert.deepEqual([...all.subarray(16, 20)], [1, 2, 3, 4]);
  assert.deepEqual([...all.subarray(32, 36)], [5, 6, 7, 8]);
  assert.deepEqual([...all.subarray(48, 52)], [110, 111, 112, 113]);
  assert.deepEqual([...all.subarray(64, 66)], [42, 43]);
  assert.equal(all[15], 0);
  assert.equal(all[20], 0);
  const f = new Float64Array(2);
  await s.copyFromDevice(f, m, 128);
  assert.deepEqual([...f], [Math.PI, -2.5]);
  // reading into a DataView with an offset, and into a Buffer
  const out = new ArrayBuffer(8);
  await s.copyFromDevice(new DataView(out, 4, 4), m, 16);
  assert.deepEqual([...new Uint8Array(out)], [0, 0, 0, 0, 1, 2, 3, 4]);
  const b = await s.copyFromDevice(Buffer.alloc(2), m, 64);
  assert.deepEqual([...b], [42, 43]);
});

test('uvcuda_add_u32 adds to every element, wrapping at 2^32', async () => {
  const s = dev.createStream();
  const n = 10007;
  const a = new Uint32Array(n);
  for (let i = 0; i < n; i++) a[i] = (i * 2654435761) >>> 0;
  a[0] = 0xfffffffe;
  const m = dev.alloc(a.byteLength);
  await s.copyToDevice(m, a);
  await s.launch(k.add, grid(n), 256, [m, n, 7]);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  for (let i = 0; i < n; i++) {
    if (out[i] !== ((a[i] + 7) >>> 0)) assert.fail(`element ${i}: ${out[i]} != ${a[i]} + 7`);
  }
  assert.equal(out[0], 5);
});

test('n smaller than the launch leaves the rest untouched', async () => {
  const s = dev.createStream();
  const m = dev.alloc(4 * 512);
  await s.memset(m, 0);
  await s.launch(k.add, [2, 1, 1], [256, 1, 1], [m, 300, 1]);
  const out = await s.copyFromDevice(new Uint32Array(512), m);
  assert.equal(out.subarray(0, 300).every((v) => v === 1), true);
  assert.equal(out.subarray(300).every((v) => v === 0), true);
});

test('uvcuda_checksum_u8 matches FNV-1a computed in JS', async () => {
  const s = dev.createStream();
  const data = bytes(4099, 99);
  const din = dev.alloc(data.length);
  const dout = dev.alloc(4);
  await s.copyToDevice(din, data);
  await s.launch(k.checksum, 1, 1, [din, data.length, dout]);
  const out = await s.copyFromDevice(new Uint32Array(1), dout);
  assert.equal(out[0], fnv1a(data));
  assert.notEqual(out[0], fnv1a(bytes(4099, 98)));
});

test('memset fills a range and leaves the rest', async () => {
  const s = dev.createStream();
  const m = dev.alloc(100);
  await s.memset(m, 0x11);
  await s.memset(m, 0xab, 50, 25);
  await s.memset(m, 0xcd, undefined, 90); // to the end
  const out = await s.copyFromDevice(new Uint8Array(100), m);
  assert.ok(out.subarray(0, 25).every((v) => v === 0x11));
  assert.ok(out.subarray(25, 75).every((v) => v === 0xab));
  assert.ok(out.subarray(75, 90).every((v) => v === 0x11));
  assert.ok(out.subarray(90).every((v) => v === 0xcd));
});

test('copyDevice copies device to device with offsets', async () => {
  const s = dev.createStream();
  const src = bytes(64, 5);
  const a = dev.alloc(64);
  const b = dev.alloc(128);
  await s.copyToDevice(a, src);
  await s.memset(b, 0);
  await s.copyDevice(b, a, 16, 100, 8);     // a[8..24) -> b[100..116)
  await s.copyDevice(b, a, undefined, 0);   // all of a -> b[0..64)
  const out = await s.copyFromDevice(new Uint8Array(128), b);
  assert.deepEqual(out.subarray(100, 116), src.subarray(8, 24));
  assert.deepEqual(out.subarray(0, 64), src);
  assert.ok(out.subarray(64, 100).every((v) => v === 0));
});

test('work on one stream runs and settles in stream order', async () => {
  const s = dev.createStream();
  const n = 1000;
  const m = dev.alloc(4 * n);
  const order = [];
  const tag = (i) => (v) => { order.push(i); return v; };
  const ps = [
    s.memset(m, 0).then(tag(0)),
    s.launch(k.sleep, 1, 1, [5_000_000n]).then(tag(1)),
    s.launch(k.add, grid(n), 256, [m, n, 3]).then(tag(2)),
    s.launch(k.add, grid(n), 256, [m, n, 4]).then(tag(3)),
    s.launch(k.add, grid(n), 256, [m, n, 5]).then(tag(4)),
    s.copyFromDevice(new Uint32Array(n), m).then(tag(5)),
    s.fence().then(tag(6)),
  ];
  const res = await Promise.all(ps);
  assert.deepEqual(order, [0, 1, 2, 3, 4, 5, 6]);
  assert.ok(res[5].every((v) => v === 12));
});

test('fence waits for the work before it', async () => {
  const s = dev.createStream();
  let slept = false;
  s.launch(k.sleep, 1, 1, [30_000_000]).then(() => { slept = true; }); // u64 from a number
  await s.fence();
  assert.equal(slept, true, 'the fence settled before the work queued ahead of it');
  await s.fence(); // idle stream
});

test('the JS thread keeps running while GPU work is pending', async () => {
  const s = dev.createStream();
  // Counted: timer callbacks that ran before the work's promise settled.
  // A JS thread held until the GPU is done would run none.
  let done = false;
  let ticks = 0;
  const iv = setInterval(() => { if (!done) ticks++; }, 1);
  await s.launch(k.sleep, 1, 1, [150_000_000n]).then(() => { done = true; });
  clearInterval(iv);
  assert.ok(ticks >= 1, 'no timer ran during 150 ms of GPU work');
});

test('Stream.fromHandle and uvcuda.fence(BigInt) await a stream made elsewhere', async () => {
  const own = dev.createStream();
  const raw = own.handle;
  const foreign = uvcuda.Stream.fromHandle(raw);
  assert.equal(foreign.owned, false);
  assert.equal(foreign.device, null);
  assert.equal(foreign.handle, raw);
  const m = dev.alloc(4 * 256);
  await foreign.memset(m, 0);
  // The fence on the raw handle waits for the work queued before it: it
  // settles after both launches (stream order), never before (no clock:
  // a busy machine makes any elapsed-time bound flaky).
  const order = [];
  const pSleep = own.launch(k.sleep, 1, 1, [20_000_000n]).then(() => order.push('sleep'));
  const pAdd = own.launch(k.add, 1, 256, [m, 256, 9]).then(() => order.push('add'));
  await uvcuda.fence(raw);
  order.push('fence');
  await Promise.all([pSleep, pAdd]);
  assert.deepEqual(order, ['sleep', 'add', 'fence']);
  const out = await foreign.copyFromDevice(new Uint32Array(256), m);
  assert.ok(out.every((v) => v === 9));
  // destroying the foreign wrapper leaves the stream alone
  foreign.destroy();
  await own.fence();
  const withDev = uvcuda.Stream.fromHandle(raw, dev);
  assert.equal(withDev.device, dev);
  await withDev.fence();
});

test('the default stream handles await with a Device', async () => {
  const m = dev.alloc(16);
  for (const h of [0n, 1n, 2n]) {
    await uvcuda.fence(h, dev);
    const s = uvcuda.Stream.fromHandle(h, dev);
    await s.memset(m, Number(h) + 1);
    const out = await s.copyFromDevice(new Uint8Array(16), m);
    assert.ok(out.every((v) => v === Number(h) + 1));
  }
});

test('thread-pool baseline gives the same bytes', async () => {
  const s = dev.createStream();
  const n = 4096;
  const m = dev.alloc(4 * n);
  await s.memset(m, 0);
  await s.launchOnThreadPool(k.add, grid(n), 256, [m, n, 11]);
  await s.launch(k.add, grid(n), 256, [m, n, 1]);
  await s.fenceOnThreadPool();
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  assert.ok(out.every((v) => v === 12));
});

test('kernel parameters: u64 from BigInt and number, ptr from BigInt and null', async () => {
  const s = dev.createStream();
  await s.launch(k.sleep, 1, 1, [1000n]);
  await s.launch(k.sleep, 1, 1, [1000]);
  const m = dev.alloc(4 * 8);
  await s.memset(m, 0);
  await s.launch(k.add, 1, 8, [m.ptr, 8, 2]); // raw pointer
  const out = await s.copyFromDevice(new Uint32Array(8), m);
  assert.ok(out.every((v) => v === 2));
  await s.launch(k.add, 1, 8, [null, 0, 2]); // n = 0: touches nothing
});

test('zero-length copies resolve', async () => {
  const s = dev.createStream();
  const m = dev.alloc(8);
  await s.copyToDevice(m, new Uint8Array(0), 8);
  const z = await s.copyFromDevice(new Uint8Array(0), m, 8);
  assert.equal(z.length, 0);
  await s.memset(m, 1, 0, 8);
  await s.copyDevice(m, m, 0);
});

test('stats count this env\'s promises', async () => {
  const before = uvcuda.stats();
  const s = dev.createStream();
  await Promise.all([s.fence(), s.fence(), s.fence()]);
  const after = uvcuda.stats();
  assert.equal(after.awaited - before.awaited, 3);
  assert.equal(after.resolved - before.resolved, 3);
  assert.equal(after.pending, 0);
  assert.equal(after.completion, 'auto');
  assert.ok(after.started >= after.awaited);
  assert.equal(after.latencyHistogram.length, 32);
  assert.equal(uvcuda.errorName(-30005), 'UVCUDA_ECAPTURING');
  assert.match(uvcuda.strerror(-30005), /capturing/);
});

test('stats count what waiting cost the reactor', async () => {
  const s = dev.createStream();
  const before = uvcuda.stats();
  // 20 ms of GPU work: past the loop's spin, so the reactor sees it done.
  await s.launch(k.sleep, 1, 1, [20_000_000n]);
  const after = uvcuda.stats();
  assert.ok(after.completedReactor > before.completedReactor);
  for (const key of ['reactorPolls', 'reactorSleeps', 'reactorCpuNs']) {
    assert.equal(typeof after[key], 'number', key);
    assert.ok(after[key] > before[key], `${key} did not grow: ${before[key]} -> ${after[key]}`);
  }
});

test('each completion strategy gives the right bytes', async () => {
  for (const completion of ['reactor', 'hostfn', 'poll', 'auto']) {
    const res = await runChild(`
      uvcuda.configure({ completion: ${JSON.stringify(completion)}, spinBudgetUs: 0,
                         latencyHistogram: true });
      const k = common.setup();
      const s = k.dev.createStream();
      const n = 1000, m = k.dev.alloc(4 * n);
      (async () => {
        await s.memset(m, 0);
        const ps = [];
        for (let i = 0; i < 50; i++) ps.push(s.launch(k.add, common.grid(n), 256, [m, n, 1]));
        await Promise.all(ps);
        const out = await s.copyFromDevice(new Uint32Array(n), m);
        const st = uvcuda.stats();
        console.log(JSON.stringify({ ok: out.every((v) => v === 50), completion: st.completion,
          hist: st.latencyHistogram.reduce((a, b) => a + b, 0) }));
      })();`);
    const r = lastJson(res);
    assert.equal(res.status, 0, res.stderr);
    assert.deepEqual(r, { ok: true, completion, hist: 52 });
  }
});

test('adaptive spin (the default) predicts repeated work, one await at a time', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    (async () => {
      // 30 ms each: a busy machine's jitter stays well inside a quarter of it
      for (let i = 0; i < 12; i++) await s.launch(k.sleep, 1, 1, [30_000_000n]);
      const st = uvcuda.stats();
      console.log(JSON.stringify({ adaptive: st.adaptive, predicted: st.predicted > 0,
        counted: st.predictHit + st.predictEarly + st.predictLate === st.predicted,
        done: st.completedSpin + st.completedReactor }));
    })();`);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), { adaptive: true, predicted: true, counted: true, done: 12 });
  const off = await runChild(`
    uvcuda.configure({ adaptive: false });
    const k = common.setup();
    const st = uvcuda.stats();
    console.log(JSON.stringify({ adaptive: st.adaptive, predicted: st.predicted }));`,
  { env: { UVCUDA_ADAPTIVE: '' } });
  assert.equal(off.status, 0, off.stderr);
  assert.deepEqual(lastJson(off), { adaptive: false, predicted: 0 });
});

test('memops refused: auto falls back to host functions', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(64);
    (async () => {
      await s.memset(m, 7);
      const out = await s.copyFromDevice(new Uint8Array(64), m);
      const st = uvcuda.stats();
      console.log(JSON.stringify({ ok: out.every((v) => v === 7), fallbacks: st.fallbacks,
        hostfn: st.completedHostfn + st.completedSpin }));
    })();`, { env: { SIMCUDA_FAIL: 'cuStreamWriteValue64=801,cuStreamWriteValue32=801' } });
  assert.equal(res.status, 0, res.stderr);
  const r = lastJson(res);
  assert.equal(r.ok, true);
  assert.ok(r.fallbacks >= 1);
});

test('host memory registration refused: auto falls back, driverInfo answers', async () => {
  // Some VMs and sandboxes refuse cuMemHostRegister: the default strategy
  // must still work (it rejected every call before), copies fall back to
  // pageable memory, and driverInfo() says no memops instead of throwing.
  const res = await runChild(`
    const info = uvcuda.driverInfo();
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(64);
    (async () => {
      await s.fence();
      await s.memset(m, 7);
      const out = await s.copyFromDevice(new Uint8Array(64), m);
      const st = uvcuda.stats();
      console.log(JSON.stringify({ ok: out.every((v) => v === 7), fallbacks: st.fallbacks > 0,
        memops: info.memops32 || info.memops64, completion: st.completion }));
    })();`, { env: { SIMCUDA_FAIL: 'cuMemHostRegister=801' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), { ok: true, fallbacks: true, memops: false, completion: 'auto' });
});

test('two devices', async () => {
  const res = await runChild(`
    (async () => {
      const out = [];
      for (let d = 0; d < uvcuda.deviceCount(); d++) {
        const k = common.setup(d);
        const s = k.dev.createStream();
        const m = k.dev.alloc(64);
        await s.memset(m, 0);
        await s.launch(k.add, 1, 16, [m, 16, d + 1]);
        const r = await s.copyFromDevice(new Uint32Array(16), m);
        out.push(r[15]);
      }
      console.log(JSON.stringify(out));
    })();`, { env: { SIMCUDA_DEVICES: '2' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), [1, 2]);
});

test('an enqueue the driver refuses rejects after the work before it on the stream, in stream order', async () => {
  // The second launch fails in the driver (the simulation refuses it):
  // its promise rejects only once the stream has run what came before it,
  // so promises of one stream settle in stream order and nothing the
  // failed call holds goes while work queued ahead of it runs (round 11:
  // it rejected on the next loop pass, ahead of the 100 ms kernel).
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    const order = [];
    (async () => {
      const a = s.launch(k.sleep, 1, 1, [100_000_000n]).then(() => order.push('a'));
      const b = s.launch(k.sleep, 1, 1, [1n]).then(() => order.push('b'),
        (e) => order.push('b:' + e.code));
      const c = s.fence().then(() => order.push('c'));
      await Promise.all([a, b, c]);
      console.log(JSON.stringify({ order, pending: s.pending }));
    })();`, { env: { SIMCUDA_FAIL: 'cuLaunchKernel=1@2' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), { order: ['a', 'b:CUDA_ERROR_INVALID_VALUE', 'c'], pending: 0 });
});
