'use strict';
// A driver call refused, wherever the package makes one: every entry point
// a Node life calls (counted in a first child) fails once with
// CUDA_ERROR_OUT_OF_MEMORY at its 1st call, and at its 2nd where it has
// one (SIMCUDA_FAIL=entry=code@nth), each in a fresh child running three
// lives. The life: open the device, load a module, allocate, copy in,
// launch, copy out, memset, fence on both paths, then free everything.
// Whatever is refused: synchronous calls throw an Error with a string
// `code`, promises reject with one (never an unhandled rejection), the
// child exits by itself with status 0 (nothing hangs, nothing crashes),
// the refusal costs one life at most and the third works in full with the
// right data: a refused call leaves nothing broken behind it. Except cuInit,
// cuDriverGetVersion and cuGetProcAddress, whose failure is the driver's
// load result for the life of the process (documented).

const assert = require('node:assert/strict');
const { test, runChild, lastJson } = require('./common');

// Runs in the child: life() returns what happened; it never throws.
const life = `
process.on('unhandledRejection', (e) => {
  console.log(JSON.stringify({ unhandled: String(e && e.code || e) }));
  process.exit(3);
});
const uvcuda_ = uvcuda;
async function life() {
  const errors = [];
  const note = (e) => {
    if (!(e instanceof Error) || typeof e.code !== 'string') {
      errors.push({ bad: String(e) });
    } else {
      errors.push(e.code);
    }
  };
  const sync = (fn) => { try { return fn(); } catch (e) { note(e); return null; } };
  const awaited = async (p) => { try { return await p; } catch (e) { note(e); return null; } };
  const dev = sync(() => uvcuda_.openDevice(0));
  if (!dev) return { errors, ok: false };
  const mod = sync(() => dev.loadModule(common.ptx));
  const add = mod && sync(() => mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']));
  const n = 1000;
  const src = new Uint32Array(n).map((_, i) => i * 3);
  const m = sync(() => dev.alloc(src.byteLength));
  const s = sync(() => dev.createStream());
  let ok = false;
  if (m && s && add) {
    const r = await Promise.all([
      awaited(s.copyToDevice(m, src)),
      awaited(s.launch(add, common.grid(n), 256, [m, n, 1])),
    ]);
    const out = await awaited(s.copyFromDevice(new Uint32Array(n), m));
    const z = await awaited(s.memset(m, 0, 16));
    const f1 = await awaited(s.fence());
    const f2 = await awaited(s.fenceOnThreadPool());
    ok = r.length === 2 && out !== null && out.every((v, i) => v === src[i] + 1) &&
      z === undefined && f1 === undefined && f2 === undefined && errors.length === 0;
  }
  if (s) sync(() => s.destroy());
  if (m) sync(() => m.free());
  if (mod) sync(() => mod.unload());
  return { errors, ok };
}
`;

// cuGetProcAddress too: the driver load resolves every entry through it
// (its refusal at the 1st or 2nd call fails the load).
const loadTime = new Set(['cuInit', 'cuDriverGetVersion', 'cuGetProcAddress']);

// The names in the X-macro tables of the addon (lib/cuda-api.h's
// UVCUDA_CU_PFNS_..., which support/drvtab.h resolves) and of the library
// (UVCUDA__DRIVER_...), deduplicated.
function resolvedEntries() {
  const fs = require('node:fs');
  const path = require('node:path');
  const { pkgDir } = require('./env');
  const libRoot = fs.existsSync(path.join(pkgDir, 'deps', 'uvcuda', 'lib'))
    ? path.join(pkgDir, 'deps', 'uvcuda') : path.join(pkgDir, '..', '..');
  const names = new Set();
  for (const [file, macro] of [[path.join(libRoot, 'lib', 'cuda-api.h'), 'UVCUDA_CU_PFNS_'],
    [path.join(libRoot, 'lib', 'driver.h'), 'UVCUDA__DRIVER_']]) {
    const text = fs.readFileSync(file, 'utf8');
    // Each table: "#define MACRO...(XX)" then continued lines to the first
    // line without a trailing backslash.
    const re = new RegExp(`#define ${macro}\\w*\\(XX\\)[^\\n]*\\\\\\n((?:[^\\n]*\\\\\\n)*[^\\n]*)`, 'g');
    for (const m of text.matchAll(re)) {
      for (const x of m[1].matchAll(/XX\((cu\w+),/g)) names.add(x[1]);
    }
  }
  return [...names];
}

// A life where nothing is refused works (else every case below is moot).
async function cleanLife() {
  const res = await runChild(`${life}
    (async () => console.log(JSON.stringify({ first: await life() })))();`);
  assert.equal(res.status, 0, res.stderr);
  assert.equal(lastJson(res).first.ok, true, res.stdout);
}

test('a refused driver call: errors carry a code, nothing hangs, the next life works', async () => {
  await cleanLife();
  // Every entry point the package or the library resolves: read from the
  // tables themselves (uvcuda's lib/cuda-api.h and lib/driver.h, in the
  // package or the repository), so a new entry is swept too. Those the
  // life never calls just pass.
  const entries = resolvedEntries();
  assert.ok(entries.length > 40 && entries.includes('cuCtxSetCurrent') &&
    entries.includes('cuStreamWriteValue64'), JSON.stringify(entries));
  const failures = [];
  let refused = 0;
  for (const entry of entries) {
    for (const nth of [1, 2]) {
      const res = await runChild(`${life}
        (async () => {
          const first = await life();
          const second = await life();
          const third = await life();
          console.log(JSON.stringify({ first, second, third }));
        })();`, { env: { SIMCUDA_FAIL: `${entry}=CUDA_ERROR_OUT_OF_MEMORY@${nth}` }, timeout: 60000 });
      const where = `${entry} refused at call ${nth}`;
      if (res.status !== 0 || res.signal) {
        failures.push(`${where}: status ${res.status} signal ${res.signal}\n${res.stdout}${res.stderr}`);
        continue;
      }
      const { first, second, third } = lastJson(res);
      const lives = [first, second, third];
      for (const e of lives.flatMap((l) => l.errors)) {
        if (typeof e !== 'string') failures.push(`${where}: not an Error with a code: ${JSON.stringify(e)}`);
      }
      // The one refused call lands in the first or second life (each makes
      // every call at least once): it costs one life at most.
      const failed = lives.filter((l) => !l.ok).length;
      refused += failed;
      if (!loadTime.has(entry) && (failed > 1 || !third.ok)) {
        failures.push(`${where}: ${failed} lives failed: ` +
          JSON.stringify(lives.map((l) => l.errors)));
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.ok(refused > 10, `only ${refused} lives met a refusal`);
});

// The context calls, refused with a code nothing else gives: on the JS
// thread (which has no context current between calls, as any thread that
// never made one), every call switches to its device's context. A refused
// read or switch fails that call with the refusal's own code, never a
// consequence of running in no context (CUDA_ERROR_INVALID_CONTEXT), and
// the next life works. Every call of the first lives is reached.
test('a refused context read or switch fails with its own code', async () => {
  const failures = [];
  let refused = 0;
  for (const entry of ['cuCtxGetCurrent', 'cuCtxSetCurrent']) {
    for (let nth = 1; nth <= 30; nth++) {
      const res = await runChild(`${life}
        (async () => {
          const first = await life();
          const second = await life();
          console.log(JSON.stringify({ first, second }));
        })();`, { env: { SIMCUDA_FAIL: `${entry}=CUDA_ERROR_NOT_PERMITTED@${nth}` } });
      const where = `${entry} refused at call ${nth}`;
      if (res.status !== 0 || res.signal) {
        failures.push(`${where}: status ${res.status} signal ${res.signal}\n${res.stdout}${res.stderr}`);
        continue;
      }
      const { first, second } = lastJson(res);
      const errors = [...first.errors, ...second.errors];
      refused += errors.length;
      if (errors.some((e) => e !== 'CUDA_ERROR_NOT_PERMITTED')) {
        failures.push(`${where}: ${JSON.stringify(errors)}`);
      }
      if (errors.length > 1 || !(first.ok || second.ok)) {
        failures.push(`${where}: ${JSON.stringify([first, second])}`);
      }
    }
  }
  assert.deepEqual(failures, []);
  assert.ok(refused > 10, `only ${refused} calls met a refusal`);
});
