'use strict';
// Every way an app loads and lets go of the addon, each in a fresh process
// that loads it the way a user does: `require('uvcuda')`, in a worker only
// where the pattern says so (no main-thread require, no preload).
//
// Why: Node dlclose()s an addon that only worker threads loaded once the
// last of them ends (nodejs/node#25577). Any thread still running the
// addon's code then (its reaper thread, uvcuda's reactor, a CUDA host
// function queued by uvcuda) jumps into unmapped memory: SIGSEGV. The
// crashes were probabilistic (a race against the unmap), so each pattern
// runs RUNS times, alternating the completion strategy (reactor / host
// functions), and must exit 0 with no signal every time.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { pkgDir, ptxPath, driverSkip } = require('./env');

const RUNS = Number(process.env.UVCUDA_UNLOAD_RUNS) || 8;

// A scratch app: node_modules/uvcuda -> this package, and the scripts below.
const app = fs.mkdtempSync(path.join(os.tmpdir(), 'uvcuda-unload-'));
fs.mkdirSync(path.join(app, 'node_modules'));
fs.symlinkSync(pkgDir, path.join(app, 'node_modules', 'uvcuda'), 'dir');
process.on('exit', () => fs.rmSync(app, { recursive: true, force: true }));

// GPU work that leaves every kind of thing behind: a kernel, copies, a
// fence, and objects freed or dropped while their work is pending (they go
// through the addon's reaper thread).
const work = `
const uvcuda = require('uvcuda');
const fs = require('node:fs');
async function work(opts = {}) {
  const dev = uvcuda.openDevice(0);
  const mod = dev.loadModule(fs.readFileSync(process.env.UVCUDA_UNLOAD_PTX, 'utf8'));
  const sleep = mod.getFunction('uvcuda_sleep_ns', ['u64']);
  const add = mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']);
  const s = dev.createStream();
  const m = dev.alloc(4 * 256);
  await s.memset(m, 0);
  await s.launch(add, 1, 256, [m, 256, 3]);
  const out = await s.copyFromDevice(new Uint32Array(256), m);
  if (out[255] !== 3) throw new Error('wrong result ' + out[255]);
  const tmp = dev.alloc(4096);
  s.memset(tmp, 1);
  tmp.free();                       // freed with work pending
  dev.alloc(1024);                  // dropped: finalized at teardown
  if (opts.pendingNs) {
    s.launch(sleep, 1, 1, [opts.pendingNs]);
    for (let i = 0; i < 20; i++) s.fence();
    s.copyFromDevice(new Uint8Array(1024), m);
    return;                         // left pending
  }
  await s.launch(sleep, 1, 1, [1_000_000n]);
  m.free();
  mod.unload();
  s.destroy();
}
`;

const workerFile = (name, body) => {
  fs.writeFileSync(path.join(app, name), `'use strict';
const { parentPort, workerData } = require('node:worker_threads');
${work}
(async () => { ${body} })().catch((e) => { console.error(e); process.exit(3); });
`);
  return name;
};

workerFile('w-done.js', `await work(); parentPort.postMessage('done');`);
workerFile('w-pending.js', `
  await work({ pendingNs: BigInt(workerData || 300_000_000) });
  parentPort.postMessage('pending');
  setInterval(() => {}, 1000);`);
workerFile('w-exit.js', `
  await work({ pendingNs: 300_000_000n });
  process.exit(0);`);

// Main-thread scripts. `linger` keeps the process up a little after the
// last worker ended, when a thread left running in unmapped code crashes.
const mainHead = `'use strict';
const { Worker } = require('node:worker_threads');
const path = require('node:path');
const w = (file, opts) => new Worker(path.join(__dirname, file), opts);
const ended = (wk) => new Promise((res, rej) => {
  wk.on('error', rej);
  wk.on('exit', res);
});
const linger = (ms = 150) => new Promise((r) => setTimeout(r, ms));
`;

const patterns = {
  'main thread only': `${work}
    (async () => { await work(); await work({ pendingNs: 20_000_000n }); })()
      .catch((e) => { console.error(e); process.exit(3); });`,

  'one worker only': `${mainHead}
    (async () => {
      const code = await ended(w('w-done.js'));
      if (code !== 0) process.exit(10 + code);
      await linger();
    })();`,

  'workers one after another': `${mainHead}
    (async () => {
      for (let i = 0; i < 4; i++) {
        const code = await ended(w('w-done.js'));
        if (code !== 0) process.exit(10 + code);
        await linger(20);
      }
      await linger();
    })();`,

  'workers at once, then more after the last ended': `${mainHead}
    (async () => {
      const codes = await Promise.all([0, 1, 2, 3].map((i) => ended(w(
        i % 2 ? 'w-done.js' : 'w-exit.js'))));
      if (codes.some((c) => c !== 0)) process.exit(20);
      await linger(20);
      const again = await Promise.all([ended(w('w-done.js')), ended(w('w-done.js'))]);
      if (again.some((c) => c !== 0)) process.exit(21);
      await linger();
    })();`,

  'terminate() with a kernel pending': `${mainHead}
    (async () => {
      const wk = w('w-pending.js');
      wk.on('message', () => wk.terminate());
      const code = await ended(wk);
      if (code !== 1) process.exit(30);
      await linger(400); // past the kernel's end
    })();`,

  'process.exit() in the main thread, worker with work pending': `${mainHead}
    const wk = w('w-pending.js', { workerData: 200_000_000n });
    wk.on('message', () => process.exit(0));`,

  'process.exit() in the main thread with work pending': `${work}
    work({ pendingNs: 300_000_000n }).then(() => process.exit(0),
      (e) => { console.error(e); process.exit(3); });`,

  'worker exits (process.exit) with work pending, main lingers': `${mainHead}
    (async () => {
      const code = await ended(w('w-exit.js'));
      if (code !== 0) process.exit(40);
      await linger(400);
    })();`,
};

function run(name, src, i) {
  const file = path.join(app, `main-${name.replace(/\W+/g, '-')}.js`);
  fs.writeFileSync(file, src);
  return spawnSync(process.execPath, [file], {
    cwd: app,
    env: {
      ...process.env,
      UVCUDA_UNLOAD_PTX: ptxPath,
      // Half the runs complete through CUDA host functions, which the
      // driver's own thread calls into the addon's code.
      UVCUDA_COMPLETION: i % 2 ? 'hostfn' : 'auto',
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

for (const [name, src] of Object.entries(patterns)) {
  test(`${name}: ${RUNS} runs exit 0, no signal`, { skip: driverSkip }, () => {
    const bad = [];
    for (let i = 0; i < RUNS; i++) {
      const r = run(name, src, i);
      if (r.status !== 0 || r.signal !== null)
        bad.push(`run ${i}: status ${r.status} signal ${r.signal} ${r.stderr.slice(-400)}`);
    }
    assert.deepEqual(bad, [], `${bad.length} of ${RUNS} runs failed`);
  });
}

// Deterministic: the crash above needs a thread to lose a race; this does
// not. After the only worker that loaded the addon ended, the addon must
// still be mapped (it is kept resident; see src/uvcuda_napi.c).
test('the addon stays loaded after the last worker that loaded it ended', { skip: driverSkip }, () => {
  const file = path.join(app, 'main-mapped.js');
  fs.writeFileSync(file, `${mainHead}
    const fs = require('node:fs');
    const mapped = () => fs.readFileSync('/proc/self/maps', 'utf8').split('\\n')
      .filter((l) => /\\.node$/.test(l)).map((l) => l.split(/\\s+/).pop());
    (async () => {
      const before = mapped();
      const code = await ended(w('w-done.js'));
      await linger(50);
      const after = mapped().filter((f) => !before.includes(f));
      console.log(JSON.stringify({ code, after: [...new Set(after)] }));
    })();`);
  const r = spawnSync(process.execPath, [file], {
    cwd: app, env: { ...process.env, UVCUDA_UNLOAD_PTX: ptxPath }, encoding: 'utf8',
  });
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(out.code, 0);
  assert.equal(out.after.length, 1, `addon mappings after the worker: ${out.after}`);
});
