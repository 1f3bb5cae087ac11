'use strict';
// The package as users reach it: require('uvcuda') and import ... from
// 'uvcuda' through package.json "exports", from an app whose node_modules
// holds it, and what addon authors read from it (include_dir, targets).
// Needs the addon, not a driver: runs anywhere.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { pkgDir } = require('./env');

const app = fs.mkdtempSync(path.join(os.tmpdir(), 'uvcuda-pkg-'));
fs.mkdirSync(path.join(app, 'node_modules'));
fs.symlinkSync(pkgDir, path.join(app, 'node_modules', 'uvcuda'), 'dir');
process.on('exit', () => fs.rmSync(app, { recursive: true, force: true }));

/** Runs `code` with node in the app (`args` before it), returns stdout's
 * last line parsed as JSON. */
function inApp(args, code) {
  const r = spawnSync(process.execPath, [...args, code], { cwd: app, encoding: 'utf8' });
  assert.equal(r.signal, null, r.stderr);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

test('require(\'uvcuda\') gives the API', () => {
  const out = inApp(['-e'], `
    const u = require('uvcuda');
    console.log(JSON.stringify({ openDevice: typeof u.openDevice, Device: typeof u.Device,
                                 version: u.version }));`);
  assert.deepEqual(out, { openDevice: 'function', Device: 'function',
                          version: require('../package.json').version });
});

test('import { openDevice } from \'uvcuda\' (ESM named exports)', () => {
  const out = inApp(['--input-type=module', '-e'], `
    import { openDevice, Stream, fence, version } from 'uvcuda';
    import uvcuda from 'uvcuda';
    console.log(JSON.stringify({ openDevice: typeof openDevice, Stream: typeof Stream,
                                 fence: typeof fence, same: openDevice === uvcuda.openDevice,
                                 version }));`);
  assert.deepEqual(out, { openDevice: 'function', Stream: 'function', fence: 'function',
                          same: true, version: require('../package.json').version });
});

test('the ESM entry exports every name the CommonJS entry has, and the same values', () => {
  const out = inApp(['--input-type=module', '-e'], `
    import * as esm from 'uvcuda';
    import { createRequire } from 'node:module';
    const cjs = createRequire(process.cwd() + '/')('uvcuda');
    const names = Object.keys(cjs);
    console.log(JSON.stringify({
      missing: names.filter((n) => !(n in esm)),
      extra: Object.keys(esm).filter((n) => n !== 'default' && !names.includes(n)),
      differ: names.filter((n) => esm[n] !== cjs[n]),
      defaultIsCjs: esm.default === cjs }));`);
  assert.deepEqual(out, { missing: [], extra: [], differ: [], defaultIsCjs: true });
});

test('a failed load is catchable from ESM as from CommonJS', () => {
  // Node 20 reports an error thrown while a statically imported CommonJS
  // module loads as uncaught even when import() is caught: an app could
  // not treat uvcuda as optional from ESM.
  const code = `import('uvcuda').then(() => console.log('loaded'),
    (e) => console.log('caught ' + e.code));`;
  for (const args of [['--input-type=module', '-e', code], ['-e', code]]) {
    const r = spawnSync(process.execPath, args, {
      cwd: app, encoding: 'utf8',
      env: { ...process.env, UVCUDA_NODE_ADDON: path.join(app, 'no-such-addon.node') },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'caught MODULE_NOT_FOUND', r.stderr);
  }
});

test('package.json: exports map with types, import and require', () => {
  const pkg = require('../package.json');
  const dot = pkg.exports['.'];
  // Types per condition: index.d.mts for import (an ES module's types, not
  // CommonJS ones "masquerading" as ESM), index.d.ts for require.
  assert.deepEqual(dot, {
    import: { types: './index.d.mts', default: './index.mjs' },
    require: { types: './index.d.ts', default: './index.js' },
  });
  for (const c of Object.values(dot))
    for (const file of Object.values(c)) assert.ok(fs.existsSync(path.join(pkgDir, file)), file);
  for (const file of ['index.d.ts', 'index.d.mts']) assert.ok(pkg.files.includes(file), file);
  assert.equal(pkg.types, 'index.d.ts');
});

test('include_dir holds uvcuda.h and uvcuda/napi.h; targets is the gyp file', () => {
  const out = inApp(['-e'], `
    const u = require('uvcuda');
    console.log(JSON.stringify({ include_dir: u.include_dir, targets: u.targets }));`);
  assert.ok(path.isAbsolute(out.include_dir));
  for (const h of ['uvcuda.h', path.join('uvcuda', 'napi.h')])
    assert.ok(fs.existsSync(path.join(out.include_dir, h)), `${h} in ${out.include_dir}`);
  assert.match(fs.readFileSync(out.targets, 'utf8'), /"target_name": "uvcuda_napi"/);
  // What the headers include, beyond Node's own headers, is there too.
  const inc = new Set();
  for (const h of ['uvcuda.h', path.join('uvcuda', 'napi.h')]) {
    const src = fs.readFileSync(path.join(out.include_dir, h), 'utf8');
    for (const m of src.matchAll(/^#\s*include\s+"([^"]+)"/gm)) inc.add(m[1]);
  }
  for (const h of inc) assert.ok(fs.existsSync(path.join(out.include_dir, h)), h);
});

/** require('uvcuda') from an app whose node_modules holds the package's JS
 * alone, no addon built; `decoy`: the app has a file at
 * build/bindings/node/uvcuda.node of its own. */
function loadBare(decoy) {
  const bare = fs.mkdtempSync(path.join(os.tmpdir(), 'uvcuda-bare-'));
  const mod = path.join(bare, 'node_modules', 'uvcuda');
  fs.mkdirSync(mod, { recursive: true });
  for (const f of ['index.js', 'package.json']) fs.copyFileSync(path.join(pkgDir, f), path.join(mod, f));
  try {
    const ngb = path.dirname(require.resolve('node-gyp-build/package.json', { paths: [pkgDir] }));
    fs.symlinkSync(ngb, path.join(bare, 'node_modules', 'node-gyp-build'), 'dir');
  } catch {
    // not installed here: the package's loader reports that as the cause
  }
  if (decoy) {
    fs.mkdirSync(path.join(bare, 'build', 'bindings', 'node'), { recursive: true });
    fs.writeFileSync(path.join(bare, 'build', 'bindings', 'node', 'uvcuda.node'), 'not an addon');
  }
  const env = { ...process.env };
  delete env.UVCUDA_NODE_ADDON;
  const r = spawnSync(process.execPath, ['-e', `
    try { require('uvcuda'); console.log('"loaded"'); }
    catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`], {
    cwd: bare, encoding: 'utf8', env,
  });
  fs.rmSync(bare, { recursive: true, force: true });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

test('no addon: ERR_UVCUDA_NO_ADDON, saying how to build it', () => {
  const out = loadBare(false);
  assert.equal(out.code, 'ERR_UVCUDA_NO_ADDON');
  assert.match(out.message, /npm rebuild uvcuda --build-from-source/);
  assert.match(out.message, /npx node-gyp rebuild/);
});

test('installed, the package never loads a uvcuda.node of the app\'s own build folders', () => {
  // The repository's Meson build is a fallback for the repository only:
  // installed, the folder two levels up is the app (round 11: it loaded
  // the app's file, and failed on it).
  assert.equal(loadBare(true).code, 'ERR_UVCUDA_NO_ADDON');
});

test('every function and method has its name, as Node core\'s have (stack traces, inspect)', () => {
  const u = require('..');
  const unnamed = [];
  for (const [key, v] of Object.entries(u))
    if (typeof v === 'function' && v.name !== key) unnamed.push(`${key}: ${JSON.stringify(v.name)}`);
  for (const C of [u.Device, u.Stream, u.DeviceMemory, u.Module, u.Kernel]) {
    for (const key of Object.getOwnPropertyNames(C.prototype)) {
      const d = Object.getOwnPropertyDescriptor(C.prototype, key);
      if (typeof d.value === 'function' && key !== 'constructor' && d.value.name !== key)
        unnamed.push(`${C.name}.prototype.${key}: ${JSON.stringify(d.value.name)}`);
    }
  }
  assert.deepEqual(unnamed, []);
});

test('evaluated again with require.cache cleared (jest.resetModules): the same API, no throw', () => {
  const out = inApp(['-e'], `
    const a = require('uvcuda');
    for (const k of Object.keys(require.cache)) if (!k.endsWith('.node')) delete require.cache[k];
    const b = require('uvcuda');
    console.log(JSON.stringify({ same: a === b, Stream: a.Stream === b.Stream,
      named: b.Stream.prototype.fence.name }));`);
  assert.deepEqual(out, { same: true, Stream: true, named: 'fence' });
});
