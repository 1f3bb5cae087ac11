"""uvcuda on asyncio: one uvcuda loop context per event loop.

On uvloop the context runs on uvloop's own ``uv_loop_t``; on any other loop
(stock asyncio's selector loop) on a private libuv loop, embedded: its
backend fd is watched with ``loop.add_reader`` and each readiness (or each
start, whose spin needs a pass at once) runs one ``uv_run(UV_RUN_NOWAIT)``.
The context is made at the loop's first await (or by :func:`attach`) and
closed before the loop closes: ``loop.close`` is wrapped on the instance.
"""
from __future__ import annotations

import asyncio
import sys
import threading
from typing import (Any, Callable, Dict, Optional, Protocol, SupportsInt,
                    Tuple, TypeVar, Union, overload)

from . import _uvcuda
from ._uvcuda import Device, Stream

__all__ = [
    'CudaError', 'attach', 'health', 'ready', 'reset', 'stats',
]

T = TypeVar('T')


class _HasCudaStreamProtocol(Protocol):
    def __cuda_stream__(self) -> Tuple[int, int]: ...


class _TorchStream(Protocol):
    @property
    def cuda_stream(self) -> int: ...


class _CupyStream(Protocol):
    @property
    def ptr(self) -> int: ...

    @property
    def device_id(self) -> int: ...


#: What :func:`ready` accepts as a stream.
StreamLike = Union[Stream, int, _HasCudaStreamProtocol, _TorchStream,
                   _CupyStream, SupportsInt]
#: A device: its ordinal or its :class:`Device`.
DeviceLike = Union[int, Device]


class CudaError(RuntimeError):
    """An error of uvcuda or of the CUDA driver.

    ``name`` is the symbolic name (``'CUDA_ERROR_ILLEGAL_ADDRESS'``,
    ``'UVCUDA_ECAPTURING'``, ``'UVCUDA_ENODRIVER'``), ``code`` the negative
    uvcuda error code (CUDA result *r* is ``-20000 - r``), ``cuda_result``
    the ``CUresult`` (0 for uvcuda's own errors).
    """

    code: int
    name: str
    cuda_result: int
    detail: Optional[str]

    def __init__(self, code: int, detail: Optional[str] = None) -> None:
        self.code = code
        self.name = _uvcuda.err_name(code)
        self.cuda_result = _uvcuda.cuda_result(code)
        self.detail = detail
        message = f'{self.name}: {_uvcuda.strerror(code)}'
        if detail:
            message += f' ({detail})'
        super().__init__(message)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.code, self.detail))


class _GpuFuture(asyncio.Future):  # type: ignore[type-arg]
    """The future :func:`ready` returns: cancelling it stops the wait at once.

    uvloop's own futures that stop a wait (sock_recv's) override ``cancel``
    the same way: ``Task.cancel``, ``asyncio.timeout`` and ``wait_for`` all
    call it.
    """

    _uvcuda_pending: Optional[_uvcuda.Pending] = None

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg=msg):
            return False
        pending = self._uvcuda_pending
        if pending is not None:
            self._uvcuda_pending = None
            pending.cancel()
        return True


class _Attached:
    __slots__ = ('loop', 'ctx', 'timer', 'fd')

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 ctx: _uvcuda.LoopContext) -> None:
        self.loop = loop
        self.ctx = ctx
        self.timer: Optional[asyncio.TimerHandle] = None
        self.fd = -1

    def pump(self) -> None:
        """One pass of the embedded libuv loop."""
        timeout = self.ctx.run_nowait()  # 0: the context asked for a pass
        if timeout > 0:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_later(timeout / 1000.0, self.pump)


_lock = threading.Lock()
_contexts: Dict[asyncio.AbstractEventLoop, _Attached] = {}
_local = threading.local()


def _ordinal(device: Optional[DeviceLike]) -> int:
    if device is None:
        return -1
    if isinstance(device, Device):
        return device.ordinal
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f'device must be an int or a uvcuda.Device, '
                        f'got {device!r}')
    if device < 0:
        raise ValueError(f'device must not be negative, got {device}')
    return device


def _is_uvloop(loop: asyncio.AbstractEventLoop) -> bool:
    mod = sys.modules.get('uvloop.loop')
    return mod is not None and isinstance(loop, mod.Loop)


def _uv_loop_capsule(loop: asyncio.AbstractEventLoop) -> object:
    method = getattr(loop, 'get_uv_loop_t_ptr', None)
    if callable(method):
        return method()
    mod = sys.modules['uvloop.loop']
    return mod.libuv_get_loop_t_ptr(loop)


def attach(loop: Optional[asyncio.AbstractEventLoop] = None, *,
           mode: Optional[str] = None,
           completion: Optional[str] = None,
           spin_budget_us: Optional[int] = None,
           adaptive: Optional[bool] = None,
           latency_histogram: bool = False,
           timing: bool = False,
           probe_interval_us: Optional[int] = None,
           reactor_spin_us: Optional[int] = None,
           reactor_yield_us: Optional[int] = None,
           reactor_sleep_max_us: Optional[int] = None,
           reactor_backoff_pct: Optional[int] = None) -> None:
    """Makes ``loop``'s uvcuda context now, with options.

    ``loop`` defaults to the running loop. The calling thread becomes the
    context's thread: every await on the loop and its close must come from
    it. ``mode``: ``'uvloop'`` (futures on uvloop's own ``uv_loop_t``; the
    default on uvloop) or ``'embedded'`` (a private libuv loop driven
    through ``add_reader``; the default elsewhere, and the way to use a
    uvloop built with its own libuv). The other options are uvcuda's
    ``uvcuda_options_t`` (docs/api.md, "Options"): ``completion``
    (``'auto'``, ``'reactor'``, ``'hostfn'``, ``'hostfn-spin'``,
    ``'hostfn-block'``, ``'poll'``), ``spin_budget_us`` (0..1000000),
    ``adaptive``, ``latency_histogram`` (``stats()['latency_hist']``),
    ``timing``, ``probe_interval_us`` (50..2000), ``reactor_spin_us``,
    ``reactor_yield_us``, ``reactor_sleep_max_us``,
    ``reactor_backoff_pct`` (1..100); ``None`` takes the
    default (the environment's ``UVCUDA_COMPLETION``,
    ``UVCUDA_SPIN_BUDGET_US``, ``UVCUDA_ADAPTIVE``, else uvcuda's).
    Raises ``RuntimeError`` if the loop has a context already or is closed.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    with _lock:
        if loop in _contexts:
            raise RuntimeError('uvcuda: this loop has a uvcuda context already')
        _attach_locked(loop, mode, completion=completion,
                       spin_budget_us=spin_budget_us, adaptive=adaptive,
                       latency_histogram=latency_histogram, timing=timing,
                       probe_interval_us=probe_interval_us,
                       reactor_spin_us=reactor_spin_us,
                       reactor_yield_us=reactor_yield_us,
                       reactor_sleep_max_us=reactor_sleep_max_us,
                       reactor_backoff_pct=reactor_backoff_pct)


def _shares_libuv() -> bool:
    mod = sys.modules['uvloop.loop']
    try:
        _uvcuda._check_libuv(mod.__file__, mod.libuv_get_version())
    except RuntimeError:
        return False
    return True


def _attach_locked(loop: asyncio.AbstractEventLoop, mode: Optional[str],
                   **options: Any) -> _Attached:
    if loop.is_closed():
        raise RuntimeError('uvcuda: the loop is closed')
    if mode is None:
        # uvloop's own uv_loop_t where uvloop shares uvcuda's libuv; a
        # uvloop with a libuv of its own (PyPI's wheels) gets the embedded
        # loop, as stock asyncio does: same semantics, a wake-up more.
        mode = 'uvloop' if _is_uvloop(loop) and _shares_libuv() else 'embedded'
    if mode == 'uvloop':
        if not _is_uvloop(loop):
            raise ValueError(f"mode='uvloop' needs a uvloop loop, "
                             f'got {type(loop).__name__}')
        mod = sys.modules['uvloop.loop']
        _uvcuda._check_libuv(mod.__file__, mod.libuv_get_version())
        ctx = _uvcuda.LoopContext(loop, _uv_loop_capsule(loop), **options)
        att = _Attached(loop, ctx)
    elif mode == 'embedded':
        ctx = _uvcuda.LoopContext(loop, None, **options)
        att = _Attached(loop, ctx)
        try:
            att.fd = ctx.fileno()
            ctx.set_pump(loop.call_soon, att.pump)
            loop.add_reader(att.fd, att.pump)
        except BaseException:
            ctx.shutdown(None)
            ctx.run_until_closed()
            raise
    else:
        raise ValueError(f"mode must be 'uvloop' or 'embedded', got {mode!r}")
    _hook_close(loop)
    _contexts[loop] = att
    return att


def _hook_close(loop: asyncio.AbstractEventLoop) -> None:
    if getattr(loop.close, '_uvcuda_hook', False):
        return
    original = loop.close

    def close() -> None:
        if not loop.is_running():
            _detach(loop)
        original()

    close._uvcuda_hook = True  # type: ignore[attr-defined]
    try:
        loop.close = close  # type: ignore[assignment]
    except AttributeError:
        raise RuntimeError(
            f'uvcuda: cannot wrap close() of {type(loop).__name__} (its '
            f'instances take no attributes): uvcuda must close its context '
            f'before the loop closes') from None


def _detach(loop: asyncio.AbstractEventLoop) -> None:
    """Closes loop's uvcuda context (from its wrapped close())."""
    with _lock:
        att = _contexts.get(loop)
        if att is None:
            return
        if att.ctx.thread != threading.get_ident():
            raise RuntimeError(
                "uvcuda: close the loop on the thread that awaited on it "
                "(uvcuda's loop context belongs to that thread)")
        del _contexts[loop]
    pair = getattr(_local, 'pair', None)
    if pair is not None and pair[0] is loop:
        _local.pair = None
    ctx = att.ctx
    if ctx.embedded:
        if att.timer is not None:
            att.timer.cancel()
        if not loop.is_closed():
            loop.remove_reader(att.fd)
        ctx.shutdown(None)
        ctx.run_until_closed()
    elif loop.is_closed():
        # uvloop was closed behind uvcuda's back (uvloop.Loop.close(loop)):
        # its close failed with EBUSY, leaving uvcuda's handles alone on
        # its uv_loop_t. Close them, then the uv_loop_t.
        if ctx.foreign_handles() != 0:
            raise RuntimeError('uvcuda: the closed uvloop loop still has '
                               'handles of its own')
        ctx.shutdown(None)
        ctx.run_until_closed()
    else:
        done = loop.create_future()

        def closed() -> None:
            if not done.done():
                done.set_result(None)

        ctx.shutdown(closed)
        loop.run_until_complete(done)


def _context(loop: asyncio.AbstractEventLoop) -> _uvcuda.LoopContext:
    with _lock:
        att = _contexts.get(loop)
        if att is None:
            att = _attach_locked(loop, None)
    _local.pair = (loop, att.ctx)
    return att.ctx


@overload
def ready(stream: StreamLike, op: None = None, *,
          device: Optional[DeviceLike] = None) -> 'asyncio.Future[None]': ...


@overload
def ready(stream: StreamLike, op: Callable[[], T], *,
          device: Optional[DeviceLike] = None) -> 'asyncio.Future[T]': ...


def ready(stream: StreamLike, op: Optional[Callable[[], Any]] = None, *,
          device: Optional[DeviceLike] = None) -> 'asyncio.Future[Any]':
    """A future that resolves once the work enqueued so far on ``stream`` is
    done: ``await uvcuda.ready(stream)``.

    ``op`` (optional) is called at once, inside uvcuda's start, with the
    stream's CUDA context current, to enqueue work on ``stream``; the future
    resolves to what it returned once that work is done, and an exception
    it raises becomes the future's, once the stream has run what the op
    enqueued before raising. The op must not await anything.

    ``stream``: a :class:`Stream`, an int (a ``CUstream``), a
    ``torch.cuda.Stream``, a CuPy ``Stream``, a cuda-python ``CUstream`` or
    any object with ``__cuda_stream__``. The default-stream handles 0, 1, 2
    mean the stream of ``device``'s primary context (or of the device the
    stream object names), else of the thread's current context.

    Call it on a thread running an asyncio loop (else ``RuntimeError``).
    Cancelling the future (``task.cancel()``, ``asyncio.timeout``) stops the
    wait at once; what the await keeps alive (the stream object, the op and
    what it refers to) stays alive until the GPU is done with it.
    """
    loop = asyncio.get_running_loop()
    pair = getattr(_local, 'pair', None)
    if pair is not None and pair[0] is loop:
        ctx = pair[1]
    else:
        ctx = _context(loop)
    fut = _GpuFuture(loop=loop)
    fut._uvcuda_pending = ctx.start(stream, op, fut, _ordinal(device))
    return fut


def stats(loop: Optional[asyncio.AbstractEventLoop] = None) -> Dict[str, Any]:
    """The counters of ``loop``'s uvcuda context (default: the running loop's).

    uvcuda's ``uvcuda_stats_t`` (``started``, ``completed_spin``,
    ``completed_reactor``, ``failed``, ``cancelled``, ``timelines``, ...)
    plus this binding's: ``awaited``, ``resolved``, ``rejected``,
    ``awaits_cancelled``, ``pending`` (awaits not yet settled),
    ``requests_live`` (awaits and drains the binding still tracks),
    ``requests_idle``, ``futures``, ``completion``, ``embedded``. Raises
    ``LookupError`` if the loop has no uvcuda context.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    with _lock:
        att = _contexts.get(loop)
    if att is None:
        raise LookupError('uvcuda: this loop has no uvcuda context')
    return att.ctx.stats()


def health(device: DeviceLike = 0) -> str:
    """``'healthy'``, or the name of the sticky error the device's primary
    context has (``'CUDA_ERROR_ILLEGAL_ADDRESS'``), asked of the driver now
    (``uvcuda_context_health``)."""
    return _uvcuda.health(_ordinal(device))


async def reset(device: DeviceLike = 0) -> None:
    """Recovery after a fault: ``uvcuda_device_reset`` on a worker thread.

    Every pending await of the device fails; every :class:`Stream`,
    :class:`DeviceMemory`, :class:`Module` and :class:`Kernel` of it made
    before is gone (using one raises ``CudaError``
    ``CUDA_ERROR_CONTEXT_IS_DESTROYED``), and so is everything other
    libraries made on its primary context. Raises ``CudaError`` where the
    driver keeps the fault (restart the process then). No thread may use
    the device meanwhile: this module's calls on it raise ``RuntimeError``.
    """
    ordinal = _ordinal(device)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, _uvcuda._device_reset, ordinal)
