"""An asyncio HTTP/1.1 server with one GPU round trip per request on /gpu
and none on /plain (keep-alive, one request at a time per connection).

    python3 server.py --variant uvcuda|executor|poll --backend ptx|torch \\
        [--kernel-us 1000] [--streams 16] [--loop asyncio|uvloop]

Prints "READY <port>" once listening. GET /stats returns JSON: requests
served so far per route, the process's CPU seconds (getrusage: every
thread, uvcuda's reactor and the executor's included) and the event-loop
lag seen since the last /stats (a ticker: asyncio.sleep(0.001), how late
it woke, in µs). Ends on SIGTERM or GET /quit.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import sys
import time
from typing import Any, Dict, List, Optional

import gpuwork

OK = b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
ERR = b'HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nerr'


class State:
    def __init__(self) -> None:
        self.counts: Dict[str, int] = {'gpu': 0, 'plain': 0, 'errors': 0}
        self.lag: List[float] = []
        self.stop: Optional[asyncio.Future[None]] = None


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Http(asyncio.Protocol):
    def __init__(self, state: State, variant: str, work: Any) -> None:
        self.state, self.variant, self.work = state, variant, work
        self.buf = b''
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b'\r\n\r\n')
            if end < 0:
                return
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            path = head.split(b' ', 2)[1] if head.count(b' ') >= 2 else b''
            if path == b'/plain':
                self.state.counts['plain'] += 1
                self.transport.write(OK)
            elif path == b'/gpu':
                asyncio.ensure_future(self.gpu())
            elif path == b'/stats':
                self.stats()
            elif path == b'/quit':
                self.transport.write(OK)
                if self.state.stop is not None and not self.state.stop.done():
                    self.state.stop.set_result(None)
            else:
                self.transport.write(ERR)

    async def gpu(self) -> None:
        try:
            token = self.work.enqueue()
            await gpuwork.wait(self.variant, self.work, token)
            self.state.counts['gpu'] += 1
            self.transport.write(OK)
        except Exception as e:  # noqa: BLE001 - counted and reported
            self.state.counts['errors'] += 1
            print('error:', repr(e), file=sys.stderr)
            self.transport.write(ERR)

    def stats(self) -> None:
        lag, self.state.lag = self.state.lag, []
        body = json.dumps({'counts': self.state.counts, 'cpu': cpu_seconds(),
                           'lag_us': lag}).encode()
        self.transport.write(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n'
                             % len(body) + body)


async def ticker(state: State) -> None:
    """Event-loop lag: how late a 1 ms call_later wakes (µs)."""
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        state.lag.append((time.perf_counter() - t0 - 0.001) * 1e6)


async def main(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    work = gpuwork.make_work(args.backend, args.kernel_us, args.streams)
    state = State()
    state.stop = loop.create_future()
    if args.variant == 'uvcuda':
        import uvcuda
        uvcuda.attach()  # made before the first request, not during it
    server = await loop.create_server(lambda: Http(state, args.variant, work),
                                      '127.0.0.1', args.port, backlog=1024)
    stop = state.stop

    def on_term() -> None:
        if not stop.done():
            stop.set_result(None)
    loop.add_signal_handler(signal.SIGTERM, on_term)
    tick = asyncio.ensure_future(ticker(state))
    port = server.sockets[0].getsockname()[1]
    print(f'READY {port}', flush=True)
    await stop
    tick.cancel()
    server.close()
    await server.wait_closed()


if __name__ == '__main__':
    p = argparse.ArgumentParser()
    p.add_argument('--variant', choices=gpuwork.VARIANTS, required=True)
    p.add_argument('--backend', choices=['ptx', 'torch'], default='ptx')
    p.add_argument('--kernel-us', type=float, default=1000.0)
    p.add_argument('--streams', type=int, default=16)
    p.add_argument('--port', type=int, default=0)
    p.add_argument('--loop', choices=['asyncio', 'uvloop'], default='asyncio')
    a = p.parse_args()
    if a.loop == 'uvloop':
        import uvloop
        uvloop.install()
    asyncio.run(main(a))
