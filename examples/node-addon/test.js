'use strict';
// The sample addon on whatever driver loads (uvcuda's simulation in CI:
// UVCUDA_LIBCUDA); every test is skipped where none does.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

// A driver is there when the addon's first GPU call works (in a child: it
// throws UVCUDA_ENODRIVER & co. synchronously otherwise).
const probe = spawnSync(process.execPath, ['-e', `
  try { require(${JSON.stringify(__dirname)}).fill(1, 0).then(() => {}, () => process.exit(1)); }
  catch (e) { console.log(e.code + ': ' + e.message); process.exit(1); }`], { encoding: 'utf8' });
const skip = probe.status === 0 ? false
  : `no loadable CUDA driver (${probe.stdout.trim() || probe.stderr.trim()})`;

test('fill: the GPU sets the bytes, the promise resolves with them', { skip }, async () => {
  const example = require('.');
  const p = example.fill(4096, 7);
  assert.ok(p instanceof Promise);
  const buf = await p;
  assert.ok(Buffer.isBuffer(buf));
  assert.equal(buf.length, 4096);
  assert.ok(buf.every((b) => b === 7));
});

test('copyThrough: bytes to the device and back', { skip }, async () => {
  const example = require('.');
  const src = Buffer.from(Array.from({ length: 100_000 }, (_, i) => (i * 31) & 0xff));
  const out = await example.copyThrough(src);
  assert.notEqual(out, src);
  assert.ok(out.equals(src));
});

test('200 promises at once settle in stream order with the right bytes', { skip }, async () => {
  const example = require('.');
  const order = [];
  const all = [];
  for (let i = 0; i < 200; i++)
    all.push(example.fill(1024, i & 0xff).then((b) => { order.push(i); return b; }));
  const bufs = await Promise.all(all);
  bufs.forEach((b, i) => assert.ok(b.every((x) => x === (i & 0xff)), `fill ${i}`));
  assert.deepEqual(order, [...order].sort((a, b) => a - b));
});

test('bad arguments throw synchronously', { skip }, () => {
  const example = require('.');
  assert.throws(() => example.fill('1', 2), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => example.fill(0, 2), { code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => example.fill(8, 256), { code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => example.copyThrough([1, 2]), { code: 'ERR_INVALID_ARG_TYPE' });
});

test('loaded only in workers, ended or terminated with work pending: clean exit', { skip }, () => {
  const worker = `
    const e = require(${JSON.stringify(__dirname)});
    e.fill(65536, 1).then(() => {
      for (let i = 0; i < 50; i++) e.fill(65536, i);   // left pending
      require('node:worker_threads').parentPort.postMessage('go');
    });`;
  const script = `
    const { Worker } = require('node:worker_threads');
    const one = () => new Promise((res) => {
      const w = new Worker(${JSON.stringify(worker)}, { eval: true });
      w.on('message', () => w.terminate());
      w.on('exit', res);
    });
    (async () => { for (let i = 0; i < 4; i++) await one(); setTimeout(() => {}, 150); })();`;
  for (let i = 0; i < 4; i++) {
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.signal, null, r.stderr);
    assert.equal(r.status, 0, r.stderr);
  }
});

test('the addon exports only its Node-API entry point (uvcuda stays inside)', { skip }, () => {
  const file = process.env.EXAMPLE_ADDON || path.join(__dirname, 'build', 'Release', 'example.node');
  const nm = spawnSync('nm', ['-D', '--defined-only', file], { encoding: 'utf8' });
  if (nm.error) return; // no binutils here
  const syms = nm.stdout.trim().split('\n').map((l) => l.split(/\s+/).pop());
  assert.deepEqual(syms.filter((s) => /uvcuda/.test(s)), []);
});
