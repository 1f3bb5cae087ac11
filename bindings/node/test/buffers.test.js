'use strict';
// Host buffers and pending GPU work. The GPU never reads or writes memory
// that JS no longer owns:
//   copyToDevice   reads its source at the call (a copy of it is what the
//                  GPU reads): changing, transferring or detaching the
//                  source afterwards changes nothing;
//   copyFromDevice the GPU writes a buffer of the binding's; the bytes go
//                  into dst when the work is done, and if dst was detached
//                  or transferred meanwhile the promise rejects with
//                  ERR_INVALID_STATE and nothing is written anywhere.
// Both keep the JS buffers they were given alive until the work is done.

const assert = require('node:assert/strict');
const { Worker } = require('node:worker_threads');
const { test, simSkip, setup, forceGc } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

const detached = { name: 'Error', code: 'ERR_INVALID_STATE' };

/** Detaches ab, returning the ArrayBuffer that now owns its memory. */
function transfer(ab) {
  return structuredClone(ab, { transfer: [ab] });
}

test('copyFromDevice into a buffer transferred before the copy ran: rejects, writes nothing', async () => {
  const s = dev.createStream();
  const m = dev.alloc(4096);
  await s.memset(m, 7);
  s.launch(k.sleep, 1, 1, [100_000_000n]); // the copy runs after this
  const dst = new Uint8Array(4096);
  const p = s.copyFromDevice(dst, m);
  const moved = new Uint8Array(transfer(dst.buffer));
  assert.equal(dst.length, 0);
  await assert.rejects(p, (e) => {
    assert.equal(e.code, detached.code);
    assert.match(e.message, /detached|transferred/);
    return true;
  });
  await s.fence();
  assert.ok(moved.every((v) => v === 0), 'the GPU wrote into memory JS had given away');
});

test('copyFromDevice into a resizable buffer resized while pending: rejects, says resized', async () => {
  const s = dev.createStream();
  const m = dev.alloc(8192);
  await s.memset(m, 0x5a);
  for (const to of [8000, 1000]) { // grown, shrunk
    const ab = new ArrayBuffer(4096, { maxByteLength: 8192 });
    const dst = new Uint8Array(ab); // length-tracking
    s.launch(k.sleep, 1, 1, [50_000_000n]);
    const p = s.copyFromDevice(dst, m);
    ab.resize(to);
    await assert.rejects(p, (e) => {
      assert.equal(e.code, detached.code);
      assert.match(e.message, /resized/);
      assert.doesNotMatch(e.message, /detached|transferred/);
      return true;
    });
    assert.ok(dst.every((v) => v === 0), `resized to ${to}: written into`);
  }
});

test('copyFromDevice into a buffer posted to a worker: the worker\'s memory is not touched', async () => {
  const s = dev.createStream();
  const m = dev.alloc(1 << 16);
  await s.memset(m, 0xee);
  s.launch(k.sleep, 1, 1, [100_000_000n]);
  const dst = new Uint8Array(1 << 16);
  const p = s.copyFromDevice(dst, m);
  const w = new Worker(`
    const { parentPort } = require('node:worker_threads');
    let view;
    parentPort.on('message', (msg) => {
      if (msg.buffer) { view = new Uint8Array(msg.buffer); parentPort.postMessage('got'); }
      else parentPort.postMessage({ nonzero: view.filter((v) => v !== 0).length });
    });`, { eval: true });
  try {
    const next = () => new Promise((r) => w.once('message', r));
    w.postMessage({ buffer: dst.buffer }, [dst.buffer]);
    const rejected = assert.rejects(p, detached); // may settle before the worker answers
    assert.equal(await next(), 'got');
    await rejected;
    await s.fence();
    w.postMessage('check');
    assert.deepEqual(await next(), { nonzero: 0 });
  } finally {
    await w.terminate();
  }
});

test('copyFromDevice into a DataView, a Buffer and a subarray whose buffer was detached', async () => {
  const s = dev.createStream();
  const m = dev.alloc(64);
  await s.memset(m, 1);
  for (const make of [
    () => new DataView(new ArrayBuffer(32), 8, 16),
    () => Buffer.from(new ArrayBuffer(16)),
    () => new Uint32Array(new ArrayBuffer(64), 16, 4),
    () => new ArrayBuffer(16),
  ]) {
    s.launch(k.sleep, 1, 1, [20_000_000n]);
    const dst = make();
    const p = s.copyFromDevice(dst, m);
    const moved = new Uint8Array(transfer(dst.buffer || dst));
    await assert.rejects(p, detached, dst.constructor.name);
    await s.fence();
    assert.ok(moved.every((v) => v === 0), dst.constructor.name);
  }
});

test('copyToDevice reads its source at the call: later writes and transfers do not reach the GPU', async () => {
  const s = dev.createStream();
  const n = 4096;
  const m = dev.alloc(n);
  await s.memset(m, 0);
  s.launch(k.sleep, 1, 1, [100_000_000n]); // the copy runs after this
  const src = new Uint8Array(n).fill(1);
  const p = s.copyToDevice(m, src);
  src.fill(9);                               // written after the call
  const moved = new Uint8Array(transfer(src.buffer));
  moved.fill(5);                             // and by its new owner
  await p;
  const out = await s.copyFromDevice(new Uint8Array(n), m);
  assert.ok(out.every((v) => v === 1), `the device got ${out[0]}, not the bytes of the call`);
});

test('copyToDevice from a source detached right after the call resolves', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  s.launch(k.sleep, 1, 1, [20_000_000n]);
  const src = new Float32Array([1.5, 2.5, 3.5, 4.5]);
  const p = s.copyToDevice(m, src);
  transfer(src.buffer);
  await p;
  const out = await s.copyFromDevice(new Float32Array(4), m);
  assert.deepEqual([...out], [1.5, 2.5, 3.5, 4.5]);
});

test('pending copies keep the JS buffers they were given alive', async () => {
  // A finalizer that runs before the copies settled proves a buffer was
  // collected while the GPU still used it. Once they settle the buffers may
  // go (a slow machine can get there before the GCs below: no time bound).
  let settled = false;
  const early = [];
  const registry = new FinalizationRegistry((what) => { if (!settled) early.push(what); });
  const s = dev.createStream();
  const m = dev.alloc(1 << 16);
  const start = () => {
    s.launch(k.sleep, 1, 1, [1_000_000_000n]); // 1 s: the GCs run meanwhile
    const src = new Uint8Array(1 << 16).fill(3);
    const dst = new Uint8Array(1 << 16);
    registry.register(src, 'src');
    registry.register(dst, 'dst');
    s.copyToDevice(m, src);
    return s.copyFromDevice(dst, m).then((b) => b.every((v) => v === 3));
  };
  const p = start();
  p.then(() => { settled = true; });
  for (let i = 0; i < 3; i++) {
    forceGc();
    await new Promise((r) => setImmediate(r));
  }
  await new Promise((r) => setTimeout(r, 50)); // finalizers of those GCs
  assert.deepEqual(early, []);
  assert.equal(await p, true);
});

test('a copy that fails on the GPU leaves dst as it was', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  await s.memset(m, 4);
  s.beginCapture();
  const dst = new Uint8Array(16).fill(8);
  await assert.rejects(s.copyFromDevice(dst, m), { code: 'UVCUDA_ECAPTURING' });
  s.endCapture();
  assert.ok(dst.every((v) => v === 8));
});

// README: awaiting a capturing stream rejects UVCUDA_ECAPTURING, the thread
// pool baselines included. They blocked in cuStreamSynchronize on it, which
// rejected CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidated the
// user's capture, so endCapture() threw (an outside tester, round 10).
test('the thread pool baselines refuse a capturing stream and leave its capture alone', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  for (const call of [() => s.fenceOnThreadPool(), () => s.launchOnThreadPool(k.add, 1, 4, [m, 4, 1])]) {
    s.beginCapture();
    await assert.rejects(call(), { code: 'UVCUDA_ECAPTURING' });
    s.endCapture(); // throws if the capture was invalidated
  }
  await s.fenceOnThreadPool(); // and the stream works again
});

// The driver runs a copy into pageable memory synchronously (the simulation
// models that, as CUDA documents it): a bounce buffer in pageable memory
// held the JS thread until the GPU reached the copy (200 ms behind a 200 ms
// kernel on the H200). The bounce is page-locked, so the call returns at
// once and work started after it, on another stream, settles first.
test('a copyFromDevice queued behind a long kernel does not hold the JS thread', async () => {
  const a = dev.createStream();
  const b = dev.createStream();
  const m = dev.alloc(4096);
  const m2 = dev.alloc(4096);
  await a.memset(m, 3);
  const order = [];
  const long = a.launch(k.sleep, 1, 1, [1_000_000_000n]).then(() => order.push('kernel'));
  const copy = a.copyFromDevice(new Uint8Array(4096), m).then((d) => {
    order.push('copy');
    assert.ok(d.every((v) => v === 3));
  });
  const up = a.copyToDevice(m2, new Uint8Array(4096).fill(5)).then(() => order.push('up'));
  const other = b.memset(m2, 0, 16).then(() => order.push('other'));
  await Promise.all([long, copy, up, other]);
  assert.deepEqual(order, ['other', 'kernel', 'copy', 'up']);
});

// Registering a new bounce buffer is a call CUDA counts as unsafe during a
// GLOBAL capture (on the H200 a cuMemHostRegister invalidated a capture of
// the same thread, or of another thread in GLOBAL mode): the addon makes it
// in RELAXED mode, so a capture the application runs is left alone.
test('a copy that needs a new bounce buffer leaves a capture of the same thread alone', async () => {
  const cap = dev.createStream();
  const s = dev.createStream();
  const n = 7 << 20; // a size class no earlier test used
  const m = dev.alloc(n);
  await s.memset(m, 6);
  cap.beginCapture('global');
  const p = s.copyFromDevice(new Uint8Array(n), m);
  const q = s.copyToDevice(m, new Uint8Array(n)); // another new buffer: p's is in use
  cap.endCapture(); // throws if the capture was invalidated
  const d = await p;
  await q;
  assert.equal(d[0], 6);
  assert.equal(d[n - 1], 6);
});
