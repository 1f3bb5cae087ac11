"""The GPU work of one benchmark request, and the three ways to wait for it.

Backends:
  ptx    uvcuda's own test kernel uvcuda_sleep_ns (one thread, busy for
         the given time) on uvcuda.Streams: runs on the simulated driver
         too (simulation, not a GPU measurement).
  torch  torch.cuda._sleep (a spinning kernel, calibrated to the given time
         with CUDA events) on torch.cuda.Streams.

Waits (one per variant):
  uvcuda    await uvcuda.ready(stream)
  executor  await loop.run_in_executor(None, stream.synchronize)
  poll      event.query() (torch) / stream.query() (ptx) between
            asyncio.sleep(0)
"""
from __future__ import annotations

import asyncio
import os
import pathlib
from typing import Any, List, Optional

import uvcuda


def kernels_ptx() -> str:
    env = os.environ.get('UVCUDA_TEST_PTX')
    if env:
        return pathlib.Path(env).read_text()
    here = pathlib.Path(__file__).resolve()
    root = here.parents[3]
    for path in (root / 'support/kernels.ptx', root / 'test/common/kernels.ptx',
                 here.parents[1] / 'vendor/uvcuda/kernels.ptx'):  # an sdist's
        if path.exists():
            return path.read_text()
    raise FileNotFoundError('kernels.ptx (set UVCUDA_TEST_PTX)')


class PtxWork:
    name = 'ptx'

    def __init__(self, kernel_us: float, nstreams: int) -> None:
        dev = uvcuda.Device(0)
        self.streams = [dev.create_stream() for _ in range(nstreams)]
        self.kernel = dev.load_module(kernels_ptx()).function(
            'uvcuda_sleep_ns', ['u64'])
        self.ns = int(kernel_us * 1000)
        self.next = 0

    def enqueue(self) -> Any:
        s = self.streams[self.next % len(self.streams)]
        self.next += 1
        s.enqueue_launch(self.kernel, 1, 1, [self.ns])
        return s

    @staticmethod
    def stream_of(token: Any) -> Any:
        return token

    @staticmethod
    def synchronize(token: Any) -> None:
        token.synchronize()

    @staticmethod
    def query(token: Any) -> bool:
        return bool(token.query())


class TorchWork:
    name = 'torch'

    def __init__(self, kernel_us: float, nstreams: int) -> None:
        import torch  # type: ignore[import]
        self.torch = torch
        self.streams = [torch.cuda.Stream() for _ in range(nstreams)]
        self.cycles = self.calibrate(kernel_us)
        self.next = 0

    def calibrate(self, kernel_us: float) -> int:
        torch = self.torch
        cycles = 1_000_000
        for _ in range(6):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
            cycles = max(1000, int(cycles * (kernel_us / 1000.0) / max(ms, 1e-3)))
        return cycles

    def enqueue(self) -> Any:
        torch = self.torch
        s = self.streams[self.next % len(self.streams)]
        self.next += 1
        with torch.cuda.stream(s):
            torch.cuda._sleep(self.cycles)
        ev = torch.cuda.Event()
        ev.record(s)
        return (s, ev)

    @staticmethod
    def stream_of(token: Any) -> Any:
        return token[0]

    @staticmethod
    def synchronize(token: Any) -> None:
        token[0].synchronize()

    @staticmethod
    def query(token: Any) -> bool:
        return bool(token[1].query())


def make_work(backend: str, kernel_us: float, nstreams: int) -> Any:
    if backend == 'torch':
        return TorchWork(kernel_us, nstreams)
    return PtxWork(kernel_us, nstreams)


async def wait(variant: str, work: Any, token: Any,
               loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
    if variant == 'uvcuda':
        await uvcuda.ready(work.stream_of(token))
    elif variant == 'executor':
        loop = loop or asyncio.get_running_loop()
        await loop.run_in_executor(None, work.synchronize, token)
    elif variant == 'poll':
        while not work.query(token):
            await asyncio.sleep(0)
    else:
        raise ValueError(variant)


VARIANTS: List[str] = ['uvcuda', 'executor', 'poll']
