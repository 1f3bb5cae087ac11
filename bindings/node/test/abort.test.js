'use strict';
// AbortSignal on every awaiting method, as Node core takes it: `{ signal }`
// after the positional arguments. Aborting rejects at once with an
// AbortError (code ABORT_ERR, cause: signal.reason); the GPU work goes on
// and keeps what it uses alive until it is done; an aborted signal rejects
// without enqueuing. And a worker that ends (terminate(), process.exit())
// does not wait for GPU work it will not see finish.

const assert = require('node:assert/strict');
const path = require('node:path');
const { getEventListeners } = require('node:events');
const { test, simSkip, uvcuda, setup, bytes, runChild, lastJson, forceGc } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

function abortError(reason) {
  return (e) => {
    assert.equal(e.name, 'AbortError');
    assert.equal(e.code, 'ABORT_ERR');
    assert.ok(e instanceof Error);
    assert.equal(e.cause, reason);
    return true;
  };
}

/** Every awaiting call, with `opts` as its options argument. */
function calls(s, m, opts) {
  const host = new Uint8Array(16);
  const m2 = dev.alloc(m.byteLength);
  return {
    'copyToDevice(dst, src, opts)': () => s.copyToDevice(m, host, opts),
    'copyToDevice(dst, src, offset, opts)': () => s.copyToDevice(m, host, 16, opts),
    'copyFromDevice(dst, src, opts)': () => s.copyFromDevice(host, m, opts),
    'copyFromDevice(dst, src, offset, opts)': () => s.copyFromDevice(host, m, 8, opts),
    'copyDevice(dst, src, opts)': () => s.copyDevice(m2, m, opts),
    'copyDevice(dst, src, n, dOff, sOff, opts)': () => s.copyDevice(m2, m, 8, 16, 0, opts),
    'memset(dst, v, opts)': () => s.memset(m, 1, opts),
    'memset(dst, v, n, off, opts)': () => s.memset(m, 1, 8, 8, opts),
    'launch(kernel, grid, block, args, opts)': () => s.launch(k.add, 1, 4, [m, 4, 1], opts),
    'launch(kernel, grid, block, args, shmem, opts)': () => s.launch(k.add, 1, 4, [m, 4, 1], 0, opts),
    'launch(u64 kernel, grid, block, args, opts)': () => s.launch(k.sleep, 1, 1, [1000n], opts),
    'fence(opts)': () => s.fence(opts),
    'fenceOnThreadPool(opts)': () => s.fenceOnThreadPool(opts),
    'launchOnThreadPool(..., opts)': () => s.launchOnThreadPool(k.add, 1, 4, [m, 4, 1], opts),
    'uvcuda.fence(stream, opts)': () => uvcuda.fence(s, opts),
    'uvcuda.fence(handle, device, opts)': () => uvcuda.fence(s.handle, dev, opts),
  };
}

test('an aborted signal rejects with AbortError and enqueues nothing', async () => {
  const s = dev.createStream();
  const m = dev.alloc(64);
  const ac = new AbortController();
  const reason = new Error('no longer needed');
  ac.abort(reason);
  const before = uvcuda.stats();
  for (const [label, f] of Object.entries(calls(s, m, { signal: ac.signal }))) {
    let p;
    assert.doesNotThrow(() => { p = f(); }, label);
    assert.ok(p instanceof Promise, label);
    await assert.rejects(p, abortError(reason), label);
  }
  await assert.rejects(dev.reset({ signal: ac.signal }), abortError(reason), 'reset');
  const after = uvcuda.stats();
  assert.equal(after.awaited, before.awaited, 'something was enqueued');
  assert.equal(s.pending, 0);
  assert.equal(m.pending, 0);
  // The default reason is an AbortError DOMException, carried as the cause.
  const ac2 = new AbortController();
  ac2.abort();
  await assert.rejects(s.fence({ signal: ac2.signal }), abortError(ac2.signal.reason));
});

test('with a signal never aborted every call resolves as without one, and lets go of it', async () => {
  const s = dev.createStream();
  const m = dev.alloc(64);
  const ac = new AbortController();
  for (const [label, f] of Object.entries(calls(s, m, { signal: ac.signal }))) {
    await f().catch((e) => assert.fail(`${label}: ${e.stack}`));
  }
  await s.copyFromDevice(new Uint8Array(16), m, {}); // options without a signal
  await s.fence({ signal: undefined });
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'abort listeners left behind');
});

test('aborting rejects at once; the GPU work goes on and its result lands', async () => {
  const s = dev.createStream();
  const n = 256;
  const m = dev.alloc(4 * n);
  await s.memset(m, 0);
  const ac = new AbortController();
  const order = [];
  s.launch(k.sleep, 1, 1, [200_000_000n]); // 200 ms
  const p = s.launch(k.add, 1, n, [m, n, 5], { signal: ac.signal })
    .then(() => order.push('resolved'), (e) => { order.push(e.name); throw e; });
  const after = s.fence().then(() => order.push('fence'));
  ac.abort('stop');
  await assert.rejects(p, abortError('stop'));
  await after;
  assert.deepEqual(order, ['AbortError', 'fence']);
  const out = await s.copyFromDevice(new Uint32Array(n), m);
  assert.ok(out.every((v) => v === 5), 'the aborted launch did not run');
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
});

test('an aborted copy keeps its buffers and device objects until the GPU is done', async () => {
  // The fact holds while the GPU work is pending; a slow or busy machine
  // may finish a short kernel during the collections, so the kernel grows
  // until the work is still pending after them (no wall-clock bound).
  let fin, dst, probe;
  for (const ns of [150_000_000n, 1_500_000_000n, 6_000_000_000n]) {
    const ac = new AbortController();
    const got = [];  // this attempt's objects only
    fin = got;
    const registry = new FinalizationRegistry((what) => got.push(what));
    const start = () => {
      const s = dev.createStream();
      const m = dev.alloc(1 << 16);
      s.memset(m, 0x5a);
      s.launch(k.sleep, 1, 1, [ns]);
      dst = new Uint8Array(1 << 16);
      const p = s.copyFromDevice(dst, m, { signal: ac.signal });
      registry.register(s, 'stream');
      registry.register(m, 'memory');
      m.free();  // freed with work pending: the copy still holds it
      s.destroy();
      probe = dev.createStream();
      return p;
    };
    const p = start();
    ac.abort();
    await assert.rejects(p, { name: 'AbortError' });
    for (let i = 0; i < 3; i++) {
      forceGc();
      await new Promise((r) => setImmediate(r));
    }
    const pending = uvcuda.stats().pending > 0;
    if (pending) assert.deepEqual(fin, [], 'collected while the GPU still used it');
    while (uvcuda.stats().pending > 0) await probe.launch(k.sleep, 1, 1, [5_000_000n]);
    if (pending) break;
    assert.notEqual(ns, 6_000_000_000n, 'a 6 s kernel ended before three collections did');
  }
  // An aborted copy does not write into dst once the caller gave up on it.
  assert.ok(dst.every((v) => v === 0), 'dst was written after the abort');
  for (let i = 0; i < 20 && fin.length < 2; i++) {
    forceGc();
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.deepEqual(fin.sort(), ['memory', 'stream']);
});

test('a signal that is not an AbortSignal rejects with ERR_INVALID_ARG_TYPE', async () => {
  const s = dev.createStream();
  for (const signal of ['yes', 1, null, {}, []]) {
    await assert.rejects(s.fence({ signal }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' },
      String(signal));
  }
});

// As Node core's validateObject(options, 'options') (timers/promises,
// fs/promises): where every positional argument is given, what follows is
// the options argument, and it must be an object (or undefined).
test('an options argument that is not an object rejects with ERR_INVALID_ARG_TYPE', async () => {
  const s = dev.createStream();
  const m = dev.alloc(64);
  const m2 = dev.alloc(64);
  const host = new Uint8Array(16);
  const at = {
    'copyToDevice(dst, src, offset, opts)': (o) => s.copyToDevice(m, host, 16, o),
    'copyFromDevice(dst, src, offset, opts)': (o) => s.copyFromDevice(host, m, 8, o),
    'copyDevice(dst, src, n, dOff, sOff, opts)': (o) => s.copyDevice(m2, m, 8, 16, 0, o),
    'memset(dst, v, n, off, opts)': (o) => s.memset(m, 1, 8, 8, o),
    'launch(kernel, grid, block, args, shmem, opts)': (o) => s.launch(k.add, 1, 4, [m, 4, 1], 0, o),
    'fence(opts)': (o) => s.fence(o),
    'fenceOnThreadPool(opts)': (o) => s.fenceOnThreadPool(o),
    'launchOnThreadPool(..., shmem, opts)': (o) => s.launchOnThreadPool(k.add, 1, 4, [m, 4, 1], 0, o),
    'uvcuda.fence(handle, device, opts)': (o) => uvcuda.fence(s.handle, dev, o),
    'device.reset(opts)': (o) => dev.reset(o),
  };
  const before = uvcuda.stats().awaited;
  for (const [label, f] of Object.entries(at)) {
    for (const [bad, shown] of [[42, 'Received type number (42)'], ['x', "Received type string ('x')"],
      [null, 'Received null'], [true, 'Received type boolean (true)'], [[], 'Received an instance of Array'],
      [() => {}, 'Received function ']]) {
      let p;
      assert.doesNotThrow(() => { p = f(bad); }, label);
      await assert.rejects(p, (e) => {
        assert.equal(e.name, 'TypeError', label);
        assert.equal(e.code, 'ERR_INVALID_ARG_TYPE', label);
        assert.ok(e.message.startsWith('The "options" argument must be of type object.'), e.message);
        assert.ok(e.message.includes(shown), `${label}: ${e.message}`);
        return true;
      }, `${label} ${String(bad)}`);
    }
  }
  assert.equal(uvcuda.stats().awaited, before, 'something was enqueued');
  // undefined is no options at all.
  await s.fence(undefined);
  await s.memset(m, 1, 8, 8, undefined);
});

test('a signal whose aborted getter throws when the copy lands: rejects with that error, dst untouched', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  const boom = new Error('boom');
  let reads = 0;
  // Read once when the call starts (not aborted), again when the copy lands.
  const signal = {
    get aborted() { if (reads++ > 0) throw boom; return false; },
    addEventListener() {},
    removeEventListener() {},
  };
  await s.memset(m, 7);
  s.launch(k.sleep, 1, 1, [20_000_000n]);
  const dst = new Uint8Array(16).fill(1);
  await assert.rejects(s.copyFromDevice(dst, m, { signal }), (e) => e === boom);
  assert.ok(reads >= 2, 'the getter was read when the copy landed');
  assert.deepEqual(dst, new Uint8Array(16).fill(1));
  await s.fence();
});

test('an abort from a getter of the call\'s own arguments rejects with AbortError', async () => {
  const s = dev.createStream();
  const m = dev.alloc(16);
  const reason = new Error('stop');
  const aborting = (ac, value) => {
    const arr = [];
    Object.defineProperty(arr, 0, { enumerable: true, get() { ac.abort(reason); return value; } });
    arr.length = 1;
    return arr;
  };
  // Aborted while the call reads args[0] / grid[0]: before the call returns.
  const ac = new AbortController();
  const p = s.launch(k.sleep, 1, 1, aborting(ac, 20_000_000n), { signal: ac.signal });
  assert.equal(ac.signal.aborted, true);
  await assert.rejects(p, abortError(reason));
  const ac2 = new AbortController();
  await assert.rejects(s.launch(k.add, aborting(ac2, 1), 4, [m, 4, 1], { signal: ac2.signal }),
    abortError(reason));
  await s.fence();
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
  assert.equal(getEventListeners(ac2.signal, 'abort').length, 0);
});

test('a signal-like object whose removeEventListener throws: the call settles, nothing unhandled', async () => {
  const s = dev.createStream();
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const boom = new Error('removeEventListener failed');
    const signal = { aborted: false, reason: undefined,
      addEventListener() {}, removeEventListener() { throw boom; } };
    let settled = 0;
    const p1 = s.fence({ signal }).then(() => { settled++; });
    const p2 = s.launch(k.sleep, 1, 1, ['x'], { signal }).catch((e) => {
      assert.equal(e.code, 'ERR_INVALID_ARG_TYPE');
      settled++;
    });
    await s.fence(); // after both in stream order
    await new Promise(setImmediate);
    assert.equal(settled, 2, 'a call never settled');
    await Promise.all([p1, p2]);
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test('a signal-like object whose addEventListener threw once: its next call is still abortable', async () => {
  const s = dev.createStream();
  const boom = new Error('boom');
  let fail = true;
  let listener;
  const signal = { aborted: false, reason: 'stop',
    addEventListener(type, f) {
      if (fail) { fail = false; throw boom; }
      listener = f;
    },
    removeEventListener() { listener = undefined; } };
  await assert.rejects(s.fence({ signal }), (e) => e === boom);
  const p = s.launch(k.sleep, 1, 1, [20_000_000n], { signal });
  assert.equal(typeof listener, 'function', 'no abort listener for the second call');
  signal.aborted = true;
  listener();
  await assert.rejects(p, abortError('stop'));
  await s.fence();
});

test('one signal for many calls: all reject at its abort, the others settle', async () => {
  const s = dev.createStream();
  const ac = new AbortController();
  s.launch(k.sleep, 1, 1, [100_000_000n]);
  const ps = Array.from({ length: 50 }, () => s.fence({ signal: ac.signal }));
  const free = s.fence();
  ac.abort();
  const r = await Promise.allSettled(ps);
  assert.ok(r.every((x) => x.status === 'rejected' && x.reason.name === 'AbortError'));
  await free;
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
});

// The end of a worker with long GPU work pending, by ordering: when the
// worker has its 8 s kernel running, the main thread starts a 2 s kernel of
// its own; if the worker's end waited for its kernel, the main kernel would
// finish first.
const common = path.join(__dirname, 'common.js');
for (const how of ['terminate()', 'process.exit() in the worker']) {
  test(`a worker's ${how} does not wait for its 8 s kernel`, async () => {
    const res = await runChild(`
      const { Worker } = require('node:worker_threads');
      const k = common.setup();
      const s = k.dev.createStream();
      const s2 = k.dev.createStream();
      const w = new Worker(\`
        const { parentPort } = require('node:worker_threads');
        const common = require(${JSON.stringify(common)});
        const k = common.setup();
        const s = k.dev.createStream();
        const m = k.dev.alloc(1 << 20);
        s.memset(m, 1);
        s.launch(k.sleep, 1, 1, [8_000_000_000n]);
        s.copyFromDevice(new Uint8Array(1 << 20), m);
        for (let i = 0; i < 20; i++) s.fence();
        k.dev.alloc(4096); // dropped: goes at teardown
        parentPort.postMessage('running');
        parentPort.on('message', () => process.exit(0));
        setInterval(() => {}, 1000);\`, { eval: true });
      const order = [];
      w.on('message', () => {
        s.launch(k.sleep, 1, 1, [2_000_000_000n]).then(() => {
          order.push('main kernel');
          console.log(JSON.stringify(order));
          process.exit(0);
        });
        if (${JSON.stringify(how)} === 'terminate()') w.terminate();
        else w.postMessage('exit');
      });
      w.on('exit', (code) => {
        order.push('worker exit ' + code);
        // Once it is gone the device works on.
        s2.launch(k.add, 1, 1, [null, 0, 0]).then(() => order.push('after'));
      });`);
    assert.equal(res.signal, null, res.stderr);
    assert.equal(res.status, 0, res.stderr);
    const code = how === 'terminate()' ? 1 : 0;
    assert.deepEqual(lastJson(res), [`worker exit ${code}`, 'after', 'main kernel']);
  });
}

test('uvcuda.fence on a foreign handle and the copies take a signal in any position', async () => {
  // Positional options are not mistaken for options bags.
  const s = dev.createStream();
  const m = dev.alloc(32);
  const src = bytes(32, 3);
  const ac = new AbortController();
  await s.copyToDevice(m, src, 0, { signal: ac.signal });
  const out = await s.copyFromDevice(new Uint8Array(32), m, { signal: ac.signal });
  assert.deepEqual(out, src);
  const dv = new DataView(new ArrayBuffer(8));
  assert.equal(await s.copyFromDevice(dv, m, 8, { signal: ac.signal }), dv);
});
