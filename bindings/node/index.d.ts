// Type declarations for uvcuda (Node.js binding). Every asynchronous call
// returns a Promise that settles on the JS thread when the GPU work is done
// and reports every error, bad arguments included, as a rejection;
// synchronous calls throw. Errors carry a Node-style `code`.
//
// Self-contained: no @types/node and no DOM types are needed (the few
// shapes used from them, AbortSignal and EventEmitter, are declared here
// structurally: Node's own objects fit them). Array inputs are readonly:
// `as const` literals are accepted.

/** Host memory a copy reads or writes. */
export type BufferSource = ArrayBufferView | ArrayBuffer;

/** Kernel parameter types, in the order of the kernel's .param list. */
export type ParamType =
  | 'ptr' | 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'u64' | 'i64' | 'f32' | 'f64';

/** A kernel argument: DeviceMemory / bigint / null for 'ptr', number for the
 * 8..32-bit and float types, bigint or a safe-integer number for 'u64'/'i64'. */
export type KernelArg = DeviceMemory | bigint | number | null;

/** Launch dimensions: x, or [x], [x, y], [x, y, z] (positive integers).
 * Any array is accepted, as at run time (`const grid = [4, 2]` infers
 * number[]); one of 0 or more than 3 numbers is a RangeError
 * ERR_OUT_OF_RANGE then. */
export type Dim3 =
  | number
  | readonly [number]
  | readonly [number, number]
  | readonly [number, number, number]
  | readonly number[];

/** What an AbortSignal offers that uvcuda uses (Node's AbortSignal, a DOM
 * one, or any object of this shape). */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** The options of every call that returns a Promise, after its positional
 * arguments. */
export interface AwaitOptions {
  /** Aborting rejects the promise at once with an AbortError, also when a
   * getter of the call's own arguments aborts it; the GPU work goes on (and
   * keeps what it uses, and the thread's event loop, alive until it is
   * done). An aborted signal rejects without enqueuing anything. */
  signal?: AbortSignalLike | undefined;
}

/** The Error of GPU, driver and argument failures. */
export interface UvcudaError extends Error {
  /** 'CUDA_ERROR_ILLEGAL_ADDRESS', 'UVCUDA_ECAPTURING', 'UVCUDA_ENODRIVER',
   * 'EBUSY' (uvcuda_err_name), or Node's 'ERR_INVALID_ARG_TYPE' (wrong
   * type), 'ERR_INVALID_THIS' (a wrong receiver), 'ERR_INVALID_ARG_VALUE' (a string that is none of the names the
   * call takes; a signature or argument list of the wrong length; memory of
   * another device than the stream's, without Device.enablePeerAccess),
   * 'ERR_OUT_OF_RANGE' (a number out of range; more than 3 dims),
   * 'ERR_INVALID_STATE', 'ERR_ILLEGAL_CONSTRUCTOR',
   * 'ERR_CONSTRUCT_CALL_REQUIRED', 'UVCUDA_ECLOSING' (a freed, destroyed or
   * unloaded object). */
  code: string;
  /** The negative uvcuda error code (uvcuda and CUDA errors); CUDA result r
   * is -20000 - r. */
  errno?: number;
  /** The CUresult, for CUDA driver errors. */
  cudaResult?: number;
  /** The device, for 'fault' and 'reset' events and reset() rejections. */
  ordinal?: number;
}

/** The rejection of an aborted call (as Node core's): name 'AbortError',
 * code 'ABORT_ERR', cause: the signal's reason. */
export class AbortError extends Error {
  constructor(message?: string, options?: { cause?: unknown });
  readonly code: 'ABORT_ERR';
  readonly name: 'AbortError';
  readonly cause?: unknown;
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

/** An option that is undefined takes its default. */
export interface ConfigureOptions {
  /** How completion reaches the loop (default: $UVCUDA_COMPLETION, else 'auto'). */
  completion?: Completion | undefined;
  /** Spin on the loop thread before arming, in µs (0..1000000; default:
   * $UVCUDA_SPIN_BUDGET_US, else 20). */
  spinBudgetUs?: number | undefined;
  /** Fault probe interval while armed, in µs (50..2000; default 1000); longer once every armed wait is old (docs/api.md, "The reactor"). */
  probeIntervalUs?: number | undefined;
  /** Record start -> callback latencies in stats().latencyHistogram. */
  latencyHistogram?: boolean | undefined;
  /** Adaptive spin and pre-wake (default: $UVCUDA_ADAPTIVE, else on). */
  adaptive?: boolean | undefined;
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
  /** Adaptive spin and pre-wake: on or off, and its counters. */
  adaptive: boolean;
  predicted: number;
  predictHit: number;
  predictEarly: number;
  predictLate: number;
  prewakes: number;
  /** ns the loop thread spent spinning (with or without adaptive). */
  spinNs: number;
  /** What waiting has cost the process's reactor thread (shared by every
   * env and loop, the same numbers from each; 0 before this env's first
   * awaited call): passes that read the armed counters, its timed sleeps
   * and parks, its CPU time in ns. */
  reactorPolls: number;
  reactorSleeps: number;
  reactorCpuNs: number;
  /** Calls of this env handed to a stream (a future started: the promise
   * helper's awaits), and how those settled: by the work, or by a
   * rejection at the stream (a capturing stream's UVCUDA_ECAPTURING, a
   * driver error of the enqueue, the device's fault; a fault known before
   * the call rejects it without reaching the driver, and counts as awaited
   * and rejected at once, with no future started: not in started or
   * failed). A call refused before that (bad arguments, a closed object,
   * an object gone with a reset, a device being reset, an aborted signal,
   * UVCUDA_ENOTSUP: a completion strategy configure() chose that this
   * driver lacks, such as 'hostfn-spin' before CUDA 13.2) is in none of them, and an aborted call's work still
   * completes: it counts as resolved or rejected by what the work did, not
   * as the AbortError its caller saw. pending: started, not yet settled. */
  pending: number;
  awaited: number;
  resolved: number;
  rejected: number;
  /** Bucket i counts latencies in [2^i, 2^(i+1)) ns (with latencyHistogram). */
  latencyHistogram: number[];
}

/** 'healthy', or the code of the sticky error the device has
 * ('CUDA_ERROR_ILLEGAL_ADDRESS', ...). */
export type Health = 'healthy' | (string & {});

type Listener = (...args: any[]) => void;

/** A CUDA device (its primary context). new Device(n) === openDevice(n) as
 * to what it opens; each call makes a new object. An EventEmitter (Node's):
 *   'fault' (error: UvcudaError)  once per fault of the device, on every
 *                                  Device object of it in every thread;
 *   'reset' (error: UvcudaError | null)  a reset of the device (from any
 *                                  thread, or by another copy of this
 *                                  package) is done: null when new work
 *                                  works; objects made before are gone.
 * Neither event keeps a thread alive; a Device with listeners for them is
 * not collected while it has them. */
export class Device {
  /** Throws RangeError for an ordinal out of range, UvcudaError without a
   * driver; TypeError ERR_CONSTRUCT_CALL_REQUIRED when called without new. */
  constructor(ordinal?: number);
  readonly ordinal: number;
  readonly name: string;
  /** [major, minor] */
  readonly computeCapability: [number, number];
  /** 'healthy' or the sticky error's code, asked of the driver now. */
  readonly health: Health;
  /** A new non-blocking stream. */
  createStream(): Stream;
  /** Device memory of byteLength bytes (contents undefined). From the
   * stream-ordered allocator where the device has memory pools. */
  alloc(byteLength: number): DeviceMemory;
  /** Loads a PTX (or cubin) image: a string, Buffer, TypedArray, DataView
   * or ArrayBuffer. Synchronous, and the driver waits for the device to be
   * idle: load modules before starting GPU work. */
  loadModule(image: string | BufferSource): Module;
  /** Recovery after a fault, for the whole process: resolves once new work
   * completes on the device; every stream, allocation, module and kernel of
   * it made before is gone (work on them rejects
   * CUDA_ERROR_CONTEXT_IS_DESTROYED). Work pending at the reset of a
   * healthy device completes or rejects CUDA_ERROR_CONTEXT_IS_DESTROYED,
   * by timing. Another copy of this package takes it as its own reset
   * (its objects of before are gone, its Devices get 'reset'); addons on
   * uvcuda/napi.h and other CUDA libraries in the process keep handles
   * the reset destroyed, which uvcuda cannot tell them: they must not use
   * them. Rejects with the driver's error
   * (CUDA_ERROR_ILLEGAL_ADDRESS) where the driver keeps the fault: restart
   * the process then. */
  reset(options?: AwaitOptions): Promise<void>;
  /** Lets this device's work (its streams' copies, memsets and kernel
   * launches) use peer's memory, which is otherwise refused with
   * ERR_INVALID_ARG_VALUE: one way (peer.enablePeerAccess(device) for the
   * other), for every thread of the process, until either device is
   * reset. Idempotent. Throws ERR_INVALID_ARG_TYPE (not a Device),
   * ERR_INVALID_ARG_VALUE (the same device),
   * CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (the driver says the two cannot),
   * the driver's error of cuCtxEnablePeerAccess, ERR_INVALID_STATE while
   * either device is being reset, or the fault's error where either has a
   * known fault. */
  enablePeerAccess(peer: Device): void;

  on(event: 'fault', listener: (error: UvcudaError) => void): this;
  on(event: 'reset', listener: (error: UvcudaError | null) => void): this;
  on(event: string | symbol, listener: Listener): this;
  once(event: 'fault', listener: (error: UvcudaError) => void): this;
  once(event: 'reset', listener: (error: UvcudaError | null) => void): this;
  once(event: string | symbol, listener: Listener): this;
  addListener(event: 'fault', listener: (error: UvcudaError) => void): this;
  addListener(event: 'reset', listener: (error: UvcudaError | null) => void): this;
  addListener(event: string | symbol, listener: Listener): this;
  prependListener(event: string | symbol, listener: Listener): this;
  prependOnceListener(event: string | symbol, listener: Listener): this;
  off(event: string | symbol, listener: Listener): this;
  removeListener(event: string | symbol, listener: Listener): this;
  removeAllListeners(event?: string | symbol): this;
  setMaxListeners(n: number): this;
  getMaxListeners(): number;
  listeners(event: string | symbol): Function[];
  rawListeners(event: string | symbol): Function[];
  listenerCount(event: string | symbol, listener?: Function): number;
  emit(event: string | symbol, ...args: any[]): boolean;
  eventNames(): (string | symbol)[];
}

/** A stream of one device. Its copies, memsets and launches take the
 * DeviceMemory of that device, or of one it was given access to
 * (Device.enablePeerAccess): other memory rejects ERR_INVALID_ARG_VALUE
 * (a stream of no known device, from fromHandle without a Device, is not
 * checked). */
export class Stream {
  private constructor();
  /** Wraps a CUstream made elsewhere (another addon). The default stream
   * handles 0n (NULL), 1n (legacy), 2n (per-thread) need the Device. It is
   * never destroyed here; it must stay valid while promises on it pend. */
  static fromHandle(handle: bigint, device?: Device): Stream;
  /** The CUstream, for other addons. After destroy() it still reads the
   * old value, which the driver may give to a new stream. */
  readonly handle: bigint;
  /** Created by createStream (destroy() destroys it) or wrapped by fromHandle. */
  readonly owned: boolean;
  readonly device: Device | null;
  readonly destroyed: boolean;
  /** Calls whose work is pending on this stream: an aborted call counts
   * until its work ends, though its promise rejected at the abort. */
  readonly pending: number;

  /** Copies all of src into dst at dstOffset. src is read at the call:
   * changing, transferring or detaching it afterwards changes nothing. */
  copyToDevice(dst: DeviceMemory, src: BufferSource, options?: AwaitOptions): Promise<void>;
  copyToDevice(dst: DeviceMemory, src: BufferSource, dstOffset?: number,
               options?: AwaitOptions): Promise<void>;
  /** Fills all of dst from src at srcOffset; resolves with dst. Rejects
   * ERR_INVALID_STATE (writing nothing) if dst was detached or transferred
   * before the copy was done; after an abort dst is left alone. */
  copyFromDevice<T extends BufferSource>(dst: T, src: DeviceMemory,
                                         options?: AwaitOptions): Promise<T>;
  copyFromDevice<T extends BufferSource>(dst: T, src: DeviceMemory, srcOffset?: number,
                                         options?: AwaitOptions): Promise<T>;
  /** byteLength defaults to src.byteLength - srcOffset. Overlapping ranges
   * (one allocation as both) are undefined, as for cuMemcpyDtoDAsync. */
  copyDevice(dst: DeviceMemory, src: DeviceMemory, options?: AwaitOptions): Promise<void>;
  copyDevice(dst: DeviceMemory, src: DeviceMemory, byteLength?: number,
             options?: AwaitOptions): Promise<void>;
  copyDevice(dst: DeviceMemory, src: DeviceMemory, byteLength?: number,
             dstOffset?: number, options?: AwaitOptions): Promise<void>;
  copyDevice(dst: DeviceMemory, src: DeviceMemory, byteLength?: number,
             dstOffset?: number, srcOffset?: number, options?: AwaitOptions): Promise<void>;
  /** Sets bytes to value (0..255); byteLength defaults to the rest of dst. */
  memset(dst: DeviceMemory, value: number, options?: AwaitOptions): Promise<void>;
  memset(dst: DeviceMemory, value: number, byteLength?: number,
         options?: AwaitOptions): Promise<void>;
  memset(dst: DeviceMemory, value: number, byteLength?: number, offset?: number,
         options?: AwaitOptions): Promise<void>;
  /** Launches kernel; args follow its signature. Resolves when it has run. */
  launch(kernel: Kernel, grid: Dim3, block: Dim3, options?: AwaitOptions): Promise<void>;
  launch(kernel: Kernel, grid: Dim3, block: Dim3, args?: readonly KernelArg[],
         options?: AwaitOptions): Promise<void>;
  launch(kernel: Kernel, grid: Dim3, block: Dim3, args?: readonly KernelArg[],
         sharedMemBytes?: number, options?: AwaitOptions): Promise<void>;
  /** Resolves once the work enqueued so far on this stream is done. */
  fence(options?: AwaitOptions): Promise<void>;
  /** Baseline (what addons do today): napi_create_async_work running
   * cuStreamSynchronize on a libuv pool thread. For comparison. */
  fenceOnThreadPool(options?: AwaitOptions): Promise<void>;
  /** Baseline: launch + cuStreamSynchronize on a libuv pool thread. */
  launchOnThreadPool(kernel: Kernel, grid: Dim3, block: Dim3,
                     options?: AwaitOptions): Promise<void>;
  launchOnThreadPool(kernel: Kernel, grid: Dim3, block: Dim3, args?: readonly KernelArg[],
                     options?: AwaitOptions): Promise<void>;
  launchOnThreadPool(kernel: Kernel, grid: Dim3, block: Dim3, args?: readonly KernelArg[],
                     sharedMemBytes?: number, options?: AwaitOptions): Promise<void>;
  /** Starts graph capture (the graph is discarded at endCapture); awaiting
   * a capturing stream rejects with UVCUDA_ECAPTURING. Another mode string:
   * TypeError ERR_INVALID_ARG_VALUE. */
  beginCapture(mode?: 'global' | 'thread-local' | 'relaxed'): void;
  endCapture(): void;
  /** No new work; an owned stream is destroyed once its pending work is done. */
  destroy(): void;
}

export class DeviceMemory {
  private constructor();
  readonly byteLength: number;
  /** The device pointer (0n once freed, or gone with a reset). Work
   * enqueued with it by other code is not tracked: it must be done before
   * free(). */
  readonly ptr: bigint;
  readonly device: Device;
  readonly freed: boolean;
  /** Calls whose work pending uses this memory: an aborted call counts
   * until its work ends, though its promise rejected at the abort. */
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
  /** A kernel of this module with its parameter types: one per parameter
   * (checked against the kernel where the driver or the PTX says how many;
   * TypeError ERR_INVALID_ARG_VALUE otherwise, and for a type name that is
   * none of ParamType). */
  getFunction(name: string, signature: readonly ParamType[]): Kernel;
  /** Unloads once no Kernel of it and no launch pending needs it. */
  unload(): void;
}

export class Kernel {
  private constructor();
  readonly name: string;
  readonly signature: readonly ParamType[];
  readonly module: Module;
}

/** uvcuda's version, e.g. '0.2.0': the C library's, from the loaded addon. */
export const version: string;

/** For addons built on uvcuda's C API, in their binding.gyp: the directory
 * holding uvcuda.h and uvcuda/napi.h. */
export const include_dir: string;
/** For addons' binding.gyp: the gyp file whose target `uvcuda_napi` (the
 * helper and uvcuda's sources, a static library) they depend on:
 * `"<!(node -p \"require('uvcuda').targets\"):uvcuda_napi"`. */
export const targets: string;
/** Loads the driver; throws UvcudaError (UVCUDA_ENODRIVER, CUDA_ERROR_NO_DEVICE, ...).
 * The driver is loaded (dlopen, version check, cuInit) once per copy of
 * uvcuda in the process, and that copy keeps the result: after a failed load
 * every later call of this package fails the same way; restart the process
 * to load it again. This package's addon is one copy; another installed copy
 * of the package, or another addon that embeds uvcuda, loads on its own. */
export function driverInfo(): DriverInfo;
/** 0 where the driver says there is no device (CUDA_ERROR_NO_DEVICE);
 * throws UvcudaError UVCUDA_ENODRIVER without a driver. */
export function deviceCount(): number;
export function openDevice(ordinal?: number): Device;
/** Awaits a Stream, or a raw CUstream handle from another addon. */
export function fence(stream: Stream | bigint, options?: AwaitOptions): Promise<void>;
export function fence(stream: Stream | bigint, device?: Device,
                      options?: AwaitOptions): Promise<void>;
/** Options of this env's uvcuda loop context, until it opens at the env's
 * first call that reaches a stream (one the device's known fault rejects
 * included, as stats() counts it; not reset(), the ...OnThreadPool
 * baselines or a refused call); then throws EBUSY. Each call sets every
 * option: one left out or undefined takes its default, not an earlier
 * call's value; configure() or configure(undefined) sets them all to their
 * defaults. Read with plain gets, as Node core reads options. A completion
 * that is none of the strategies: TypeError ERR_INVALID_ARG_VALUE. */
export function configure(options?: Readonly<ConfigureOptions>): void;
/** Not a GPU call: before the env's first awaited call, zeros and the
 * settings to come (no driver needed). Throws EINVAL / UVCUDA_ESTRATEGY,
 * naming the variable, if the environment's settings are invalid. */
export function stats(): Stats;
/** errno: an integer in the int32 range (else RangeError ERR_OUT_OF_RANGE). */
export function errorName(errno: number): string;
export function strerror(errno: number): string;
