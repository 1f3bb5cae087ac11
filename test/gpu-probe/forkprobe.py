# What the real driver does in a child forked after cuInit (api.md, "Processes
# and fork", cites it). Prints the parent's and the child's CUresults.
# Usage (GPU host): python3 test/gpu-probe/forkprobe.py
import ctypes, os, sys

cu = ctypes.CDLL("libcuda.so.1")
n = ctypes.c_int()
print("parent: cuInit %d, cuDeviceGetCount %d (%d devices)" %
      (cu.cuInit(0), cu.cuDeviceGetCount(ctypes.byref(n)), n.value))
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    m = ctypes.c_int(-1)
    r1 = cu.cuDeviceGetCount(ctypes.byref(m))
    r2 = cu.cuInit(0)
    dev = ctypes.c_int()
    r3 = cu.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    r4 = cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
    print("child: cuDeviceGetCount %d, cuInit %d, cuDeviceGet %d, "
          "cuDevicePrimaryCtxRetain %d" % (r1, r2, r3, r4))
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
s = ctypes.c_void_p()
print("parent after the fork: cuStreamCreate %d" %
      cu.cuStreamCreate(ctypes.byref(s), 0))
