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
  const repo = path.join(__dirname, '..', '..');
  for (const dir of ['build', 'builddir', 'build-node']) {
    const file = path.join(repo, dir, 'bindings', 'node', 'uvcuda.node');
    if (fs.existsSync(file)) return require(file);
  }
  const err = new Error(
    `uvcuda: no native addon for ${process.platform}-${process.arch} could be loaded ` +
      `(${cause && cause.message}). Build it from the package's sources with ` +
      '`npm rebuild uvcuda --build-from-source` (needs python3, make and a C ' +
      'compiler; node-gyp comes with npm), or set UVCUDA_NODE_ADDON to a built uvcuda.node.',
    { cause });
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
  include_dir,
  targets,
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
