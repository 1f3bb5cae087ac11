"""Loops and threads: one uvcuda context per loop, worker threads with
loops of their own, and the shutdown order."""
from __future__ import annotations

import asyncio
import gc
import pathlib
import struct
import threading
import weakref
from typing import Any, Dict, List

import pytest

import uvcuda
from conftest import HAVE_UVLOOP, Kernels, Runner, needs_uvloop, new_loop, run_script


async def settle(stream: Any) -> None:
    # ready() needs a running loop: loop.run_until_complete(ready(s)) would
    # call it before the loop runs.
    await uvcuda.ready(stream)


def test_worker_threads_with_their_own_loops(dev: uvcuda.Device,
                                             kernels: Kernels) -> None:
    results: Dict[int, Any] = {}

    def worker(i: int) -> None:
        loop = new_loop('uvloop' if i % 2 and HAVE_UVLOOP else 'asyncio')
        s = dev.create_stream()
        m = dev.alloc(4 * 128)

        async def main() -> Any:
            await s.memset(m, 0)
            for _ in range(50):
                await uvcuda.ready(s, lambda: s.enqueue_launch(
                    kernels.add, 1, 128, [m, 128, i]))
            out = await s.copy_from_device(bytearray(4 * 128), m)
            return set(struct.unpack('128I', out)), uvcuda.stats()
        try:
            results[i] = loop.run_until_complete(main())
        except BaseException as e:  # noqa: B902
            results[i] = e
        finally:
            loop.close()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        assert not isinstance(results[i], BaseException), results[i]
        values, st = results[i]
        assert values == {50 * i}
        assert st['awaited'] == 52
        assert st['embedded'] is (i % 2 == 0 or not HAVE_UVLOOP)


def test_one_context_per_loop(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        await uvcuda.ready(s)
        first = uvcuda.stats()
        await uvcuda.ready(s)
        return first, uvcuda.stats()
    a, b = run(main)
    assert a['awaited'] == 1 and b['awaited'] == 2

    async def again() -> Any:  # a new loop: a new context
        await uvcuda.ready(s)
        return uvcuda.stats()
    assert run(again)['awaited'] == 1


def test_ready_without_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match='no running event loop'):
        uvcuda.ready(0)
    errors: List[BaseException] = []

    def other() -> None:
        try:
            uvcuda.ready(0)
        except BaseException as e:  # noqa: B902
            errors.append(e)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert isinstance(errors[0], RuntimeError)


def test_stats_of_a_loop_without_context(run: Runner) -> None:
    async def main() -> None:
        with pytest.raises(LookupError):
            uvcuda.stats()
    run(main)


def test_close_with_pending_awaits_cancels_them_and_waits_for_the_gpu(
        loop_kind: str, dev: uvcuda.Device, kernels: Kernels) -> None:
    loop = new_loop(loop_kind)
    s = dev.create_stream()
    mem = dev.alloc(4 * 256)
    dst = bytearray(4 * 256)
    futs: List[Any] = []
    refs: List[Any] = []

    class Token:
        pass

    async def main() -> None:
        await s.memset(mem, 0)

        def op(token: Token = Token()) -> None:
            refs.append(weakref.ref(token))
            s.enqueue_launch(kernels.sleep, 1, 1, [5_000_000])
            s.enqueue_launch(kernels.add, 1, 256, [mem, 256, 3])
            s.enqueue_copy_from_device(dst, mem)
        futs.append(uvcuda.ready(s, op))
        futs.append(uvcuda.ready(s))
    loop.run_until_complete(main())
    assert not futs[0].done()
    loop.close()  # uvcuda's context first, then the loop
    assert all(f.cancelled() for f in futs)
    assert loop.is_closed()
    gc.collect()
    # The loop's close waited for the GPU: the op and its copy were held
    # until the work was done, then let go.
    assert refs[0]() is None and mem.pending == 0 and s.pending == 0
    assert dst == bytearray(4 * 256)  # a cancelled copy leaves dst alone


def test_close_twice_and_close_without_context(loop_kind: str,
                                               dev: uvcuda.Device) -> None:
    loop = new_loop(loop_kind)
    loop.run_until_complete(settle(dev.create_stream()))
    loop.close()
    loop.close()
    loop2 = new_loop(loop_kind)
    loop2.close()


def test_close_a_running_loop_is_refused_and_changes_nothing(
        run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> Any:
        await uvcuda.ready(s)
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop().close()
        return await uvcuda.ready(s, lambda: 'still open')
    assert run(main) == 'still open'


def test_close_from_another_thread_is_refused(loop_kind: str,
                                              dev: uvcuda.Device) -> None:
    loop = new_loop(loop_kind)
    s = dev.create_stream()
    errors: List[BaseException] = []

    def other() -> None:
        try:
            loop.close()
        except BaseException as e:  # noqa: B902
            errors.append(e)
    loop.run_until_complete(settle(s))
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and 'thread that awaited' in str(errors[0])
    assert not loop.is_closed()
    loop.close()  # on the right thread
    assert loop.is_closed()


def test_loop_run_on_another_thread_later_is_refused(loop_kind: str,
                                                     dev: uvcuda.Device) -> None:
    loop = new_loop(loop_kind)
    s = dev.create_stream()
    loop.run_until_complete(settle(s))
    errors: List[BaseException] = []

    def other() -> None:
        async def main() -> None:
            await uvcuda.ready(s)
        try:
            loop.run_until_complete(main())
        except BaseException as e:  # noqa: B902
            errors.append(e)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and 'another thread' in str(errors[0])
    loop.close()


@pytest.mark.sim
@needs_uvloop
def test_uvloop_closed_behind_uvcudas_back() -> None:
    """uvloop's own close (bypassing the wrapper) while uvcuda's context is
    on its uv_loop_t: uvloop reports the handles it does not know and
    fails with EBUSY (an error, no crash); loop.close() then closes
    uvcuda's context and the uv_loop_t."""
    r = run_script('''
import asyncio, gc, uvloop, uvcuda
loop = uvloop.new_event_loop()
messages = []
loop.set_exception_handler(lambda l, ctx: messages.append(ctx['message']))
s = uvcuda.Device(0).create_stream()
async def settle():
    await uvcuda.ready(s)
loop.run_until_complete(settle())
try:
    uvloop.Loop.close(loop)
except OSError as e:
    print('uvloop close:', type(e).__name__, e.errno)
assert loop.is_closed()
assert any('handle.data is NULL' in m for m in messages), messages
loop.close()   # uvcuda's context, then the uv_loop_t
del loop
gc.collect()
print('OK')
''')
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'uvloop close: OSError' in r.stdout and 'OK' in r.stdout


@pytest.mark.sim
@needs_uvloop
def test_uvloop_closed_behind_uvcudas_back_with_work_pending() -> None:
    r = run_script('''
import asyncio, gc, os, uvloop, uvcuda
loop = uvloop.new_event_loop()
loop.set_exception_handler(lambda l, ctx: None)
dev = uvcuda.Device(0)
s = dev.create_stream()
mod = dev.load_module(open(os.environ['UVCUDA_TEST_PTX']).read())
sleep = mod.function('uvcuda_sleep_ns', ['u64'])
fut = None
async def main():
    global fut
    fut = s.launch(sleep, 1, 1, [50_000_000])
loop.run_until_complete(main())
try:
    uvloop.Loop.close(loop)   # runs until uvcuda's future is done, then EBUSY
except OSError as e:
    print('uvloop close:', type(e).__name__, e.errno)
loop.close()
assert s.pending == 0
del loop
gc.collect()
print('OK')
''')
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'OK' in r.stdout


def test_attach_refuses_a_closed_loop_and_bad_modes(loop_kind: str) -> None:
    loop = new_loop(loop_kind)
    with pytest.raises(ValueError, match='mode'):
        uvcuda.attach(loop, mode='threads')
    if loop_kind == 'asyncio':
        with pytest.raises(ValueError, match='uvloop'):
            uvcuda.attach(loop, mode='uvloop')
    with pytest.raises(ValueError, match='completion'):
        uvcuda.attach(loop, completion='fast')
    with pytest.raises(ValueError, match='spin_budget_us'):
        uvcuda.attach(loop, spin_budget_us=-1)
    with pytest.raises(ValueError, match='probe_interval_us'):
        uvcuda.attach(loop, probe_interval_us=10)
    with pytest.raises(ValueError, match='reactor_sleep_max_us'):
        uvcuda.attach(loop, reactor_sleep_max_us=0)
    with pytest.raises(TypeError, match='reactor_spin_us'):
        uvcuda.attach(loop, reactor_spin_us='5')  # type: ignore[arg-type]
    loop.close()
    with pytest.raises(RuntimeError, match='closed'):
        uvcuda.attach(loop)


@pytest.mark.sim
@needs_uvloop
def test_uvloop_with_another_libuv_is_refused() -> None:
    """A uvloop whose libuv is not this extension's (PyPI's wheels bundle
    one): refused with a message, never run on. Modelled by a version
    that differs."""
    import uvloop.loop
    from uvcuda import _uvcuda
    with pytest.raises(RuntimeError, match='embedded'):
        _uvcuda._check_libuv(uvloop.loop.__file__, 0x012f00)
    with pytest.raises(RuntimeError, match='bundle'):
        # an object that has no uv_version of its own or its dependencies'
        _uvcuda._check_libuv(_uvcuda.__file__, 0)
    _uvcuda._check_libuv(uvloop.loop.__file__, uvloop.loop.libuv_get_version())


@pytest.mark.sim
@needs_uvloop
def test_uvloop_with_another_libuv_falls_back_to_embedded(
        monkeypatch: pytest.MonkeyPatch, dev: uvcuda.Device) -> None:
    """On a uvloop that does not share this extension's libuv (PyPI's
    wheels), the default attach is the embedded loop, and awaits work;
    mode='uvloop' asked for explicitly is refused. Modelled by a uvloop
    module that reports another libuv version."""
    import uvloop
    import uvloop.loop
    monkeypatch.setattr(uvloop.loop, 'libuv_get_version', lambda: 0x012f00)
    loop = uvloop.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match='embedded'):
            uvcuda.attach(loop, mode='uvloop')

        async def main() -> bool:
            s = dev.create_stream()
            await uvcuda.ready(s)
            return bool(uvcuda.stats()['embedded'])

        assert loop.run_until_complete(main()) is True
    finally:
        loop.close()


@pytest.mark.sim
@pytest.mark.parametrize('kind', ['asyncio', pytest.param('uvloop', marks=needs_uvloop)])
def test_frees_never_hold_the_loop(kind: str) -> None:
    """cuMemFree and cuModuleUnload wait for every stream of the context:
    free(), unload() and the collector's deallocations leave that to the
    reaper thread, and the loop runs on while a stream is busy."""
    r = run_script('''
import asyncio, ctypes, gc, os, sys
sys.path.insert(0, os.environ['TESTS_DIR'])
import uvcuda
from conftest import Sim, new_loop
sim = Sim()
dev = uvcuda.Device(0)
ptx = open(os.environ['UVCUDA_TEST_PTX']).read()
async def main():
    s = dev.create_stream()
    g = sim.gate(s); g.close()
    busy = s.ready()
    m = dev.alloc(1024); m.free()              # explicit
    dev.alloc(1024)                            # collected at once
    m2 = dev.alloc(64); ref = [m2]; ref.append(ref); del m2, ref
    gc.collect()                               # collected by the collector
    dev.load_module(ptx).unload()
    dev.load_module(ptx)
    for _ in range(10):
        await asyncio.sleep(0)                 # the loop runs
    assert not busy.done()
    g.open()
    await busy
    print('OK')
loop = new_loop(sys.argv[1])
loop.run_until_complete(main())
loop.close()
''', args=[kind], env={'TESTS_DIR': str(pathlib.Path(__file__).parent)},
        hang_guard=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'OK' in r.stdout
