'use strict';
// npm pack / npm publish: copies what the package needs from the rest of
// the repository into it, so that git holds one copy of each file:
//
//   ../../lib/*.c, *.h          -> deps/uvcuda/lib/      (binding.gyp, uvcuda.gyp)
//   ../../include/**            -> deps/uvcuda/include/  (require('uvcuda').include_dir)
//   what sources.txt lists outside bindings/node (support/drvtab.c), with
//   its header (drvtab.h)       -> deps/uvcuda/<same path> (binding.gyp)
//   ../../support/kernels.ptx   -> kernels/kernels.ptx (tests, bench, README examples)
//   ../../LICENSE                 -> LICENSE
//
//   node scripts/prepack.js           copy (prepack)
//   node scripts/prepack.js --clean   remove the copies (postpack), so the
//                                     repository's own sources are built again
//
// lib/ is globbed, never listed: its file names change.

const fs = require('node:fs');
const path = require('node:path');
const { outsidePaths } = require('./gyp.js');

const pkg = path.join(__dirname, '..');
const repo = path.join(pkg, '..', '..');
const deps = path.join(pkg, 'deps');
const kernels = path.join(pkg, 'kernels');

function clean() {
  fs.rmSync(deps, { recursive: true, force: true });
  fs.rmSync(kernels, { recursive: true, force: true });
  fs.rmSync(path.join(pkg, 'LICENSE'), { force: true });
}

function copyTree(from, to, keep) {
  fs.mkdirSync(to, { recursive: true });
  for (const e of fs.readdirSync(from, { withFileTypes: true })) {
    const src = path.join(from, e.name);
    const dst = path.join(to, e.name);
    if (e.isDirectory()) copyTree(src, dst, keep);
    else if (e.isFile() && keep(e.name)) fs.copyFileSync(src, dst);
  }
}

function main() {
  if (process.argv.includes('--clean')) {
    clean();
    return;
  }
  const lib = path.join(repo, 'lib');
  // The repository: its lib/ (whatever its files are called) next to
  // include/uvcuda.h.
  if (!fs.existsSync(path.join(repo, 'include', 'uvcuda.h')) ||
      !fs.existsSync(lib) || !fs.readdirSync(lib).some((f) => f.endsWith('.c'))) {
    // Packing an unpacked package again: its copies are already in place.
    if (fs.existsSync(path.join(deps, 'uvcuda', 'lib'))) return;
    const err = new Error(`uvcuda: ${lib} not found; pack from bindings/node of the uvcuda repository`);
    err.code = 'ERR_UVCUDA_PREPACK';
    throw err;
  }
  clean();
  copyTree(lib, path.join(deps, 'uvcuda', 'lib'), (n) => /\.[ch]$/.test(n));
  copyTree(path.join(repo, 'include'), path.join(deps, 'uvcuda', 'include'), (n) => /\.h$/.test(n));
  for (const src of outsidePaths()) {
    fs.mkdirSync(path.join(deps, 'uvcuda', path.dirname(src)), { recursive: true });
    for (const f of [src, src.replace(/\.c$/, '.h')]) {
      const from = path.join(repo, f);
      if (fs.existsSync(from)) fs.copyFileSync(from, path.join(deps, 'uvcuda', f));
    }
  }
  fs.mkdirSync(kernels);
  fs.copyFileSync(path.join(repo, 'support', 'kernels.ptx'),
                  path.join(kernels, 'kernels.ptx'));
  fs.copyFileSync(path.join(repo, 'LICENSE'), path.join(pkg, 'LICENSE'));
  const n = fs.readdirSync(path.join(deps, 'uvcuda', 'lib')).length;
  console.log(`uvcuda prepack: ${n} files of lib/, include/, support/ and kernels.ptx copied ` +
    'into the package');
}

main();
