# What another user of the device can see after cuDevicePrimaryCtxReset:
# does the primary context keep its handle, does its unique id change, and
# what do id and state queries on the old handle answer? A second copy of
# uvcuda in the process (which keeps its own records) could only notice a
# reset it did not make through such a change (api.md, uvcuda_device_reset).
# Usage (GPU host): python3 test/gpu-probe/ctxreset.py
import ctypes

cu = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_ulonglong
print("cuInit %d" % cu.cuInit(0))
dev = ctypes.c_int()
cu.cuDeviceGet(ctypes.byref(dev), 0)


def ctx_id(c):
    i = u64()
    r = cu.cuCtxGetId(c, ctypes.byref(i)) if hasattr(cu, "cuCtxGetId") else -1
    return "%d (%d)" % (i.value, r)


def state():
    flags, active = ctypes.c_uint(), ctypes.c_int()
    r = cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
    return "active %d (%d)" % (active.value, r)


p1 = ctypes.c_void_p()
print("retain %d handle %#x id %s %s" % (
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(p1), dev), p1.value or 0,
    ctx_id(p1), state()))
cu.cuCtxSetCurrent(p1)
s = ctypes.c_void_p()
print("stream create %d" % cu.cuStreamCreate(ctypes.byref(s), 1))
sid = u64()
print("stream id %d (%d)" % (sid.value, cu.cuStreamGetId(s, ctypes.byref(sid))))
print("reset %d %s" % (cu.cuDevicePrimaryCtxReset_v2(dev)
                       if hasattr(cu, "cuDevicePrimaryCtxReset_v2")
                       else cu.cuDevicePrimaryCtxReset(dev), state()))
print("old handle after reset: id %s" % ctx_id(p1))
cur = ctypes.c_void_p()
print("current after reset %d %#x" % (cu.cuCtxGetCurrent(ctypes.byref(cur)), cur.value or 0))
p2 = ctypes.c_void_p()
print("retain again %d handle %#x (same: %s) id %s %s" % (
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(p2), dev), p2.value or 0,
    p1.value == p2.value, ctx_id(p2), state()))
print("old handle after re-retain: id %s" % ctx_id(p1))
cu.cuCtxSetCurrent(p2)
# The old stream: only its id query, which reads the handle (a launch or
# destroy on it may crash, which is the point of asking the context first).
print("old stream id query %d" % cu.cuStreamGetId(s, ctypes.byref(sid)))
