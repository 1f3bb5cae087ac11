"""await uvcuda.ready(stream, op) on both loops: results, ops, order."""
from __future__ import annotations

import asyncio
import struct
from typing import Any, List

import pytest

import uvcuda
from conftest import Kernels, Runner, needs_uvloop


def test_ready_resolves_none_without_op(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        return await uvcuda.ready(s)
    assert run(main) is None


def test_op_result_is_the_awaits_result(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()
    token = object()

    async def main() -> Any:
        return await uvcuda.ready(s, lambda: token)
    assert run(main) is token


def test_op_runs_inside_the_call_before_it_returns(run: Runner,
                                                   dev: uvcuda.Device) -> None:
    s = dev.create_stream()
    ran: List[str] = []

    async def main() -> None:
        fut = uvcuda.ready(s, lambda: ran.append('op'))
        ran.append('returned')
        await fut
    run(main)
    assert ran == ['op', 'returned']


def test_gpu_work_of_the_op_is_done_when_the_await_resolves(
        run: Runner, dev: uvcuda.Device, kernels: Kernels) -> None:
    s = dev.create_stream()
    n = 4096
    mem = dev.alloc(4 * n)

    async def main() -> bytearray:
        def op() -> None:
            s.enqueue_copy_to_device(mem, struct.pack(f'{n}I', *range(n)))
            s.enqueue_launch(kernels.sleep, 1, 1, [2_000_000])
            s.enqueue_launch(kernels.add, (n + 255) // 256, 256, [mem, n, 7])
        await uvcuda.ready(s, op)
        # the copy below reads what the kernel wrote: nothing is in flight
        return await s.copy_from_device(bytearray(4 * n), mem)
    out = run(main)
    assert struct.unpack(f'{n}I', out) == tuple(i + 7 for i in range(n))


def test_helpers_round_trip(run: Runner, dev: uvcuda.Device,
                            kernels: Kernels) -> None:
    s = dev.create_stream()
    a, b = dev.alloc(64), dev.alloc(64)
    checksum = dev.alloc(4)

    async def main() -> Any:
        await s.memset(a, 0xAB)
        await s.memset(a, 0x01, 8, offset=8)
        await s.copy_device(b, a)
        await s.launch(kernels.checksum, 1, 1, [b, 64, checksum])
        host = await s.copy_from_device(bytearray(64), b)
        part = await s.copy_from_device(bytearray(4), b, 6)
        ck = await s.copy_from_device(bytearray(4), checksum)
        return host, part, ck
    host, part, ck = run(main)
    assert host == b'\xab' * 8 + b'\x01' * 8 + b'\xab' * 48
    assert part == b'\xab\xab\x01\x01'
    fnv = 0x811C9DC5
    for byte in host:
        fnv = ((fnv ^ byte) * 0x01000193) & 0xFFFFFFFF
    assert struct.unpack('I', ck)[0] == fnv


def test_copy_from_device_resolves_to_dst(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()
    mem = dev.alloc(16)
    dst = bytearray(16)

    async def main() -> Any:
        await s.memset(mem, 3)
        return await s.copy_from_device(dst, mem)
    assert run(main) is dst
    assert dst == b'\x03' * 16


def test_awaits_on_one_stream_resolve_in_stream_order(
        run: Runner, dev: uvcuda.Device, kernels: Kernels, gate: Any) -> None:
    s = dev.create_stream()
    order: List[int] = []

    async def main() -> None:
        g = gate(s)  # everything below waits for it
        futs = []
        for i in range(50):
            f = uvcuda.ready(s, (lambda: s.enqueue_launch(kernels.sleep, 1, 1,
                                                          [1000])) if i % 3 else None)
            f.add_done_callback(lambda _, i=i: order.append(i))
            futs.append(f)
        assert not any(f.done() for f in futs)
        g.open()
        await asyncio.gather(*futs)
    run(main)
    assert order == list(range(50))


def test_many_streams_many_awaits(run: Runner, dev: uvcuda.Device,
                                  kernels: Kernels) -> None:
    streams = [dev.create_stream() for _ in range(8)]
    mems = [dev.alloc(4 * 256) for _ in streams]

    async def worker(i: int) -> bytes:
        s, m = streams[i], mems[i]
        await s.memset(m, 0)
        for _ in range(25):
            await s.launch(kernels.add, 1, 256, [m, 256, i + 1])
        return bytes(await s.copy_from_device(bytearray(4 * 256), m))

    async def main() -> List[bytes]:
        return list(await asyncio.gather(*(worker(i) for i in range(8))))
    outs = run(main)
    for i, out in enumerate(outs):
        assert set(struct.unpack('256I', out)) == {25 * (i + 1)}


def test_stream_like_objects(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    class Torchish:
        cuda_stream = s.handle
        device_index = 0

    class Cupyish:
        ptr = s.handle
        device_id = 0

    class CudaPythonish:  # cuda-python's CUstream is int()-able
        def __int__(self) -> int:
            return s.handle

    class Protocolish:
        def __cuda_stream__(self) -> Any:
            return (0, s.handle)

    class ProtocolProperty:  # the protocol's early form: a property
        @property
        def __cuda_stream__(self) -> Any:
            return (0, s.handle)

    async def main() -> None:
        for obj in (s, s.handle, Torchish(), Cupyish(), CudaPythonish(),
                    Protocolish(), ProtocolProperty()):
            assert await uvcuda.ready(obj, lambda: 1) == 1  # type: ignore[arg-type]
        assert await s.ready() is None
        assert s.__cuda_stream__() == (0, s.handle)
    run(main)


def test_default_stream_of_a_device(run: Runner, dev: uvcuda.Device) -> None:
    async def main() -> None:
        for handle in (0, 1, 2):
            assert await uvcuda.ready(handle, lambda: 'x', device=0) == 'x'
            assert await uvcuda.ready(handle, device=dev) is None

        class TorchDefault:  # torch.cuda.current_stream(): handle 0
            cuda_stream = 0
            device_index = 0
        assert await uvcuda.ready(TorchDefault()) is None  # type: ignore[arg-type]
    run(main)


def test_op_exception_is_the_awaits_after_its_work(
        run: Runner, dev: uvcuda.Device, kernels: Kernels, gate: Any) -> None:
    s = dev.create_stream()
    mem = dev.alloc(16)
    dst = bytearray(16)

    class Boom(Exception):
        pass

    async def main() -> None:
        await s.memset(mem, 9)
        g = gate(s)

        def op() -> None:
            s.enqueue_copy_from_device(dst, mem)
            raise Boom('after enqueuing a copy')
        fut = uvcuda.ready(s, op)
        # The copy is held behind the gate: the exception waits for it.
        for _ in range(20):
            await asyncio.sleep(0)
        assert not fut.done()
        g.open()
        with pytest.raises(Boom) as info:
            await fut
        assert info.value.__traceback__ is not None
        assert dst == b'\x09' * 16  # the copy ran before the exception came
    run(main)
    assert s.pending == 0 and mem.pending == 0


def test_op_that_returns_its_own_value_and_keeps_it(
        run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        results = await asyncio.gather(*(uvcuda.ready(s, lambda i=i: i * i)
                                         for i in range(100)))
        return results
    assert run(main) == [i * i for i in range(100)]


def test_stats_count_awaits(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        for _ in range(30):
            await uvcuda.ready(s)
        return uvcuda.stats()
    st = run(main)
    assert st['awaited'] == st['resolved'] == st['started'] == 30
    assert st['pending'] == 0 and st['requests_live'] == 0
    assert st['completed_spin'] + st['completed_reactor'] + \
        st['completed_hostfn'] + st['completed_poll'] == 30


def test_each_loop_runs_where_documented(loop_kind: str, run: Runner,
                                         dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        await uvcuda.ready(s)
        return uvcuda.stats()['embedded']
    # uvloop: on uvloop's own uv_loop_t; stock asyncio: embedded.
    assert run(main) is (loop_kind == 'asyncio')


def test_attach_options(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        uvcuda.attach(completion='poll', spin_budget_us=0, latency_histogram=True)
        with pytest.raises(RuntimeError, match='already'):
            uvcuda.attach()
        for _ in range(10):
            await uvcuda.ready(s)
        return uvcuda.stats()
    st = run(main)
    assert st['completion'] == 'poll' and st['spin_budget_ns'] == 0
    assert st['completed_poll'] + st['completed_spin'] == 10
    assert sum(st['latency_hist']) == 10


@needs_uvloop
def test_embedded_mode_on_uvloop(dev: uvcuda.Device) -> None:
    import uvloop
    loop = uvloop.new_event_loop()
    s = dev.create_stream()

    async def main() -> Any:
        uvcuda.attach(mode='embedded')
        for _ in range(10):
            await uvcuda.ready(s)
        return uvcuda.stats()['embedded']
    try:
        assert loop.run_until_complete(main()) is True
    finally:
        loop.close()


def test_copy_from_device_does_not_hold_the_loop(run: Runner, dev: uvcuda.Device,
                                                 gate: Any) -> None:
    """The driver runs a copy into pageable memory synchronously (the caller
    waits for the stream to get there; the simulated driver does the same):
    the copy goes through page-locked memory, and the loop runs on."""
    import threading
    s = dev.create_stream()
    mem = dev.alloc(64)
    dst = bytearray(64)
    opened_by: List[str] = []

    async def main() -> None:
        await s.memset(mem, 7)
        g = gate(s)
        released = threading.Event()

        def guard() -> None:  # only against a hang: not a time bound
            if not released.wait(60):
                opened_by.append('guard')
                g.open()
        t = threading.Thread(target=guard)
        t.start()
        try:
            fut = s.copy_from_device(dst, mem)
            for _ in range(10):
                await asyncio.sleep(0)
            assert not fut.done()
            opened_by.append('loop')
            g.open()
        finally:
            released.set()
            t.join()
        assert await fut is dst
    run(main)
    assert opened_by == ['loop']
    assert dst == b'\x07' * 64


def test_device_work_enqueued_outside_an_op(run: Runner, dev: uvcuda.Device,
                                            kernels: Kernels, gate: Any) -> None:
    """Launches, memsets and device copies may be enqueued anywhere (no host
    memory to keep alive); an await on the stream covers them."""
    s = dev.create_stream()
    m = dev.alloc(4 * 64)

    async def main() -> bytearray:
        g = gate(s)
        s.enqueue_memset(m, 0)
        s.enqueue_launch(kernels.add, 1, 64, [m, 64, 2])
        assert s.query() is False  # held by the gate
        g.open()
        await uvcuda.ready(s)
        assert s.query() is True
        s.enqueue_launch(kernels.add, 1, 64, [m, 64, 1])
        s.synchronize()  # blocks this thread: a baseline, not for loops
        return await s.copy_from_device(bytearray(4 * 64), m)
    assert run(main) == struct.pack('64I', *([3] * 64))


def test_op_raising_stopiteration(run: Runner, dev: uvcuda.Device) -> None:
    """asyncio refuses StopIteration as a future's exception (it would end
    the awaiting generator): it comes as a RuntimeError from it, as a
    Task's does, and the await still settles."""
    s = dev.create_stream()

    def op() -> None:
        raise StopIteration('inside the op')

    async def main() -> None:
        with pytest.raises(RuntimeError) as info:
            await uvcuda.ready(s, op)
        assert isinstance(info.value.__cause__, StopIteration)
        assert uvcuda.stats()['pending'] == 0
    run(main)
