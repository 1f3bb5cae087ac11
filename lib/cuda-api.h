/* cuda-api.h: the part of the CUDA driver API that uvcuda uses, declared
 * here so that the library, the bindings, the simulated driver (test/sim),
 * the tests, the bench and the examples build with a C compiler and libuv
 * alone: no CUDA Toolkit at build time. The driver itself is dlopen'ed at
 * run time (driver.c).
 *
 * What is declared: the opaque handles, CUdevice, CUdeviceptr, cuuint32_t /
 * cuuint64_t, CUhostFn / CUstreamCallback, CUDAAPI / CUDA_CB, every CUresult
 * value of CUDA 13.0, the other enum constants and flag macros this tree
 * names, and the PFN_<name>_v<version> typedefs of cudaTypedefs.h that it
 * calls entry points through (driver.h's table, support/drvtab.h's) or that
 * the simulated driver implements. Names, values, ABI versions and
 * prototypes are the toolkit's own, so code reads the same as with
 * <cuda.h>. Add what new code needs; the drift test checks it.
 *
 * Next to the real header: a translation unit that includes <cuda.h> BEFORE
 * this header (CUDA_VERSION is then defined) gets the toolkit's declarations
 * (<cudaTypedefs.h>, which must be 12.5 or newer) and none of these. One
 * that includes <cuda.h> AFTER this header fails to compile (CUresult and
 * the rest declared twice): include <cuda.h> first.
 *
 * Drift test (test/cuda-api/, suite unit, built where the toolkit headers
 * are found): it includes <cuda.h> and <cudaTypedefs.h>, then this header
 * with UVCUDA_CUDA_API_SELFTEST defined, which ignores CUDA_VERSION and
 *  - declares every handle, scalar and PFN typedef again under its own name:
 *    C11 accepts a second typedef only for the very same type, so a changed
 *    prototype or handle is a compile error (and a PFN list entry whose
 *    name and ABI version cudaTypedefs.h lacks fails another check);
 *  - defines every flag macro again: a different value is a "redefined"
 *    error (the test is built with -Werror);
 *  - declares the enums, whose constants cannot be declared twice, under
 *    uvcuda_selftest_<name>, and the test checks each value, the enum's
 *    size and underlying type against the toolkit's.
 *
 * Enums and entry points are X-macro lists, XX(NAME, value) and
 * XX(name, version, (parameters)), expanded further down into
 * `typedef enum tag { NAME = value, ... } Type;` and
 * `typedef CUresult (CUDAAPI *PFN_name_vversion)(parameters);`. */
#ifndef UVCUDA_CUDA_API_H
#define UVCUDA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- Enums (lists; declared below) ------------------------------------- */

/* CUresult: every value of CUDA 13.0's enum cudaError_enum. */
#define UVCUDA_CU_RESULT(XX)                            \
  XX(CUDA_SUCCESS, 0)                                   \
  XX(CUDA_ERROR_INVALID_VALUE, 1)                       \
  XX(CUDA_ERROR_OUT_OF_MEMORY, 2)                       \
  XX(CUDA_ERROR_NOT_INITIALIZED, 3)                     \
  XX(CUDA_ERROR_DEINITIALIZED, 4)                       \
  XX(CUDA_ERROR_PROFILER_DISABLED, 5)                   \
  XX(CUDA_ERROR_PROFILER_NOT_INITIALIZED, 6)            \
  XX(CUDA_ERROR_PROFILER_ALREADY_STARTED, 7)            \
  XX(CUDA_ERROR_PROFILER_ALREADY_STOPPED, 8)            \
  XX(CUDA_ERROR_STUB_LIBRARY, 34)                       \
  XX(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, 36)         \
  XX(CUDA_ERROR_DEVICE_UNAVAILABLE, 46)                 \
  XX(CUDA_ERROR_NO_DEVICE, 100)                         \
  XX(CUDA_ERROR_INVALID_DEVICE, 101)                    \
  XX(CUDA_ERROR_DEVICE_NOT_LICENSED, 102)               \
  XX(CUDA_ERROR_INVALID_IMAGE, 200)                     \
  XX(CUDA_ERROR_INVALID_CONTEXT, 201)                   \
  XX(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, 202)           \
  XX(CUDA_ERROR_MAP_FAILED, 205)                        \
  XX(CUDA_ERROR_UNMAP_FAILED, 206)                      \
  XX(CUDA_ERROR_ARRAY_IS_MAPPED, 207)                   \
  XX(CUDA_ERROR_ALREADY_MAPPED, 208)                    \
  XX(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)                 \
  XX(CUDA_ERROR_ALREADY_ACQUIRED, 210)                  \
  XX(CUDA_ERROR_NOT_MAPPED, 211)                        \
  XX(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, 212)               \
  XX(CUDA_ERROR_NOT_MAPPED_AS_POINTER, 213)             \
  XX(CUDA_ERROR_ECC_UNCORRECTABLE, 214)                 \
  XX(CUDA_ERROR_UNSUPPORTED_LIMIT, 215)                 \
  XX(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, 216)            \
  XX(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, 217)           \
  XX(CUDA_ERROR_INVALID_PTX, 218)                       \
  XX(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, 219)          \
  XX(CUDA_ERROR_NVLINK_UNCORRECTABLE, 220)              \
  XX(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, 221)            \
  XX(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)           \
  XX(CUDA_ERROR_JIT_COMPILATION_DISABLED, 223)          \
  XX(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, 224)         \
  XX(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, 225)          \
  XX(CUDA_ERROR_CONTAINED, 226)                         \
  XX(CUDA_ERROR_INVALID_SOURCE, 300)                    \
  XX(CUDA_ERROR_FILE_NOT_FOUND, 301)                    \
  XX(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, 302)    \
  XX(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, 303)         \
  XX(CUDA_ERROR_OPERATING_SYSTEM, 304)                  \
  XX(CUDA_ERROR_INVALID_HANDLE, 400)                    \
  XX(CUDA_ERROR_ILLEGAL_STATE, 401)                     \
  XX(CUDA_ERROR_LOSSY_QUERY, 402)                       \
  XX(CUDA_ERROR_NOT_FOUND, 500)                         \
  XX(CUDA_ERROR_NOT_READY, 600)                         \
  XX(CUDA_ERROR_ILLEGAL_ADDRESS, 700)                   \
  XX(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701)           \
  XX(CUDA_ERROR_LAUNCH_TIMEOUT, 702)                    \
  XX(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, 703)     \
  XX(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704)       \
  XX(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, 705)           \
  XX(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708)            \
  XX(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709)              \
  XX(CUDA_ERROR_ASSERT, 710)                            \
  XX(CUDA_ERROR_TOO_MANY_PEERS, 711)                    \
  XX(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712)    \
  XX(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713)        \
  XX(CUDA_ERROR_HARDWARE_STACK_ERROR, 714)              \
  XX(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715)               \
  XX(CUDA_ERROR_MISALIGNED_ADDRESS, 716)                \
  XX(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717)             \
  XX(CUDA_ERROR_INVALID_PC, 718)                        \
  XX(CUDA_ERROR_LAUNCH_FAILED, 719)                     \
  XX(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, 720)      \
  XX(CUDA_ERROR_TENSOR_MEMORY_LEAK, 721)                \
  XX(CUDA_ERROR_NOT_PERMITTED, 800)                     \
  XX(CUDA_ERROR_NOT_SUPPORTED, 801)                     \
  XX(CUDA_ERROR_SYSTEM_NOT_READY, 802)                  \
  XX(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)            \
  XX(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804)    \
  XX(CUDA_ERROR_MPS_CONNECTION_FAILED, 805)             \
  XX(CUDA_ERROR_MPS_RPC_FAILURE, 806)                   \
  XX(CUDA_ERROR_MPS_SERVER_NOT_READY, 807)              \
  XX(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, 808)           \
  XX(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, 809)       \
  XX(CUDA_ERROR_MPS_CLIENT_TERMINATED, 810)             \
  XX(CUDA_ERROR_CDP_NOT_SUPPORTED, 811)                 \
  XX(CUDA_ERROR_CDP_VERSION_MISMATCH, 812)              \
  XX(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900)        \
  XX(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901)        \
  XX(CUDA_ERROR_STREAM_CAPTURE_MERGE, 902)              \
  XX(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, 903)          \
  XX(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, 904)           \
  XX(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, 905)          \
  XX(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, 906)           \
  XX(CUDA_ERROR_CAPTURED_EVENT, 907)                    \
  XX(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, 908)       \
  XX(CUDA_ERROR_TIMEOUT, 909)                           \
  XX(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, 910)         \
  XX(CUDA_ERROR_EXTERNAL_DEVICE, 911)                   \
  XX(CUDA_ERROR_INVALID_CLUSTER_SIZE, 912)              \
  XX(CUDA_ERROR_FUNCTION_NOT_LOADED, 913)               \
  XX(CUDA_ERROR_INVALID_RESOURCE_TYPE, 914)             \
  XX(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, 915)    \
  XX(CUDA_ERROR_KEY_ROTATION, 916)                      \
  XX(CUDA_ERROR_UNKNOWN, 999)

/* cuCtxCreate flags (a subset). */
#define UVCUDA_CU_CTX_FLAGS(XX)                         \
  XX(CU_CTX_SCHED_AUTO, 0x00)                           \
  XX(CU_CTX_SCHED_SPIN, 0x01)                           \
  XX(CU_CTX_SCHED_YIELD, 0x02)                          \
  XX(CU_CTX_SCHED_BLOCKING_SYNC, 0x04)                  \
  XX(CU_CTX_MAP_HOST, 0x08)                             \
  XX(CU_CTX_FLAGS_MASK, 0xFF)

/* cuStreamCreate flags. */
#define UVCUDA_CU_STREAM_FLAGS(XX)                      \
  XX(CU_STREAM_DEFAULT, 0x0)                            \
  XX(CU_STREAM_NON_BLOCKING, 0x1)

/* cuEventCreate flags. */
#define UVCUDA_CU_EVENT_FLAGS(XX)                       \
  XX(CU_EVENT_DEFAULT, 0x0)                             \
  XX(CU_EVENT_BLOCKING_SYNC, 0x1)                       \
  XX(CU_EVENT_DISABLE_TIMING, 0x2)                      \
  XX(CU_EVENT_INTERPROCESS, 0x4)

/* cuStreamIsCapturing's answer. */
#define UVCUDA_CU_STREAM_CAPTURE_STATUS(XX)             \
  XX(CU_STREAM_CAPTURE_STATUS_NONE, 0)                  \
  XX(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1)                \
  XX(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)

/* cuStreamBeginCapture / cuThreadExchangeStreamCaptureMode. */
#define UVCUDA_CU_STREAM_CAPTURE_MODE(XX)               \
  XX(CU_STREAM_CAPTURE_MODE_GLOBAL, 0)                  \
  XX(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1)            \
  XX(CU_STREAM_CAPTURE_MODE_RELAXED, 2)

/* cuStreamWaitEvent flags. */
#define UVCUDA_CU_EVENT_WAIT_FLAGS(XX)                  \
  XX(CU_EVENT_WAIT_DEFAULT, 0x0)                        \
  XX(CU_EVENT_WAIT_EXTERNAL, 0x1)

/* cuStreamWaitValue32/64 flags. */
#define UVCUDA_CU_STREAM_WAIT_VALUE_FLAGS(XX)           \
  XX(CU_STREAM_WAIT_VALUE_GEQ, 0x0)                     \
  XX(CU_STREAM_WAIT_VALUE_EQ, 0x1)                      \
  XX(CU_STREAM_WAIT_VALUE_AND, 0x2)                     \
  XX(CU_STREAM_WAIT_VALUE_NOR, 0x3)                     \
  XX(CU_STREAM_WAIT_VALUE_FLUSH, 1 << 30)

/* cuStreamWriteValue32/64 flags (NO_MEMORY_BARRIER: rejected by v2). */
#define UVCUDA_CU_STREAM_WRITE_VALUE_FLAGS(XX)          \
  XX(CU_STREAM_WRITE_VALUE_DEFAULT, 0x0)                \
  XX(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, 0x1)

/* cuGetProcAddress flags. */
#define UVCUDA_CU_DRIVER_PROC_ADDRESS_FLAGS(XX)         \
  XX(CU_GET_PROC_ADDRESS_DEFAULT, 0)                    \
  XX(CU_GET_PROC_ADDRESS_LEGACY_STREAM, 1 << 0)         \
  XX(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, 1 << 1)

/* cuGetProcAddress's symbol status. */
#define UVCUDA_CU_DRIVER_PROC_ADDRESS_QUERY_RESULT(XX)  \
  XX(CU_GET_PROC_ADDRESS_SUCCESS, 0)                    \
  XX(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1)           \
  XX(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 2)

/* cuDeviceGetAttribute: the attributes uvcuda, its tests and bench may
 * ask about and the simulated driver answers (a subset of the toolkit's
 * enum; the values are its own). */
#define UVCUDA_CU_DEVICE_ATTRIBUTE(XX)                                   \
  XX(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1)                       \
  XX(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 2)                             \
  XX(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 3)                             \
  XX(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 4)                             \
  XX(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5)                              \
  XX(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 6)                              \
  XX(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 7)                              \
  XX(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 8)                 \
  XX(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 9)                       \
  XX(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 10)                                  \
  XX(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 12)                    \
  XX(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                       \
  XX(CU_DEVICE_ATTRIBUTE_INTEGRATED, 18)                                 \
  XX(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 19)                        \
  XX(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 31)                         \
  XX(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 33)                                 \
  XX(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 39)             \
  XX(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 40)                         \
  XX(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 41)                         \
  XX(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                   \
  XX(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)                   \
  XX(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 86)               \
  XX(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 88)                     \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 91)    \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 92)                  \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 93)           \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 94)           \
  XX(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 99)                    \
  XX(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 113)         \
  XX(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 115)                    \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 122)             \
  XX(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 123)

/* XX(enum tag, typedef name, value list), as the toolkit names them. */
#define UVCUDA_CU_ENUMS(XX)                                                  \
  XX(cudaError_enum, CUresult, UVCUDA_CU_RESULT)                             \
  XX(CUctx_flags_enum, CUctx_flags, UVCUDA_CU_CTX_FLAGS)                     \
  XX(CUstream_flags_enum, CUstream_flags, UVCUDA_CU_STREAM_FLAGS)            \
  XX(CUevent_flags_enum, CUevent_flags, UVCUDA_CU_EVENT_FLAGS)               \
  XX(CUevent_wait_flags_enum, CUevent_wait_flags,                            \
     UVCUDA_CU_EVENT_WAIT_FLAGS)                                             \
  XX(CUstreamCaptureStatus_enum, CUstreamCaptureStatus,                      \
     UVCUDA_CU_STREAM_CAPTURE_STATUS)                                        \
  XX(CUstreamCaptureMode_enum, CUstreamCaptureMode,                          \
     UVCUDA_CU_STREAM_CAPTURE_MODE)                                          \
  XX(CUstreamWaitValue_flags_enum, CUstreamWaitValue_flags,                  \
     UVCUDA_CU_STREAM_WAIT_VALUE_FLAGS)                                      \
  XX(CUstreamWriteValue_flags_enum, CUstreamWriteValue_flags,                \
     UVCUDA_CU_STREAM_WRITE_VALUE_FLAGS)                                     \
  XX(CUdriverProcAddress_flags_enum, CUdriverProcAddress_flags,              \
     UVCUDA_CU_DRIVER_PROC_ADDRESS_FLAGS)                                    \
  XX(CUdriverProcAddressQueryResult_enum, CUdriverProcAddressQueryResult,    \
     UVCUDA_CU_DRIVER_PROC_ADDRESS_QUERY_RESULT)                             \
  XX(CUdevice_attribute_enum, CUdevice_attribute, UVCUDA_CU_DEVICE_ATTRIBUTE)

/* ---- Entry points (lists; declared below) ----------------------------- */

/* XX(name, ABI version, parameters): PFN_<name>_v<version> as in
 * cudaTypedefs.h, returning CUresult. lib/: driver.h's table and the entry
 * points it is growing. */
#define UVCUDA_CU_PFNS_LIB(XX) \
  XX(cuInit, 2000, (unsigned int Flags)) \
  XX(cuDriverGetVersion, 2020, (int *driverVersion)) \
  XX(cuGetErrorName, 6000, (CUresult error, const char **pStr)) \
  XX(cuGetErrorString, 6000, (CUresult error, const char **pStr)) \
  XX(cuGetProcAddress, 12000, (const char *symbol, void **pfn, int driverVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolFound)) \
  XX(cuDeviceGet, 2000, (CUdevice_v1 *device, int ordinal)) \
  XX(cuDeviceGetCount, 2000, (int *count)) \
  XX(cuDeviceGetAttribute, 2000, (int *pi, CUdevice_attribute attrib, CUdevice_v1 dev)) \
  XX(cuDevicePrimaryCtxRetain, 7000, (CUcontext *pctx, CUdevice_v1 dev)) \
  XX(cuDevicePrimaryCtxRelease, 11000, (CUdevice_v1 dev)) \
  XX(cuDevicePrimaryCtxReset, 11000, (CUdevice_v1 dev)) \
  XX(cuCtxGetCurrent, 4000, (CUcontext *pctx)) \
  XX(cuCtxSetCurrent, 4000, (CUcontext ctx)) \
  XX(cuCtxGetDevice, 2000, (CUdevice_v1 *device)) \
  XX(cuCtxGetId, 12000, (CUcontext ctx, unsigned long long *ctxId)) \
  XX(cuCtxSynchronize, 2000, (void)) \
  XX(cuStreamCreate, 2000, (CUstream *phStream, unsigned int Flags)) \
  XX(cuStreamDestroy, 4000, (CUstream hStream)) \
  XX(cuStreamGetCtx, 9020, (CUstream hStream, CUcontext *pctx)) \
  XX(cuStreamGetId, 12000, (CUstream hStream, unsigned long long *streamId)) \
  XX(cuStreamQuery, 2000, (CUstream hStream)) \
  XX(cuStreamSynchronize, 2000, (CUstream hStream)) \
  XX(cuStreamIsCapturing, 10000, (CUstream hStream, CUstreamCaptureStatus *captureStatus)) \
  XX(cuThreadExchangeStreamCaptureMode, 10010, (CUstreamCaptureMode *mode)) \
  XX(cuEventCreate, 2000, (CUevent *phEvent, unsigned int Flags)) \
  XX(cuEventRecord, 2000, (CUevent hEvent, CUstream hStream)) \
  XX(cuEventQuery, 2000, (CUevent hEvent)) \
  XX(cuEventDestroy, 4000, (CUevent hEvent)) \
  XX(cuLaunchHostFunc, 10000, (CUstream hStream, CUhostFn fn, void *userData)) \
  XX(cuStreamWriteValue32, 11070, (CUstream stream, CUdeviceptr_v2 addr, cuuint32_t value, unsigned int flags)) \
  XX(cuStreamWriteValue64, 11070, (CUstream stream, CUdeviceptr_v2 addr, cuuint64_t value, unsigned int flags)) \
  XX(cuStreamWaitValue32, 11070, (CUstream stream, CUdeviceptr_v2 addr, cuuint32_t value, unsigned int flags)) \
  XX(cuMemHostAlloc, 2020, (void **pp, size_t bytesize, unsigned int Flags)) \
  XX(cuMemFreeHost, 2000, (void *p)) \
  XX(cuMemHostGetDevicePointer, 3020, (CUdeviceptr_v2 *pdptr, void *p, unsigned int Flags)) \
  XX(cuMemHostRegister, 6050, (void *p, size_t bytesize, unsigned int Flags)) \
  XX(cuMemHostUnregister, 4000, (void *p))

/* What the bindings, tests, bench and examples call beyond lib/: with the
 * list above, support/drvtab.h's one table (resolved through
 * uvcuda_driver_symbol). Every entry exists in every driver uvcuda
 * supports and in the simulated driver. cuCtxCreate is the CUDA 3.2 ABI
 * (flags, device): every driver uvcuda supports has it, where 12.5's
 * (CUctxCreateParams, listed for the simulation below) needs 12.5. */
#define UVCUDA_CU_PFNS_SUPPORT(XX) \
  XX(cuCtxCreate, 3020, (CUcontext *pctx, unsigned int flags, CUdevice_v1 dev)) \
  XX(cuCtxDestroy, 4000, (CUcontext ctx)) \
  XX(cuCtxPushCurrent, 4000, (CUcontext ctx)) \
  XX(cuCtxPopCurrent, 4000, (CUcontext *pctx)) \
  XX(cuMemsetD32Async, 3020, (CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N, CUstream hStream)) \
  XX(cuDeviceGetName, 2000, (char *name, int len, CUdevice_v1 dev)) \
  XX(cuStreamBeginCapture, 10010, (CUstream hStream, CUstreamCaptureMode mode)) \
  XX(cuStreamEndCapture, 10000, (CUstream hStream, CUgraph *phGraph)) \
  XX(cuStreamWaitEvent, 3020, (CUstream hStream, CUevent hEvent, unsigned int Flags)) \
  XX(cuGraphDestroy, 10000, (CUgraph hGraph)) \
  XX(cuGraphInstantiateWithFlags, 11040, (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)) \
  XX(cuGraphLaunch, 10000, (CUgraphExec hGraph, CUstream hStream)) \
  XX(cuGraphExecDestroy, 10000, (CUgraphExec hGraphExec)) \
  XX(cuMemAlloc, 3020, (CUdeviceptr_v2 *dptr, size_t bytesize)) \
  XX(cuMemFree, 3020, (CUdeviceptr_v2 dptr)) \
  XX(cuMemcpyHtoDAsync, 3020, (CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)) \
  XX(cuMemcpyDtoHAsync, 3020, (void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream)) \
  XX(cuMemcpyDtoDAsync, 3020, (CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream)) \
  XX(cuMemsetD8Async, 3020, (CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N, CUstream hStream)) \
  XX(cuModuleLoadData, 2000, (CUmodule *module, const void *image)) \
  XX(cuModuleGetFunction, 2000, (CUfunction *hfunc, CUmodule hmod, const char *name)) \
  XX(cuModuleUnload, 2000, (CUmodule hmod)) \
  XX(cuLaunchKernel, 4000, (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)) \
  XX(cuDeviceCanAccessPeer, 4000, (int *canAccessPeer, CUdevice_v1 dev, CUdevice_v1 peerDev)) \
  XX(cuCtxEnablePeerAccess, 4000, (CUcontext peerContext, unsigned int Flags))

/* Entry points a driver may lack (left NULL in support/drvtab.h's table):
 * the stream-ordered allocator and 12.4's cuFuncGetParamInfo (the
 * simulated driver has none of them). */
#define UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(XX) \
  XX(cuMemAllocAsync, 11020, (CUdeviceptr_v2 *dptr, size_t bytesize, CUstream hStream)) \
  XX(cuMemFreeAsync, 11020, (CUdeviceptr_v2 dptr, CUstream hStream)) \
  XX(cuFuncGetParamInfo, 12040, (CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize))

/* What the simulated driver (test/sim) implements beyond the lists above:
 * the other ABI versions of their entry points that a driver serves to
 * older or newer callers, and a few entry points nothing here calls
 * through a table (the simulation's own tests do). In no table. */
#define UVCUDA_CU_PFNS_SIM(XX) \
  XX(cuGetProcAddress, 11030, (const char *symbol, void **pfn, int driverVersion, cuuint64_t flags)) \
  XX(cuCtxCreate, 12050, (CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice_v1 dev)) \
  XX(cuCtxGetDevice, 13000, (CUdevice_v1 *device, CUcontext ctx)) \
  XX(cuCtxSynchronize, 13000, (CUcontext ctx)) \
  XX(cuEventSynchronize, 2000, (CUevent hEvent)) \
  XX(cuStreamAddCallback, 5000, (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)) \
  XX(cuStreamWriteValue32, 8000, (CUstream stream, CUdeviceptr_v2 addr, cuuint32_t value, unsigned int flags)) \
  XX(cuStreamWriteValue64, 9000, (CUstream stream, CUdeviceptr_v2 addr, cuuint64_t value, unsigned int flags)) \
  XX(cuStreamWaitValue32, 8000, (CUstream stream, CUdeviceptr_v2 addr, cuuint32_t value, unsigned int flags)) \
  XX(cuMemcpyPeerAsync, 4000, (CUdeviceptr_v2 dstDevice, CUcontext dstContext, CUdeviceptr_v2 srcDevice, CUcontext srcContext, size_t ByteCount, CUstream hStream))

#if defined(CUDA_VERSION) && !defined(UVCUDA_CUDA_API_SELFTEST)

/* ---- The toolkit's <cuda.h> came first: use its declarations ----------- */

#include <cudaTypedefs.h>

#if CUDA_VERSION < 12050
#error "uvcuda: <cuda.h> older than CUDA 12.5 (the PFN lists name 12.5's typedefs)"
#endif

#else /* !CUDA_VERSION || UVCUDA_CUDA_API_SELFTEST */

/* ---- Types and flag macros --------------------------------------------- */

#ifdef _WIN32
#define CUDAAPI __stdcall
#define CUDA_CB __stdcall
#else
#define CUDAAPI
#define CUDA_CB
#endif

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

#if defined(_WIN64) || defined(__LP64__)
typedef unsigned long long CUdeviceptr_v2;
#else
typedef unsigned int CUdeviceptr_v2;
#endif
typedef CUdeviceptr_v2 CUdeviceptr;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

/* cuCtxCreate v4's parameters (12.5). Their pointees are declared no
 * further: nothing here fills them. The drift test compares the layout. */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCigParam_st CUctxCigParam;
#ifndef UVCUDA_CUDA_API_SELFTEST
typedef struct CUctxCreateParams_st {
  CUexecAffinityParam *execAffinityParams;
  int numExecAffinityParams;
  CUctxCigParam *cigParams;
} CUctxCreateParams;
#endif

typedef void (CUDA_CB *CUhostFn)(void *userData);

/* Special stream handles. */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* cuMemHostAlloc flags. */
#define CU_MEMHOSTALLOC_PORTABLE        0x01
#define CU_MEMHOSTALLOC_DEVICEMAP       0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED   0x04

/* cuMemHostRegister flags. */
#define CU_MEMHOSTREGISTER_PORTABLE     0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP    0x02
#define CU_MEMHOSTREGISTER_IOMEMORY     0x04
#define CU_MEMHOSTREGISTER_READ_ONLY    0x08

/* ---- Enums ------------------------------------------------------------- */

#ifdef UVCUDA_CUDA_API_SELFTEST
#define UVCUDA_CU__VALUE(name, value) uvcuda_selftest_##name = (value),
#define UVCUDA_CU__ENUM(tag, type, values)                                   \
  typedef enum uvcuda_selftest_##tag { values(UVCUDA_CU__VALUE) }            \
      uvcuda_selftest_##type;
#else
#define UVCUDA_CU__VALUE(name, value) name = (value),
#define UVCUDA_CU__ENUM(tag, type, values)                                   \
  typedef enum tag { values(UVCUDA_CU__VALUE) } type;
#endif
UVCUDA_CU_ENUMS(UVCUDA_CU__ENUM)
#undef UVCUDA_CU__ENUM
#undef UVCUDA_CU__VALUE

/* cuStreamAddCallback's callback (it takes a CUresult: after the enums). */
typedef void (CUDA_CB *CUstreamCallback)(CUstream hStream, CUresult status, void *userData);

/* ---- Entry points: PFN_<name>_v<ABI version> -------------------------- */

/* In the self-test these use the toolkit's enum types (ours carry the
 * uvcuda_selftest_ prefix there and are compared value by value). */

#define UVCUDA_CU__PFN(name, ver, params) \
  typedef CUresult (CUDAAPI *PFN_##name##_v##ver) params;
UVCUDA_CU_PFNS_LIB(UVCUDA_CU__PFN)
UVCUDA_CU_PFNS_SUPPORT(UVCUDA_CU__PFN)
UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(UVCUDA_CU__PFN)
UVCUDA_CU_PFNS_SIM(UVCUDA_CU__PFN)
#undef UVCUDA_CU__PFN

#endif /* !CUDA_VERSION || UVCUDA_CUDA_API_SELFTEST */

/* CUDA 13.2's cuLaunchHostFunc_v2 (syncMode: 0 blocking, 1 spin-wait) is
 * not in the 13.0 headers: declared here unless <cuda.h> 13.2+ came first.
 * The drift test checks it only against a toolkit that declares it. */
#if !defined(CUDA_VERSION) || CUDA_VERSION < 13020 || defined(UVCUDA_CUDA_API_SELFTEST)
typedef CUresult (CUDAAPI *PFN_cuLaunchHostFunc_v13020)(CUstream hStream, CUhostFn fn, void *userData, unsigned int syncMode);
#endif

#endif /* UVCUDA_CUDA_API_H */
