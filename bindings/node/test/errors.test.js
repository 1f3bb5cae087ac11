'use strict';
// Bad arguments of a synchronous call throw TypeError / RangeError; those
// of a call that returns a Promise reject with them (promises.test.js has
// the conventions); closed objects: TypeError (code UVCUDA_ECLOSING);
// errors of the GPU work reject with an Error carrying .code, .errno (and
// .cudaResult for CUDA results); driver problems throw named errors.

const assert = require('node:assert/strict');
const { test, nodeTest, simSkip, uvcuda, setup, runChild, lastJson, LOAD_COPY } = require('./common');

// Without the simulated driver every test here is skipped: make nothing.
const k = simSkip ? {} : setup();
const { dev } = k;
const s = dev && dev.createStream();
const m = dev && dev.alloc(64);

const typeError = { name: 'TypeError' };
const rangeError = { name: 'RangeError' };
const valueError = { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' };
const closed = { name: 'TypeError', code: 'UVCUDA_ECLOSING', errno: -30009 };

/** f() returns a Promise (it does not throw) that rejects with `want`. */
function rejects(f, want) {
  let p;
  assert.doesNotThrow(() => { p = f(); });
  assert.ok(p instanceof Promise);
  return assert.rejects(p, want);
}

test('bad arguments of a Promise method reject (nothing is thrown)', async () => {
  await rejects(() => s.copyToDevice(m, 'not bytes'), typeError);
  await rejects(() => s.launch(k.add, 1, 1, [m, -1, 1]), rangeError);
});

test('errors print their code as Node core\'s do: `Name [CODE]: message`', async () => {
  const caught = (f) => { try { f(); } catch (e) { return e; } return assert.fail('did not throw'); };
  // Node's own, for the shape.
  const core = caught(() => require('node:fs').readFileSync({}));
  assert.match(String(core), /^TypeError \[ERR_INVALID_ARG_TYPE\]: /);
  const s2 = dev.createStream();
  s2.destroy();
  const errors = {
    'thrown, ERR_INVALID_ARG_TYPE': caught(() => dev.alloc('8')),
    'thrown, ERR_OUT_OF_RANGE': caught(() => dev.alloc(-1)),
    'thrown, UVCUDA_ECLOSING': caught(() => s2.beginCapture()),
    'rejected, ERR_INVALID_ARG_TYPE': await s.copyToDevice(m, 'x').catch((e) => e),
    'rejected, UVCUDA_ECLOSING': await s2.fence().catch((e) => e),
    'rejected by the wrapper, options': await s.fence(42, 43).catch((e) => e),
    'rejected by the wrapper, signal': await s.fence({ signal: 1 }).catch((e) => e),
    'thrown, ERR_INVALID_ARG_VALUE': caught(() => uvcuda.configure({ completion: 'nope' })),
  };
  for (const [label, e] of Object.entries(errors)) {
    assert.ok(e instanceof Error, label);
    assert.equal(typeof e.code, 'string', label);
    const shown = `${e.name} [${e.code}]: ${e.message}`;
    assert.equal(String(e), shown, label);
    assert.equal(e.stack.split('\n')[0], shown, label);
    assert.doesNotMatch(e.name, /\[/, `${label}: name ${e.name}`);
    assert.ok(!Object.keys(e).includes('toString'), `${label}: toString enumerable`);
  }
});

test('Device and allocation arguments', () => {
  assert.throws(() => new uvcuda.Device(99), rangeError);
  assert.throws(() => new uvcuda.Device(-1), rangeError);
  assert.throws(() => new uvcuda.Device('0'), typeError);
  assert.throws(() => new uvcuda.Device(0.5), rangeError);
  assert.throws(() => dev.alloc(), typeError);
  assert.throws(() => dev.alloc('8'), typeError);
  assert.throws(() => dev.alloc(-8), rangeError);
  assert.throws(() => dev.alloc(0), rangeError);
  // One range for every refused size, 0 included (outside tester round 9).
  for (const [v, shown] of [[0, '0'], [-1, '-1'], [1.5, '1.5']])
    assert.throws(() => dev.alloc(v), { ...rangeError, message:
      `byteLength must be an integer from 1 to 2**53 - 1 (Number.MAX_SAFE_INTEGER), got ${shown}` });
  assert.throws(() => dev.alloc(1.5), rangeError);
  assert.throws(() => dev.alloc(NaN), rangeError);
  // Every type it takes is named (ArrayBuffer and DataView too).
  assert.throws(() => dev.loadModule(42), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE',
    message: 'image must be a string, a Buffer, a TypedArray, a DataView or an ArrayBuffer, ' +
      'got 42' });
  assert.throws(() => dev.loadModule(''), rangeError);
});

test('constructors and receivers are checked', async () => {
  // As Node core's classes: called without new.
  assert.throws(() => uvcuda.Device(0), { name: 'TypeError', code: 'ERR_CONSTRUCT_CALL_REQUIRED',
    message: 'Class constructor Device cannot be invoked without `new`' });
  assert.throws(() => new uvcuda.Stream(), /Illegal constructor/);
  assert.throws(() => new uvcuda.DeviceMemory(), /Illegal constructor/);
  assert.throws(() => new uvcuda.Module(), typeError);
  assert.throws(() => new uvcuda.Kernel(), typeError);
  const wrongThis = { name: 'TypeError', code: 'ERR_INVALID_THIS' };
  await rejects(() => uvcuda.Stream.prototype.fence.call({}), wrongThis);
  await rejects(() => uvcuda.Stream.prototype.fence.call(m), wrongThis);
  assert.throws(() => uvcuda.DeviceMemory.prototype.free.call(s), wrongThis);
  assert.throws(() => uvcuda.Device.prototype.alloc.call(s, 8), wrongThis);
});

test('copy arguments: types and ranges', async () => {
  const host = new Uint8Array(16);
  await rejects(() => s.copyToDevice(host, host), typeError); // dst not DeviceMemory
  await rejects(() => s.copyToDevice(s, host), typeError);    // a Stream is not memory
  await rejects(() => s.copyToDevice(m, 123), typeError);
  await rejects(() => s.copyToDevice(m, [1, 2, 3]), typeError);
  await rejects(() => s.copyToDevice(m, host, '1'), typeError);
  await rejects(() => s.copyToDevice(m, host, -1), rangeError);
  await rejects(() => s.copyToDevice(m, host, 49), rangeError);   // 16 at 49 > 64
  await rejects(() => s.copyToDevice(m, new Uint8Array(65)), rangeError);
  await rejects(() => s.copyToDevice(m, host, 2 ** 60), rangeError);
  await rejects(() => s.copyFromDevice(new Uint8Array(65), m), rangeError);
  await rejects(() => s.copyFromDevice(new Uint8Array(8), m, 57), rangeError);
  await rejects(() => s.copyFromDevice(m, m), typeError);
  await rejects(() => s.copyFromDevice(host, host), typeError);
  const big = dev.alloc(128);
  await rejects(() => s.copyDevice(m, big), rangeError);          // 128 into 64
  await rejects(() => s.copyDevice(m, big, 8, 60), rangeError);
  await rejects(() => s.copyDevice(m, big, 8, 0, 121), rangeError);
  await rejects(() => s.copyDevice(m, big, 8, 0, 200), rangeError);
  await rejects(() => s.copyDevice(m, host), typeError);
  await rejects(() => s.memset(m, 256), rangeError);
  await rejects(() => s.memset(m, -1), rangeError);
  await rejects(() => s.memset(m, 'x'), typeError);
  await rejects(() => s.memset(m, 0, 65), rangeError);
  await rejects(() => s.memset(m, 0, 8, 60), rangeError);
  await rejects(() => s.memset(m, 0, undefined, 65), rangeError);
});

test('launch arguments: kernel, grid, block, parameters', async () => {
  await rejects(() => s.launch(m, 1, 1, []), typeError);
  await rejects(() => s.launch(k.add, 0, 1, [m, 1, 1]), rangeError);
  await rejects(() => s.launch(k.add, 1, 0, [m, 1, 1]), rangeError);
  await rejects(() => s.launch(k.add, [1, 2, 3, 4], 1, [m, 1, 1]), rangeError);
  await rejects(() => s.launch(k.add, [], 1, [m, 1, 1]), rangeError);
  await rejects(() => s.launch(k.add, 'x', 1, [m, 1, 1]), typeError);
  await rejects(() => s.launch(k.add, [1, 'y'], 1, [m, 1, 1]), typeError);
  await rejects(() => s.launch(k.add, 1, 1.5, [m, 1, 1]), rangeError);
  await rejects(() => s.launch(k.add, 1, 1, [m, 1]), typeError);          // count
  await rejects(() => s.launch(k.add, 1, 1, [m, 1, 1, 1]), typeError);
  await rejects(() => s.launch(k.add, 1, 1), typeError);
  await rejects(() => s.launch(k.add, 1, 1, 'm'), typeError);
  await rejects(() => s.launch(k.add, 1, 1, [m, '1', 1]), typeError);     // u32
  await rejects(() => s.launch(k.add, 1, 1, [m, 2 ** 32, 1]), rangeError);
  await rejects(() => s.launch(k.add, 1, 1, [m, 1.25, 1]), rangeError);
  await rejects(() => s.launch(k.add, 1, 1, [m, 1n, 1]), typeError);
  await rejects(() => s.launch(k.add, 1, 1, [12345, 1, 1]), typeError);   // ptr
  await rejects(() => s.launch(k.add, 1, 1, [s, 1, 1]), typeError);
  await rejects(() => s.launch(k.add, 1, 1, [-1n, 1, 1]), rangeError);
  await rejects(() => s.launch(k.sleep, 1, 1, [-1]), rangeError);         // u64
  await rejects(() => s.launch(k.sleep, 1, 1, [2n ** 64n]), rangeError);
  await rejects(() => s.launch(k.sleep, 1, 1, [2 ** 53]), rangeError);
  await rejects(() => s.launch(k.sleep, 1, 1, ['1']), typeError);
  await rejects(() => s.launch(k.fault, 1, 1, [], -1), rangeError);       // shared mem
});

test('getFunction: names and signatures', () => {
  assert.throws(() => k.mod.getFunction(), typeError);
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32'), typeError);
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 'int']), valueError);
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', [1]), typeError);
  assert.throws(() => k.mod.getFunction('', []), rangeError);
  assert.throws(() => k.mod.getFunction('x', new Array(65).fill('u32')), rangeError);
  assert.throws(() => k.mod.getFunction('no_such_kernel', []),
    { name: 'Error', code: 'CUDA_ERROR_NOT_FOUND', errno: -20500, cudaResult: 500 });
});

// As Node core's validateOneOf (dns.lookup's family, spawn's stdio): a
// string that is none of the names a call takes is ERR_INVALID_ARG_VALUE,
// a TypeError, whose message lists them and shows the value as
// util.inspect does; a value of another type stays ERR_INVALID_ARG_TYPE.
test('an unknown name is ERR_INVALID_ARG_VALUE, as Node core\'s validateOneOf', () => {
  const { inspect } = require('node:util');
  const oneOf = (name, allowed, v) => ({
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_VALUE',
    message: `The ${name.includes('.') ? 'property' : 'argument'} '${name}' must be one of: ` +
      `${allowed.map((a) => `'${a}'`).join(', ')}. Received ` +
      (inspect(v).length > 128 ? `${inspect(v).slice(0, 128)}...` : inspect(v)),
  });
  const types = ['ptr', 'u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64', 'f32', 'f64'];
  const strategies = ['auto', 'reactor', 'hostfn', 'hostfn-spin', 'hostfn-block', 'poll'];
  const modes = ['global', 'thread-local', 'relaxed'];
  const c = dev.createStream();
  // Shown as util.inspect shows them, quotes, escapes and all; none of
  // them is a name cut short at a NUL or at a buffer's end.
  for (const v of ['u65', '', 'U32', 'u32\0', 'u32 ', "it's", 'it\'s "x"', 'it\'s "x" `y`',
    'a\0b\n\t\x7f\u0085\\c', 'é€😀', 'x'.repeat(150), 'x' + '😀'.repeat(70), 'u32'.padEnd(300, '\0')]) {
    assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', v, 'u32']),
      oneOf('signature[1]', types, v), JSON.stringify(v));
    assert.throws(() => uvcuda.configure({ completion: v }),
      oneOf('options.completion', strategies, v), JSON.stringify(v));
    assert.throws(() => c.beginCapture(v), oneOf('mode', modes, v), JSON.stringify(v));
  }
  // A character the cut at 128 UTF-16 units splits keeps its high half, a
  // lone surrogate, as Node keeps it.
  assert.throws(() => c.beginCapture('😀'.repeat(70)),
    { ...valueError, message: /Received '(😀){63}\ud83d\.\.\.$/ });
  // Wrong types stay ERR_INVALID_ARG_TYPE.
  const wrongType = { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' };
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 32, 'u32']), wrongType);
  assert.throws(() => uvcuda.configure({ completion: 1 }), wrongType);
  assert.throws(() => c.beginCapture(1), wrongType);
  // The names themselves work.
  assert.deepEqual(k.mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']).signature,
    ['ptr', 'u32', 'u32']);
  c.beginCapture('thread-local');
  c.endCapture();
});

// The value is shown as Node's ERR_INVALID_ARG_VALUE shows it: its
// util.inspect (UTF-16 units, not UTF-8 bytes: a lone surrogate is
// escaped '\ud800'; a string longer than 76 units is split after each
// newline into 'quoted' + lines, each with its own quotes; only its first
// 10000 units are read), past 128 units the first 128 and '...' (so a pair
// the cut splits keeps its high half, as Node keeps it).
test('ERR_INVALID_ARG_VALUE shows the value exactly as Node\'s util.inspect does', () => {
  const { inspect } = require('node:util');
  const expected = (name, allowed, v) => {
    let shown = inspect(v);
    if (shown.length > 128) shown = `${shown.slice(0, 128)}...`;
    return `The ${name.includes('.') ? 'property' : 'argument'} '${name}' must be one of: ` +
      `${allowed.map((a) => `'${a}'`).join(', ')}. Received ${shown}`;
  };
  const types = ['ptr', 'u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64', 'f32', 'f64'];
  const strategies = ['auto', 'reactor', 'hostfn', 'hostfn-spin', 'hostfn-block', 'poll'];
  const modes = ['global', 'thread-local', 'relaxed'];
  const x = (n) => 'x'.repeat(n);
  const tricky = [
    // Surrogates: lone high, lone low, reversed, in text, valid pairs.
    '\ud800', '\udc00', '\udbff', '\udfff', 'a\ud800b', 'a\udc00b', '\udc00\ud800',
    '\ud800\ud800\udc00', '\ud800\udc00\udc00', 'x\ud83d', '\ude00x', '\ud83d\ude00',
    '\ud83d\ude00\ud83d', "it's \ud800", 'it\'s "\udfff"',
    // Control characters, C1, DEL, NBSP, line separators, BOM, backslash.
    '\0', 'a\0b', '\x01\x07\b\t\n\v\f\r\x0e\x1b\x1f', '\x7f\x80\x85\x9f\xa0\xff',
    '\u2028\u2029\ufeff\u00ad', '\\', 'a\\b\\\\', '\\\'',
    // Quotes of each kind and their combinations.
    "'", '"', '`', "'\"", "'`", "'\"`", "'\"${", "'${", "'\"$", "'\"{", '"`${', '${',
    "it's", 'it\'s "x"', 'it\'s "x" `y`', 'it\'s "x" ${y}', "\\'\"",
    // Long: cut at 128 units, split at newlines past 76 units.
    x(200), 'é'.repeat(200), '😀'.repeat(100), '\ud800'.repeat(40), x(76), x(77), x(127), x(128),
    x(126) + '😀', x(125) + '😀', x(127) + '😀', '😀'.repeat(70), x(125) + '\ud800',
    x(124) + '\\', x(126) + "'", x(200) + "'",
    'x\n'.repeat(50), 'a\n' + x(100), "it's\n\"x\"\n`y`\n" + x(80), "it's\n" + x(100),
    `${x(40)}\n${x(40)}`, `${x(40)}\n${x(36)}`, '\n\n\n' + x(80), x(80) + '\n', x(80) + '\n\n',
    '\ud800\n'.repeat(30), x(60) + '\n😀\n' + x(60), x(70) + '\r\n' + x(70),
    // Only the first 10000 units are inspected (a quote past them does
    // not choose the quotes; a pair they split leaves its high half).
    x(10000) + "'", x(9999) + '😀', x(10000) + '\n' + x(10),
  ];
  const c = dev.createStream();
  for (const v of tricky) {
    const label = JSON.stringify(v.length > 40 ? `${v.slice(0, 20)}…(${v.length})` : v);
    assert.throws(() => c.beginCapture(v), { ...valueError, message: expected('mode', modes, v) },
      `beginCapture ${label}`);
    assert.throws(() => k.mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', v]),
      { ...valueError, message: expected('signature[2]', types, v) }, `getFunction ${label}`);
    assert.throws(() => uvcuda.configure({ completion: v }),
      { ...valueError, message: expected('options.completion', strategies, v) },
      `configure ${label}`);
  }
  // And strings made of those pieces at random (a fixed seed).
  const pieces = ['x', "'", '"', '`', '$', '{', '\n', '\\', '\0', '\x7f', '\x9f', '\ud800', '\udc00',
    '\ud83d\ude00', 'é', '\r'];
  let seed = 1;
  const rnd = (n) => { seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff; return seed % n; };
  for (let t = 0; t < 2000; t++) {
    const len = rnd(4) === 0 ? rnd(300) : rnd(40);
    let v = '';
    for (let i = 0; i < len; i++) v += pieces[rnd(pieces.length)];
    assert.throws(() => c.beginCapture(v), { ...valueError, message: expected('mode', modes, v) },
      `beginCapture ${JSON.stringify(v)}`);
  }
  c.destroy();
});

test('a Proxy of an array is an array, as Array.isArray says (Node core\'s validateArray)', async () => {
  const proxy = (a) => new Proxy(a, {});
  const add = k.mod.getFunction('uvcuda_add_u32', proxy(['ptr', 'u32', 'u32']));
  assert.deepEqual(add.signature, ['ptr', 'u32', 'u32']);
  const target = dev.alloc(4 * 8);
  await s.memset(target, 0);
  await s.launch(add, proxy([1]), proxy([8]), proxy([target, 8, 5]));
  assert.deepEqual(await s.copyFromDevice(new Uint32Array(8), target), new Uint32Array(8).fill(5));
  await s.launchOnThreadPool(add, proxy([1, 1, 1]), 8, proxy([target, 8, 1]));
  assert.deepEqual(await s.copyFromDevice(new Uint32Array(8), target), new Uint32Array(8).fill(6));
  // Its elements are checked as an array's are.
  await rejects(() => s.launch(add, 1, 8, proxy([target, 8])), { code: 'ERR_INVALID_ARG_VALUE' });
  await rejects(() => s.launch(add, proxy([0]), 8, [target, 8, 1]), rangeError);
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', proxy(['ptr', 'u32', 7])), typeError);
  // A trap that throws: that error, through the promise.
  const boom = new Error('boom');
  const hostile = new Proxy([1], { get() { throw boom; } });
  await rejects(() => s.launch(add, hostile, 8, [target, 8, 1]), (e) => e === boom);
  const { proxy: revoked, revoke } = Proxy.revocable([1], {});
  revoke();
  await rejects(() => s.launch(add, revoked, 8, [target, 8, 1]), typeError);
  // A Proxy of anything else is no array.
  await rejects(() => s.launch(add, 1, 8, new Proxy({ length: 3 }, {}), 0),
    { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => k.mod.getFunction('uvcuda_add_u32', new Proxy({}, {})),
    { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
});

test('objects of another copy of the addon are foreign: ERR_INVALID_ARG_TYPE', async () => {
  // Two copies in one process (two versions in node_modules, say): each
  // tags its objects its own way, so neither unwraps the other's.
  const res = await runChild(`
    const fs = require('node:fs');
    const os = require('node:os');
    const path = require('node:path');
    ${LOAD_COPY}
    const A = uvcuda;
    const code = (p) => p.then(() => 'resolved', (e) => e.code);
    const grab = (f) => { try { f(); return 'no throw'; } catch (e) { return e.code; } };
    (async () => {
      const a = common.setup();
      const sA = a.dev.createStream();
      const devB = B.openDevice(0);
      const memB = devB.alloc(64);
      const sB = devB.createStream();
      const kB = devB.loadModule(common.ptx).getFunction('uvcuda_sleep_ns', ['u64']);
      const out = {
        distinct: A.Stream !== B.Stream,
        own: [await code(sA.memset(a.dev.alloc(64), 1)), await code(sB.memset(memB, 1))],
        memset: await code(sA.memset(memB, 1)),
        memsetMsg: await sA.memset(memB, 1).catch((e) => /of another copy of uvcuda/.test(e.message)),
        fence: await code(A.Stream.prototype.fence.call(sB)),
        launch: await code(sA.launch(kB, 1, 1, [1n])),
        ptrArg: await code(sA.launch(a.add, 1, 1, [memB, 1, 1])),
        fenceAB: await code(A.fence(sB)),
        alloc: grab(() => A.Device.prototype.alloc.call(devB, 8)),
        free: grab(() => A.DeviceMemory.prototype.free.call(memB)),
        back: await code(sB.memset(memB, 2)),
        // In an optional last place, where { signal } may stand: an
        // object of the other copy is an argument of the wrong type, not
        // an options bag (round 11: these resolved, the object dropped).
        fenceDev: await code(A.fence(sA, devB)),
        streamFenceDev: await code(sA.fence(devB)),
        memsetLen: await code(sA.memset(a.dev.alloc(64), 0, memB)),
        defaultFence: await code(A.fence(0n, devB)),
      };
      fs.rmSync(dir, { recursive: true, force: true });
      console.log(JSON.stringify(out));
    })();`);
  assert.equal(res.status, 0, res.stderr);
  const foreign = 'ERR_INVALID_ARG_TYPE';
  assert.deepEqual(lastJson(res), {
    distinct: true, own: ['resolved', 'resolved'], memset: foreign, memsetMsg: true,
    fence: 'ERR_INVALID_THIS',
    launch: foreign, ptrArg: foreign, fenceAB: foreign, alloc: 'ERR_INVALID_THIS',
    free: 'ERR_INVALID_THIS',
    back: 'resolved', fenceDev: foreign, streamFenceDev: foreign, memsetLen: foreign,
    defaultFence: foreign,
  });
});

test('a kernel name with a NUL byte is refused, as Node core refuses such paths', () => {
  // The driver would read up to the NUL: another kernel than the one named.
  for (const name of ['uvcuda_fault\0this part is ignored', '\0', 'uvcuda_fault\0'])
    assert.throws(() => k.mod.getFunction(name, []),
      { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /without null bytes. Received '.*\\x00/ });
});

test('getFunction checks the signature of a PTX image that ends in NUL bytes too', () => {
  // How C hands PTX to cuModuleLoadData; the PTX's .entry is then what
  // counts the parameters where the driver cannot (the simulation, drivers
  // before 12.4).
  const ptx = require('./common').ptx;
  for (const image of [ptx + '\0', Buffer.from(ptx + '\0\0'), new TextEncoder().encode(ptx + '\0')]) {
    const mod = dev.loadModule(image);
    assert.throws(() => mod.getFunction('uvcuda_add_u32', ['ptr']),
      { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE' });
    assert.ok(mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']));
    mod.unload();
  }
});

test('stream handles and fence arguments', async () => {
  assert.throws(() => uvcuda.Stream.fromHandle(123), typeError);
  assert.throws(() => uvcuda.Stream.fromHandle(-1n), rangeError);
  assert.throws(() => uvcuda.Stream.fromHandle(2n ** 64n), rangeError);
  assert.throws(() => uvcuda.Stream.fromHandle(0n), typeError);         // needs a Device
  assert.throws(() => uvcuda.Stream.fromHandle(1n, m), typeError);
  await rejects(() => uvcuda.fence(), typeError);
  await rejects(() => uvcuda.fence('s'), typeError);
  await rejects(() => uvcuda.fence(m), typeError);
  await rejects(() => uvcuda.fence(2n), typeError);
  assert.throws(() => uvcuda.configure({ completion: 'nope' }), valueError);
  assert.throws(() => uvcuda.configure(1), typeError);
  assert.throws(() => uvcuda.configure({ adaptive: 'yes' }), typeError);
  // Every argument error says what it got, as the docs promise.
  assert.throws(() => uvcuda.configure(1), { message: /must be an object, got 1$/ });
  assert.throws(() => uvcuda.configure(null), { message: /must be an object, got null$/ });
  // An array is no options bag, as Node core's validateObject and this
  // package's { signal } bags have it (round 11: it was taken, as {}).
  assert.throws(() => uvcuda.configure([]),
    { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE', message: /must be an object, got an array$/ });
  assert.throws(() => uvcuda.configure(() => {}), typeError);
  assert.throws(() => uvcuda.configure({ completion: null }),
    { ...typeError, message: /options.completion must be a string, got null$/ });
  assert.throws(() => uvcuda.errorName(undefined), { ...typeError, message: /got undefined$/ });
  assert.throws(() => uvcuda.strerror('x'), { ...typeError, message: /got type string \('x'\)$/ });
  await s.fence(); // this env's loop context exists from its first awaited call on
  assert.throws(() => uvcuda.configure({ completion: 'hostfn' }),
    { code: 'EBUSY', message: /before the first awaited call/ }); // too late now
  assert.throws(() => uvcuda.errorName('x'), typeError);
  // A Stream knows its device; a second argument must still be a Device.
  await rejects(() => uvcuda.fence(s, 'x'), typeError);
  await rejects(() => uvcuda.fence(s, 42), typeError);
  await rejects(() => uvcuda.fence(s, s), typeError);
  await uvcuda.fence(s, dev);
  await uvcuda.fence(s, undefined);
});

test('errorName / strerror take an integer, never a wrapped or truncated one', () => {
  assert.equal(uvcuda.errorName(-16), 'EBUSY');
  assert.equal(uvcuda.errorName(-30005), 'UVCUDA_ECAPTURING');
  assert.equal(uvcuda.errorName(-20700), 'CUDA_ERROR_ILLEGAL_ADDRESS');
  for (const bad of [NaN, 1.5, 2 ** 53, 2 ** 32 - 1, -(2 ** 31) - 1, Infinity]) {
    assert.throws(() => uvcuda.errorName(bad), { ...rangeError, code: 'ERR_OUT_OF_RANGE' },
      String(bad));
    assert.throws(() => uvcuda.strerror(bad), { ...rangeError, code: 'ERR_OUT_OF_RANGE' });
  }
  assert.equal(typeof uvcuda.errorName(-(2 ** 31)), 'string');
});

test('messages print numbers as JavaScript does and name the range the call accepts', async () => {
  const got = (f) => { try { f(); } catch (e) { return e; } assert.fail('did not throw'); };
  for (const [v, shown] of [[2 ** 31, '2147483648'], [NaN, 'NaN'], [Infinity, 'Infinity'],
    [-Infinity, '-Infinity'], [1.5, '1.5'], [1e21, '1e+21'], [-(2 ** 31) - 1, '-2147483649']]) {
    for (const f of [uvcuda.errorName, uvcuda.strerror]) {
      const e = got(() => f(v));
      assert.equal(e.code, 'ERR_OUT_OF_RANGE');
      assert.ok(e.message.endsWith(`got ${shown}`), e.message);
    }
  }
  // The bound in the message is the one the call applies: a value inside
  // it is not refused by a narrower check afterwards.
  const m1 = dev.alloc(8);
  for (const v of [-1, 256, 1.5]) {
    await rejects(() => s.memset(m1, v), (e) => e.code === 'ERR_OUT_OF_RANGE' &&
      /from 0 to 255, got /.test(e.message));
  }
  await s.memset(m1, 255);
  for (const [opt, v, range] of [['probeIntervalUs', 49, '50 to 2000'],
    ['probeIntervalUs', 2001, '50 to 2000'], ['spinBudgetUs', 1000001, '0 to 1000000'],
    ['spinBudgetUs', -1, '0 to 1000000']]) {
    const e = got(() => uvcuda.configure({ [opt]: v }));
    assert.equal(e.code, 'ERR_OUT_OF_RANGE');
    assert.ok(e.message.includes(`options.${opt} must be an integer from ${range}, got ${v}`),
      e.message);
  }
});

test('a buffer detached before the call rejects ERR_INVALID_STATE, copies nothing', async () => {
  const detach = (u8) => { structuredClone(u8.buffer, { transfer: [u8.buffer] }); return u8; };
  const dst = detach(new Uint8Array(16));
  await rejects(() => s.copyFromDevice(dst, m), { code: 'ERR_INVALID_STATE' });
  const view = new DataView(new ArrayBuffer(8));
  structuredClone(view.buffer, { transfer: [view.buffer] });
  await rejects(() => s.copyFromDevice(view, m), { code: 'ERR_INVALID_STATE' });
  await rejects(() => s.copyToDevice(m, detach(new Uint8Array(16))), { code: 'ERR_INVALID_STATE' });
  await s.fence();
});

test('a throwing options getter rejects; the call does not throw', async () => {
  const boom = new Error('boom');
  await rejects(() => s.fence({ get signal() { throw boom; } }), (e) => e === boom);
  const hostile = { get aborted() { throw boom; }, addEventListener() {} };
  await rejects(() => s.fence({ signal: hostile }), (e) => e === boom);
  const noListen = { aborted: false, addEventListener() { throw boom; } };
  await rejects(() => s.fence({ signal: noListen }), (e) => e === boom);
  await s.fence();
});

// Without the environment's settings in the way.
const plainEnv = { UVCUDA_COMPLETION: '', UVCUDA_ADAPTIVE: '', UVCUDA_SPIN_BUDGET_US: '' };

test('stats() is not a GPU call: zeros and the settings to come; configure() still works', async () => {
  const res = await runChild(`
    const out = {};
    const s0 = uvcuda.stats();
    Object.assign(out, { started: s0.started, completion: s0.completion,
                         adaptive: s0.adaptive, spin: s0.spinBudgetNs, pending: s0.pending });
    // undefined options are the defaults, as in Node core
    uvcuda.configure({ completion: 'hostfn', spinBudgetUs: 5, adaptive: undefined,
                       probeIntervalUs: undefined, latencyHistogram: undefined });
    const s1 = uvcuda.stats();
    Object.assign(out, { c1: s1.completion, spin1: s1.spinBudgetNs, a1: s1.adaptive });
    const k = common.setup();
    k.dev.createStream().fence().then(() => {
      const s2 = uvcuda.stats();
      Object.assign(out, { c2: s2.completion, started2: s2.started, resolved2: s2.resolved });
      try { uvcuda.configure({}); out.late = 'no throw'; } catch (e) { out.late = e.code; }
      console.log(JSON.stringify(out));
    });`, { env: plainEnv });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    started: 0, completion: 'auto', adaptive: true, spin: 20000, pending: 0,
    c1: 'hostfn', spin1: 5000, a1: true,
    c2: 'hostfn', started2: 1, resolved2: 1, late: 'EBUSY',
  });
});

test('configure() reads options with plain gets, and options left out take their defaults', async () => {
  const res = await runChild(`
    const out = {};
    // A Proxy with a get trap only (no has trap): read as Node core reads a bag.
    uvcuda.configure(new Proxy({}, { get: (t, key) => (key === 'spinBudgetUs' ? 5 : undefined) }));
    out.proxy = uvcuda.stats().spinBudgetNs;
    // Each call sets every option: one left out goes back to its default.
    uvcuda.configure({ spinBudgetUs: 7 });
    uvcuda.configure({ adaptive: false });
    out.spin = uvcuda.stats().spinBudgetNs;
    out.adaptive = uvcuda.stats().adaptive;
    console.log(JSON.stringify(out));`, { env: plainEnv });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), { proxy: 5000, spin: 20000, adaptive: false });
});

// Each call sets every option, a left-out one taking its default: an
// options bag left out (or undefined) is every option left out, as Node
// core takes an omitted options argument. null and non-objects are refused;
// the loop context's rule (EBUSY once open) holds for it too.
test('configure() and configure(undefined) set every option to its default', async () => {
  const res = await runChild(`
    const out = {};
    uvcuda.configure({ spinBudgetUs: 7, adaptive: false, completion: 'poll' });
    out.returns = uvcuda.configure();
    out.bare = [uvcuda.stats().spinBudgetNs, uvcuda.stats().adaptive, uvcuda.stats().completion];
    uvcuda.configure({ spinBudgetUs: 7 });
    uvcuda.configure(undefined);
    out.undef = uvcuda.stats().spinBudgetNs;
    for (const bad of [null, 1, 'x', () => {}]) {
      try { uvcuda.configure(bad); out[String(bad)] = 'no throw'; } catch (e) { out[String(bad)] = e.code; }
    }
    const k = common.setup();
    k.dev.createStream().fence().then(() => {
      try { uvcuda.configure(); out.late = 'no throw'; } catch (e) { out.late = e.code; }
      console.log(JSON.stringify(out));
    });`, { env: plainEnv });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    bare: [20000, true, 'auto'], undef: 20000,
    null: 'ERR_INVALID_ARG_TYPE', 1: 'ERR_INVALID_ARG_TYPE', x: 'ERR_INVALID_ARG_TYPE',
    '() => {}': 'ERR_INVALID_ARG_TYPE', late: 'EBUSY',
  });
});

test('a bad environment variable is named in the error', async () => {
  for (const [name, value, code] of [['UVCUDA_ADAPTIVE', 'bogus', 'EINVAL'],
    ['UVCUDA_SPIN_BUDGET_US', 'abc', 'EINVAL'], ['UVCUDA_COMPLETION', 'nope', 'UVCUDA_ESTRATEGY']]) {
    const res = await runChild(`
      const out = {};
      try { uvcuda.stats(); out.stats = 'no throw'; } catch (e) { out.stats = [e.code, e.message]; }
      const k = common.setup();
      k.dev.createStream().fence().then(() => { out.fence = 'resolved'; },
        (e) => { out.fence = [e.code, e.message]; }).then(() => console.log(JSON.stringify(out)));`,
    { env: { ...plainEnv, [name]: value } });
    assert.equal(res.status, 0, res.stderr);
    const out = lastJson(res);
    for (const k of ['stats', 'fence']) {
      assert.equal(out[k][0], code, `${name}: ${k}`);
      assert.match(out[k][1], new RegExp(`\\$${name} is '${value}'`), `${name}: ${k}`);
    }
  }
});

test('closed objects: TypeError UVCUDA_ECLOSING', async () => {
  const s2 = dev.createStream();
  const m2 = dev.alloc(16);
  const mod2 = dev.loadModule(require('./common').ptx);
  const add2 = mod2.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
  m2.free();
  m2.free(); // idempotent
  await rejects(() => s.copyToDevice(m2, new Uint8Array(1)), closed);
  await rejects(() => s.memset(m2, 0), closed);
  await rejects(() => s.launch(k.add, 1, 1, [m2, 1, 1]), closed);
  assert.equal(m2.ptr, 0n);
  mod2.unload();
  assert.equal(mod2.unloaded, true);
  assert.throws(() => mod2.getFunction('uvcuda_add_u32', []), closed);
  await rejects(() => s.launch(add2, 1, 1, [m, 1, 1]), { code: 'UVCUDA_ECLOSING' });
  s2.destroy();
  await rejects(() => s2.fence(), closed);
  await rejects(() => s2.copyToDevice(m, new Uint8Array(1)), closed);
  await rejects(() => uvcuda.fence(s2), closed);
  assert.doesNotThrow(() => s2.destroy());
  await s.fence();
});

// A getter in the call's own arguments runs JS in the middle of the call;
// an object closed there is closed for this call too: nothing is enqueued
// with its handle (the stream may already be destroyed and its handle
// handed to a new stream).
test('an object closed by a getter of the call\'s own arguments: UVCUDA_ECLOSING, nothing runs', async () => {
  const getter = (arr, i, value, fn) => {
    Object.defineProperty(arr, i, { get() { fn(); return value; } });
    return arr;
  };
  const target = dev.alloc(4 * 16);
  await s.memset(target, 0);
  // grid / block are read before anything holds the stream: it is destroyed
  // at once, its handle free for the next createStream.
  const s1 = dev.createStream();
  await rejects(() => s1.launch(k.add, getter([1], 0, 1, () => s1.destroy()), 16,
    [target, 16, 1]), closed);
  assert.equal(s1.destroyed, true);
  const s2 = dev.createStream();
  await rejects(() => s2.launchOnThreadPool(k.add, 1, getter([16], 0, 16, () => s2.destroy()),
    [target, 16, 1]), closed);
  // args are read after the stream and the kernel are held.
  const s3 = dev.createStream();
  await rejects(() => s3.launch(k.add, 1, 16, getter([target, 16, 0], 2, 1, () => s3.destroy())),
    closed);
  assert.equal(s3.destroyed, true);
  const s4 = dev.createStream();
  const m4 = dev.alloc(4 * 16);
  await rejects(() => s4.launch(k.add, 1, 16, getter([m4, 16, 0], 2, 1, () => m4.free())),
    closed);
  assert.equal(m4.freed, true);
  const mod5 = dev.loadModule(require('./common').ptx);
  const add5 = mod5.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
  await rejects(() => s4.launch(add5, 1, 16, getter([target, 16, 0], 2, 1, () => mod5.unload())),
    closed);
  await rejects(() => s4.launchOnThreadPool(k.add, 1, 16,
    getter([target, 16, 0], 2, 1, () => s4.destroy())), closed);
  // getFunction reads the signature before it asks the module.
  const mod6 = dev.loadModule(require('./common').ptx);
  assert.throws(() => mod6.getFunction('uvcuda_add_u32',
    getter(['ptr', 'u32', 'u32'], 2, 'u32', () => mod6.unload())), closed);
  // None of the launches ran.
  assert.deepEqual(await s.copyFromDevice(new Uint32Array(16), target), new Uint32Array(16));
  // The handles went back: new streams work.
  const s7 = dev.createStream();
  await s7.launch(k.add, 1, 16, [target, 16, 2]);
  assert.deepEqual(await s7.copyFromDevice(new Uint32Array(16), target),
    new Uint32Array(16).fill(2));
});

test('a capturing stream rejects with UVCUDA_ECAPTURING, then works again', async () => {
  const c = dev.createStream();
  c.beginCapture();
  await assert.rejects(c.fence(), (e) => {
    assert.equal(e.code, 'UVCUDA_ECAPTURING');
    assert.equal(e.errno, -30005);
    assert.equal(e.cudaResult, undefined);
    assert.match(e.message, /capturing/);
    assert.ok(e instanceof Error);
    return true;
  });
  await assert.rejects(c.memset(m, 1), { code: 'UVCUDA_ECAPTURING' });
  // The capture check is the helper's (its await started): stats() counts
  // the call as awaited and rejected, as README says; a call refused by the
  // package's own checks is in none of the counts.
  const before = uvcuda.stats();
  await assert.rejects(c.launch(k.sleep, 1, 1, [1n]), { code: 'UVCUDA_ECAPTURING' });
  await assert.rejects(uvcuda.fence(c), { code: 'UVCUDA_ECAPTURING' });
  await assert.rejects(c.launch(k.sleep, 1, 1, ['x']), typeError);
  await assert.rejects(c.fence({ signal: AbortSignal.abort() }), { name: 'AbortError' });
  const after = uvcuda.stats();
  assert.deepEqual([after.awaited - before.awaited, after.rejected - before.rejected,
    after.resolved - before.resolved, after.pending], [2, 2, 0, 0]);
  c.endCapture();
  await c.fence();
  assert.throws(() => c.beginCapture('sideways'), valueError);
  assert.throws(() => c.endCapture(), { code: 'CUDA_ERROR_ILLEGAL_STATE' });
});

test('an error of the enqueue itself rejects (later, not thrown)', async () => {
  // The simulation does not model kernels by other names: launch fails.
  const other = dev.loadModule('.version 8.0\n.target sm_80\n.address_size 64\n' +
                               '.visible .entry not_modelled()\n{\n ret;\n}\n');
  const fn = other.getFunction('not_modelled', []);
  const p = s.launch(fn, 1, 1, []);
  assert.ok(p instanceof Promise);
  await assert.rejects(p, { code: 'CUDA_ERROR_NOT_SUPPORTED', errno: -20801, cudaResult: 801 });
  await assert.rejects(s.launchOnThreadPool(fn, 1, 1, []), { code: 'CUDA_ERROR_NOT_SUPPORTED' });
  await s.fence(); // the stream is fine
});

test('driver calls that fail throw named errors', () => {
  assert.throws(() => dev.loadModule('this is not PTX'),
    { name: 'Error', code: 'CUDA_ERROR_INVALID_IMAGE', errno: -20200 });
});

test('failures injected in the driver surface as named errors', async () => {
  const res = await runChild(`
    const k = common.setup();
    const s = k.dev.createStream();
    const out = {};
    try { k.dev.alloc(16); } catch (e) { out.alloc = e.code; }
    const m = k.dev.alloc(16);
    s.copyToDevice(m, new Uint8Array(16)).then(() => { out.copy = 'resolved'; },
      (e) => { out.copy = e.code; }).then(() => s.fence()).then(() => {
        out.after = 'ok'; console.log(JSON.stringify(out)); });`,
  { env: { SIMCUDA_FAIL: 'cuMemAlloc=CUDA_ERROR_OUT_OF_MEMORY:1,cuMemcpyHtoDAsync=CUDA_ERROR_INVALID_VALUE:1' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    alloc: 'CUDA_ERROR_OUT_OF_MEMORY', copy: 'CUDA_ERROR_INVALID_VALUE', after: 'ok' });
});

test('an object the driver refuses to make is freed once, after its error is read', async () => {
  // A refused module or allocation checks the device's health after
  // the failure; glibc told to fill freed memory at once (no per-thread
  // cache) makes a read of the freed object crash the child instead of
  // passing by luck.
  const res = await runChild(`
    const k = common.setup();
    const out = { module: [], alloc: [] };
    for (let i = 0; i < 20; i++) {
      try { k.dev.loadModule('this is not PTX'); } catch (e) { out.module.push(e.code); }
    }
    for (let i = 0; i < 3; i++) {
      try { k.dev.alloc(16); } catch (e) { out.alloc.push(e.code); }
    }
    k.dev.createStream().fence().then(() => {
      out.health = k.dev.health;
      console.log(JSON.stringify(out));
    });`,
  { env: { GLIBC_TUNABLES: 'glibc.malloc.tcache_count=0', MALLOC_PERTURB_: '50',
           SIMCUDA_FAIL: 'cuMemAlloc=CUDA_ERROR_OUT_OF_MEMORY:3' } });
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    module: new Array(20).fill('CUDA_ERROR_INVALID_IMAGE'),
    alloc: new Array(3).fill('CUDA_ERROR_OUT_OF_MEMORY'),
    health: 'healthy',
  });
});

test('a device fault rejects pending and later work with CUDA_ERROR_ILLEGAL_ADDRESS', async () => {
  // In a child: the fault is sticky for the process's context.
  const res = await runChild(`
    const k = common.setup();
    const a = k.dev.createStream(), b = k.dev.createStream();
    const m = k.dev.alloc(16);
    const out = {};
    const name = (e) => ({ code: e.code, errno: e.errno, cudaResult: e.cudaResult,
                           message: e.message, isError: e instanceof Error });
    (async () => {
      const long = b.launch(k.sleep, 1, 1, [2_000_000_000n]); // 2 s on another stream
      const fault = a.launch(k.fault, 1, 1, []);
      const after = a.copyFromDevice(new Uint8Array(16), m);
      const pool = b.fenceOnThreadPool();
      const r = await Promise.allSettled([fault, after, long, pool]);
      out.results = r.map((x) => x.status === 'rejected' ? name(x.reason) : 'resolved');
      await a.fence().catch((e) => { out.later = e.code; });
      const st = uvcuda.stats();
      out.faults = st.faults;
      out.ms = 0;
      console.log(JSON.stringify(out));
    })();`);
  assert.equal(res.signal, null, res.stderr);
  assert.equal(res.status, 0, res.stderr);
  const out = lastJson(res);
  const illegal = {
    code: 'CUDA_ERROR_ILLEGAL_ADDRESS', errno: -20700, cudaResult: 700, isError: true,
  };
  for (const r of out.results.slice(0, 3)) {
    assert.notEqual(r, 'resolved');
    assert.deepEqual({ ...r, message: undefined }, { ...illegal, message: undefined });
    assert.ok(r.message.length > 0);
  }
  assert.equal(out.results[3].code, 'CUDA_ERROR_ILLEGAL_ADDRESS'); // the baseline sees it too
  assert.equal(out.later, 'CUDA_ERROR_ILLEGAL_ADDRESS');
  assert.ok(out.faults >= 1);
  assert.ok(res.ms < 30000);
});

// Runs anywhere: the child is pointed at a driver that does not exist.
nodeTest('no driver: named errors, thrown synchronously (rejected by fence)', async () => {
  const res = await runChild(`
    const out = {};
    const info = (e) => ({ name: e.name, code: e.code, errno: e.errno, dl: /dlopen/.test(e.message) });
    const grab = (f) => { try { f(); return 'no throw'; } catch (e) { return info(e); } };
    out.info = grab(() => uvcuda.driverInfo());
    out.open = grab(() => uvcuda.openDevice(0));
    out.stats = uvcuda.stats().started === 0 ? 'zeros' : 'not zeros'; // not a GPU call
    out.count = grab(() => uvcuda.deviceCount());
    uvcuda.fence(12345n).then(() => 'resolved', info).then((r) => {
      out.fence = r;
      console.log(JSON.stringify(out));
    });`,
  { env: { UVCUDA_LIBCUDA: '/nonexistent/libcuda.so.1' } });
  assert.equal(res.status, 0, res.stderr);
  const out = lastJson(res);
  const e = { name: 'Error', code: 'UVCUDA_ENODRIVER', errno: -30001, dl: true };
  assert.deepEqual(out, { info: e, open: e, fence: e, stats: 'zeros', count: e });
});

test('no device and missing entry points: named errors', async () => {
  const code = `
    const grab = (f) => { try { f(); return 'no throw'; } catch (e) { return e.code; } };
    console.log(JSON.stringify([grab(() => uvcuda.driverInfo()), grab(() => uvcuda.openDevice())]));`;
  let res = await runChild(code, { env: { SIMCUDA_DEVICES: '0' } });
  assert.deepEqual(lastJson(res), ['CUDA_ERROR_NO_DEVICE', 'CUDA_ERROR_NO_DEVICE']);
  // A count: no devices is 0, not an error.
  res = await runChild('console.log(JSON.stringify(uvcuda.deviceCount()));',
    { env: { SIMCUDA_DEVICES: '0' } });
  assert.equal(lastJson(res), 0, res.stderr);
  res = await runChild(code, { env: { SIMCUDA_HIDE: 'cuModuleLoadData' } });
  const [info, open] = lastJson(res);
  assert.equal(typeof info, 'string');
  assert.equal(open, 'UVCUDA_ENOSYM');
});

// README: loading the driver (dlopen, version check, cuInit) happens once
// per process and its result is kept: a load that failed once fails every
// later call the same way, even where the failure was transient (here
// cuInit refuses once, the first call only); only a new process loads again.
test('a failed driver load is kept: every later call fails the same way', async () => {
  const res = await runChild(`
    const grab = (f) => { try { f(); return 'no throw'; } catch (e) { return e.code; } };
    const out = [];
    for (let i = 0; i < 3; i++) {
      out.push(grab(() => uvcuda.deviceCount()), grab(() => uvcuda.driverInfo()),
               grab(() => uvcuda.openDevice(0)));
    }
    uvcuda.fence(12345n).then(() => 'resolved', (e) => e.code).then((fence) => {
      out.push(fence);
      console.log(JSON.stringify(out));
    });`, { env: { SIMCUDA_FAIL: 'cuInit=999:1' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), Array(10).fill('CUDA_ERROR_UNKNOWN'));
});

// The load and its result are per copy of uvcuda, not per process: a
// second copy of the addon (another installed copy of the package) loads
// the driver on its own, and the first keeps its failed load.
test('the driver load is kept per copy of uvcuda: another copy loads on its own', async () => {
  const res = await runChild(`
    const fs = require('node:fs');
    const os = require('node:os');
    const path = require('node:path');
    const grab = (f) => { try { f(); return 'ok'; } catch (e) { return e.code; } };
    const out = { a: [grab(() => uvcuda.driverInfo())] };
    process.env.UVCUDA_LIBCUDA = ${JSON.stringify(process.env.UVCUDA_LIBCUDA || '')};
    out.a.push(grab(() => uvcuda.driverInfo()));
    ${LOAD_COPY}
    out.b = [grab(() => B.driverInfo()), B.deviceCount() > 0];
    out.a.push(grab(() => uvcuda.deviceCount()));
    fs.rmSync(dir, { recursive: true, force: true });
    console.log(JSON.stringify(out));`,
  { env: { UVCUDA_LIBCUDA: '/nonexistent/uvcuda-no-such-libcuda.so' } });
  assert.equal(res.status, 0, res.stderr);
  assert.deepEqual(lastJson(res), {
    a: ['UVCUDA_ENODRIVER', 'UVCUDA_ENODRIVER', 'UVCUDA_ENODRIVER'],
    b: ['ok', true],
  });
});
