'use strict';
// Device affinity: memory of one device used on another device's stream
// (a copy, a memset, a launch argument) rejects with ERR_INVALID_ARG_VALUE
// unless the stream's device was given access to the memory's device with
// device.enablePeerAccess(peer). On a GPU such work reads or writes
// another device's memory without a mapping: a copy fails, a kernel can
// fault the whole device. Each case runs in a child process with two
// simulated devices (SIMCUDA_DEVICES=2), which accept peer access.

const assert = require('node:assert/strict');
const { test, runChild, lastJson, pkgDir } = require('./common');

const two = { env: { SIMCUDA_DEVICES: '2' } };

// In a child: d0/d1 with the test kernels, a stream and 64 bytes on each,
// and `codes(calls)`: each call's rejection code, or 'resolved'.
const helpers = `
const k0 = common.setup(0);
const k1 = common.setup(1);
const s0 = k0.dev.createStream();
const s1 = k1.dev.createStream();
const m0 = k0.dev.alloc(64);
const m1 = k1.dev.alloc(64);
const host = new Uint8Array(64);
async function codes(calls) {
  const r = await Promise.allSettled(calls.map((f) => f()));
  return r.map((x) => (x.status === 'rejected' ? x.reason.code : 'resolved'));
}
// Every way memory of device 1 reaches a stream of device 0.
const crossing = () => [
  () => s0.copyToDevice(m1, host),
  () => s0.copyFromDevice(new Uint8Array(64), m1),
  () => s0.copyDevice(m0, m1),
  () => s0.copyDevice(m1, m0),
  () => s0.memset(m1, 1),
  () => s0.launch(k0.add, 1, 16, [m1, 16, 1]),
  () => s0.launchOnThreadPool(k0.add, 1, 16, [m1, 16, 1]),
];
`;

test('memory of another device on a stream: ERR_INVALID_ARG_VALUE, nothing enqueued', async () => {
  const res = await runChild(`${helpers}
    (async () => {
      await s1.memset(m1, 9);
      const before = uvcuda.stats().awaited;
      const out = { codes: await codes(crossing()) };
      out.awaited = uvcuda.stats().awaited - before;
      out.pending = [s0.pending, m1.pending, m0.pending];
      const e = await s0.copyDevice(m0, m1).catch((x) => x);
      out.error = { name: e.name, message: e.message };
      const a = await s0.launch(k0.add, 1, 16, [m1, 16, 1]).catch((x) => x);
      out.argMessage = a.message;
      // m1 was left as it was: nothing reached the driver.
      const back = await s1.copyFromDevice(new Uint8Array(64), m1);
      out.untouched = back.every((v) => v === 9);
      // Same-device work is unaffected.
      out.same = await codes([() => s0.memset(m0, 1), () => s1.memset(m1, 1),
        () => s0.launch(k0.add, 1, 16, [m0, 16, 1])]);
      console.log(JSON.stringify(out));
    })();`, two);
  assert.equal(res.status, 0, res.stderr);
  const out = lastJson(res);
  assert.deepEqual(out.codes, Array(7).fill('ERR_INVALID_ARG_VALUE'));
  assert.equal(out.awaited, 0);
  assert.deepEqual(out.pending, [0, 0, 0]);
  assert.equal(out.error.name, 'TypeError');
  assert.match(out.error.message, /^The argument 'src' must be memory of device 0/);
  assert.match(out.error.message, /enablePeerAccess/);
  assert.match(out.error.message, /Received memory of device 1$/);
  assert.match(out.argMessage, /^The argument 'args\[0\]' must be memory of device 0/);
  assert.equal(out.untouched, true);
  assert.deepEqual(out.same, ['resolved', 'resolved', 'resolved']);
});

test('after d0.enablePeerAccess(d1) device 0 uses device 1\'s memory; not the other way', async () => {
  const res = await runChild(`${helpers}
    (async () => {
      const out = {};
      out.returned = typeof k0.dev.enablePeerAccess(k1.dev);
      out.again = typeof k0.dev.enablePeerAccess(uvcuda.openDevice(1)); // idempotent
      out.codes = await codes(crossing());
      // The bytes went where they should.
      const src = new Uint32Array(16).map((_, i) => i);
      await s0.copyToDevice(m1, src);
      await s0.launch(k0.add, 1, 16, [m1, 16, 5]);
      const viaPeer = await s0.copyFromDevice(new Uint32Array(16), m1);
      const viaOwn = await s1.copyFromDevice(new Uint32Array(16), m1);
      out.data = viaPeer.every((v, i) => v === i + 5) && viaOwn.every((v, i) => v === i + 5);
      // One direction only: device 1's streams still refuse device 0's memory.
      out.reverse = await codes([() => s1.memset(m0, 1), () => s1.copyDevice(m1, m0)]);
      k1.dev.enablePeerAccess(k0.dev);
      out.reverseAfter = await codes([() => s1.memset(m0, 1), () => s1.copyDevice(m1, m0)]);
      console.log(JSON.stringify(out));
    })();`, two);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    returned: 'undefined',
    again: 'undefined',
    codes: Array(7).fill('resolved'),
    data: true,
    reverse: ['ERR_INVALID_ARG_VALUE', 'ERR_INVALID_ARG_VALUE'],
    reverseAfter: ['resolved', 'resolved'],
  });
});

test('enablePeerAccess: bad arguments, driver refusals', async () => {
  const code = `
    const grab = (f) => { try { return f(); } catch (e) { return { name: e.name, code: e.code,
      message: e.message }; } };
    const d0 = uvcuda.openDevice(0);
    const d1 = uvcuda.openDevice(1);
    const out = {
      none: grab(() => d0.enablePeerAccess()),
      number: grab(() => d0.enablePeerAccess(1)),
      stream: grab(() => d0.enablePeerAccess(d1.createStream())),
      self: grab(() => d0.enablePeerAccess(d0)),
      sameOrdinal: grab(() => d0.enablePeerAccess(uvcuda.openDevice(0))),
      wrongThis: grab(() => uvcuda.Device.prototype.enablePeerAccess.call({}, d1)),
      ok: grab(() => d0.enablePeerAccess(d1)),
    };
    console.log(JSON.stringify(out));`;
  let res = await runChild(code, two);
  assert.equal(res.status, 0, res.stderr);
  let out = lastJson(res);
  const type = { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' };
  assert.deepEqual({ ...out.none, message: undefined }, { ...type, message: undefined });
  assert.match(out.none.message, /^peer must be a uvcuda Device, got undefined$/);
  assert.equal(out.number.code, type.code);
  assert.match(out.stream.message, /got an instance of Stream$/);
  for (const k of ['self', 'sameOrdinal']) {
    assert.equal(out[k].code, 'ERR_INVALID_ARG_VALUE', k);
    assert.equal(out[k].message, "The argument 'peer' must be another device than device 0. " +
      'Received device 0', k);
  }
  assert.equal(out.wrongThis.code, 'ERR_INVALID_THIS');
  assert.equal(out.ok, undefined);

  // What the driver refuses is thrown with its code, and nothing is allowed.
  for (const [entry, want] of [['cuCtxEnablePeerAccess', 'CUDA_ERROR_PEER_ACCESS_UNSUPPORTED'],
    ['cuDeviceCanAccessPeer', 'CUDA_ERROR_INVALID_DEVICE']]) {
    const result = want === 'CUDA_ERROR_INVALID_DEVICE' ? 101 : 217;
    res = await runChild(`${helpers}
      (async () => {
        const out = {};
        try { k0.dev.enablePeerAccess(k1.dev); out.thrown = 'no throw'; }
        catch (e) { out.thrown = [e.code, e.cudaResult]; }
        out.after = await codes([() => s0.memset(m1, 1)]);
        console.log(JSON.stringify(out));
      })();`, { env: { SIMCUDA_DEVICES: '2', SIMCUDA_FAIL: `${entry}=${result}:1` } });
    assert.equal(res.status, 0, res.stderr);
    out = lastJson(res);
    assert.deepEqual(out, { thrown: [want, result], after: ['ERR_INVALID_ARG_VALUE'] }, entry);
  }
});

test('a reset of either device ends peer access; enabling it again works', async () => {
  const res = await runChild(`${helpers}
    (async () => {
      const out = {};
      k0.dev.enablePeerAccess(k1.dev);
      out.before = await codes([() => s0.memset(m1, 1)]);
      await k1.dev.reset();
      const m1b = k1.dev.alloc(64);
      out.afterPeerReset = await codes([() => s0.memset(m1b, 1)]);
      k0.dev.enablePeerAccess(k1.dev);
      out.again = await codes([() => s0.memset(m1b, 1)]);
      await k0.dev.reset();
      const s0b = k0.dev.createStream();
      out.afterOwnReset = await codes([() => s0b.memset(m1b, 1)]);
      k0.dev.enablePeerAccess(k1.dev);
      out.last = await codes([() => s0b.memset(m1b, 1)]);
      console.log(JSON.stringify(out));
    })();`, two);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    before: ['resolved'],
    afterPeerReset: ['ERR_INVALID_ARG_VALUE'],
    again: ['resolved'],
    afterOwnReset: ['ERR_INVALID_ARG_VALUE'],
    last: ['resolved'],
  });
});

test('peer access is the process\'s: enabled in a worker, allowed on the main thread', async () => {
  const res = await runChild(`${helpers}
    const { Worker } = require('node:worker_threads');
    const w = new Worker(${JSON.stringify(`const uvcuda = require(${JSON.stringify(pkgDir)});
      uvcuda.openDevice(0).enablePeerAccess(uvcuda.openDevice(1));`)}, { eval: true });
    w.on('exit', async (code) => {
      const out = { code, after: await codes([() => s0.memset(m1, 1)]) };
      console.log(JSON.stringify(out));
    });`, two);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), { code: 0, after: ['resolved'] });
});

test('a stream of no known device (fromHandle without a Device) is not checked', async () => {
  const res = await runChild(`${helpers}
    (async () => {
      const foreign = uvcuda.Stream.fromHandle(s0.handle);
      console.log(JSON.stringify(await codes([() => foreign.memset(m1, 1)])));
    })();`, two);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), ['resolved']);
});
