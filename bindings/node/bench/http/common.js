'use strict';
// Shared by app.js, load.js and run.js: argument parsing, where the kernels
// and the thread-pool baseline addon are, histogram summaries.

const fs = require('node:fs');
const path = require('node:path');

/** --name value / --name=value / --flag; returns { get(name, dflt), has(name) }. */
function parseArgs(argv) {
  const vals = new Map();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) continue;
    const eq = a.indexOf('=');
    if (eq > 0) vals.set(a.slice(2, eq), a.slice(eq + 1));
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) vals.set(a.slice(2), argv[++i]);
    else vals.set(a.slice(2), true);
  }
  return {
    has: (name) => vals.has(name),
    get: (name, dflt) => (vals.has(name) ? vals.get(name) : dflt),
    num(name, dflt) {
      if (!vals.has(name)) return dflt;
      const v = Number(vals.get(name));
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`--${name}: not a number >= 0: ${vals.get(name)}`);
      return v;
    },
  };
}

const repo = path.join(__dirname, '..', '..', '..', '..');

/** The test kernels: $UVCUDA_TEST_PTX, the package's copy, the repository's. */
function findPtx() {
  return [
    process.env.UVCUDA_TEST_PTX,
    path.join(__dirname, '..', '..', 'kernels', 'kernels.ptx'),
    path.join(repo, 'support', 'kernels.ptx'),
  ].find((p) => p && fs.existsSync(p));
}

/** The thread-pool baseline addon (uvcuda_pool.node): an explicit path,
 * $UVCUDA_POOL_ADDON, node-gyp's build in pool-addon/, or the Meson build
 * that holds $UVCUDA_NODE_ADDON (<build>/bindings/node/uvcuda.node ->
 * <build>/bindings/node/bench/http/uvcuda_pool.node), or a Meson build in
 * the repository (build, builddir, build-node). */
function findPoolAddon(explicit) {
  const candidates = [
    explicit,
    process.env.UVCUDA_POOL_ADDON,
    path.join(__dirname, 'pool-addon', 'build', 'Release', 'uvcuda_pool.node'),
    process.env.UVCUDA_NODE_ADDON &&
      path.join(path.dirname(process.env.UVCUDA_NODE_ADDON), 'bench', 'http', 'uvcuda_pool.node'),
    ...['build', 'builddir', 'build-node'].map((d) =>
      path.join(repo, d, 'bindings', 'node', 'bench', 'http', 'uvcuda_pool.node')),
  ];
  return { found: candidates.find((p) => p && fs.existsSync(p)), tried: candidates.filter(Boolean) };
}

/** A perf_hooks histogram of values in `unit` ns (1 for ns, 1e3 for µs
 * recorded as µs, ...) as { count, p50, p90, p99, max, mean } in `out`
 * units (divide by `div`). */
function summarize(h, div = 1) {
  const f = (x) => Math.round((x / div) * 1000) / 1000;
  if (!h || h.count === 0) return { count: 0, p50: null, p90: null, p99: null, max: null, mean: null };
  return {
    count: h.count,
    p50: f(h.percentile(50)),
    p90: f(h.percentile(90)),
    p99: f(h.percentile(99)),
    max: f(h.max),
    mean: f(h.mean),
  };
}

const SIM_NOTE = 'simulation, not a GPU measurement';

module.exports = { parseArgs, findPtx, findPoolAddon, summarize, SIM_NOTE, repo };
