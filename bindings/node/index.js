'use strict';
// uvcuda for Node.js: await CUDA stream work. Every asynchronous call
// returns a Promise that settles on the JS thread when the GPU work is done;
// no thread blocks on the GPU. See README.md and docs/guide-node.md.
//
// The addon (uvcuda.node, Node-API 8: one binary for every Node version) is
// $UVCUDA_NODE_ADDON if set; else what node-gyp-build finds: build/Release
// (compiled at install from binding.gyp) or prebuilds/<platform>-<arch>/;
// else, in the repository, the Meson build (-Dnapi=enabled).

const fs = require('node:fs');
const path = require('node:path');

// For addons that use uvcuda's C API (include/uvcuda/napi.h), in their
// binding.gyp: the headers, and the gyp file of the static library.
const root = fs.existsSync(path.join(__dirname, 'deps', 'uvcuda', 'include'))
  ? path.join(__dirname, 'deps', 'uvcuda')   // the npm package
  : path.join(__dirname, '..', '..');        // the repository
const include_dir = path.join(root, 'include');
const targets = path.join(__dirname, 'uvcuda.gyp');

function load() {
  if (process.env.UVCUDA_NODE_ADDON) return require(process.env.UVCUDA_NODE_ADDON);
  let cause;
  try {
    return require('node-gyp-build')(__dirname);
  } catch (e) {
    cause = e;
  }
  // Only in the repository, where this file is <repo>/bindings/node/:
  // installed, two levels up is the app, whose files are not ours.
  const repo = path.join(__dirname, '..', '..');
  const inRepo = path.basename(__dirname) === 'node' &&
    path.basename(path.dirname(__dirname)) === 'bindings' &&
    fs.existsSync(path.join(repo, 'include', 'uvcuda.h'));
  for (const dir of inRepo ? ['build', 'builddir', 'build-node'] : []) {
    const file = path.join(repo, dir, 'bindings', 'node', 'uvcuda.node');
    if (fs.existsSync(file)) return require(file);
  }
  const err = new Error(
    `uvcuda: no native addon for ${process.platform}-${process.arch} could be loaded ` +
      `(${cause && cause.message}). Build it from the package's sources with ` +
      '`npm rebuild uvcuda --build-from-source`, or `npx node-gyp rebuild` in ' +
      'node_modules/uvcuda (npm 11 warns of the flag) (needs python3, make and a C ' +
      'compiler; node-gyp comes with npm), or set UVCUDA_NODE_ADDON to a built uvcuda.node.',
    { cause });
  throw showCode(err, 'ERR_UVCUDA_NO_ADDON');
}

const native = load();

// This file evaluated again while its addon stays loaded (Node loads an
// addon once per thread): require.cache cleared, as jest.resetModules
// does. The addon's classes are decorated already, and doing it twice
// throws: hand out the API made the first time.
const kApi = Symbol.for('uvcuda.api');
if (native[kApi] !== undefined) {
  module.exports = native[kApi];
  return; // a top-level return: CommonJS allows it
}
const { EventEmitter } = require('node:events');

// console.log(device) & co show what matters, not an empty object.
const inspect = Symbol.for('nodejs.util.inspect.custom');
const shown = {
  Device: (d) => ({ ordinal: d.ordinal, name: d.name }),
  Stream: (s) => ({ handle: s.handle, owned: s.owned, destroyed: s.destroyed,
                    pending: s.pending }),
  DeviceMemory: (m) => ({ byteLength: m.byteLength, ptr: m.ptr, freed: m.freed,
                          pending: m.pending, streamOrdered: m.streamOrdered }),
  Module: (m) => ({ unloaded: m.unloaded }),
  Kernel: (k) => ({ name: k.name, signature: k.signature }),
};
for (const [name, fields] of Object.entries(shown)) {
  Object.defineProperty(native[name].prototype, inspect, {
    value(depth, options, nodeInspect) {
      const show = nodeInspect || require('node:util').inspect;
      return `${name} ${show(fields(this), options)}`;
    },
  });
}

// A Device is an EventEmitter: the addon emits 'fault' on every Device
// object of a device once per fault (see docs/guide-node.md).
Object.setPrototypeOf(native.Device.prototype, EventEmitter.prototype);

// The addon holds Device objects weakly. One with 'fault' or 'reset'
// listeners is kept here (this thread's set) until it has none, as Node
// keeps an emitter a native source still feeds: a Device referred to by its
// listeners only still hears of the device's faults. Kept is not alive:
// neither event keeps the thread running.
const listening = new Set();
function track(dev) {
  if (!(dev instanceof native.Device)) return;
  if (dev.listenerCount('fault') + dev.listenerCount('reset') > 0) listening.add(dev);
  else listening.delete(dev);
}
for (const name of ['on', 'addListener', 'prependListener', 'once', 'prependOnceListener',
  'off', 'removeListener', 'removeAllListeners']) {
  const base = EventEmitter.prototype[name];
  Object.defineProperty(native.Device.prototype, name, {
    value: {
      [name](...args) {
        const r = base.apply(this, args);
        track(this);
        return r;
      },
    }[name],
    writable: true,
    configurable: true,
    enumerable: false,
  });
}

/** The rejection of an aborted call, as Node core's: name 'AbortError',
 * code 'ABORT_ERR', cause: the signal's reason. */
class AbortError extends Error {
  constructor(message = 'The operation was aborted', options = undefined) {
    super(message, options);
    this.code = 'ABORT_ERR';
    this.name = 'AbortError';
  }
}

const classes = [native.Device, native.Stream, native.DeviceMemory, native.Module,
  native.Kernel];

// Every copy of the package marks its classes' prototypes so: an object of
// another copy (another version in node_modules) is then still no options
// bag, and reaches the addon, which refuses it as foreign.
const kObject = Symbol.for('uvcuda.object');
for (const C of classes) Object.defineProperty(C.prototype, kObject, { value: true });

// The options bag `{ signal }` after the positional arguments: a plain
// object, never one of the values a positional argument can be.
function isOptions(v) {
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v) || ArrayBuffer.isView(v) || v instanceof ArrayBuffer) return false;
  if (typeof SharedArrayBuffer === 'function' && v instanceof SharedArrayBuffer) return false;
  return !(kObject in v); // this copy's objects, and other copies'
}

function received(v) {
  if (v === null || v === undefined) return ` Received ${v}`;
  if (typeof v === 'function') return ` Received function ${v.name}`;
  if (typeof v === 'object') {
    return v.constructor && v.constructor.name
      ? ` Received an instance of ${v.constructor.name}` : ' Received an object';
  }
  let shown = String(v).slice(0, 28);
  if (typeof v === 'string') shown = `'${shown}'`;
  return ` Received type ${typeof v} (${shown})`;
}

// As Node core shows its own errors: `TypeError [ERR_X]: message` in the
// stack (formatted at its first read, with the name of that moment) and in
// String(err); err.name stays 'TypeError'. The addon's errors do the same.
function showCode(err, code) {
  const { name } = err;
  err.code = code;
  err.name = `${name} [${code}]`;
  err.stack; // eslint-disable-line no-unused-expressions
  delete err.name;
  Object.defineProperty(err, 'toString', {
    value() { return `${this.name} [${this.code}]: ${this.message}`; },
    writable: true,
    configurable: true,
  });
  return err;
}

function invalidOptions(options) {
  return showCode(new TypeError(
    `The "options" argument must be of type object.${received(options)}`), 'ERR_INVALID_ARG_TYPE');
}

function invalidSignal(signal) {
  return showCode(new TypeError('The "options.signal" property must be an instance of ' +
    `AbortSignal.${received(signal)}`), 'ERR_INVALID_ARG_TYPE');
}

// One 'abort' listener per signal, however many calls wait on it; removed
// when the last of them settles.
const waiting = new WeakMap();

function watch(signal, onAbort) {
  let set = waiting.get(signal);
  if (set === undefined) {
    set = new Set();
    set.listener = () => {
      waiting.delete(signal);
      for (const f of set) f();
    };
    // Kept only once listening: a throwing addEventListener leaves no
    // entry that would make the signal's next call unabortable.
    signal.addEventListener('abort', set.listener, { once: true });
    waiting.set(signal, set);
  }
  set.add(onAbort);
}

function unwatch(signal, onAbort) {
  const set = waiting.get(signal);
  if (set === undefined) return;
  set.delete(onAbort);
  if (set.size === 0) {
    waiting.delete(signal);
    try {
      signal.removeEventListener('abort', set.listener);
    } catch { // a signal-like object's: the listener left there does nothing now
    }
  }
}

// The promise of an awaiting call with a signal, listening from before the
// addon call: an abort from a getter of the call's own arguments rejects
// like any later one. Nothing here refers to the call's arguments: the
// AbortError's stack (its frames' functions) must not keep them alive.
// Throws if a signal-like object's addEventListener throws.
function abortable(signal) {
  const w = {};
  w.promise = new Promise((resolve, reject) => {
    w.resolve = resolve;
    w.reject = reject;
  });
  w.onAbort = () => w.reject(new AbortError(undefined, { cause: signal.reason }));
  watch(signal, w.onAbort);
  return w;
}

// The GPU work goes on after an abort: `p` (the addon's promise) still
// holds every buffer and device object the work uses until it is done.
// Settled first: nothing the signal does after can keep it pending.
function follow(p, signal, w) {
  p.then((v) => {
    w.resolve(v);
    unwatch(signal, w.onAbort);
  }, (e) => {
    w.reject(e);
    unwatch(signal, w.onAbort);
  });
}

/** Wraps fn (an addon function returning a Promise) so that it takes an
 * options bag `{ signal }` after its `positional` arguments (of which
 * `required` come first). With `passSignal`, the signal goes to fn after
 * the positional arguments. */
function withSignal(fn, required, positional, passSignal = false) {
  const wrapped = {
    [fn.name](...args) {
      const n = args.length;
      let at; // where the options argument is
      try { // isOptions throws on a revoked Proxy: a promise-returning call never throws
        if (n > positional) { // every positional argument given: what follows
          at = positional;
          if (args[at] !== undefined && !isOptions(args[at])) {
            return Promise.reject(invalidOptions(args[at]));
          }
        } else if (n > required && isOptions(args[n - 1])) {
          at = n - 1; // options in place of the optional positional ones
        }
      } catch (e) {
        return Promise.reject(e);
      }
      if (at === undefined) return fn.apply(this, args);
      if (args[at] === undefined) return fn.apply(this, args.slice(0, at));
      let signal;
      try {
        ({ signal } = args[at]);
      } catch (e) { // a throwing getter: a promise-returning call never throws
        return Promise.reject(e);
      }
      args.length = at;
      if (signal === undefined) return fn.apply(this, args);
      try {
        if (signal === null || typeof signal !== 'object' || !('aborted' in signal) ||
            typeof signal.addEventListener !== 'function') {
          return Promise.reject(invalidSignal(signal));
        }
        if (signal.aborted) {
          return Promise.reject(new AbortError(undefined, { cause: signal.reason }));
        }
      } catch (e) { // a signal-like object whose getters throw
        return Promise.reject(e);
      }
      if (passSignal) {
        args.length = positional;
        args.push(signal);
      }
      let w;
      try {
        w = abortable(signal);
      } catch (e) { // a signal-like object whose addEventListener threw: nothing starts
        return Promise.reject(e);
      }
      let p;
      try {
        p = fn.apply(this, args);
      } catch (e) { // not the addon's way (it rejects), but never leave a listener
        p = Promise.reject(e);
      }
      follow(p, signal, w);
      return w.promise;
    },
  }[fn.name];
  Object.defineProperty(wrapped, 'length', { value: fn.length });
  return wrapped;
}

// Node-API leaves native functions unnamed ('' in stack traces and
// util.inspect); Node core's carry their names. Before the wrapping below,
// which names its wrappers after what it wraps.
function nameIt(fn, name) {
  if (typeof fn === 'function' && fn.name === '') Object.defineProperty(fn, 'name', { value: name });
}
for (const C of classes)
  for (const key of Object.getOwnPropertyNames(C.prototype))
    nameIt(Object.getOwnPropertyDescriptor(C.prototype, key).value, key);
for (const key of Object.getOwnPropertyNames(native)) nameIt(native[key], key);

// kernel.signature: readonly in index.d.ts, so one frozen array per kernel
// rather than a fresh mutable one at each read.
{
  const desc = Object.getOwnPropertyDescriptor(native.Kernel.prototype, 'signature');
  const signatures = new WeakMap();
  const { get } = Object.getOwnPropertyDescriptor({
    get signature() {
      let v = signatures.get(this); // undefined for a wrong receiver, which desc.get refuses
      if (v === undefined) signatures.set(this, v = Object.freeze(desc.get.call(this)));
      return v;
    },
  }, 'signature');
  Object.defineProperty(native.Kernel.prototype, 'signature', { ...desc, get });
}

// [method, required arguments, positional arguments, pass the signal]
const awaiting = {
  Stream: [
    ['copyToDevice', 2, 3],
    ['copyFromDevice', 2, 3, true], // an aborted copy leaves dst alone
    ['copyDevice', 2, 5],
    ['memset', 2, 4],
    ['launch', 3, 5],
    ['fence', 0, 0],
    ['fenceOnThreadPool', 0, 0],
    ['launchOnThreadPool', 3, 5],
  ],
  Device: [['reset', 0, 0]],
};
for (const [cls, methods] of Object.entries(awaiting)) {
  const proto = native[cls].prototype;
  for (const [name, required, positional, pass] of methods) {
    Object.defineProperty(proto, name, {
      value: withSignal(proto[name], required, positional, pass),
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
}

/** Opens device `ordinal` (its primary context): same as new Device(ordinal). */
function openDevice(ordinal = 0) {
  return new native.Device(ordinal);
}

const fenceWithSignal = withSignal(native.fence, 1, 2);

/** Resolves once the work enqueued so far on `stream` is done. `stream` is a
 * Stream or a raw CUstream handle (BigInt) from another addon; the default
 * stream handles 0n/1n/2n need the Device whose context they refer to.
 * Takes `{ signal }` last. */
function fence(stream, device, options) {
  return fenceWithSignal(...arguments);
}

module.exports = {
  include_dir,
  targets,
  version: native.version,
  Device: native.Device,
  Stream: native.Stream,
  DeviceMemory: native.DeviceMemory,
  Module: native.Module,
  Kernel: native.Kernel,
  AbortError,
  driverInfo: native.driverInfo,
  deviceCount: native.deviceCount,
  openDevice,
  fence,
  configure: native.configure,
  stats: native.stats,
  errorName: native.errorName,
  strerror: native.strerror,
};
Object.defineProperty(native, kApi, { value: module.exports });
