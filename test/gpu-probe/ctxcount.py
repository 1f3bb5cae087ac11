import ctypes, os, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
cu.cuDeviceGet(ctypes.byref(dev), 0)
ctxs = []
r = 0
while len(ctxs) < 200:
    c = ctypes.c_void_p()
    r = cu.cuCtxCreate_v2(ctypes.byref(c), 0, dev)
    if r != 0:
        break
    ctxs.append(c)
    cu.cuCtxPopCurrent_v2(None)
free = ctypes.c_size_t(); total = ctypes.c_size_t()
print("env CUDA_DEVICE_MAX_CONNECTIONS=%s: %d contexts made, then CUresult %d" % (os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS","unset"), len(ctxs), r))
sys.stdout.flush()
