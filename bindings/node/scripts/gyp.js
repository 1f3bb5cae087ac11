'use strict';
// What binding.gyp and uvcuda.gyp ask for at configure time (gyp runs it
// from the directory of the .gyp file, the package root):
//
//   node scripts/gyp.js root            where uvcuda's sources are: deps/uvcuda in
//                                       the npm package (scripts/prepack.js), else
//                                       the repository this directory is in (../..)
//   node scripts/gyp.js sources         the C files under <root>/lib, one a line
//                                       (globbed: lib/'s file names change)
//   node scripts/gyp.js addon-sources   the addon's C files: sources.txt, its paths
//                                       made relative to the package root
//
// No CUDA Toolkit is involved: <root>/lib/cuda-api.h declares the driver API.

const fs = require('node:fs');
const path = require('node:path');

const pkg = path.join(__dirname, '..');

function root() {
  return fs.existsSync(path.join(pkg, 'deps', 'uvcuda', 'lib')) ? 'deps/uvcuda' : '../..';
}

function sources(dir) {
  const out = [];
  for (const e of fs.readdirSync(path.join(pkg, dir), { withFileTypes: true }).sort(
    (a, b) => (a.name < b.name ? -1 : 1))) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) out.push(...sources(rel));
    else if (e.name.endsWith('.c')) out.push(rel);
  }
  return out;
}

// sources.txt: one path a line, relative to uvcuda's repository root; this
// package is its bindings/node/, and what lies elsewhere is under root().
const here = 'bindings/node/';

function listed() {
  return fs.readFileSync(path.join(pkg, 'sources.txt'), 'utf8').split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

function addonSources() {
  return listed().map((p) => (p.startsWith(here) ? p.slice(here.length) : `${root()}/${p}`));
}

// The paths of sources.txt outside this package (scripts/prepack.js copies
// them, with their headers, under deps/uvcuda/).
function outsidePaths() {
  return listed().filter((p) => !p.startsWith(here));
}

if (require.main === module) {
  const what = process.argv[2];
  if (what === 'root') console.log(root());
  else if (what === 'sources') console.log(sources(`${root()}/lib`).join('\n'));
  else if (what === 'addon-sources') console.log(addonSources().join('\n'));
  else {
    console.error('usage: node scripts/gyp.js root|sources|addon-sources');
    process.exit(2);
  }
}

module.exports = { outsidePaths };
