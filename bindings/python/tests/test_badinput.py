"""Bad input gives the documented error and changes nothing."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

import uvcuda
from conftest import Kernels, Runner, run_script


@pytest.mark.parametrize('stream, error', [
    ('0', TypeError), (b'0', TypeError), (0.0, TypeError), (None, TypeError),
    (True, TypeError), (object(), TypeError), (-1, ValueError),
    (1 << 64, OverflowError), ([0], TypeError),
])
def test_ready_bad_stream(run: Runner, stream: Any, error: type) -> None:
    async def main() -> Any:
        with pytest.raises(error):
            uvcuda.ready(stream)
        return uvcuda.stats()
    st = run(main)
    assert st['awaited'] == 0 and st['requests_live'] == 0


def test_ready_bad_op_and_device(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()

    async def main() -> None:
        with pytest.raises(TypeError, match='callable'):
            uvcuda.ready(s, 42)  # type: ignore[call-overload]
        with pytest.raises(TypeError, match='device'):
            uvcuda.ready(0, device='0')  # type: ignore[call-overload]
        with pytest.raises(TypeError, match='device'):
            uvcuda.ready(0, device=True)
        with pytest.raises(ValueError, match='negative'):
            uvcuda.ready(0, device=-1)
        with pytest.raises(IndexError):
            uvcuda.ready(0, device=7)
        with pytest.raises(TypeError):
            uvcuda.ready(s, None, 0)  # type: ignore[call-overload]
        assert uvcuda.stats()['requests_live'] == 0
    run(main)


def test_closed_objects(run: Runner, dev: uvcuda.Device, kernels: Kernels,
                        ptx: str) -> None:
    s = dev.create_stream()
    m = dev.alloc(16)
    mod = dev.load_module(ptx)
    k = mod.function('uvcuda_sleep_ns', ['u64'])

    async def main() -> None:
        s2 = dev.create_stream()
        m.free()
        m.free()  # idempotent
        assert m.freed and m.ptr == 0
        with pytest.raises(ValueError, match='freed'):
            s2.memset(m, 0)
        with pytest.raises(ValueError, match='freed'):
            s2.copy_to_device(m, b'x')
        mod.unload()
        assert mod.unloaded
        with pytest.raises(ValueError, match='unloaded'):
            s2.launch(k, 1, 1, [1])
        with pytest.raises(ValueError, match='unloaded'):
            mod.function('uvcuda_sleep_ns', ['u64'])
        s.destroy()
        s.destroy()
        assert s.destroyed
        with pytest.raises(ValueError, match='destroyed'):
            uvcuda.ready(s)
        with pytest.raises(ValueError, match='destroyed'):
            s.ready()
        m2 = dev.alloc(16)
        with pytest.raises(ValueError, match='destroyed'):
            s.memset(m2, 0)
        assert uvcuda.stats()['requests_live'] == 0
    run(main)


def test_weak_references(dev: uvcuda.Device, ptx: str) -> None:
    import gc
    import weakref
    mod = dev.load_module(ptx)
    objs = [dev.alloc(8), dev.create_stream(), mod,
            mod.function('uvcuda_sleep_ns', ['u64'])]
    refs = [weakref.ref(o) for o in objs]
    assert all(r() is not None for r in refs)
    del objs, mod
    gc.collect()
    assert all(r() is None for r in refs)


def test_construction(dev: uvcuda.Device) -> None:
    assert uvcuda.Device(0) is dev  # one per ordinal
    assert uvcuda.Device() is dev
    for cls in (uvcuda.Stream, uvcuda.DeviceMemory, uvcuda.Module, uvcuda.Kernel):
        with pytest.raises(TypeError, match='directly'):
            cls()
    with pytest.raises(IndexError):
        uvcuda.Device(uvcuda.device_count())
    with pytest.raises(OverflowError):
        uvcuda.Device(1 << 40)
    with pytest.raises(TypeError):
        uvcuda.Device('0')  # type: ignore[arg-type]
    for n, err in ((0, ValueError), (-1, ValueError), (1.5, TypeError),
                   ('8', TypeError), (1 << 70, OverflowError)):
        with pytest.raises(err):
            dev.alloc(n)  # type: ignore[arg-type]
    with pytest.raises(uvcuda.CudaError) as info:
        dev.load_module('not ptx')
    assert info.value.name == 'CUDA_ERROR_INVALID_IMAGE'
    with pytest.raises(TypeError):
        dev.load_module(42)  # type: ignore[arg-type]


def test_kernel_signatures(dev: uvcuda.Device, ptx: str) -> None:
    mod = dev.load_module(ptx.encode())  # bytes work too
    with pytest.raises(ValueError, match='takes 1 parameter'):
        mod.function('uvcuda_sleep_ns', [])
    with pytest.raises(ValueError, match="one of 'ptr'"):
        mod.function('uvcuda_sleep_ns', ['u65'])
    with pytest.raises(TypeError):
        mod.function('uvcuda_sleep_ns', 'u64')
    with pytest.raises(uvcuda.CudaError) as info:
        mod.function('no_such_kernel', [])
    assert info.value.name == 'CUDA_ERROR_NOT_FOUND'
    k = mod.function('uvcuda_add_u32', ('ptr', 'u32', 'u32'))
    assert k.name == 'uvcuda_add_u32' and k.signature == ('ptr', 'u32', 'u32')
    assert k.module is mod


def test_launch_arguments(run: Runner, dev: uvcuda.Device, kernels: Kernels) -> None:
    s = dev.create_stream()
    m = dev.alloc(64)

    async def main() -> None:
        add, sleep = kernels.add, kernels.sleep
        with pytest.raises(ValueError, match='takes 3 arguments'):
            s.launch(add, 1, 1, [m, 1])
        with pytest.raises(TypeError, match='int'):
            s.launch(add, 1, 1, [m, 1.5, 1])
        with pytest.raises(OverflowError):
            s.launch(add, 1, 1, [m, 1 << 32, 1])
        with pytest.raises(OverflowError):
            s.launch(add, 1, 1, [m, -1, 1])
        with pytest.raises(TypeError, match='args'):
            s.launch(sleep, 1, 1, 5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match='grid'):
            s.launch(sleep, 0, 1, [1])
        with pytest.raises(ValueError, match='block'):
            s.launch(sleep, 1, (1, 1, 1, 1), [1])
        with pytest.raises(TypeError):
            s.launch(m, 1, 1)  # type: ignore[arg-type]
        await s.launch(sleep, (1,), [1, 1, 1], [0])
        await s.launch(add, 1, 16, [m.ptr, 16, 1])  # a raw pointer works
        assert uvcuda.stats()['requests_live'] == 0
    run(main)


def test_copy_arguments(run: Runner, dev: uvcuda.Device) -> None:
    s = dev.create_stream()
    m = dev.alloc(16)

    async def main() -> None:
        with pytest.raises(ValueError, match='exceed'):
            s.copy_to_device(m, bytes(17))
        with pytest.raises(ValueError, match='exceed'):
            s.copy_to_device(m, bytes(8), 9)
        with pytest.raises(ValueError, match='exceed'):
            s.copy_from_device(bytearray(4), m, 13)
        with pytest.raises(TypeError, match='writable'):
            s.copy_from_device(bytes(4), m)
        with pytest.raises(TypeError, match='bytes-like'):
            s.copy_to_device(m, 'text')  # type: ignore[arg-type]
        with pytest.raises(TypeError, match='DeviceMemory'):
            s.copy_to_device(b'x', m)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match='byte'):
            s.memset(m, 256)
        with pytest.raises(ValueError, match='exceed'):
            s.memset(m, 0, 8, 9)
        with pytest.raises(ValueError, match='exceed'):
            s.copy_device(m, dev.alloc(32))
        await s.copy_to_device(m, b'')  # nothing to copy: fine
        await s.copy_to_device(m, memoryview(bytearray(16))[4:8], 4)
        assert uvcuda.stats()['requests_live'] == 0
    run(main)


def test_enqueue_outside_an_op(run: Runner, dev: uvcuda.Device,
                               kernels: Kernels) -> None:
    s, other = dev.create_stream(), dev.create_stream()
    m = dev.alloc(16)

    async def main() -> None:
        with pytest.raises(RuntimeError, match='inside an op'):
            s.enqueue_copy_to_device(m, b'x')
        with pytest.raises(RuntimeError, match='inside an op'):
            s.enqueue_copy_from_device(bytearray(1), m)

        def wrong_stream() -> None:
            other.enqueue_copy_from_device(bytearray(1), m)
        with pytest.raises(RuntimeError, match='inside an op'):
            await uvcuda.ready(s, wrong_stream)

        def nested() -> None:
            uvcuda.ready(s)
        with pytest.raises(RuntimeError, match='must not await'):
            await uvcuda.ready(s, nested)
        assert uvcuda.stats()['requests_live'] == 0
    run(main)


def test_errors_helpers() -> None:
    assert uvcuda.err_name(0) == 'OK'
    assert uvcuda.err_name(-20700) == 'CUDA_ERROR_ILLEGAL_ADDRESS'
    assert uvcuda.err_name(-30005) == 'UVCUDA_ECAPTURING'
    assert 'illegal' in uvcuda.strerror(-20700)
    with pytest.raises(TypeError):
        uvcuda.err_name('x')  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        uvcuda.err_name(1 << 40)
    e = uvcuda.CudaError(-20700, 'detail')
    assert (e.name, e.code, e.cuda_result) == ('CUDA_ERROR_ILLEGAL_ADDRESS', -20700, 700)
    import pickle
    e2 = pickle.loads(pickle.dumps(e))
    assert (type(e2), e2.code, str(e2)) == (uvcuda.CudaError, -20700, str(e))


@pytest.mark.sim
def test_stream_of_another_device() -> None:
    r = run_script('''
import asyncio, os, uvcuda
assert uvcuda.device_count() == 2
d0, d1 = uvcuda.Device(0), uvcuda.Device(1)
ptx = open(os.environ['UVCUDA_TEST_PTX']).read()
async def main():
    s0, s1 = d0.create_stream(), d1.create_stream()
    m0, m1 = d0.alloc(64), d1.alloc(64)
    k0 = d0.load_module(ptx).function('uvcuda_add_u32', ['ptr', 'u32', 'u32'])
    for call in (lambda: s1.memset(m0, 0), lambda: s1.copy_to_device(m0, b'x'),
                 lambda: s1.copy_device(m1, m0), lambda: s1.launch(k0, 1, 1, [m1, 1, 1]),
                 lambda: s1.launch(k0.module.function('uvcuda_add_u32', ['ptr', 'u32', 'u32']),
                                   1, 1, [m1, 1, 1])):
        try:
            call()
        except ValueError as e:
            assert 'device 0' in str(e) and 'device 1' in str(e), e
        else:
            raise AssertionError('accepted')
    try:
        uvcuda.ready(s1, device=0)
    except ValueError as e:
        assert 'device 0' in str(e), e
    else:
        raise AssertionError('accepted')
    # Each device's streams work, side by side, on one loop.
    await asyncio.gather(s0.memset(m0, 1), s1.memset(m1, 2),
                         uvcuda.ready(s1, device=1), uvcuda.ready(0, device=1),
                         uvcuda.ready(0, device=d0))
    a = await s0.copy_from_device(bytearray(64), m0)
    b = await s1.copy_from_device(bytearray(64), m1)
    assert a == b'\\x01' * 64 and b == b'\\x02' * 64
    print('OK')
asyncio.run(main())
''', env={'SIMCUDA_DEVICES': '2'})
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.sim
def test_capturing_stream() -> None:
    """An await on a stream capturing into a CUDA graph fails with
    UVCUDA_ECAPTURING, the capture left intact."""
    r = run_script('''
import asyncio, ctypes, os, uvcuda
sim = ctypes.CDLL(os.environ['UVCUDA_LIBCUDA'])
fn = ctypes.c_void_p(); st = ctypes.c_int()
def sym(name, ver, *args):
    sim.cuGetProcAddress_v2(name, ctypes.byref(fn), ver, 0, ctypes.byref(st))
    return ctypes.CFUNCTYPE(ctypes.c_int, *args)(fn.value)
begin = sym(b'cuStreamBeginCapture', 10010, ctypes.c_void_p, ctypes.c_int)
end = sym(b'cuStreamEndCapture', 10000, ctypes.c_void_p, ctypes.c_void_p)
async def main():
    s = uvcuda.Device(0).create_stream()
    assert begin(s.handle, 2) == 0   # relaxed
    try:
        await uvcuda.ready(s, lambda: 'never')
    except uvcuda.CudaError as e:
        assert e.name == 'UVCUDA_ECAPTURING', e
    else:
        raise AssertionError('no error')
    g = ctypes.c_void_p()
    assert end(s.handle, ctypes.byref(g)) == 0 and g.value
    assert await uvcuda.ready(s, lambda: 'after') == 'after'
    print('OK')
asyncio.run(main())
''')
    assert r.returncode == 0, r.stdout + r.stderr
