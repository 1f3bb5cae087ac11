// Type declarations for uvcuda (Node.js binding). Every asynchronous call
// returns a Promise that settles on the JS thread when the GPU work is done.
// Bad arguments throw TypeError / RangeError synchronously; GPU and driver
// errors reject (or, for synchronous calls, throw) a UvcudaError.

/// <reference types="node" />

/** Host memory a copy reads or writes. */
export type BufferSource = ArrayBufferView | ArrayBuffer;

/** Kernel parameter types, in the order of the kernel's .param list. */
export type ParamType =
  | 'ptr' | 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'u64' | 'i64' | 'f32' | 'f64';

/** A kernel argument: DeviceMemory / bigint / null for 'ptr', number for the
 * 8..32-bit and float types, bigint or a safe-integer number for 'u64'/'i64'. */
export type KernelArg = DeviceMemory | bigint | number | null;

/** Launch dimensions: x, or [x], [x, y], [x, y, z] (positive integers). */
export type Dim3 = number | [number] | [number, number] | [number, number, number];

/** The Error of GPU and driver failures. */
export interface UvcudaError extends Error {
  /** 'CUDA_ERROR_ILLEGAL_ADDRESS', 'UVCUDA_ECAPTURING', 'UVCUDA_ENODRIVER',
   * 'EBUSY', ... (uvcuda_err_name) */
  code: string;
  /** The negative uvcuda error code; CUDA result r is -20000 - r. */
  errno: number;
  /** The CUresult, for CUDA driver errors. */
  cudaResult?: number;
}

export interface DriverInfo {
  /** What was dlopen'ed ($UVCUDA_LIBCUDA or libcuda.so.1). */
  path: string;
  /** cuDriverGetVersion, e.g. 13000. */
  driverVersion: number;
  deviceCount: number;
  memops32: boolean;
  memops64: boolean;
  /** cuLaunchHostFunc_v2 exists (CUDA >= 13.2). */
  hostTaskSync: boolean;
  /** The loaded driver is uvcuda's test simulation (no GPU). */
  simulated: boolean;
}

export type Completion = 'auto' | 'reactor' | 'hostfn' | 'hostfn-spin' | 'hostfn-block' | 'poll';

export interface ConfigureOptions {
  /** How completion reaches the loop (default: $UVCUDA_COMPLETION, else 'auto'). */
  completion?: Completion;
  /** Spin on the loop thread before arming, in µs (0..1000000; default 20). */
  spinBudgetUs?: number;
  /** Fault probe interval while armed, in µs (50..2000; default 1000). */
  probeIntervalUs?: number;
  /** Record start -> callback latencies in stats().latencyHistogram. */
  latencyHistogram?: boolean;
}

export interface Stats {
  completion: Completion;
  spinBudgetNs: number;
  started: number;
  completedSpin: number;
  completedReactor: number;
  completedHostfn: number;
  completedPoll: number;
  failed: number;
  cancelled: number;
  fallbacks: number;
  reactorWakeups: number;
  hostfnWakeups: number;
  faults: number;
  timelines: number;
  /** Promises of this env not yet settled. */
  pending: number;
  awaited: number;
  resolved: number;
  rejected: number;
  /** Bucket i counts latencies in [2^i, 2^(i+1)) ns (with latencyHistogram). */
  latencyHistogram: number[];
}

/** A CUDA device (its primary context). new Device(n) === openDevice(n). */
export class Device {
  /** Throws RangeError for an ordinal out of range, UvcudaError without a driver. */
  constructor(ordinal?: number);
  readonly ordinal: number;
  readonly name: string;
  /** [major, minor] */
  readonly computeCapability: [number, number];
  /** A new non-blocking stream. */
  createStream(): Stream;
  /** Device memory of byteLength bytes (contents undefined). From the
   * stream-ordered allocator where the device has memory pools. */
  alloc(byteLength: number): DeviceMemory;
  /** Loads a PTX (or cubin) image. Synchronous, and the driver waits for the
   * device to be idle: load modules before starting GPU work. */
  loadModule(image: string | BufferSource): Module;
}

export class Stream {
  private constructor();
  /** Wraps a CUstream made elsewhere (another addon). The default stream
   * handles 0n (NULL), 1n (legacy), 2n (per-thread) need the Device. It is
   * never destroyed here; it must stay valid while promises on it pend. */
  static fromHandle(handle: bigint, device?: Device): Stream;
  /** The CUstream, for other addons. */
  readonly handle: bigint;
  /** Created by createStream (destroy() destroys it) or wrapped by fromHandle. */
  readonly owned: boolean;
  readonly device: Device | null;
  readonly destroyed: boolean;
  /** Promises pending on this stream. */
  readonly pending: number;

  /** Copies all of src into dst at dstOffset. */
  copyToDevice(dst: DeviceMemory, src: BufferSource, dstOffset?: number): Promise<void>;
  /** Fills all of dst from src at srcOffset; resolves with dst. */
  copyFromDevice<T extends BufferSource>(dst: T, src: DeviceMemory, srcOffset?: number): Promise<T>;
  /** byteLength defaults to src.byteLength - srcOffset. */
  copyDevice(dst: DeviceMemory, src: DeviceMemory, byteLength?: number,
             dstOffset?: number, srcOffset?: number): Promise<void>;
  /** Sets bytes to value (0..255); byteLength defaults to the rest of dst. */
  memset(dst: DeviceMemory, value: number, byteLength?: number, offset?: number): Promise<void>;
  /** Launches kernel; args follow its signature. Resolves when it has run. */
  launch(kernel: Kernel, grid: Dim3, block: Dim3, args?: KernelArg[],
         sharedMemBytes?: number): Promise<void>;
  /** Resolves once the work enqueued so far on this stream is done. */
  fence(): Promise<void>;
  /** Baseline (what addons do today): napi_create_async_work running
   * cuStreamSynchronize on a libuv pool thread. For comparison. */
  fenceOnThreadPool(): Promise<void>;
  /** Baseline: launch + cuStreamSynchronize on a libuv pool thread. */
  launchOnThreadPool(kernel: Kernel, grid: Dim3, block: Dim3, args?: KernelArg[],
                     sharedMemBytes?: number): Promise<void>;
  /** Starts graph capture (the graph is discarded at endCapture); awaiting
   * a capturing stream rejects with UVCUDA_ECAPTURING. */
  beginCapture(mode?: 'global' | 'thread-local' | 'relaxed'): void;
  endCapture(): void;
  /** No new work; an owned stream is destroyed once its pending work is done. */
  destroy(): void;
}

export class DeviceMemory {
  private constructor();
  readonly byteLength: number;
  /** The device pointer (0n once freed). Work enqueued with it by other code
   * is not tracked: it must be done before free(). */
  readonly ptr: bigint;
  readonly device: Device;
  readonly freed: boolean;
  /** Promises pending that use this memory. */
  readonly pending: number;
  /** Allocated by the stream-ordered allocator: freed without waiting for
   * the device. Otherwise cuMemFree runs on a helper thread. */
  readonly streamOrdered: boolean;
  /** Releases the memory once the work pending on it is done. Idempotent. */
  free(): void;
}

export class Module {
  private constructor();
  readonly device: Device;
  readonly unloaded: boolean;
  /** A kernel of this module with its parameter types. */
  getFunction(name: string, signature: ParamType[]): Kernel;
  /** Unloads once no Kernel of it and no launch pending needs it. */
  unload(): void;
}

export class Kernel {
  private constructor();
  readonly name: string;
  readonly signature: ParamType[];
  readonly module: Module;
}

export const version: string;

/** For addons built on uvcuda's C API, in their binding.gyp: the directory
 * holding uvcuda.h and uvcuda/napi.h. */
export const include_dir: string;
/** For addons' binding.gyp: the gyp file whose target `uvcuda_napi` (the
 * helper and uvcuda's sources, a static library) they depend on:
 * `"<!(node -p \"require('uvcuda').targets\"):uvcuda_napi"`. */
export const targets: string;
/** Loads the driver; throws UvcudaError (UVCUDA_ENODRIVER, CUDA_ERROR_NO_DEVICE, ...). */
export function driverInfo(): DriverInfo;
export function deviceCount(): number;
export function openDevice(ordinal?: number): Device;
/** Awaits a Stream, or a raw CUstream handle from another addon. */
export function fence(stream: Stream | bigint, device?: Device): Promise<void>;
/** Options of this env's uvcuda loop context; before any other GPU call of
 * the env, else throws EBUSY. */
export function configure(options: ConfigureOptions): void;
export function stats(): Stats;
export function errorName(errno: number): string;
export function strerror(errno: number): string;
