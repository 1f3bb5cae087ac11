"""Nothing leaks: many awaits, cancellations and loops leave the counts,
Python objects, memory and file descriptors where they were."""
from __future__ import annotations

import asyncio
import gc
import os
import tracemalloc
from typing import Any, Callable, Dict, Tuple

import uvcuda
from conftest import Kernels, Runner, new_loop


def fds() -> int:
    return len(os.listdir('/proc/self/fd'))


def measure(fn: Callable[[], None]) -> Tuple[int, int]:
    """Heap bytes and gc-tracked objects that fn() left behind: the less of
    two runs in a row. A leak leaves its share behind in every run; a
    one-off growth of the interpreter's own (seen once in a CI run: 968 KB
    over 50 loops, never again in 29 runs of the suite) shows in one."""
    grown, objects = [], []
    for _ in range(2):
        gc.collect()
        before_objects = len(gc.get_objects())
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            fn()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        grown.append(after - before)
        objects.append(len(gc.get_objects()) - before_objects)
    return min(grown), min(objects)


def test_many_awaits_leave_nothing(run: Runner, dev: uvcuda.Device,
                                   kernels: Kernels) -> None:
    s = dev.create_stream()
    mem = dev.alloc(4096)
    host = bytearray(4096)
    stats: Dict[str, Any] = {}

    async def burst(n: int) -> None:
        for i in range(n):
            if i % 4 == 0:
                await uvcuda.ready(s)
            elif i % 4 == 1:
                await uvcuda.ready(s, lambda: s.enqueue_launch(kernels.add, 1, 32,
                                                               [mem, 32, 1]))
            elif i % 4 == 2:
                await s.copy_to_device(mem, host)
            else:
                await s.copy_from_device(host, mem)
        await asyncio.gather(*(uvcuda.ready(s) for _ in range(200)))
        for _ in range(3):  # the loop's last handles let go of the gather
            await asyncio.sleep(0)
        stats.update(uvcuda.stats())

    loop_bytes: Dict[str, Any] = {}

    async def measured() -> None:
        await burst(2000)  # warm: the free list and the pools fill
        await burst(8000)
        gc.collect()
        loop_bytes['objects'] = len(gc.get_objects())
        tracemalloc.start()
        loop_bytes['before'] = tracemalloc.get_traced_memory()[0]
        await burst(8000)
        gc.collect()
        loop_bytes['after'] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        loop_bytes['objects_after'] = len(gc.get_objects())
    run(measured)
    grown = loop_bytes['after'] - loop_bytes['before']
    assert grown < 32 * 1024, grown  # 8,200 awaits: under 4 bytes each
    assert loop_bytes['objects_after'] - loop_bytes['objects'] < 100
    assert stats['pending'] == 0 and stats['requests_live'] == 0
    assert stats['requests_idle'] <= 256 and stats['timelines'] == 0
    assert stats['awaited'] == stats['resolved'] == stats['started']
    assert s.pending == 0 and mem.pending == 0


def test_cancellations_leave_nothing(run: Runner, dev: uvcuda.Device,
                                     kernels: Kernels) -> None:
    s = dev.create_stream()

    async def burst(n: int) -> Dict[str, Any]:
        for i in range(n):
            fut = uvcuda.ready(s, lambda: s.enqueue_launch(kernels.sleep, 1, 1,
                                                           [10_000]))
            if i % 2:
                fut.cancel()
            else:
                await fut
        await uvcuda.ready(s)
        while uvcuda.stats()['requests_live']:
            await asyncio.sleep(0)
        return uvcuda.stats()

    async def main() -> Tuple[Any, int, int]:
        await burst(500)
        gc.collect()
        objects = len(gc.get_objects())
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        st = await burst(2000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return st, grown, len(gc.get_objects()) - objects
    st, grown, objects = run(main)
    assert grown < 64 * 1024, grown
    assert objects < 100
    assert st['pending'] == 0 and st['awaits_cancelled'] == 1250
    assert st['cancelled'] <= 1250  # the C side saw each one still pending
    assert s.pending == 0


def test_loops_come_and_go(loop_kind: str, dev: uvcuda.Device,
                           sim: Any) -> None:
    s = dev.create_stream()

    def one_loop() -> None:
        loop = new_loop(loop_kind)

        async def main() -> None:
            for _ in range(10):
                await uvcuda.ready(s, lambda: None)
            uvcuda.ready(s)  # left pending: the close cancels it
        loop.run_until_complete(main())
        loop.close()
    for _ in range(5):
        one_loop()  # warm
    open_fds = fds()
    streams = sim.lib.simcuda_live_streams()
    grown, objects = measure(lambda: [one_loop() for _ in range(50)] and None)
    assert fds() == open_fds
    assert sim.lib.simcuda_live_streams() <= streams
    assert grown < 64 * 1024, grown
    assert objects < 100
    assert s.pending == 0
