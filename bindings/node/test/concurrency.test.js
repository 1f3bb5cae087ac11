'use strict';
// Many promises at once: all settle, in stream order per stream, with the
// right bytes; the event loop keeps serving an HTTP server meanwhile.

const assert = require('node:assert/strict');
const http = require('node:http');
const { test, simSkip, uvcuda, setup, grid, bytes } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

test('10,000 fences on 16 streams settle, in order per stream', async () => {
  const streams = Array.from({ length: 16 }, () => dev.createStream());
  const seen = streams.map(() => []);
  const ps = [];
  for (let i = 0; i < 10000; i++) {
    const j = i % streams.length;
    if (i % 97 === 0) streams[j].launch(k.sleep, 1, 1, [100_000n]);
    ps.push(streams[j].fence().then(() => seen[j].push(i)));
  }
  assert.equal(uvcuda.stats().pending >= 1, true);
  await Promise.all(ps);
  for (let j = 0; j < streams.length; j++) {
    const want = [];
    for (let i = j; i < 10000; i += streams.length) want.push(i);
    assert.deepEqual(seen[j], want, `stream ${j} settled out of order`);
  }
  assert.equal(uvcuda.stats().pending, 0);
});

test('2,000 kernel launches in flight add up exactly', async () => {
  const n = 1024;
  const streams = Array.from({ length: 8 }, () => dev.createStream());
  const bufs = streams.map(() => dev.alloc(4 * n));
  await Promise.all(streams.map((s, i) => s.memset(bufs[i], 0)));
  const ps = [];
  for (let i = 0; i < 2000; i++) {
    const j = i % streams.length;
    ps.push(streams[j].launch(k.add, grid(n), 256, [bufs[j], n, 1]));
  }
  await Promise.all(ps);
  const outs = await Promise.all(streams.map((s, i) =>
    s.copyFromDevice(new Uint32Array(n), bufs[i])));
  for (const out of outs) assert.ok(out.every((v) => v === 250), `got ${out[0]}`);
});

test('64 independent pipelines (copy in, kernels, copy out) at once', async () => {
  const jobs = Array.from({ length: 64 }, async (_, i) => {
    const s = dev.createStream();
    const n = 256 + i;
    const data = new Uint32Array(n).map((_, j) => j * 3 + i);
    const m = dev.alloc(data.byteLength);
    await s.copyToDevice(m, data);
    const launches = [];
    for (let r = 0; r < 5; r++) launches.push(s.launch(k.add, grid(n), 256, [m, n, i + 1]));
    const out = s.copyFromDevice(new Uint32Array(n), m);
    await Promise.all(launches);
    const got = await out;
    for (let j = 0; j < n; j++) {
      if (got[j] !== data[j] + 5 * (i + 1)) throw new Error(`pipeline ${i} element ${j}`);
    }
    s.destroy();
    m.free();
    return got.length;
  });
  const lens = await Promise.all(jobs);
  assert.equal(lens.reduce((a, b) => a + b, 0), 64 * 256 + (63 * 64) / 2);
});

test('a long sequential chain of awaits (futures are reused)', async () => {
  const s = dev.createStream();
  const m = dev.alloc(4);
  await s.memset(m, 0);
  for (let i = 0; i < 2000; i++) await s.launch(k.add, 1, 1, [m, 1, 1]);
  const out = await s.copyFromDevice(new Uint32Array(1), m);
  assert.equal(out[0], 2000);
});

test('mixed: promises on one buffer across the thread-pool baseline and uvcuda', async () => {
  const s = dev.createStream();
  const n = 512;
  const m = dev.alloc(4 * n);
  await s.memset(m, 0);
  const ps = [];
  for (let i = 0; i < 40; i++) {
    ps.push(i % 2 ? s.launch(k.add, grid(n), 256, [m, n, 1])
                  : s.launchOnThreadPool(k.add, grid(n), 256, [m, n, 1]));
  }
  await Promise.all(ps);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  assert.ok(out.every((v) => v === 40));
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
    const n = 256;
    const bufs = streams.map(() => dev.alloc(4 * n));
    await Promise.all(streams.map((s, i) => s.memset(bufs[i], 0)));
    let settled = 0;
    const ps = [];
    for (let i = 0; i < 1000; i++) {
      const j = i % streams.length;
      const s = streams[j];
      // 4 ms of work each, then an add: ~400 ms of GPU time per stream
      ps.push(s.launch(k.sleep, 1, 1, [4_000_000n]).then(() => { settled++; }));
      ps.push(s.launch(k.add, 1, n, [bufs[j], n, 1]).then(() => { settled++; }));
    }
    // Counted: answers that came back while GPU work was still pending. A
    // loop blocked until the GPU is done would answer only at the end.
    let answers = 0;
    let whilePending = 0;
    const pendingAtStart = uvcuda.stats().pending;
    while (settled < ps.length) {
      const r = await get(port);
      assert.equal(r.body, 'ok');
      answers++;
      if (settled < ps.length && uvcuda.stats().pending > 0) whilePending++;
    }
    await Promise.all(ps);
    assert.ok(pendingAtStart >= 1000, `only ${pendingAtStart} pending`);
    assert.ok(whilePending >= 2, `${whilePending} of ${answers} HTTP answers came while GPU work was pending`);
    const outs = await Promise.all(streams.map((s, i) =>
      s.copyFromDevice(new Uint32Array(n), bufs[i])));
    for (const out of outs) assert.ok(out.every((v) => v === 100));
  } finally {
    server.close();
  }
});

test('copy-heavy: 32 x 256 KiB round trips in parallel', async () => {
  const jobs = Array.from({ length: 32 }, async (_, i) => {
    const s = dev.createStream();
    const src = bytes(256 * 1024, i + 1);
    const m = dev.alloc(src.length);
    await s.copyToDevice(m, src);
    const dst = await s.copyFromDevice(new Uint8Array(src.length), m);
    assert.deepEqual(dst, src);
  });
  await Promise.all(jobs);
});
