"""Fixtures of the uvcuda Python tests (the simulated driver: UVCUDA_LIBCUDA).

Each test makes its own event loop (``run``: stock asyncio and uvloop, by
parametrization) and closes it. Tests that need a fault or two devices run
a script in a subprocess (``run_script``): a fault is sticky for the
process, and the device count is read once.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional

import pytest

import uvcuda

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent


def kernels_ptx() -> pathlib.Path:
    """uvcuda's test kernels (moving from test/common/ to support/)."""
    env = os.environ.get('UVCUDA_TEST_PTX')
    if env:
        return pathlib.Path(env)
    for path in (ROOT / 'support/kernels.ptx', ROOT / 'test/common/kernels.ptx',
                 HERE.parent / 'vendor/uvcuda/kernels.ptx'):  # an sdist's
        if path.exists():
            return path
    raise FileNotFoundError('kernels.ptx (set UVCUDA_TEST_PTX)')


def _driver() -> Optional[Dict[str, Any]]:
    try:
        return uvcuda.driver_info()
    except uvcuda.CudaError:
        return None


INFO = _driver()
SIMULATED = bool(INFO and INFO['simulated'])


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    if INFO is None:
        skip = pytest.mark.skip(reason='no CUDA driver (set UVCUDA_LIBCUDA to '
                                       "the build's test/sim/libsimcuda.so)")
        for item in items:
            if 'gpu' not in item.keywords:
                item.add_marker(skip)
    elif not SIMULATED:
        skip = pytest.mark.skip(reason='needs the simulated driver')
        for item in items:
            if 'sim' in item.keywords:
                item.add_marker(skip)


try:
    import uvloop
    HAVE_UVLOOP = True
except ImportError:  # another interpreter than Debian's python3 (the GPU host)
    HAVE_UVLOOP = False
needs_uvloop = pytest.mark.skipif(not HAVE_UVLOOP, reason='no uvloop')


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == 'uvloop':
        if not HAVE_UVLOOP:
            pytest.skip('no uvloop')
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


LOOP_KINDS = ['asyncio', 'uvloop'] if HAVE_UVLOOP else ['asyncio']


@pytest.fixture(params=LOOP_KINDS)
def loop_kind(request: Any) -> str:
    return str(request.param)


Runner = Callable[[Callable[[], Awaitable[Any]]], Any]


@pytest.fixture
def gates() -> Iterator[List['Gate']]:
    """The gates a test closed: all open before its loop closes (a loop's
    close waits for the GPU work its awaits keep objects for)."""
    made: List[Gate] = []
    yield made
    for g in made:
        g.open()


@pytest.fixture
def run(loop_kind: str, gates: List['Gate']) -> Iterator[Runner]:
    """run(async_fn): runs async_fn() on a new loop of the kind, closes it."""
    def runner(fn: Callable[[], Awaitable[Any]]) -> Any:
        loop = new_loop(loop_kind)
        try:
            return loop.run_until_complete(fn())
        finally:
            for g in gates:
                g.open()
            loop.close()
    yield runner


@pytest.fixture(scope='session')
def ptx() -> str:
    return kernels_ptx().read_text()


@pytest.fixture
def dev() -> uvcuda.Device:
    return uvcuda.Device(0)


class Kernels:
    def __init__(self, dev: uvcuda.Device, ptx: str) -> None:
        self.module = dev.load_module(ptx)
        self.sleep = self.module.function('uvcuda_sleep_ns', ['u64'])
        self.add = self.module.function('uvcuda_add_u32', ['ptr', 'u32', 'u32'])
        self.fault = self.module.function('uvcuda_fault', [])
        self.checksum = self.module.function('uvcuda_checksum_u8',
                                             ['ptr', 'u32', 'ptr'])


@pytest.fixture
def kernels(dev: uvcuda.Device, ptx: str) -> Kernels:
    return Kernels(dev, ptx)


class Sim:
    """The simulated driver's controls (test/sim/simcuda.h), and a gate: a
    cuStreamWaitValue32 on pinned host memory that holds a stream until
    opened, so that "the GPU is still busy" does not depend on timing."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(os.environ['UVCUDA_LIBCUDA'])
        self.lib.simcuda_enqueue_work.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        self.lib.simcuda_enqueue_fault.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.lib.simcuda_live_streams.restype = ctypes.c_int
        self.lib.simcuda_call_count.argtypes = [ctypes.c_char_p]
        self.lib.simcuda_call_count.restype = ctypes.c_uint64
        self._flags: List[int] = []

    def sym(self, name: str, version: int, restype: Any, *argtypes: Any) -> Any:
        fn = ctypes.c_void_p()
        status = ctypes.c_int()
        gpa = self.lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                        ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
        assert gpa(name.encode(), ctypes.byref(fn), version, 0,
                   ctypes.byref(status)) == 0 and fn.value, name
        return ctypes.CFUNCTYPE(restype, *argtypes)(fn.value)

    def gate(self, stream: uvcuda.Stream) -> 'Gate':
        return Gate(self, stream)


class Gate:
    def __init__(self, sim: Sim, stream: uvcuda.Stream) -> None:
        c_void_p, c_uint = ctypes.c_void_p, ctypes.c_uint
        set_current = sim.sym('cuCtxSetCurrent', 4000, ctypes.c_int, c_void_p)
        get_current = sim.sym('cuCtxGetCurrent', 4000, ctypes.c_int,
                              ctypes.POINTER(c_void_p))
        host_alloc = sim.sym('cuMemHostAlloc', 2020, ctypes.c_int,
                             ctypes.POINTER(c_void_p), ctypes.c_size_t, c_uint)
        self._wait = sim.sym('cuStreamWaitValue32', 11070, ctypes.c_int,
                             c_void_p, ctypes.c_uint64, ctypes.c_uint32, c_uint)
        prev = c_void_p()
        assert get_current(ctypes.byref(prev)) == 0
        assert set_current(stream.device.context) == 0
        p = c_void_p()
        assert host_alloc(ctypes.byref(p), 4, 0) == 0
        set_current(prev)
        assert p.value is not None
        self.flag = ctypes.c_uint32.from_address(p.value)
        self.stream = stream

    def close(self) -> None:
        """Enqueues the gate: the stream's later work waits for open()."""
        assert self._wait(self.stream.handle,
                          ctypes.addressof(self.flag), 1, 0x1) == 0  # EQ

    def open(self) -> None:
        self.flag.value = 1


@pytest.fixture
def sim() -> Iterator[Sim]:
    if not SIMULATED:
        pytest.skip('needs the simulated driver')
    yield Sim()


@pytest.fixture
def gate(sim: Sim, gates: List[Gate]) -> Callable[[uvcuda.Stream], Gate]:
    """gate(stream): a closed gate on stream (see gates)."""
    def make(stream: uvcuda.Stream) -> Gate:
        g = sim.gate(stream)
        g.close()
        gates.append(g)
        return g
    return make


def run_script(code: str, env: Optional[Dict[str, str]] = None,
               args: Optional[List[str]] = None,
               hang_guard: Optional[float] = None) -> subprocess.CompletedProcess:
    """Runs code (dedented) in a new interpreter; returns its result.

    hang_guard: seconds after which a script that never ends is killed and
    reported as failed (for code that would otherwise block forever; not a
    bound on how fast anything is)."""
    full_env = dict(os.environ)
    full_env['UVCUDA_TEST_PTX'] = str(kernels_ptx())
    if env:
        full_env.update(env)
    cmd = [sys.executable, '-c', textwrap.dedent(code)] + (args or [])
    try:
        return subprocess.run(cmd, env=full_env, capture_output=True, text=True,
                              timeout=hang_guard)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, str(e.stdout or ''),
                                           'hung (killed): ' + str(e.stderr or ''))
