'use strict';
// uvcuda for Node.js: await CUDA stream work. Every asynchronous call
// returns a Promise that settles on the JS thread when the GPU work is done;
// no thread blocks on the GPU. See README.md and docs/guide-node.md.
//
// The addon (uvcuda.node) is built with Meson (-Dnapi=enabled). It is found
// at $UVCUDA_NODE_ADDON, else next to this file, else in the usual build
// directories of this repository.

const fs = require('node:fs');
const path = require('node:path');

function candidates() {
  const out = [];
  if (process.env.UVCUDA_NODE_ADDON) out.push(process.env.UVCUDA_NODE_ADDON);
  out.push(path.join(__dirname, 'uvcuda.node'));
  out.push(path.join(__dirname, 'build', 'uvcuda.node'));
  const root = path.join(__dirname, '..', '..');
  for (const dir of ['build', 'builddir', 'build-node']) {
    out.push(path.join(root, dir, 'bindings', 'node', 'uvcuda.node'));
  }
  return out;
}

function load() {
  const tried = [];
  for (const file of candidates()) {
    if (!fs.existsSync(file)) {
      tried.push(file);
      continue;
    }
    return require(file);
  }
  const err = new Error(
    'uvcuda: the native addon was not found; build it with ' +
      '`meson setup build -Dnapi=enabled && ninja -C build` or set ' +
      'UVCUDA_NODE_ADDON. Tried:\n  ' + tried.join('\n  '));
  err.code = 'ERR_UVCUDA_NO_ADDON';
  throw err;
}

const native = load();

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

/** Opens device `ordinal` (its primary context): same as new Device(ordinal). */
function openDevice(ordinal = 0) {
  return new native.Device(ordinal);
}

/** Resolves once the work enqueued so far on `stream` is done. `stream` is a
 * Stream or a raw CUstream handle (BigInt) from another addon; the default
 * stream handles 0n/1n/2n need the Device whose context they refer to. */
function fence(stream, device) {
  return native.fence(stream, device);
}

module.exports = {
  version: native.version,
  Device: native.Device,
  Stream: native.Stream,
  DeviceMemory: native.DeviceMemory,
  Module: native.Module,
  Kernel: native.Kernel,
  driverInfo: native.driverInfo,
  deviceCount: native.deviceCount,
  openDevice,
  fence,
  configure: native.configure,
  stats: native.stats,
  errorName: native.errorName,
  strerror: native.strerror,
};
