"""Load generator (a process of its own): keep-alive HTTP/1.1 connections,
one request at a time each, for a route.

    python3 load.py --port P --route /gpu --connections 32 \\
        --warmup 3 --duration 10 [--rate 0]

--rate 0: closed loop (each connection sends its next request when the
last one's response came); --rate R: R requests per second over all
connections (open loop, as long as the server keeps up). Prints one JSON
line: requests and errors in the measured window, and a latency histogram
(µs, buckets 2^(i/8)) that run.py merges across processes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from typing import Dict, List

BUCKETS_PER_OCTAVE = 8


def bucket(us: float) -> int:
    return max(0, int(math.log2(max(us, 1.0)) * BUCKETS_PER_OCTAVE))


def bucket_value(i: int) -> float:
    """The upper edge of bucket i (µs)."""
    return float(2.0 ** ((i + 1) / BUCKETS_PER_OCTAVE))


def percentile(hist: Dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if total == 0:
        return float('nan')
    rank = q * total
    seen = 0
    for i in sorted(hist):
        seen += hist[i]
        if seen >= rank:
            return bucket_value(i)
    return bucket_value(max(hist))


async def connection(args: argparse.Namespace, start: float, hist: Dict[int, int],
                     counts: Dict[str, int], interval: float, offset: float) -> None:
    reader, writer = await asyncio.open_connection('127.0.0.1', args.port)
    request = f'GET {args.route} HTTP/1.1\r\nHost: x\r\n\r\n'.encode()
    measure_from = start + args.warmup
    end = measure_from + args.duration
    next_send = start + offset
    try:
        while True:
            now = time.perf_counter()
            if now >= end:
                return
            if interval > 0:
                if next_send > now:
                    await asyncio.sleep(next_send - now)
                next_send += interval
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b'\r\n\r\n')
            length = int(head.split(b'Content-Length: ', 1)[1].split(b'\r\n', 1)[0])
            await reader.readexactly(length)
            t1 = time.perf_counter()
            if t0 >= measure_from and t1 <= end:
                if head.startswith(b'HTTP/1.1 200'):
                    counts['requests'] += 1
                    b = bucket((t1 - t0) * 1e6)
                    hist[b] = hist.get(b, 0) + 1
                else:
                    counts['errors'] += 1
    except (ConnectionError, asyncio.IncompleteReadError):
        counts['errors'] += 1
    finally:
        writer.close()


async def main(args: argparse.Namespace) -> None:
    hist: Dict[int, int] = {}
    counts = {'requests': 0, 'errors': 0}
    interval = args.connections / args.rate if args.rate > 0 else 0.0
    start = time.perf_counter()
    tasks: List['asyncio.Task[None]'] = [
        asyncio.ensure_future(connection(args, start, hist, counts, interval,
                                         interval * i / args.connections))
        for i in range(args.connections)]
    await asyncio.gather(*tasks)
    print(json.dumps({'route': args.route, 'duration': args.duration,
                      **counts, 'hist': hist}), flush=True)


if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--route', default='/gpu')
    p.add_argument('--connections', type=int, default=32)
    p.add_argument('--warmup', type=float, default=3.0)
    p.add_argument('--duration', type=float, default=10.0)
    p.add_argument('--rate', type=float, default=0.0)
    asyncio.run(main(p.parse_args()))
