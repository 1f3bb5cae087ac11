'use strict';
// What pending GPU work keeps alive, and what happens when the process goes
// while work is pending.

const assert = require('node:assert/strict');
const { test, simSkip, uvcuda, setup, bytes, runChild, lastJson, forceGc } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

test('pending work keeps its stream, memory and buffers alive through GC', async () => {
  const src = bytes(64 * 1024, 3);
  const start = () => {
    // Nothing but the promise refers to any of these after this returns.
    const s = dev.createStream();
    const m = dev.alloc(src.length);
    s.launch(k.sleep, 1, 1, [50_000_000n]);
    s.copyToDevice(m, Uint8Array.from(src));
    s.launch(k.add, 1, 1, [m, 0, 0]);
    return s.copyFromDevice(new Uint8Array(src.length), m);
  };
  const p = start();
  for (let i = 0; i < 5; i++) {
    forceGc();
    await new Promise((r) => setTimeout(r, 5));
  }
  const out = await p;
  assert.deepEqual(out, src);
  forceGc(); // now they may go
});

test('free() / destroy() / unload() while work is pending: the work completes first', async () => {
  const s = dev.createStream();
  const m = dev.alloc(4 * 64);
  const mod = dev.loadModule(require('./common').ptx);
  const add = mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
  await s.memset(m, 0);
  s.launch(k.sleep, 1, 1, [30_000_000n]);
  const launched = s.launch(add, 1, 64, [m, 64, 5]);
  const out = s.copyFromDevice(new Uint32Array(64), m);
  const fenced = s.fence();
  assert.equal(m.pending, 2);
  assert.equal(s.pending, 4);
  m.free();
  mod.unload();
  s.destroy();
  assert.equal(m.freed, true);
  assert.equal(s.destroyed, true);
  await assert.rejects(s.fence(), { code: 'UVCUDA_ECLOSING' });
  await launched;
  const got = await out;
  await fenced;
  assert.ok(got.every((v) => v === 5));
  assert.equal(m.pending, 0);
  assert.equal(s.pending, 0);
});

test('dropped objects with no pending work are collected without trouble', async () => {
  for (let i = 0; i < 200; i++) {
    const s = dev.createStream();
    const m = dev.alloc(1024);
    const mod = dev.loadModule(require('./common').ptx);
    mod.getFunction('uvcuda_fault', []);
    if (i % 2) await s.memset(m, i & 0xff);
  }
  forceGc();
  await new Promise((r) => setImmediate(r));
  forceGc();
  const s = dev.createStream();
  await s.fence();
});

test('process.exit() with long GPU work pending exits at once, cleanly, with its code', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream(), t = k.dev.createStream();
    const m = k.dev.alloc(1 << 20);
    s.launch(k.sleep, 1, 1, [10_000_000_000n]);          // 10 s
    s.copyFromDevice(new Uint8Array(1 << 20), m);
    t.launch(k.sleep, 1, 1, [10_000_000_000n]);
    for (let i = 0; i < 100; i++) t.fence();
    setTimeout(() => { console.log('exiting'); process.exit(3); }, 100);`);
  assert.equal(res.signal, null, `killed by ${res.signal}: ${res.stderr}`);
  assert.equal(res.status, 3, res.stderr);
  assert.match(res.stdout, /exiting/);
  assert.ok(res.ms < 5000, `exit took ${res.ms} ms`);
});

test('the thread-pool baseline, by contrast, holds process.exit() until the GPU is done', async () => {
  // uv_library_shutdown() joins the pool thread blocked in cuStreamSynchronize.
  const res = await runChild(`
    const k = common.setup();
    const t = k.dev.createStream();
    t.launchOnThreadPool(k.sleep, 1, 1, [1_500_000_000n]); // 1.5 s
    setTimeout(() => process.exit(4), 100);`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 4, res.stderr);
  assert.ok(res.ms >= 1400, `exit took only ${res.ms} ms`);
});

test('process.exit() from inside a settle callback', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    for (let i = 0; i < 50; i++) s.launch(k.sleep, 1, 1, [1_000_000n]);
    s.fence().then(() => process.exit(5));
    s.launch(k.sleep, 1, 1, [5_000_000_000n]);
    s.fence();`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 5, res.stderr);
});

test('an uncaught exception with GPU work pending ends the process normally', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    s.launch(k.sleep, 1, 1, [5_000_000_000n]);
    s.fence();
    setTimeout(() => { throw new Error('boom'); }, 20);`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 1);
  assert.match(res.stderr, /boom/);
});

test('pending GPU work keeps the process alive until it settles, then exit is clean', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(16);
    s.memset(m, 9);
    s.launch(k.sleep, 1, 1, [200_000_000n]);
    s.copyFromDevice(new Uint8Array(16), m).then((b) => console.log(JSON.stringify([...b])));
    process.on('exit', (c) => console.error('exit ' + c));`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), new Array(16).fill(9));
  assert.ok(res.ms >= 200);
});

test('an unawaited rejection is an unhandled rejection, as for any promise', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    s.beginCapture();
    s.fence();`);
  assert.equal(res.signal, null);
  assert.notEqual(res.status, 0);
  assert.match(res.stderr, /UVCUDA_ECAPTURING/);
});

test('the env does not stay alive without pending work', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    s.fence().then(() => console.log('"done"'));`);
  assert.equal(res.status, 0, res.stderr);
  assert.equal(lastJson(res), 'done');
  assert.ok(res.ms < 5000);
});
