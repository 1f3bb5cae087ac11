# What cuStreamGetId answers for the special stream handles (NULL, legacy,
# per-thread) in two contexts, and for a created stream: timelines are
# keyed by that id (docs/design.md, "Stream identity").
# Usage (GPU host): python3 test/gpu-probe/streamids.py
import ctypes

cu = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_ulonglong
print("cuInit %d" % cu.cuInit(0))
dev = ctypes.c_int()
cu.cuDeviceGet(ctypes.byref(dev), 0)
prim = ctypes.c_void_p()
print("primary retain %d" % cu.cuDevicePrimaryCtxRetain(ctypes.byref(prim), dev))
own = ctypes.c_void_p()
r = -1
for name in ("cuCtxCreate_v2", "cuCtxCreate"):
    if hasattr(cu, name):
        r = getattr(cu, name)(ctypes.byref(own), 0, dev)
        print("%s %d" % (name, r))
        if r == 0:
            break
LEGACY, PER_THREAD = ctypes.c_void_p(1), ctypes.c_void_p(2)
for label, c in (("primary", prim), ("own", own)):
    if not c.value:
        print("%s: no context" % label)
        continue
    cu.cuCtxSetCurrent(c)
    cid = u64()
    rc = cu.cuCtxGetId(c, ctypes.byref(cid)) if hasattr(cu, "cuCtxGetId") else -1
    out = ["ctx id %s (%d)" % (cid.value, rc)]
    for sl, h in (("NULL", ctypes.c_void_p(0)), ("legacy", LEGACY),
                  ("per-thread", PER_THREAD)):
        i = u64()
        rr = cu.cuStreamGetId(h, ctypes.byref(i))
        out.append("%s id %d (%d)" % (sl, i.value, rr))
    s = ctypes.c_void_p()
    cu.cuStreamCreate(ctypes.byref(s), 1)
    i = u64()
    out.append("created id %d (%d)" % (i.value, cu.cuStreamGetId(s, ctypes.byref(i))))
    print("%s: %s" % (label, ", ".join(out)))
