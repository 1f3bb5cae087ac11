"""Await latency on each loop uvcuda runs on: the time from calling
uvcuda.ready(stream, op) to the awaiting coroutine running again, one await
at a time.

    python3 latency.py [--backend ptx|torch] [--n 2000] [--out DIR]

Loops: stock asyncio (uvcuda on a private libuv loop, embedded through
add_reader: the "embedded" mode), uvloop (uvcuda on uvloop's own
uv_loop_t: "uvloop"), and uvloop with mode='embedded' (the same loop, the
other mechanism), each where available. Work: an await on an idle stream
(no op), and kernels of --kernel-us (uvcuda_sleep_ns on the ptx backend,
torch.cuda._sleep on torch).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import gpuwork
import uvcuda

SIM_NOTE = 'simulation, not a GPU measurement'


def loops() -> List[Tuple[str, Callable[[], asyncio.AbstractEventLoop], Optional[str]]]:
    out: List[Tuple[str, Callable[[], asyncio.AbstractEventLoop], Optional[str]]] = [
        ('asyncio (embedded)', asyncio.new_event_loop, None)]
    try:
        import uvloop
        out.append(('uvloop (direct)', uvloop.new_event_loop, None))
        out.append(('uvloop (embedded)', uvloop.new_event_loop, 'embedded'))
    except ImportError:
        pass
    return out


def pct(v: List[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


async def measure(work: Any, kernel_us: float, n: int, mode: Optional[str]) -> Dict[str, Any]:
    uvcuda.attach(mode=mode)
    out: Dict[str, Any] = {}
    cases: List[Tuple[str, Optional[Callable[[], Any]]]] = [('idle stream', None)]
    if work.name == 'ptx':
        s = work.streams[0]

        def ptx_op(us: float) -> Callable[[], Any]:
            def op() -> None:
                s.enqueue_launch(work.kernel, 1, 1, [int(us * 1000)])
            return op
        cases += [(f'kernel {k:g} µs', ptx_op(k)) for k in (10, kernel_us)]
        stream: Any = s
    else:
        torch = work.torch
        s = work.streams[0]
        stream = s

        def torch_op(cycles: int) -> Callable[[], Any]:
            def op() -> None:
                with torch.cuda.stream(s):
                    torch.cuda._sleep(cycles)
            return op
        small = max(1000, work.cycles // int(max(1, kernel_us / 10)))
        cases += [('kernel ~10 µs', torch_op(small)),
                  (f'kernel {kernel_us:g} µs', torch_op(work.cycles))]
    for name, op in cases:
        for _ in range(n // 10):  # warm-up
            await uvcuda.ready(stream, op)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await uvcuda.ready(stream, op)
            samples.append((time.perf_counter() - t0) * 1e6)
        out[name] = {'p50_us': pct(samples, 0.5), 'p99_us': pct(samples, 0.99),
                     'min_us': min(samples)}
    st = uvcuda.stats()
    out['stats'] = {k: st[k] for k in ('completed_spin', 'completed_reactor',
                                       'completed_hostfn', 'reactor_wakeups')}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--backend', choices=['ptx', 'torch'], default='ptx')
    ap.add_argument('--kernel-us', type=float, default=1000.0)
    ap.add_argument('--n', type=int, default=2000)
    ap.add_argument('--out', default=os.environ.get('OUT'))
    args = ap.parse_args()
    info = uvcuda.driver_info()
    work = gpuwork.make_work(args.backend, args.kernel_us, 1)
    lines = [SIM_NOTE if info['simulated'] else
             f'GPU: {uvcuda.Device(0).name}, driver {info["driver_version"]}',
             f'await latency, µs (p50 / p99 / min), {args.n} awaits one at a time, '
             f'python {sys.version.split()[0]}, backend {args.backend}', '']
    results: Dict[str, Any] = {}
    cases: List[str] = []
    for name, new_loop, mode in loops():
        loop = new_loop()
        try:
            results[name] = loop.run_until_complete(
                measure(work, args.kernel_us, args.n, mode))
        finally:
            loop.close()
        cases = [c for c in results[name] if c != 'stats']
    lines.append('| loop | ' + ' | '.join(cases) + ' | completed spin / reactor |')
    lines.append('|---' * (len(cases) + 2) + '|')
    for name, r in results.items():
        cells = [f'{r[c]["p50_us"]:.1f} / {r[c]["p99_us"]:.1f} / {r[c]["min_us"]:.1f}'
                 for c in cases]
        lines.append(f'| {name} | ' + ' | '.join(cells) +
                     f' | {r["stats"]["completed_spin"]} / '
                     f'{r["stats"]["completed_reactor"]} |')
    if info['simulated']:
        lines += ['', f'({SIM_NOTE})']
    report = '\n'.join(lines)
    print(report)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f'python-latency-{args.backend}.md').write_text(report + '\n')
        (out / f'python-latency-{args.backend}.json').write_text(
            json.dumps(results, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
