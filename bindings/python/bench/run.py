"""The Python HTTP benchmark: uvcuda vs run_in_executor(synchronize) vs
polling, each in a server process (server.py) under load from separate
processes (load.py).

    python3 run.py [--backend ptx|torch] [--quick] [--out DIR]

For each variant: /gpu under closed-loop load (--gpu-procs processes of
--gpu-connections connections; by default 128 requests in flight over 64
streams, so that neither the GPU nor the load generator is what limits a
variant) while /plain gets --plain-rate requests/s (open loop). Before
them, /plain alone at the same rate (its p99 alone).
Reports per variant: GPU req/s, p50/p99 of both routes, server CPU per
request (getrusage of the server process, every thread), event-loop lag
(a 1 ms ticker: how late it woke; p50/p99/max), errors. The default run
takes about 75 s; --quick about 20 s (for the simulated driver: it only
proves the benchmark works, and says so).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request
from typing import Any, Dict, List, Optional

import load

HERE = pathlib.Path(__file__).resolve().parent
SIM_NOTE = 'simulation, not a GPU measurement'


def start_server(args: argparse.Namespace, variant: str) -> Any:
    cmd = [sys.executable, str(HERE / 'server.py'), '--variant', variant,
           '--backend', args.backend, '--kernel-us', str(args.kernel_us),
           '--streams', str(args.streams), '--loop', args.loop]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith('READY '):
        proc.kill()
        raise RuntimeError(f'server {variant} did not start: {line!r}')
    proc.port = int(line.split()[1])  # type: ignore[attr-defined]
    return proc


def stop_server(proc: Any) -> None:
    try:
        urllib.request.urlopen(f'http://127.0.0.1:{proc.port}/quit', timeout=10).read()
    except OSError:
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_stats(proc: Any) -> Dict[str, Any]:
    with urllib.request.urlopen(f'http://127.0.0.1:{proc.port}/stats',
                                timeout=30) as r:
        return dict(json.loads(r.read()))


def start_load(args: argparse.Namespace, port: int, route: str, connections: int,
               rate: float) -> Any:
    cmd = [sys.executable, str(HERE / 'load.py'), '--port', str(port),
           '--route', route, '--connections', str(connections),
           '--warmup', str(args.warmup), '--duration', str(args.duration),
           '--rate', str(rate)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def collect(procs: List[Any]) -> Dict[str, Any]:
    hist: Dict[int, int] = {}
    requests = errors = 0
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f'load generator failed ({p.returncode})')
        r = json.loads(out.strip().splitlines()[-1])
        requests += r['requests']
        errors += r['errors']
        for k, v in r['hist'].items():
            hist[int(k)] = hist.get(int(k), 0) + v
    return {'requests': requests, 'errors': errors, 'hist': hist}


def pct(values: List[float], q: float) -> float:
    if not values:
        return float('nan')
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def phase(args: argparse.Namespace, proc: Any, gpu: bool) -> Dict[str, Any]:
    """One measured window: /plain at its rate, and /gpu under load if gpu."""
    loads = []
    if gpu:
        loads = [start_load(args, proc.port, '/gpu', args.gpu_connections, 0)
                 for _ in range(args.gpu_procs)]
    plain = start_load(args, proc.port, '/plain', args.plain_connections,
                       args.plain_rate)
    time.sleep(args.warmup)
    before = server_stats(proc)
    time.sleep(args.duration)
    after = server_stats(proc)
    g = collect(loads) if gpu else {'requests': 0, 'errors': 0, 'hist': {}}
    p = collect([plain])
    served = (after['counts']['gpu'] - before['counts']['gpu'] +
              after['counts']['plain'] - before['counts']['plain'])
    lag = after['lag_us']
    return {
        'gpu_rps': g['requests'] / args.duration,
        'gpu_p50_us': load.percentile(g['hist'], 0.50),
        'gpu_p99_us': load.percentile(g['hist'], 0.99),
        'plain_rps': p['requests'] / args.duration,
        'plain_p50_us': load.percentile(p['hist'], 0.50),
        'plain_p99_us': load.percentile(p['hist'], 0.99),
        'cpu_us_per_request': (after['cpu'] - before['cpu']) * 1e6 / max(served, 1),
        'lag_p50_us': pct(lag, 0.50), 'lag_p99_us': pct(lag, 0.99),
        'lag_max_us': max(lag) if lag else float('nan'),
        'errors': g['errors'] + p['errors'] + after['counts']['errors'],
    }


def fmt(v: float) -> str:
    return '-' if v != v else (f'{v:.0f}' if abs(v) >= 10 else f'{v:.1f}')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--backend', choices=['ptx', 'torch'], default='ptx')
    ap.add_argument('--variants', default='uvcuda,executor,poll')
    ap.add_argument('--loop', choices=['asyncio', 'uvloop'], default='asyncio')
    ap.add_argument('--kernel-us', type=float, default=1000.0)
    ap.add_argument('--streams', type=int, default=64)
    ap.add_argument('--gpu-procs', type=int, default=2)
    ap.add_argument('--gpu-connections', type=int, default=64)
    ap.add_argument('--plain-connections', type=int, default=4)
    ap.add_argument('--plain-rate', type=float, default=500.0)
    ap.add_argument('--warmup', type=float, default=3.0)
    ap.add_argument('--duration', type=float, default=10.0)
    ap.add_argument('--quick', action='store_true',
                    help='a short run with small load (for the simulated driver)')
    ap.add_argument('--out', default=os.environ.get('OUT'))
    args = ap.parse_args()
    if args.quick:
        args.kernel_us, args.streams = 200.0, 4
        args.gpu_procs, args.gpu_connections = 1, 8
        args.plain_connections, args.plain_rate = 2, 100.0
        args.warmup, args.duration = 0.5, 2.0

    import uvcuda
    info = uvcuda.driver_info()
    header = []
    if info['simulated']:
        header.append(f'**{SIM_NOTE}**: the uvcuda simulated driver '
                      f'({info["path"]}); no GPU behind these numbers.')
        print(SIM_NOTE, flush=True)
    else:
        header.append(f'GPU: {uvcuda.Device(0).name}, driver '
                      f'{info["driver_version"]}')
    header.append(f'backend {args.backend}, kernel {args.kernel_us:g} µs, '
                  f'{args.streams} streams, loop {args.loop}; /gpu: '
                  f'{args.gpu_procs}x{args.gpu_connections} closed-loop '
                  f'connections; /plain: {args.plain_rate:g} req/s over '
                  f'{args.plain_connections} connections; {args.warmup:g} s '
                  f'warm-up, {args.duration:g} s measured; executor: asyncio\'s '
                  f'default, {min(32, (os.cpu_count() or 1) + 4)} threads; '
                  f'{os.cpu_count()} CPUs; python {sys.version.split()[0]}, '
                  f'uvcuda {uvcuda.__version__}')

    results: Dict[str, Any] = {'header': header, 'variants': {}}
    alone: Optional[Dict[str, Any]] = None
    for variant in args.variants.split(','):
        proc = start_server(args, variant)
        try:
            if alone is None:
                alone = phase(args, proc, gpu=False)
                results['plain_alone'] = alone
            results['variants'][variant] = phase(args, proc, gpu=True)
        finally:
            stop_server(proc)
        print(f'{variant}: done', flush=True)

    assert alone is not None
    lines = header[:] + [
        '',
        f'/plain alone: {fmt(alone["plain_rps"])} req/s, p50 '
        f'{fmt(alone["plain_p50_us"])} µs, p99 {fmt(alone["plain_p99_us"])} µs',
        '',
        '| variant | GPU req/s | /gpu p50 µs | /gpu p99 µs | /plain p50 µs | '
        '/plain p99 µs | /plain p99 vs alone | CPU µs/request | loop lag p50 / '
        'p99 / max µs | errors |',
        '|---|---|---|---|---|---|---|---|---|---|']
    for variant, r in results['variants'].items():
        ratio = r['plain_p99_us'] / alone['plain_p99_us']
        lines.append(
            f'| {variant} | {fmt(r["gpu_rps"])} | {fmt(r["gpu_p50_us"])} | '
            f'{fmt(r["gpu_p99_us"])} | {fmt(r["plain_p50_us"])} | '
            f'{fmt(r["plain_p99_us"])} | {ratio:.2f}x | '
            f'{fmt(r["cpu_us_per_request"])} | {fmt(r["lag_p50_us"])} / '
            f'{fmt(r["lag_p99_us"])} / {fmt(r["lag_max_us"])} | {r["errors"]} |')
    v = results['variants']
    if 'uvcuda' in v and 'executor' in v and v['executor']['gpu_rps'] > 0:
        lines += ['', f'uvcuda / executor GPU req/s: '
                  f'{v["uvcuda"]["gpu_rps"] / v["executor"]["gpu_rps"]:.2f}x '
                  f'(target >= 2); uvcuda /plain p99 under GPU load: '
                  f'{v["uvcuda"]["plain_p99_us"] / alone["plain_p99_us"]:.2f}x '
                  f'of alone (target <= 1.5)']
    if info['simulated']:
        lines += ['', f'({SIM_NOTE})']
    report = '\n'.join(lines)
    print(report)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        name = f'python-bench-{args.backend}-{args.loop}'
        (out / f'{name}.md').write_text(report + '\n')
        (out / f'{name}.json').write_text(json.dumps(results, indent=1) + '\n')
    errors = sum(r['errors'] for r in results['variants'].values())
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
