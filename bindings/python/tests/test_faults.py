"""Device faults, health() and reset(): each scenario in a new process (a
fault is sticky for the process)."""
from __future__ import annotations

import pytest

from conftest import needs_uvloop, run_script

pytestmark = pytest.mark.sim

PRELUDE = '''
import asyncio, ctypes, os, sys
import uvcuda
kind = sys.argv[1]
if kind == 'uvloop':
    import uvloop
    new_loop = uvloop.new_event_loop
else:
    new_loop = asyncio.new_event_loop
ptx = open(os.environ['UVCUDA_TEST_PTX']).read()
sim = ctypes.CDLL(os.environ['UVCUDA_LIBCUDA'])
def run(coro):
    loop = new_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
'''


@pytest.mark.parametrize('kind', ['asyncio', pytest.param('uvloop', marks=needs_uvloop)])
def test_fault_fails_every_pending_await_then_reset_recovers(kind: str) -> None:
    r = run_script(PRELUDE + '''
async def main():
    dev = uvcuda.Device(0)
    mod = dev.load_module(ptx)
    sleep = mod.function('uvcuda_sleep_ns', ['u64'])
    fault = mod.function('uvcuda_fault', [])
    add = mod.function('uvcuda_add_u32', ['ptr', 'u32', 'u32'])
    streams = [dev.create_stream() for _ in range(3)]
    mem = dev.alloc(1024)
    assert uvcuda.health() == 'healthy' and dev.health() == 'healthy'
    # Work that would run for a minute: the fault ends it.
    pending = [s.launch(sleep, 1, 1, [60_000_000_000]) for s in streams
               for _ in range(4)]
    pending.append(uvcuda.ready(streams[0], lambda: 'op'))
    await asyncio.sleep(0)
    faulting = dev.create_stream().launch(fault, 1, 1)
    results = await asyncio.gather(*pending, faulting, return_exceptions=True)
    for e in results:
        assert isinstance(e, uvcuda.CudaError), e
        assert isinstance(e, RuntimeError)
        assert e.name == 'CUDA_ERROR_ILLEGAL_ADDRESS', e
        assert e.cuda_result == 700 and e.code == -20700, e
        assert str(e).startswith('CUDA_ERROR_ILLEGAL_ADDRESS: ')
    assert uvcuda.health(0) == 'CUDA_ERROR_ILLEGAL_ADDRESS'
    # A new await on the faulted context fails with the fault too.
    try:
        await streams[1].ready()
    except uvcuda.CudaError as e:
        assert e.name == 'CUDA_ERROR_ILLEGAL_ADDRESS'
    else:
        raise AssertionError('no error')
    st = uvcuda.stats()
    assert st['pending'] == 0 and st['rejected'] == len(results) + 1
    assert st['faults'] >= 1

    await uvcuda.reset(0)
    assert uvcuda.health() == 'healthy'
    # Everything made before the reset is gone.
    for call in (lambda: uvcuda.ready(streams[0]),
                 lambda: streams[0].memset(mem, 0),
                 lambda: mod.function('uvcuda_sleep_ns', ['u64'])):
        try:
            call()
        except uvcuda.CudaError as e:
            assert e.name == 'CUDA_ERROR_CONTEXT_IS_DESTROYED', e
        else:
            raise AssertionError('stale object accepted')
    assert mem.ptr == 0
    mem.free(); streams[0].destroy(); mod.unload()  # accepted: nothing to free
    # New objects work.
    s = dev.create_stream()
    m = dev.alloc(4 * 64)
    add2 = dev.load_module(ptx).function('uvcuda_add_u32', ['ptr', 'u32', 'u32'])
    await s.memset(m, 0)
    await s.launch(add2, 1, 64, [m, 64, 5])
    out = await s.copy_from_device(bytearray(4 * 64), m)
    assert out == bytes([5, 0, 0, 0]) * 64
    print('OK')
run(main())
''', args=[kind])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith('OK')


def test_reset_refuses_calls_while_it_runs() -> None:
    r = run_script(PRELUDE + '''
import threading
sim.simcuda_hold_calls.argtypes = [ctypes.c_char_p, ctypes.c_int]
sim.simcuda_held_calls.argtypes = [ctypes.c_char_p]
sim.simcuda_held_calls.restype = ctypes.c_uint64
async def main():
    dev = uvcuda.Device(0)
    s = dev.create_stream()
    m = dev.alloc(64)
    sim.simcuda_hold_calls(b'cuDevicePrimaryCtxReset', 1)
    task = asyncio.ensure_future(dev.reset())
    while sim.simcuda_held_calls(b'cuDevicePrimaryCtxReset') == 0:
        await asyncio.sleep(0.001)
    for call in (lambda: dev.alloc(64), lambda: dev.create_stream(),
                 lambda: dev.load_module(ptx), lambda: uvcuda.health(0),
                 lambda: uvcuda.ready(s), lambda: uvcuda.ready(0, device=0),
                 lambda: s.memset(m, 1)):
        try:
            call()
        except RuntimeError as e:
            assert 'being reset' in str(e), e
        else:
            raise AssertionError('accepted during a reset')
    # An op given a foreign stream handle of the device, which this module
    # can't tell: what it enqueues on the device is refused the same way.
    def op():
        s.enqueue_memset(m, 1)
    try:
        await uvcuda.ready(s.handle, op)
    except RuntimeError as e:
        print('during reset:', type(e).__name__, e)
    except uvcuda.CudaError as e:
        print('during reset (driver):', e)
    sim.simcuda_hold_calls(b'cuDevicePrimaryCtxReset', 0)
    await task
    assert uvcuda.health() == 'healthy'
    s2 = dev.create_stream()
    await s2.ready()
    print('OK')
run(main())
''', args=['asyncio'])
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'being reset' in r.stdout


def test_reset_where_the_driver_keeps_the_fault() -> None:
    """Where the reset's check fails (the H200 keeps a fault for the life
    of the process), reset() raises, saying to restart the process."""
    r = run_script(PRELUDE + '''
sim.simcuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
async def main():
    sim.simcuda_fail(b'cuDevicePrimaryCtxReset', 700, -1)
    try:
        await uvcuda.reset(0)
    except uvcuda.CudaError as e:
        assert e.name == 'CUDA_ERROR_ILLEGAL_ADDRESS', e
        assert 'restart the process' in str(e), e
    else:
        raise AssertionError('no error')
    print('OK')
run(main())
''', args=['asyncio'])
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_driver() -> None:
    r = run_script('''
import asyncio, uvcuda
try:
    uvcuda.Device(0)
except uvcuda.CudaError as e:
    assert e.name == 'UVCUDA_ENODRIVER', e
    print(e)
async def main():
    try:
        await uvcuda.ready(0)
    except uvcuda.CudaError as e:
        assert e.name == 'UVCUDA_ENODRIVER', e
    else:
        raise AssertionError
asyncio.run(main())
print('OK')
''', env={'UVCUDA_LIBCUDA': '/nonexistent/libcuda.so.1'})
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'UVCUDA_ENODRIVER' in r.stdout and '/nonexistent' in r.stdout
