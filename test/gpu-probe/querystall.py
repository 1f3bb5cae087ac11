# Does a cuStreamQuery on an idle stream (what uvcuda's fault probe asks,
# on the reactor thread) wait while another thread is inside a long driver
# call? If it does, a probe there holds up every armed future's delivery
# for that long (the reactor scans counters between probes), and a loop
# context closing meanwhile must not wait for it (reactor.c retires it).
# One thread queries in a loop and records each call's time; the main
# thread makes, in turn: a module load that JIT-compiles a large PTX, a
# large cuMemAlloc + free, a cuCtxSynchronize behind a 200 ms kernel.
# Usage (GPU host): python3 test/gpu-probe/querystall.py
import ctypes
import threading
import time

cu = ctypes.CDLL("libcuda.so.1")
vp = ctypes.c_void_p
cu.cuStreamQuery.argtypes = [vp]
print("cuInit %d" % cu.cuInit(0))
dev = ctypes.c_int()
cu.cuDeviceGet(ctypes.byref(dev), 0)
ctx = vp()
cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
cu.cuCtxSetCurrent(ctx)
idle, busy = vp(), vp()
cu.cuStreamCreate(ctypes.byref(idle), 1)
cu.cuStreamCreate(ctypes.byref(busy), 1)

# A large PTX: many small kernels, so that the JIT takes a while.
N = 3000
body = []
for i in range(N):
    body.append(""".visible .entry k%d(.param .u64 p) {
 .reg .b64 %%rd<4>; .reg .b32 %%r<4>;
 ld.param.u64 %%rd1, [p]; cvta.to.global.u64 %%rd2, %%rd1;
 mov.u32 %%r1, %%tid.x; mul.lo.s32 %%r2, %%r1, %d; st.global.u32 [%%rd2], %%r2;
 ret; }
""" % (i, i + 1))
ptx = (".version 7.0\n.target sm_70\n.address_size 64\n" + "".join(body)).encode()
spin_ptx = b""".version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns) {
 .reg .b64 %rd<5>; .reg .pred %p;
 ld.param.u64 %rd1, [ns]; mov.u64 %rd2, %globaltimer;
L: mov.u64 %rd3, %globaltimer; sub.u64 %rd4, %rd3, %rd2;
 setp.lt.u64 %p, %rd4, %rd1; @%p bra L; ret; }
"""

stop = False
lat = []  # (t_start, seconds)


def querier():
    cu.cuCtxSetCurrent(ctx)
    while not stop:
        t0 = time.perf_counter()
        cu.cuStreamQuery(idle)
        lat.append((t0, time.perf_counter() - t0))


def during(name, fn):
    th = threading.Thread(target=querier)
    global stop
    stop = False
    del lat[:]
    th.start()
    time.sleep(0.2)
    a = time.perf_counter()
    r = fn()
    b = time.perf_counter()
    time.sleep(0.05)
    stop = True
    th.join()
    inside = [d for (t, d) in lat if a <= t <= b]
    worst = max([d for (t, d) in lat if t <= b] or [0])
    print("%-34s took %8.1f ms (rc %s); queries meanwhile %6d, longest "
          "%8.3f ms; longest overall %8.3f ms" % (
              name, (b - a) * 1e3, r, len(inside),
              max(inside or [0]) * 1e3, worst * 1e3))


mod = vp()
during("cuModuleLoadData (%d kernels JIT)" % N,
       lambda: cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx)))
dptr = ctypes.c_ulonglong()


def alloc_free():
    r = cu.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(16 << 30))
    return (r, cu.cuMemFree_v2(dptr) if r == 0 else -1)


during("cuMemAlloc 16 GiB + cuMemFree", alloc_free)
smod, fn = vp(), vp()
print("spin module %d, function %d" % (
    cu.cuModuleLoadData(ctypes.byref(smod), ctypes.c_char_p(spin_ptx)),
    cu.cuModuleGetFunction(ctypes.byref(fn), smod, b"spin")))


def sync_behind_kernel():
    ns = ctypes.c_ulonglong(200 * 1000 * 1000)
    args = (vp * 1)(ctypes.cast(ctypes.pointer(ns), vp))
    r = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, busy, args, None)
    return (r, cu.cuCtxSynchronize())


during("cuCtxSynchronize, 200 ms kernel", sync_behind_kernel)
