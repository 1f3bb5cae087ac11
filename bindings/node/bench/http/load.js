#!/usr/bin/env node
'use strict';
// One autocannon instance in its own process (run.js starts two at once
// for the mixed phase, so neither load generator shares a JS thread with
// the other), printing one JSON line with its result.
//
//   node load.js --url http://127.0.0.1:PORT/gpu --connections 32
//                --duration 10 [--rate R] [--timeout 10]
//
// --rate R: at most R requests/s over all connections (autocannon's
// overallRate: each connection sends its share of a second back to back,
// then waits for the next second), else as fast as the connections go.
// Latency: autocannon's own histogram has 1 ms resolution (integers of
// ms), too coarse for a route that answers in 100 µs; every 2xx response's
// time (autocannon's 'response' event, from process.hrtime) also goes into a
// µs histogram here, and its percentiles are the ones run.js reports.

const autocannon = require('autocannon');
const { createHistogram } = require('node:perf_hooks');
const { parseArgs, summarize } = require('./common');

const args = parseArgs(process.argv.slice(2));
const url = args.get('url', null);
if (!url || !/^http:\/\/127\.0\.0\.1:\d+\//.test(url)) {
  console.error('load: --url http://127.0.0.1:PORT/... (loopback only)');
  process.exit(2);
}
const rate = args.num('rate', 0);
const opts = {
  url,
  connections: Math.max(1, Math.floor(args.num('connections', 10))),
  duration: args.num('duration', 10),
  timeout: args.num('timeout', 10),
};
if (rate > 0) opts.overallRate = rate;

const us = createHistogram();
const inst = autocannon(opts, (err, r) => {
  if (err) {
    console.error('load:', err);
    process.exit(1);
  }
  const ok = r['2xx'];
  const out = {
    url,
    connections: opts.connections,
    rate: rate || null,
    durationS: r.duration,
    ok,
    rps: r.duration > 0 ? ok / r.duration : null,
    rpsAutocannon: r.requests.average,
    sent: r.requests.sent,
    errors: r.errors,
    timeouts: r.timeouts,
    non2xx: r.non2xx,
    resets: r.resets,
    latencyUs: summarize(us),
    latencyMsAutocannon: { p50: r.latency.p50, p99: r.latency.p99, max: r.latency.max },
  };
  console.log(JSON.stringify(out));
});
inst.on('response', (client, statusCode, resBytes, responseTime) => {
  if (statusCode >= 200 && statusCode < 300) us.record(Math.max(1, Math.round(responseTime * 1000)));
});
