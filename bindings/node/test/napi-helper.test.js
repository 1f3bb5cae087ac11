'use strict';
// The contract of include/uvcuda/napi.h, seen from JS: each await is an
// async resource (napi_async_init) whose settle runs inside a callback scope
// (async_hooks before/after around it, nextTicks and microtasks drained when
// it closes), destroyed after; counters per env.

const assert = require('node:assert/strict');
const async_hooks = require('node:async_hooks');
const { test, simSkip, uvcuda, setup, runChild } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;

test('each await is an async resource, settled between before/after, then destroyed', async () => {
  const events = new Map();
  const note = (id, what) => {
    if (events.has(id)) events.get(id).push(what);
  };
  const hook = async_hooks.createHook({
    init(id, type) {
      if (type.startsWith('uvcuda.')) events.set(id, [type]);
    },
    before(id) { note(id, 'before'); },
    after(id) { note(id, 'after'); },
    destroy(id) { note(id, 'destroy'); },
  }).enable();
  try {
    const s = dev.createStream();
    const m = dev.alloc(16);
    await s.memset(m, 1);
    await s.launch(k.add, 1, 4, [m, 4, 1]);
    await s.copyFromDevice(new Uint8Array(16), m);
    await s.fence();
    await uvcuda.fence(s.handle);
    await new Promise((r) => setImmediate(r)); // destroy hooks run later
    await new Promise((r) => setImmediate(r));
  } finally {
    hook.disable();
  }
  const types = [...events.values()].map((e) => e[0]);
  assert.deepEqual(types, ['uvcuda.memset', 'uvcuda.launch', 'uvcuda.copyFromDevice',
                           'uvcuda.fence', 'uvcuda.fence']);
  for (const e of events.values()) {
    assert.deepEqual(e.slice(1, 3), ['before', 'after'], e.join(' '));
    assert.ok(e.includes('destroy'), e.join(' '));
  }
});

test('nextTicks and microtasks queued by a settle run before the next settle', async () => {
  const s = dev.createStream();
  const order = [];
  const ps = [];
  for (let i = 0; i < 5; i++) {
    ps.push(s.fence().then(() => {
      order.push(`settle ${i}`);
      process.nextTick(() => order.push(`tick ${i}`));
      queueMicrotask(() => order.push(`micro ${i}`));
    }));
  }
  await Promise.all(ps);
  await new Promise((r) => setImmediate(r)); // the last nextTick
  const want = [];
  for (let i = 0; i < 5; i++) want.push(`settle ${i}`, `micro ${i}`, `tick ${i}`);
  assert.deepEqual(order, want);
});

test('AsyncLocalStorage context flows into the continuation', async () => {
  const { AsyncLocalStorage } = async_hooks;
  const als = new AsyncLocalStorage();
  const s = dev.createStream();
  const got = await als.run({ req: 42 }, async () => {
    await s.launch(k.sleep, 1, 1, [1_000_000n]);
    return als.getStore();
  });
  assert.deepEqual(got, { req: 42 });
});

test('an exception thrown by a continuation is an ordinary rejection', async () => {
  const s = dev.createStream();
  await assert.rejects(s.fence().then(() => { throw new Error('from then'); }), /from then/);
  await s.fence();
});

test('resolved and rejected counters', async () => {
  const s = dev.createStream();
  const a = uvcuda.stats();
  s.beginCapture();
  await assert.rejects(s.fence(), { code: 'UVCUDA_ECAPTURING' });
  s.endCapture();
  await s.fence();
  const b = uvcuda.stats();
  assert.equal(b.rejected - a.rejected, 1);
  assert.equal(b.resolved - a.resolved, 1);
  assert.equal(b.awaited - a.awaited, 2);
  assert.equal(b.pending, 0);
});

test('continuations run on the thread that awaited', async () => {
  const { threadId } = require('node:worker_threads');
  const s = dev.createStream();
  const seen = await s.fence().then(() => require('node:worker_threads').threadId);
  assert.equal(seen, threadId);
});

// A third-party addon (test/addon/teardown.c, built by Meson) calls the
// helper from the env's finalizers: the uvcuda_napi_set_data finalizer and
// a napi_wrap finalizer Node runs after it. Before, the helper took the
// dying env for a fresh one and set instance data on it: a double free or
// a crash at exit. Now the finalizer reads its data, closing is nonzero,
// and an await is refused without a throw. Node's slot is not read once
// the data's finalizer ran: Node 20 reads it through a deleted reference.
const teardownAddon = process.env.UVCUDA_NAPI_TEARDOWN_ADDON;
const noTeardownAddon = !teardownAddon && 'needs the test addon of the Meson build';

test('helper calls from the env finalizers see a closing env, never a fresh one', {
  skip: noTeardownAddon,
}, async () => {
  for (let round = 0; round < 3; round++) {
    const res = await runChild(`
      const t = require(process.env.UVCUDA_NAPI_TEARDOWN_ADDON);
      globalThis.early = t.wrapEarly();
      t.initData().then(() => {}, () => {});`,
    // glibc fills freed memory at once (no per-thread cache): a read of
    // the freed instance data slot crashes instead of passing by luck.
    { env: { GLIBC_TUNABLES: 'glibc.malloc.tcache_count=0', MALLOC_PERTURB_: '50' } });
    assert.equal(res.status, 0, `${res.signal} ${res.stderr}`);
    const lines = res.stdout.trim().split('\n');
    assert.deepEqual(lines, [
      'data-finalizer get=0 data=ours closing=1 stats=0 await=refused',
      'wrap-finalizer get=0 data=null closing=1 stats=0 await=refused',
    ], res.stderr);
  }
});

// A napi_wrap made after the helper's state is finalized before the
// set_data finalizer, with the instance data still set: the helper tried
// to throw there (Node refuses: JS can't run) and answered
// napi_pending_exception (10) with nothing pending, and set_data took data
// nothing would finalize. napi.h: napi_generic_failure (9), nothing thrown.
test('helper calls from a napi_wrap finalizer at teardown: napi_generic_failure, nothing thrown', {
  skip: noTeardownAddon,
}, async () => {
  const res = await runChild(`
    const t = require(process.env.UVCUDA_NAPI_TEARDOWN_ADDON);
    t.initData().then(() => {}, () => {});
    globalThis.late = t.wrapLate();`);
  assert.equal(res.status, 0, `${res.signal} ${res.stderr}`);
  const line = res.stdout.split('\n').find((l) => l.startsWith('late-wrap-finalizer'));
  assert.equal(line, 'late-wrap-finalizer await=9 promise=null loop=9 ul=null configure=9 ' +
    'set_data=9 pending=0', res.stdout);
});

// Options given to uvcuda_napi_configure out of range were reported, when
// the context was made, as a bare "invalid argument"; the environment's
// were named. Now the option is too.
test('a bad option given to uvcuda_napi_configure is named', {
  skip: noTeardownAddon,
}, async () => {
  const res = await runChild(`
    const t = require(process.env.UVCUDA_NAPI_TEARDOWN_ADDON);
    const e = t.badSpin();
    console.log(JSON.stringify({ code: e.code, message: e.message }));`);
  assert.equal(res.status, 0, `${res.signal} ${res.stderr}`);
  const { code, message } = JSON.parse(res.stdout);
  assert.equal(code, 'EINVAL');
  assert.match(message, /spin_budget_us is 2000000/);
});

test('await_ex with a keep value Node-API cannot hold: a TypeError, no promise', {
  skip: noTeardownAddon,
}, () => {
  const t = require(teardownAddon);
  for (const v of [42, 'str', undefined, null, true, 1n]) {
    assert.throws(() => t.keepValue(v), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  }
  const p = t.keepValue({}); // an object is kept: a promise of the work
  assert.ok(p instanceof Promise);
  return p.then(() => {}, () => {});
});

// napi.h is for the env's JS thread. A helper call from another thread
// entered V8 there and Node aborted the process ("Entering the V8 API
// without proper locking"). Now each call made off the thread that made
// the env's helper state returns napi_generic_failure (9) with nothing
// thrown (no JS can run there), and closing() answers nonzero.
test('helper calls from another thread are refused, never enter V8', {
  skip: noTeardownAddon,
}, async () => {
  const res = await runChild(`
    const t = require(process.env.UVCUDA_NAPI_TEARDOWN_ADDON);
    console.log(JSON.stringify(t.fromThread()));`);
  assert.equal(res.status, 0, `${res.signal} ${res.stderr}`);
  assert.deepEqual(JSON.parse(res.stdout), {
    await: 9, promiseCleared: 1, loop: 9, loopCleared: 1, configure: 9, stats: 9,
    getData: 9, dataCleared: 1, setData: 9, createError: 9, errorCleared: 1,
    throw: 9, closing: 1,
  });
});
