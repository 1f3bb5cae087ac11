'use strict';
// The conventions of the API, as Node core's promise APIs have them: a
// method that returns a Promise reports every error, argument errors and
// wrong receivers included, as a rejection with a Node-style `code`; a
// synchronous method throws, with a code too. Messages print numbers as
// JavaScript prints them. A kernel's signature must match its parameter
// count. CUDA objects belong to their thread: structured cloning and
// postMessage refuse them.

const assert = require('node:assert/strict');
const { MessageChannel } = require('node:worker_threads');
const { test, simSkip, uvcuda, setup, ptx } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;
const s = dev && dev.createStream();
const m = dev && dev.alloc(64);

const argType = { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' };
const outOfRange = { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' };
const closed = { code: 'UVCUDA_ECLOSING' };

/** Calls f, which must return a Promise (not throw), and checks the
 * rejection against `want` (an object of expected properties). */
async function rejectsWith(f, want, label) {
  let p;
  assert.doesNotThrow(() => { p = f(); }, `${label}: threw instead of rejecting`);
  assert.ok(p instanceof Promise, `${label}: returned ${p}, not a Promise`);
  await assert.rejects(p, want, label);
}

test('Promise methods reject on bad arguments, never throw', async () => {
  const host = new Uint8Array(16);
  const cases = [
    ['copyToDevice(m, string)', () => s.copyToDevice(m, 'not bytes'), argType],
    ['copyToDevice(host, host)', () => s.copyToDevice(host, host), argType],
    ['copyToDevice(m, host, -1)', () => s.copyToDevice(m, host, -1), outOfRange],
    ['copyToDevice too long', () => s.copyToDevice(m, new Uint8Array(65)), outOfRange],
    ['copyFromDevice(m, m)', () => s.copyFromDevice(m, m), argType],
    ['copyFromDevice past the end', () => s.copyFromDevice(new Uint8Array(8), m, 57), outOfRange],
    ['copyDevice(m, host)', () => s.copyDevice(m, host), argType],
    ['memset(m, 256)', () => s.memset(m, 256), outOfRange],
    ['memset(m, "x")', () => s.memset(m, 'x'), argType],
    ['launch(m, ...)', () => s.launch(m, 1, 1, []), argType],
    ['launch grid 0', () => s.launch(k.add, 0, 1, [m, 1, 1]), outOfRange],
    ['launch u32 2**32', () => s.launch(k.add, 1, 1, [m, 2 ** 32, 1]), outOfRange],
    ['launch ptr 12345', () => s.launch(k.add, 1, 1, [12345, 1, 1]), argType],
    ['launch args count', () => s.launch(k.add, 1, 1, [m, 1]), { name: 'TypeError' }],
    ['launchOnThreadPool(m, ...)', () => s.launchOnThreadPool(m, 1, 1, []), argType],
    ['uvcuda.fence()', () => uvcuda.fence(), argType],
    ['uvcuda.fence("s")', () => uvcuda.fence('s'), argType],
    ['uvcuda.fence(2n) without a device', () => uvcuda.fence(2n), argType],
    ['uvcuda.fence(-1n, dev)', () => uvcuda.fence(-1n, dev), outOfRange],
  ];
  for (const [label, f, want] of cases) await rejectsWith(f, want, label);
});

test('a Proxy that throws where the options may go rejects, never throws', async () => {
  // Array.isArray throws on a revoked Proxy, instanceof on one whose
  // getPrototypeOf trap throws: deciding whether the last argument is the
  // options object is part of the call.
  const revoked = () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy;
  };
  const trap = () => new Proxy({}, { getPrototypeOf() { throw new Error('trap'); } });
  for (const [name, make] of [['revoked', revoked], ['trap', trap]]) {
    const cases = [
      ['stream.fence', () => s.fence(make())],
      ['stream.fenceOnThreadPool', () => s.fenceOnThreadPool(make())],
      ['stream.launch', () => s.launch(k.add, 1, 1, make())],
      ['stream.launchOnThreadPool', () => s.launchOnThreadPool(k.add, 1, 1, make())],
      ['stream.copyToDevice', () => s.copyToDevice(m, new Uint8Array(1), make())],
      ['uvcuda.fence', () => uvcuda.fence(s, make())],
    ];
    for (const [label, f] of cases) await rejectsWith(f, (e) => e instanceof Error, `${label}(${name})`);
  }
});

test('work on closed objects rejects with UVCUDA_ECLOSING', async () => {
  const s2 = dev.createStream();
  const m2 = dev.alloc(16);
  m2.free();
  s2.destroy();
  await rejectsWith(() => s.copyToDevice(m2, new Uint8Array(1)), closed, 'freed memory');
  await rejectsWith(() => s.launch(k.add, 1, 1, [m2, 1, 1]), closed, 'freed kernel argument');
  await rejectsWith(() => s2.fence(), closed, 'destroyed stream');
  await rejectsWith(() => s2.fenceOnThreadPool(), closed, 'destroyed stream, pool');
  await rejectsWith(() => uvcuda.fence(s2), closed, 'uvcuda.fence(destroyed)');
});

// As Node core's classes (Blob, AbortSignal, URLSearchParams): a wrong
// `this` is ERR_INVALID_THIS, 'Value of "this" must be of type Stream',
// whatever the receiver (a sloppy call's undefined is not described as the
// global object it becomes).
const thisType = (cls) => ({ name: 'TypeError', code: 'ERR_INVALID_THIS',
  message: `Value of "this" must be of type ${cls}` });

test('a wrong receiver: ERR_INVALID_THIS as in Node core, not "Illegal invocation"', async () => {
  const { Stream, Device, DeviceMemory, Module, Kernel } = uvcuda;
  // Promise methods reject...
  for (const name of ['fence', 'fenceOnThreadPool', 'copyToDevice', 'copyFromDevice',
    'copyDevice', 'memset', 'launch', 'launchOnThreadPool']) {
    for (const recv of [{}, m, undefined, null, 5, 'x'])
      await rejectsWith(() => Stream.prototype[name].call(recv), thisType('Stream'),
        `Stream#${name} on ${String(recv)}`);
  }
  // ... synchronous ones throw, with the code.
  const sync = [
    ['Device', () => Device.prototype.alloc.call(s, 8)],
    ['Device', () => Device.prototype.createStream.call({})],
    ['Device', () => Device.prototype.loadModule.call(null, ptx)],
    ['Device', () => Device.prototype.loadModule.call(undefined, ptx)],
    ['DeviceMemory', () => DeviceMemory.prototype.free.call(s)],
    ['Module', () => Module.prototype.getFunction.call(k.add, 'x', [])],
    ['Stream', () => Stream.prototype.destroy.call(dev)],
    ['Stream', () => Stream.prototype.beginCapture.call(5)],
  ];
  for (const [cls, f] of sync) assert.throws(f, thisType(cls));
  // Getters too.
  const getters = [[Device, 'name'], [Stream, 'handle'], [Stream, 'pending'],
    [DeviceMemory, 'byteLength'], [DeviceMemory, 'ptr'], [Module, 'unloaded'], [Kernel, 'name']];
  for (const [C, prop] of getters) {
    const get = Object.getOwnPropertyDescriptor(C.prototype, prop).get;
    assert.throws(() => get.call({}), thisType(C.name), `${C.name}#${prop}`);
    assert.throws(() => get.call(undefined), thisType(C.name), `${C.name}#${prop}`);
  }
});

test('messages print numbers as JavaScript does', async () => {
  const msg = (f) => {
    try { f(); } catch (e) { return e.message; }
    return assert.fail('did not throw');
  };
  assert.match(msg(() => dev.alloc(NaN)), /\bNaN\b/);
  // 2**53 is an integer, but not one JS can count bytes in exactly.
  assert.match(msg(() => dev.alloc(2 ** 53)), /2\*\*53 - 1/);
  assert.doesNotMatch(msg(() => dev.alloc(NaN)), /\bnan\b/);
  assert.match(msg(() => dev.alloc(1.5)), /\b1\.5\b/);
  assert.match(msg(() => dev.alloc(-8)), /-8\b/);
  assert.match(msg(() => dev.alloc(Infinity)), /\bInfinity\b/);
  assert.match(msg(() => new uvcuda.Device(4294967296)), /\b4294967296\b/);
  const rejection = async (p) => { try { await p; } catch (e) { return e.message; } return ''; };
  const big = await rejection(s.launch(k.add, 1, 1, [m, 2 ** 32, 1]));
  assert.match(big, /\b4294967296\b/);
  assert.doesNotMatch(big, /e\+/);
  assert.match(await rejection(s.launch(k.add, 1, 1, [m, 1.25, 1])), /\b1\.25\b/);
  assert.match(await rejection(s.launch(k.add, [1, 0.5], 1, [m, 1, 1])), /\b0\.5\b/);
  assert.match(await rejection(s.memset(m, 1e21)), /\b1e\+21\b/);
  assert.match(await rejection(s.copyToDevice(m, new Uint8Array(1), NaN)), /\bNaN\b/);
});

test('synchronous methods keep throwing', () => {
  assert.throws(() => dev.alloc('8'), argType);
  assert.throws(() => dev.alloc(0), outOfRange);
  assert.throws(() => dev.loadModule(42), argType);
  assert.throws(() => k.mod.getFunction(1, []), argType);
  assert.throws(() => uvcuda.Stream.fromHandle(1), argType);
  assert.throws(() => new uvcuda.Stream(), { name: 'TypeError', code: 'ERR_ILLEGAL_CONSTRUCTOR' });
});

test('getFunction checks the signature against the kernel\'s parameter count', () => {
  const count = { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' };
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 'u32']), (e) => {
    assert.equal(e.code, count.code);
    assert.match(e.message, /uvcuda_add_u32/);
    assert.match(e.message, /\b3\b/);
    assert.match(e.message, /\b2\b/);
    return true;
  });
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32', 'u32']), count);
  assert.throws(() => k.mod.getFunction('uvcuda_fault', ['u32']), count);
  assert.throws(() => k.mod.getFunction('uvcuda_sleep_ns', []), count);
  // The right counts work, from a module loaded from text or from bytes.
  assert.equal(k.mod.getFunction('uvcuda_checksum_u8', ['ptr', 'u32', 'ptr']).signature.length, 3);
  const fromBytes = dev.loadModule(Buffer.from(ptx));
  assert.throws(() => fromBytes.getFunction('uvcuda_sleep_ns', ['u64', 'u64']), count);
  assert.equal(fromBytes.getFunction('uvcuda_sleep_ns', ['u64']).name, 'uvcuda_sleep_ns');
  // An entry declared over several lines, with comments.
  const multi = dev.loadModule(`.version 8.0\n.target sm_80\n.address_size 64\n
    // uvcuda_add_u32(.param .u64 fake) in a comment does not count
    .visible .entry uvcuda_add_u32 /* (.param .u32 x) */ (
      .param .u64 data,   // the array
      .param .u32 n,
      .param .u32 value
    )\n{\n ret;\n}\n.visible .entry uvcuda_fault\n{\n ret;\n}\n`);
  assert.throws(() => multi.getFunction('uvcuda_add_u32', ['ptr']), count);
  assert.ok(multi.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']));
  assert.ok(multi.getFunction('uvcuda_fault', []));
  assert.throws(() => multi.getFunction('uvcuda_fault', ['u32']), count);
});

test('CUDA objects refuse structured cloning and postMessage', () => {
  const mod = dev.loadModule(ptx);
  const objs = {
    Device: dev,
    Stream: s,
    DeviceMemory: m,
    Module: mod,
    Kernel: mod.getFunction('uvcuda_fault', []),
    'foreign Stream': uvcuda.Stream.fromHandle(s.handle),
  };
  const { port1, port2 } = new MessageChannel();
  try {
    for (const [what, o] of Object.entries(objs)) {
      const refused = (e) => {
        assert.equal(e.name, 'DataCloneError', `${what}: ${e.name}: ${e.message}`);
        assert.match(e.message, /cannot be cloned/, what);
        return true;
      };
      assert.throws(() => structuredClone(o), refused, what);
      assert.throws(() => structuredClone({ nested: [o] }), refused, `${what} nested`);
      assert.throws(() => port1.postMessage(o), refused, `${what} posted`);
    }
  } finally {
    port1.close();
    port2.close();
  }
  // Still usable, and still plain to look at.
  assert.equal(s.device, dev);
  assert.equal(typeof JSON.stringify({ ...m }), 'string');
});
