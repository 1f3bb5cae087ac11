"""uvcuda: await CUDA stream work from asyncio, on uvloop or stock asyncio.

    import asyncio, torch, uvcuda

    async def handle(x):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            y = x @ x
        await uvcuda.ready(s)   # the loop serves other requests meanwhile
        return y

No thread waits for the GPU: completion reaches the loop through uvcuda's
reactor (one thread per process) or a CUDA host function. See
docs/guide-python.md and bindings/python/README.md in uvcuda's repository.
"""
import sys as _sys

if _sys.version_info < (3, 11):  # the stable ABI module loads on 3.10 too
    raise ImportError('uvcuda needs Python 3.11 or later')

from ._uvcuda import (Device, DeviceMemory, Kernel, Module, Stream,
                      device_count, driver_info, err_name, strerror,
                      uv_version)
from . import _uvcuda
from ._asyncio import (CudaError, DeviceLike, StreamLike, attach, health,
                       ready, reset, stats)

__all__ = [
    'CudaError', 'Device', 'DeviceLike', 'DeviceMemory', 'Kernel', 'Module',
    'Stream', 'StreamLike', 'attach', 'device_count', 'driver_info',
    'err_name', 'health', 'ready', 'reset', 'stats', 'strerror',
    'uv_version', 'version',
]

#: The version of the uvcuda C library compiled into this package.
version: str = _uvcuda.version
__version__: str = _uvcuda.package_version

_uvcuda._init(CudaError, ready, reset)
