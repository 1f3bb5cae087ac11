'use strict';
// Worker threads: each env has its own uvcuda loop context, settles its
// promises on its own thread, and tears down cleanly (pending futures
// closed, context closed) however the worker ends.

const assert = require('node:assert/strict');
const path = require('node:path');
const { Worker } = require('node:worker_threads');
const { test, uvcuda, setup, runChild, lastJson } = require('./common');

const common = path.join(__dirname, 'common.js');

/** A worker running `body` (an async function body with `k`, `uvcuda`,
 * `common`, `post`, `threadId` in scope). Resolves {messages, code, ms}. */
function runWorker(body, { onMessage } = {}) {
  const src = `
    const { parentPort, threadId } = require('node:worker_threads');
    const common = require(${JSON.stringify(common)});
    const { uvcuda } = common;
    const post = (m) => parentPort.postMessage(m);
    (async () => { ${body} })().catch((e) => { post({ error: String(e && e.stack || e) }); });
  `;
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const w = new Worker(src, { eval: true });
    const threadId = w.threadId; // -1 once it exited
    const messages = [];
    w.on('message', (m) => {
      messages.push(m);
      if (onMessage) onMessage(m, w);
    });
    w.on('error', reject);
    w.on('exit', (code) => resolve({ messages, code, ms: Date.now() - t0, threadId }));
  });
}

test('four workers compute at once, each on its own loop context', async () => {
  const k = setup();
  const mainBefore = uvcuda.stats().awaited;
  const runs = [1, 2, 3, 4].map((v) => runWorker(`
    const k = common.setup();
    const s = k.dev.createStream();
    const n = 4096, m = k.dev.alloc(4 * n);
    await s.memset(m, 0);
    for (let i = 0; i < 25; i++) s.launch(k.add, common.grid(n), 256, [m, n, ${v}]);
    const out = await s.copyFromDevice(new Uint32Array(n), m);
    const st = uvcuda.stats();
    post({ ok: out.every((x) => x === 25 * ${v}), first: out[0], awaited: st.awaited,
           pending: st.pending, threadId });`));
  // the main env keeps working meanwhile
  const s = k.dev.createStream();
  const m = k.dev.alloc(64);
  await s.memset(m, 3);
  const mine = await s.copyFromDevice(new Uint8Array(64), m);
  const res = await Promise.all(runs);
  assert.ok(mine.every((x) => x === 3));
  res.forEach((r, i) => {
    assert.equal(r.code, 0);
    assert.deepEqual(r.messages, [{ ok: true, first: 25 * (i + 1), awaited: 27, pending: 0,
                                    threadId: r.threadId }]);
  });
  assert.equal(uvcuda.stats().awaited - mainBefore, 2, 'workers count in their own envs');
});

test('terminate() with GPU work pending: the worker exits, the process goes on', async () => {
  let started = false;
  const r = await runWorker(`
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(1 << 16);
    s.launch(k.sleep, 1, 1, [300_000_000n]);
    for (let i = 0; i < 200; i++) s.fence();
    s.copyFromDevice(new Uint8Array(1 << 16), m);
    post('started');
    setInterval(() => {}, 1000);`, {
    onMessage: (msg, w) => {
      if (msg === 'started') { started = true; w.terminate(); }
    },
  });
  // It exited at all: teardown closed its pending futures (no clock here;
  // a hang is the runner's timeout).
  assert.equal(r.code, 1);
  assert.ok(started);
  const k = setup();
  const s = k.dev.createStream();
  await s.launch(k.sleep, 1, 1, [1_000_000n]);
});

test('process.exit() inside a worker with GPU work pending', async () => {
  const r = await runWorker(`
    const k = common.setup();
    const s = k.dev.createStream();
    s.launch(k.sleep, 1, 1, [200_000_000n]);
    s.fence();
    s.fenceOnThreadPool();
    setTimeout(() => process.exit(7), 20);`);
  assert.equal(r.code, 7);
});

test('a worker that ends on its own waits for its promises', async () => {
  const r = await runWorker(`
    const k = common.setup();
    const s = k.dev.createStream();
    const m = k.dev.alloc(32);
    s.memset(m, 0x5a);
    s.launch(k.sleep, 1, 1, [100_000_000n]);
    s.copyFromDevice(new Uint8Array(32), m).then((b) => post({ b: [...b], threadId }));`);
  assert.equal(r.code, 0);
  assert.deepEqual(r.messages, [{ b: new Array(32).fill(0x5a), threadId: r.threadId }]);
});

test('twelve workers one after another, some killed mid-work', async () => {
  for (let i = 0; i < 12; i++) {
    const kill = i % 3 === 2;
    const r = await runWorker(`
      const k = common.setup();
      const s = k.dev.createStream();
      const m = k.dev.alloc(4 * 256);
      await s.memset(m, 0);
      await s.launch(k.add, 1, 256, [m, 256, ${i}]);
      const out = await s.copyFromDevice(new Uint32Array(256), m);
      post(out[255]);
      ${kill ? 's.launch(k.sleep, 1, 1, [50_000_000n]); s.fence(); setInterval(() => {}, 1000);' : ''}`,
    { onMessage: (m, w) => { if (kill) w.terminate(); } });
    assert.deepEqual(r.messages, [i]);
    assert.equal(r.code, kill ? 1 : 0);
  }
});

test('a worker that loads the addon but never uses the GPU', async () => {
  const r = await runWorker('post(typeof uvcuda.openDevice);');
  assert.equal(r.code, 0);
  assert.deepEqual(r.messages, ['function']);
});

test('main-thread process.exit() while a worker has GPU work pending', async () => {
  const res = await runChild(`
    const { Worker } = require('node:worker_threads');
    const w = new Worker(\`
      const common = require(${JSON.stringify(common)});
      const k = common.setup();
      const s = k.dev.createStream();
      s.launch(k.sleep, 1, 1, [300_000_000n]);
      for (let i = 0; i < 50; i++) s.fence();
      require('node:worker_threads').parentPort.postMessage('go');
      setInterval(() => {}, 1000);\`, { eval: true });
    w.on('message', () => setTimeout(() => { console.log('"exit"'); process.exit(0); }, 20));`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  assert.equal(lastJson(res), 'exit');
});
