"""Cancellation: task.cancel(), asyncio.timeout, wait_for stop the wait at
once; what the GPU still uses stays alive until it is done."""
from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from typing import Any, List

import pytest

import uvcuda
from conftest import Kernels, Runner


class Token:
    """Something an op refers to (weakly referenceable)."""


def test_task_cancel_stops_the_wait_at_once(run: Runner, dev: uvcuda.Device,
                                            gate: Any) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        gate(s)
        task = asyncio.ensure_future(uvcuda.ready(s))
        await asyncio.sleep(0)
        before = uvcuda.stats()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The C future was closed: its cancellation callback comes on the
        # loop's next passes, while the GPU is still held by the gate.
        while uvcuda.stats()['cancelled'] == before['cancelled']:
            await asyncio.sleep(0)
        return before, uvcuda.stats()
    before, after = run(main)
    assert before['pending'] == 1 and after['pending'] == 0
    assert after['awaits_cancelled'] == 1 and after['cancelled'] == 1
    assert after['resolved'] == 0 and after['rejected'] == 0


def test_asyncio_timeout_cancels(run: Runner, dev: uvcuda.Device,
                                 gate: Any) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        g = gate(s)
        fut = uvcuda.ready(s)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await fut
        assert fut.cancelled()
        g.open()
        return await uvcuda.ready(s, lambda: 'after')
    assert run(main) == 'after'


def test_wait_for_cancels(run: Runner, dev: uvcuda.Device, gate: Any) -> None:
    s = dev.create_stream()

    async def main() -> None:
        gate(s)
        fut = uvcuda.ready(s)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fut, 0)
        assert fut.cancelled()
        assert uvcuda.stats()['awaits_cancelled'] == 1
    run(main)


def test_op_objects_stay_alive_until_the_gpu_is_done(
        run: Runner, dev: uvcuda.Device, kernels: Kernels, gate: Any) -> None:
    s = dev.create_stream()
    mem = dev.alloc(256)
    dst = bytearray(256)
    refs: List[Any] = []

    async def main() -> None:
        g = gate(s)

        def make_op(token: Token) -> Any:
            def op() -> None:
                assert token is not None  # captured: the op keeps it
                s.enqueue_copy_from_device(dst, mem)
            return op
        token = Token()
        refs.append(weakref.ref(token))
        fut = uvcuda.ready(s, make_op(token))
        del token
        fut.cancel()
        await asyncio.sleep(0)
        gc.collect()
        # Cancelled, and the GPU has not run the copy yet: all held.
        assert refs[0]() is not None
        assert mem.pending == 1 and s.pending >= 1
        with pytest.raises(BufferError):
            dst.extend(b'x')  # exported to the pending copy: can't move
        g.open()
        # A later await on the stream resolves after the cancelled work:
        # by then the cancelled await has let go.
        await uvcuda.ready(s)
        gc.collect()
        assert refs[0]() is None
        assert mem.pending == 0
        dst.extend(b'x')
    run(main)
    assert s.pending == 0


def test_cancelled_copy_leaves_dst_alone(run: Runner, dev: uvcuda.Device,
                                         gate: Any) -> None:
    s = dev.create_stream()
    mem = dev.alloc(64)
    dst = bytearray(64)

    async def main() -> None:
        await s.memset(mem, 0x5A)
        g = gate(s)
        fut = s.copy_from_device(dst, mem)
        fut.cancel()
        g.open()
        await uvcuda.ready(s)
    run(main)
    assert dst == bytearray(64)


def test_buffer_refcount_returns(run: Runner, dev: uvcuda.Device,
                                 gate: Any) -> None:
    s = dev.create_stream()
    mem = dev.alloc(1 << 16)
    src = bytearray(1 << 16)
    base = sys.getrefcount(src)

    async def main() -> None:
        g = gate(s)
        fut = s.copy_to_device(mem, src)
        assert sys.getrefcount(src) > base  # exported to the copy
        fut.cancel()
        await asyncio.sleep(0)
        assert sys.getrefcount(src) > base
        g.open()
        await uvcuda.ready(s)
    run(main)
    assert sys.getrefcount(src) == base


def test_cancel_after_completion_is_a_no_op(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        fut = uvcuda.ready(s, lambda: 5)
        assert await fut == 5
        assert fut.cancel() is False
        return uvcuda.stats()
    st = run(main)
    assert st['awaits_cancelled'] == 0 and st['cancelled'] == 0


def test_stream_destroy_waits_for_cancelled_work(
        run: Runner, dev: uvcuda.Device, sim: Any, gate: Any) -> None:
    s = dev.create_stream()
    destroys: List[int] = []

    def count() -> int:
        return int(sim.lib.simcuda_call_count(b'cuStreamDestroy'))

    async def main() -> None:
        g = gate(s)
        fut = s.ready(lambda: None)
        fut.cancel()
        destroys.append(count())
        s.destroy()
        assert s.destroyed
        with pytest.raises(ValueError, match='destroyed'):
            uvcuda.ready(s)
        await asyncio.sleep(0)
        assert s.pending > 0  # the drain holds it: not destroyed in CUDA yet
        destroys.append(count())
        g.open()
        while s.pending:
            await asyncio.sleep(0)
        destroys.append(count())
    gc.collect()
    gc.disable()  # no other test's stream is collected meanwhile
    try:
        run(main)
    finally:
        gc.enable()
    assert s.pending == 0
    assert destroys[1] == destroys[0] and destroys[2] == destroys[0] + 1


def test_cancel_many_with_timeouts(run: Runner, dev: uvcuda.Device,
                                   kernels: Kernels) -> None:
    streams = [dev.create_stream() for _ in range(4)]

    async def one(i: int) -> str:
        s = streams[i % 4]
        try:
            async with asyncio.timeout(0 if i % 2 else None):
                await s.launch(kernels.sleep, 1, 1, [100_000])
            return 'done'
        except TimeoutError:
            return 'timeout'

    async def main() -> Any:
        out = await asyncio.gather(*(one(i) for i in range(200)))
        for s in streams:
            await uvcuda.ready(s)
        return out, uvcuda.stats()
    out, st = run(main)
    assert out.count('done') == 100 and out.count('timeout') == 100
    assert st['pending'] == 0 and st['requests_live'] == 0
    # A timeout may come after its work was done: then nothing is cancelled.
    assert st['awaits_cancelled'] <= 100
    assert st['resolved'] + st['awaits_cancelled'] == st['awaited'] == 204


def test_cancel_from_another_thread_is_refused(run: Runner, dev: uvcuda.Device,
                                               gate: Any) -> None:
    s = dev.create_stream()

    async def main() -> None:
        g = gate(s)
        fut = uvcuda.ready(s)
        errors: List[BaseException] = []

        def other() -> None:
            try:
                fut.cancel()
            except BaseException as e:  # noqa: B902
                errors.append(e)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
        g.open()
        # asyncio's future was marked cancelled by that thread; the C
        # future ran on: it completes, and nothing is leaked.
        while uvcuda.stats()['pending']:
            await asyncio.sleep(0)
    run(main)
