"""GPU checks of the uvcuda Python package with PyTorch's own streams and
kernels (a real GPU: skipped on the simulated driver and without torch).

Runs under pytest (test_gpu.py) or alone, where pytest is not installed
(the GPU host): ``python3 gpu_checks.py [asyncio|uvloop ...]`` prints one
line per check (PASS / FAIL / SKIP) and exits non-zero if one failed.
"""
from __future__ import annotations

import asyncio
import gc
import os
import pathlib
import subprocess
import sys
import textwrap
import traceback
import weakref
from typing import Any, Callable, Dict, List, Optional

import uvcuda


class Skip(Exception):
    pass


def need_gpu() -> Any:
    try:
        info = uvcuda.driver_info()
    except uvcuda.CudaError as e:
        raise Skip(f'no CUDA driver: {e}') from None
    if info['simulated'] or info['device_count'] == 0:
        raise Skip('no GPU (simulated driver)')
    try:
        import torch
    except ImportError:
        raise Skip('no torch') from None
    if not torch.cuda.is_available():
        raise Skip('torch sees no GPU')
    return torch


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
    raise Skip('kernels.ptx not found (set UVCUDA_TEST_PTX)')


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == 'uvloop':
        try:
            import uvloop
        except ImportError:
            raise Skip('no uvloop') from None
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(kind: str, fn: Callable[[], Any]) -> Any:
    loop = new_loop(kind)
    try:
        return loop.run_until_complete(fn())
    finally:
        loop.close()


_CYCLES_PER_MS: List[float] = []


def sleep_cycles(torch: Any, ms: float) -> int:
    """torch.cuda._sleep cycles for about ms milliseconds (measured once,
    on a 10 ms kernel)."""
    if not _CYCLES_PER_MS:
        cycles = 1_000_000
        for _ in range(4):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(cycles)
            b.record()
            b.synchronize()
            per_ms = cycles / max(a.elapsed_time(b), 1e-3)
            cycles = max(1000, int(per_ms * 10))
        _CYCLES_PER_MS.append(per_ms)
    return max(1000, int(_CYCLES_PER_MS[0] * ms))


def check_torch_stream_matmul(kind: str) -> None:
    torch = need_gpu()
    s = torch.cuda.Stream()
    x = torch.randn(2048, 2048, device='cuda')

    async def main() -> Any:
        s.wait_stream(torch.cuda.current_stream())  # x came from there
        with torch.cuda.stream(s):
            y = x @ x
        await uvcuda.ready(s)
        assert s.query(), 'the stream still has work after ready()'
        return y
    y = run(kind, main)
    torch.testing.assert_close(y, x @ x)


def check_op_form_and_result(kind: str) -> None:
    torch = need_gpu()
    s = torch.cuda.Stream()
    a = torch.ones(1024, 1024, device='cuda')

    async def main() -> Any:
        def op() -> Any:
            s.wait_stream(torch.cuda.current_stream())  # a came from there
            with torch.cuda.stream(s):  # the op enqueues on the stream given
                return (a * 3).sum()
        total = await uvcuda.ready(s, op)
        assert s.query()
        return total
    assert run(kind, main).item() == 3 * 1024 * 1024


def check_default_stream(kind: str) -> None:
    torch = need_gpu()
    cur = torch.cuda.current_stream()

    async def main() -> None:
        x = torch.randn(4096, 4096, device='cuda')
        y = x @ x
        await uvcuda.ready(cur)          # handle 0: torch's default stream
        assert cur.query()
        del y
    run(kind, main)


def check_many_streams_in_flight(kind: str) -> None:
    torch = need_gpu()
    streams = [torch.cuda.Stream() for _ in range(16)]
    cycles = sleep_cycles(torch, 1.0)

    async def one(i: int) -> int:
        s = streams[i % len(streams)]
        with torch.cuda.stream(s):
            torch.cuda._sleep(cycles)
        await uvcuda.ready(s)
        return i

    async def main() -> Any:
        out = await asyncio.gather(*(one(i) for i in range(2000)))
        return out, uvcuda.stats()
    out, st = run(kind, main)
    assert out == list(range(2000))
    assert st['pending'] == 0 and st['failed'] == 0 and st['requests_live'] == 0


def check_order_on_one_stream(kind: str) -> None:
    torch = need_gpu()
    s = torch.cuda.Stream()
    cycles = sleep_cycles(torch, 0.2)
    order: List[int] = []

    async def main() -> None:
        futs = []
        for i in range(200):
            with torch.cuda.stream(s):
                torch.cuda._sleep(cycles)
            f = uvcuda.ready(s)
            f.add_done_callback(lambda _, i=i: order.append(i))
            futs.append(f)
        await asyncio.gather(*futs)
    run(kind, main)
    assert order == list(range(200))


def check_cancel_keeps_tensors_alive(kind: str) -> None:
    torch = need_gpu()
    s = torch.cuda.Stream()
    cycles = sleep_cycles(torch, 1000.0)
    refs: List[Any] = []

    class Holder:
        def __init__(self, t: Any) -> None:
            self.t = t

    async def main() -> None:
        def make_op(h: Holder) -> Callable[[], None]:
            def op() -> None:
                s.wait_stream(torch.cuda.current_stream())  # h.t came from there
                with torch.cuda.stream(s):
                    torch.cuda._sleep(cycles)
                    h.t.mul_(2)
            return op
        h = Holder(torch.ones(1 << 20, device='cuda'))
        refs.append(weakref.ref(h))
        fut = uvcuda.ready(s, make_op(h))
        del h
        try:
            async with asyncio.timeout(0.01):
                await fut
        except TimeoutError:
            pass
        assert fut.cancelled()
        gc.collect()
        assert refs[0]() is not None, 'released while the GPU still runs'
        await uvcuda.ready(s)
        gc.collect()
        assert refs[0]() is None
    run(kind, main)


def check_uvcuda_ptx_kernels(kind: str) -> None:
    need_gpu()
    dev = uvcuda.Device(0)
    mod = dev.load_module(kernels_ptx())
    add = mod.function('uvcuda_add_u32', ['ptr', 'u32', 'u32'])
    sleep = mod.function('uvcuda_sleep_ns', ['u64'])
    n = 1 << 20
    s = dev.create_stream()
    mem = dev.alloc(4 * n)

    async def main() -> Any:
        await s.memset(mem, 0)
        await s.launch(sleep, 1, 1, [2_000_000])
        await s.launch(add, (n + 255) // 256, 256, [mem, n, 41])
        await s.launch(add, (n + 255) // 256, 256, [mem, n, 1])
        return await s.copy_from_device(bytearray(4 * n), mem)
    out = run(kind, main)
    assert out[:8] == bytes([42, 0, 0, 0, 42, 0, 0, 0]) and out[-4:] == bytes([42, 0, 0, 0])


def check_fault_fails_pending_awaits(kind: str) -> None:
    """In a new process: a kernel fault fails every pending await with
    CUDA_ERROR_ILLEGAL_ADDRESS; reset() recovers or says to restart."""
    need_gpu()
    code = textwrap.dedent('''
        import asyncio, sys, uvcuda, torch
        from gpu_checks import kernels_ptx, new_loop, sleep_cycles
        async def main():
            dev = uvcuda.Device(0)
            fault = dev.load_module(kernels_ptx()).function('uvcuda_fault', [])
            streams = [torch.cuda.Stream() for _ in range(4)]
            cycles = sleep_cycles(torch, 5000.0)
            pending = []
            for s in streams:
                with torch.cuda.stream(s):
                    torch.cuda._sleep(cycles)
                pending.append(uvcuda.ready(s))
            faulting = dev.create_stream().launch(fault, 1, 1)
            res = await asyncio.gather(*pending, faulting, return_exceptions=True)
            names = sorted({getattr(e, 'name', repr(e)) for e in res})
            print('awaits:', names)
            print('health:', uvcuda.health(0))
            try:
                await uvcuda.reset(0)
                print('reset: recovered', uvcuda.health(0))
            except uvcuda.CudaError as e:
                print('reset: refused', e.name, '(restart the process)')
        loop = new_loop(sys.argv[1])
        loop.run_until_complete(main())
        loop.close()
    ''')
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(pathlib.Path(__file__).parent),
                                                      env.get('PYTHONPATH')]))
    r = subprocess.run([sys.executable, '-c', code, kind], env=env,
                       capture_output=True, text=True, timeout=300)
    print(textwrap.indent(r.stdout + r.stderr[-2000:], '    '), end='')
    print(f'    (exit status {r.returncode})')
    assert "awaits: ['CUDA_ERROR_ILLEGAL_ADDRESS']" in r.stdout, r.stdout
    assert 'reset: ' in r.stdout, r.stdout


CHECKS: Dict[str, Callable[[str], None]] = {
    name[len('check_'):]: fn for name, fn in globals().items()
    if name.startswith('check_') and callable(fn)}


def main(kinds: Optional[List[str]] = None) -> int:
    failed = 0
    for kind in kinds or ['asyncio', 'uvloop']:
        for name, fn in CHECKS.items():
            try:
                fn(kind)
                print(f'PASS {name} [{kind}]', flush=True)
            except Skip as e:
                print(f'SKIP {name} [{kind}]: {e}', flush=True)
            except Exception:  # noqa: BLE001 - reported
                failed += 1
                print(f'FAIL {name} [{kind}]', flush=True)
                traceback.print_exc()
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
