#!/usr/bin/env node
'use strict';
// The Node HTTP benchmark's driver: for each variant (uvcuda promises, the
// thread-pool baseline) it starts app.js as a child process on 127.0.0.1,
// drives it with autocannon (load.js, one process per instance) in three
// phases, and reads the app's /stats (event-loop delay, GPU counters)
// around each phase:
//   nogpu  /nogpu alone (--nogpu-connections, capped at --nogpu-rate req/s:
//          autocannon's overallRate, where each connection sends its share
//          of a second back to back, then waits for the next second)
//   gpu    /gpu alone (closed loop: --connections, as fast as they go;
//          --gpu-rate R caps it at R req/s, e.g. to compare the variants'
//          /nogpu latency under the same GPU load)
//   mixed  both at once, two autocannon processes: /nogpu's latency under
//          GPU load is the point
// then prints a table and the targets, and writes http-bench.json,
// http-bench.csv and http-bench.md to --out.
//
//   node run.js [--quick] [--out DIR] [--variants uvcuda,pool]
//               [--duration S] [--warmup S] [--connections N]
//               [--gpu-rate R] [--nogpu-connections N] [--nogpu-rate R]
//               [--streams N] [--kernel-us US] [--elements N]
//               [--timeout S] [--pool-addon PATH] [--completion MODE]
//               [--copy-out together|after]
//
// Exit status: 0 when every request of every phase succeeded (2xx, no
// error, no timeout) and the apps exited cleanly; 1 otherwise; 77 when
// autocannon is not installed (npm ci here). The timing targets are
// printed, never asserted. On the simulated driver every figure is marked
// "simulation, not a GPU measurement".

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const http = require('node:http');
const { spawn } = require('node:child_process');
const { parseArgs, findPoolAddon, SIM_NOTE } = require('./common');

const args = parseArgs(process.argv.slice(2));
const quick = args.has('quick');
const cfg = {
  variants: String(args.get('variants', 'uvcuda,pool')).split(',').filter(Boolean),
  duration: args.num('duration', quick ? 1 : 10),
  warmup: args.num('warmup', quick ? 0 : 2),
  connections: Math.max(1, Math.floor(args.num('connections', quick ? 16 : 32))),
  nogpuConnections: Math.max(1, Math.floor(args.num('nogpu-connections', 4))),
  nogpuRate: args.num('nogpu-rate', quick ? 200 : 1000),
  gpuRate: args.num('gpu-rate', 0),
  streams: Math.max(1, Math.floor(args.num('streams', 8))),
  kernelUs: args.num('kernel-us', 1000),
  elements: Math.max(1, Math.floor(args.num('elements', 256))),
  timeout: args.num('timeout', quick ? 5 : 10),
  completion: args.get('completion', null),
  copyOut: args.get('copy-out', 'together'),
  out: path.resolve(String(args.get('out', path.join(os.tmpdir(), 'uvcuda-http-bench')))),
  threadpool: Number(process.env.UV_THREADPOOL_SIZE || 4),
};
for (const v of cfg.variants) {
  if (v !== 'uvcuda' && v !== 'pool') {
    console.error(`run: --variants: uvcuda and/or pool, not ${v}`);
    process.exit(2);
  }
}

try {
  require.resolve('autocannon');
} catch {
  console.log('SKIP: autocannon is not installed: run `npm ci` in ' + __dirname);
  process.exit(77);
}
let poolAddon = null;
if (cfg.variants.includes('pool')) {
  const { found, tried } = findPoolAddon(args.get('pool-addon', null));
  if (!found) {
    console.error('run: the thread-pool baseline addon uvcuda_pool.node is not built; tried:\n  ' +
                  tried.join('\n  ') + '\nBuild it with Meson (-Dnapi=enabled: ' +
                  '<build>/bindings/node/bench/http/uvcuda_pool.node) or `npm run build:pool`, ' +
                  'or set UVCUDA_POOL_ADDON.');
    process.exit(1);
  }
  poolAddon = found;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the app ----------------------------------------------------------------

function startApp(variant) {
  const argv = [path.join(__dirname, 'app.js'), '--variant', variant, '--port', '0',
                '--streams', String(cfg.streams), '--kernel-us', String(cfg.kernelUs),
                '--elements', String(cfg.elements)];
  if (poolAddon) argv.push('--pool-addon', poolAddon);
  if (cfg.completion) argv.push('--completion', cfg.completion);
  argv.push('--copy-out', cfg.copyOut);
  const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  const app = { child, ready: null, final: null, exit: null, stderr: '' };
  let buf = '';
  let onReady;
  const ready = new Promise((resolve, reject) => {
    onReady = resolve;
    child.on('exit', (code, signal) => reject(new Error(
      `app (${variant}) exited before listening: ${signal || code}\n${app.stderr}`)));
  });
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (d) => {
    buf += d;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.startsWith('READY ')) onReady((app.ready = JSON.parse(line.slice(6))));
      else if (line.startsWith('FINAL ')) app.final = JSON.parse(line.slice(6));
      else if (line.trim()) console.log(`  [app ${variant}] ${line}`);
    }
  });
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => {
    app.stderr += d;
    process.stderr.write(d.replace(/^(?=.)/gm, `  [app ${variant}] `));
  });
  app.exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    app.exit = { code, signal };
    resolve(app.exit);
  }));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
  return ready.finally(() => clearTimeout(timer)).then(() => app);
}

async function stopApp(app) {
  app.child.kill('SIGTERM');
  const t = setTimeout(() => app.child.kill('SIGKILL'), 20000);
  await app.exited;
  clearTimeout(t);
}

function getJson(port, p) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, agent: false, timeout: 10000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => {
        try {
          resolve(JSON.parse(body));
        } catch (e) {
          reject(new Error(`GET ${p}: ${res.statusCode} ${body.slice(0, 200)}`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${p}: timeout`)));
    req.on('error', reject);
  });
}

// ---- load -------------------------------------------------------------------

function load(port, route, duration) {
  const gpu = route === '/gpu';
  const argv = [path.join(__dirname, 'load.js'), '--url', `http://127.0.0.1:${port}${route}`,
                '--connections', String(gpu ? cfg.connections : cfg.nogpuConnections),
                '--duration', String(duration), '--timeout', String(cfg.timeout)];
  const rate = gpu ? cfg.gpuRate : cfg.nogpuRate;
  if (rate > 0) argv.push('--rate', String(rate));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => (out += d));
    const kill = setTimeout(() => child.kill('SIGKILL'), (duration + cfg.timeout + 30) * 1000);
    child.on('exit', (code, signal) => {
      clearTimeout(kill);
      const line = out.trim().split('\n').pop();
      if (code !== 0 || !line) return reject(new Error(`load ${route}: exit ${signal || code}`));
      resolve(JSON.parse(line));
    });
  });
}

async function phase(app, name, routes, duration) {
  const port = app.ready.port;
  await getJson(port, '/stats?reset=1');
  const results = await Promise.all(routes.map((r) => load(port, r, duration)));
  // The load generators stop with requests in flight; let the app finish
  // them before reading its counters.
  for (let i = 0; i < 200; i++) {
    const s = await getJson(port, '/stats');
    if (s.gpu.inflight === 0) break;
    await sleep(10);
  }
  const stats = await getJson(port, '/stats');
  const byRoute = {};
  routes.forEach((r, i) => (byRoute[r.slice(1)] = results[i]));
  return { phase: name, routes: byRoute, app: stats };
}

// ---- main -------------------------------------------------------------------

async function runVariant(variant) {
  const app = await startApp(variant);
  const r = { variant, ready: app.ready, phases: [] };
  console.log(`${variant}: app pid ${app.ready.pid} on 127.0.0.1:${app.ready.port}` +
              (app.ready.simulated ? ` (${SIM_NOTE})` : ` (${app.ready.device})`));
  try {
    if (cfg.warmup > 0) await phase(app, 'warmup', ['/gpu', '/nogpu'], cfg.warmup);
    r.phases.push(await phase(app, 'nogpu', ['/nogpu'], cfg.duration));
    r.phases.push(await phase(app, 'gpu', ['/gpu'], cfg.duration));
    r.phases.push(await phase(app, 'mixed', ['/gpu', '/nogpu'], cfg.duration));
  } finally {
    await stopApp(app);
  }
  r.final = app.final;
  r.exit = app.exit;
  return r;
}

const f = (x, d = 0) => (x === null || x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));

async function main() {
  fs.mkdirSync(cfg.out, { recursive: true });
  const t0 = Date.now();
  const runs = [];
  for (const v of cfg.variants) runs.push(await runVariant(v));

  const simulated = runs.some((r) => r.ready.simulated);
  const src = simulated ? SIM_NOTE : `GPU: ${runs[0].ready.device}`;
  const rows = [];
  const countLines = []; // what the waits did, per request of the phase (uvcuda's counters)
  for (const r of runs) {
    for (const p of r.phases) {
      // The app process's CPU over the phase (every thread), per request
      // of every route the phase drove.
      const served = Object.values(p.routes).reduce((a, l) => a + l.ok, 0);
      const per = (x) => (served > 0 && x !== null && x !== undefined ? x / served : null);
      const cpuPerReq = per(p.app.cpuUs);
      if (p.app.waitCounts && served > 0)
        countLines.push(`counts per request, ${r.variant} ${p.phase}: ` +
                        Object.entries(p.app.waitCounts).map(([k, v]) => `${k} ${per(v).toFixed(2)}`).join(', '));
      for (const [route, l] of Object.entries(p.routes)) {
        rows.push({
          source: src,
          variant: r.variant,
          phase: p.phase,
          route,
          connections: l.connections,
          rate: l.rate,
          rps: l.rps,
          ok: l.ok,
          p50Us: l.latencyUs.p50,
          p99Us: l.latencyUs.p99,
          maxUs: l.latencyUs.max,
          errors: l.errors,
          timeouts: l.timeouts,
          non2xx: l.non2xx,
          appGpuErrors: route === 'gpu' ? p.app.gpu.errors + p.app.gpu.checkFailures : 0,
          eldP50Ms: p.app.eventLoopDelayMs.p50,
          eldP99Ms: p.app.eventLoopDelayMs.p99,
          eldMaxMs: p.app.eventLoopDelayMs.max,
          enqueueP50Us: route === 'gpu' ? p.app.enqueueUs.p50 : null,
          enqueueP99Us: route === 'gpu' ? p.app.enqueueUs.p99 : null,
          appCpuUsPerReq: cpuPerReq,
          reactorCpuUsPerReq: per(p.app.reactorCpuUs),
          spinUsPerReq: per(p.app.spinUs),
        });
      }
    }
  }

  // Targets.
  const get = (v, ph, route) => rows.find((x) => x.variant === v && x.phase === ph && x.route === route);
  const targets = [];
  for (const r of runs) {
    const gpuRows = rows.filter((x) => x.variant === r.variant && x.route === 'gpu');
    // A failed GPU request is a 500 (non-2xx) the client saw, or one the
    // app counted after the client stopped waiting: the larger of the two.
    const bad = gpuRows.reduce((a, x) => a + x.errors + x.timeouts + Math.max(x.non2xx, x.appGpuErrors), 0);
    targets.push({ variant: r.variant, target: 'GPU route: 0 errors (errors, timeouts, non-2xx, wrong results)',
                   value: bad, met: bad === 0 });
    const alone = get(r.variant, 'nogpu', 'nogpu');
    const mixed = get(r.variant, 'mixed', 'nogpu');
    const ratio = alone && mixed && alone.p99Us > 0 ? mixed.p99Us / alone.p99Us : null;
    targets.push({ variant: r.variant, target: '/nogpu p99 under GPU load <= 1.2x its p99 alone',
                   value: ratio, detail: `${f(mixed && mixed.p99Us)} vs ${f(alone && alone.p99Us)} µs`,
                   met: ratio !== null && ratio <= 1.2 });
  }
  if (cfg.variants.includes('uvcuda') && cfg.variants.includes('pool')) {
    for (const ph of ['gpu', 'mixed']) {
      const u = get('uvcuda', ph, 'gpu');
      const p = get('pool', ph, 'gpu');
      targets.push({ variant: 'uvcuda vs pool', target: `GPU req/s (${ph} phase): uvcuda >= thread pool`,
                     value: u && p && p.rps > 0 ? u.rps / p.rps : null,
                     detail: `${f(u && u.rps)} vs ${f(p && p.rps)} req/s`, met: !!(u && p && u.rps >= p.rps) });
    }
  }

  // Any failed request, anywhere, or an app that did not exit cleanly.
  const failures = [];
  for (const x of rows) {
    const n = x.errors + x.timeouts + x.non2xx + x.appGpuErrors;
    if (n) failures.push(`${x.variant}/${x.phase} /${x.route}: ${x.errors} errors, ${x.timeouts} timeouts, ` +
                         `${x.non2xx} non-2xx, ${x.appGpuErrors} GPU errors in the app`);
  }
  for (const r of runs) {
    if (!r.final || r.exit.code !== 0) {
      failures.push(`${r.variant}: app exit ${r.exit.signal || r.exit.code}` +
                    (r.final ? `, ${r.final.totalGpuErrors} GPU errors` : ', no FINAL line'));
    }
    if (r.phases.some((p) => p.routes.gpu && p.routes.gpu.ok === 0))
      failures.push(`${r.variant}: a phase completed no /gpu request`);
  }

  // The report.
  const h = runs[0].ready;
  const md = [];
  const banner = simulated ? `**${SIM_NOTE.toUpperCase()}**: every figure below comes from the simulated driver ` +
                             '(host sleeps on worker threads); it says nothing about a GPU.' : null;
  md.push(`# uvcuda Node HTTP benchmark (${src})`);
  md.push('');
  if (banner) md.push(banner, '');
  md.push(`${new Date().toISOString()}; node ${h.node} (libuv ${h.uv}); driver ${h.driverVersion} ` +
          `(${h.driverPath}); device: ${h.device}; ${os.cpus().length} CPUs (${os.cpus()[0] && os.cpus()[0].model}); ` +
          `uvcuda completion ${h.completion}; UV_THREADPOOL_SIZE ${cfg.threadpool}`);
  md.push(`/gpu: ${cfg.elements} u32 in, ${cfg.kernelUs} µs uvcuda_sleep_ns + uvcuda_add_u32, out, checked ` +
          `(uvcuda: copy out enqueued ${cfg.copyOut === 'after' ? 'after the kernels are done' : 'with the rest'}); ` +
          `${cfg.streams} streams round-robin; ${cfg.connections} connections, ` +
          (cfg.gpuRate > 0 ? `capped at ${cfg.gpuRate} req/s. ` : 'closed loop. ') +
          `/nogpu: ${cfg.nogpuConnections} connections` +
          (cfg.nogpuRate > 0 ? `, capped at ${cfg.nogpuRate} req/s` : ', closed loop') + '. ' +
          `${cfg.duration} s per phase after ${cfg.warmup} s of warm-up; autocannon request timeout ${cfg.timeout} s.`);
  md.push('Latency: per response, µs (client side, autocannon). ELD: the app\'s event-loop delay ' +
          '(perf_hooks.monitorEventLoopDelay, 1 ms timer: an idle loop reads ~1.0 ms), ms. ' +
          'enq: the synchronous part of a /gpu request on the JS thread (the enqueue calls), µs. ' +
          'CPU/req: the app process\'s CPU (every thread: JS, uvcuda\'s reactor, libuv\'s pool, the driver\'s) ' +
          'over the phase, per request of the phase, µs; of it, reactor: uvcuda\'s reactor thread\'s CPU, ' +
          'and spin: the JS thread\'s time in uvcuda\'s spin (between two passes that spun), µs per request.');
  md.push('');
  md.push('| variant | phase | route | req/s | p50 µs | p99 µs | max µs | errors | timeouts | non-2xx | GPU errors (app) | ELD p50 ms | ELD p99 ms | ELD max ms | enq p50 µs | enq p99 µs | CPU/req µs | reactor µs/req | spin µs/req |' +
          (simulated ? ' source |' : ''));
  md.push('|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|' + (simulated ? '---|' : ''));
  for (const x of rows) {
    md.push(`| ${x.variant} | ${x.phase} | /${x.route} | ${f(x.rps)} | ${f(x.p50Us)} | ${f(x.p99Us)} | ${f(x.maxUs)} | ` +
            `${x.errors} | ${x.timeouts} | ${x.non2xx} | ${x.appGpuErrors} | ${f(x.eldP50Ms, 2)} | ${f(x.eldP99Ms, 2)} | ` +
            `${f(x.eldMaxMs, 2)} | ${f(x.enqueueP50Us)} | ${f(x.enqueueP99Us)} | ${f(x.appCpuUsPerReq, 1)} | ${f(x.reactorCpuUsPerReq, 1)} | ${f(x.spinUsPerReq, 1)} |` +
            (simulated ? ' simulation |' : ''));
  }
  md.push('');
  md.push(...countLines);
  md.push('');
  md.push('Targets' + (simulated ? ` (${SIM_NOTE})` : '') + ':');
  md.push('');
  for (const t of targets) {
    const v = typeof t.value === 'number' && !Number.isInteger(t.value) ? t.value.toFixed(2) : t.value;
    md.push(`- ${t.variant}: ${t.target}: ${v === null ? '-' : v}${t.detail ? ` (${t.detail})` : ''} — ` +
            `${t.met ? 'met' : 'NOT met'}`);
  }
  md.push('');
  md.push(failures.length ? `FAILED: ${failures.join('; ')}` : 'All requests succeeded (0 errors, 0 timeouts, 0 non-2xx, 0 wrong results).');
  if (banner) md.push('', banner);
  const text = md.join('\n');
  console.log('\n' + text);

  const json = {
    source: src,
    simulated,
    note: simulated ? SIM_NOTE : undefined,
    date: new Date().toISOString(),
    host: { hostname: os.hostname(), cpus: os.cpus().length, cpuModel: os.cpus()[0] && os.cpus()[0].model },
    config: cfg,
    apps: runs.map((r) => ({ variant: r.variant, ready: r.ready, final: r.final, exit: r.exit })),
    phases: runs.map((r) => ({ variant: r.variant, phases: r.phases })),
    rows,
    targets,
    failures,
    wallS: (Date.now() - t0) / 1000,
  };
  fs.writeFileSync(path.join(cfg.out, 'http-bench.json'), JSON.stringify(json, null, 2) + '\n');
  fs.writeFileSync(path.join(cfg.out, 'http-bench.md'), text + '\n');
  const cols = Object.keys(rows[0]);
  const csv = [cols.join(',')].concat(rows.map((x) => cols.map((c) => {
    const v = x[c];
    if (v === null || v === undefined) return '';
    return typeof v === 'string' && /[",\n]/.test(v) ? `"${v.replace(/"/g, '""')}"` : String(v);
  }).join(',')));
  fs.writeFileSync(path.join(cfg.out, 'http-bench.csv'), csv.join('\n') + '\n');
  console.log(`\nwrote ${path.join(cfg.out, 'http-bench.{json,csv,md}')} in ${json.wallS.toFixed(1)} s`);
  process.exitCode = failures.length ? 1 : 0;
}

main().catch((e) => {
  console.error('run:', e);
  process.exit(1);
});
