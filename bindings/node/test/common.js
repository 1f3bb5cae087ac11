'use strict';
// Shared by the node --test suites: the package, the test kernels
// (kernels.ptx, which the simulated driver models by name), a JS FNV-1a to
// check uvcuda_checksum_u8, and a child-process runner for what must happen
// in a fresh process (sticky faults, exits, no driver).
//
// `test` here is node:test's, skipped (not failed) where the loaded driver
// is not uvcuda's simulation: these suites check exact simulated behaviour
// (injected failures, the simulated device's name). `nodeTest` runs
// anywhere. See env.js.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync, spawn } = require('node:child_process');
const nodeTest = require('node:test');
const { pkgDir, ptxPath, driver, driverSkip, simSkip, gpuSkip } = require('./env');

const uvcuda = require(pkgDir);
const ptx = fs.readFileSync(ptxPath, 'utf8');

/** node:test's test(name, [options], fn), skipped without the simulation. */
function test(name, options, fn) {
  if (typeof options === 'function') [options, fn] = [{}, options];
  return nodeTest(name, { ...options, skip: simSkip || options.skip }, fn);
}

/** Device 0 with the test kernels loaded. */
function setup(ordinal = 0) {
  const dev = uvcuda.openDevice(ordinal);
  const mod = dev.loadModule(ptx);
  return {
    dev,
    mod,
    sleep: mod.getFunction('uvcuda_sleep_ns', ['u64']),
    fault: mod.getFunction('uvcuda_fault', []),
    add: mod.getFunction('uvcuda_add_u32', ['ptr', 'u32', 'u32']),
    checksum: mod.getFunction('uvcuda_checksum_u8', ['ptr', 'u32', 'ptr']),
  };
}

/** Blocks for a launch of n threads (256 per block). */
function grid(n, block = 256) {
  return Math.max(1, Math.ceil(n / block));
}

/** FNV-1a 32-bit, as uvcuda_checksum_u8 computes it. */
function fnv1a(bytes) {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i];
    h = Math.imul(h, 16777619) >>> 0;
  }
  return h >>> 0;
}

/** Deterministic pseudo-random bytes. */
function bytes(n, seed = 1) {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

/** Preamble of child scripts: the package and the kernels. */
const childPreamble = `
const uvcuda = require(${JSON.stringify(pkgDir)});
const common = require(${JSON.stringify(__filename)});
`;

/** Runs `code` in a fresh node process; resolves {status, signal, stdout,
 * stderr, ms}. `env` is added to this process's environment. */
function runChild(code, { env = {}, timeout = 60000, args = [] } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, [...args, '-e', childPreamble + code], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeout);
    child.on('close', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

/** The last line of a child's stdout, parsed as JSON. */
function lastJson(res) {
  const lines = res.stdout.trim().split('\n');
  try {
    return JSON.parse(lines[lines.length - 1]);
  } catch (e) {
    throw new Error(`child printed no JSON (status ${res.status}, signal ` +
      `${res.signal}):\n${res.stdout}\n${res.stderr}`);
  }
}

function forceGc() {
  const v8 = require('node:v8');
  const vm = require('node:vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  gc();
  gc();
}

const simulated = (() => {
  try {
    return uvcuda.driverInfo().simulated;
  } catch {
    return false;
  }
})();

// Child-script lines (for runChild) that load a second copy of the addon
// (the package's JS and a copy of its .node file in a temporary folder,
// as another installed copy of the package would be) as B; `dir` is that
// folder. They need fs, os and path in scope.
const LOAD_COPY = `
    const addon = Object.keys(require.cache).find((f) => f.endsWith('.node'));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'uvcuda-copy-'));
    for (const f of ['index.js', 'package.json'])
      fs.copyFileSync(path.join(${JSON.stringify(pkgDir)}, f), path.join(dir, f));
    fs.copyFileSync(addon, path.join(dir, 'copy.node'));
    process.env.UVCUDA_NODE_ADDON = path.join(dir, 'copy.node');
    const B = require(dir);`;

module.exports = {
  uvcuda, ptx, ptxPath, setup, grid, fnv1a, bytes, runChild, lastJson, forceGc,
  simulated, spawnSync, test, nodeTest, pkgDir, driver, driverSkip, simSkip, gpuSkip,
  LOAD_COPY,
};
