'use strict';
// The examples of the docs work as written. Every ```js block of the
// package's README.md and, in the repository, of the top-level README.md
// and docs/guide-node.md runs, each as a file of its own in an app whose
// node_modules holds this package and whose directory holds kernels.ptx
// (the examples read it from there); a block with `import` statements runs
// as ESM (.mjs, top-level await allowed), any other as CommonJS (.cjs).
// Needs a driver: the simulation does. Blocks that show a file of the
// sample addon (examples/node-addon) must match that file.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { pkgDir, ptxPath, driverSkip } = require('./env');

const docs = [
  path.join(pkgDir, 'README.md'),
  path.join(pkgDir, '..', '..', 'README.md'),
  path.join(pkgDir, '..', '..', 'docs', 'guide-node.md'),
].filter((f) => fs.existsSync(f));

// Fenced blocks of a Markdown file: { lang, line, code, from }. `from` is
// set by a comment on the line before the fence:
//   <!-- file: PATH -->     the block is the whole file PATH (repository root)
//   <!-- excerpt: PATH -->  the block is a part of file PATH, as it is there
function blocks(file) {
  const out = [];
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  let block = null;
  lines.forEach((line, i) => {
    const open = block === null && /^```(\w*)\s*$/.exec(line);
    if (open) {
      const m = /^<!-- (file|excerpt): (\S+) -->$/.exec(lines[i - 1] || '');
      block = { lang: open[1], line: i + 1, code: [], from: m && { how: m[1], path: m[2] } };
    } else if (block !== null && /^```\s*$/.test(line)) {
      out.push({ ...block, code: block.code.join('\n') + '\n' });
      block = null;
    } else if (block !== null) block.code.push(line);
  });
  return out;
}

const jsBlocks = (file) => blocks(file).filter((b) => b.lang === 'js' && !b.from);

const app = fs.mkdtempSync(path.join(os.tmpdir(), 'uvcuda-readme-'));
fs.mkdirSync(path.join(app, 'node_modules'));
fs.symlinkSync(pkgDir, path.join(app, 'node_modules', 'uvcuda'), 'dir');
fs.copyFileSync(ptxPath, path.join(app, 'kernels.ptx'));
process.on('exit', () => fs.rmSync(app, { recursive: true, force: true }));

test('the package README has JavaScript examples', () => {
  assert.ok(jsBlocks(path.join(pkgDir, 'README.md')).length >= 2);
});

// The README ships in the npm package (package.json "files"), where
// nothing above the package exists: each of its relative links must name
// a file the package itself ships. (Paths of the uvcuda repository are
// named in plain text, not linked.)
test('the package README links only to what the package ships', () => {
  const { files } = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
  const shipped = (rel) => rel === 'package.json' || rel === 'README.md' || files.some((f) =>
    (f.endsWith('/') ? rel.startsWith(f) : rel === f));
  const text = fs.readFileSync(path.join(pkgDir, 'README.md'), 'utf8')
    .replace(/^```[\s\S]*?^```/gm, ''); // not the code blocks
  const links = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1])
    .filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l) && !l.startsWith('#'));
  assert.ok(links.length > 0);
  for (const link of links) {
    const rel = path.posix.normalize(link.split('#')[0]);
    assert.ok(!rel.startsWith('..') && !path.isAbsolute(rel), `${link}: outside the package`);
    assert.ok(shipped(rel), `${link}: not in package.json "files"`);
    assert.ok(fs.existsSync(path.join(pkgDir, rel)), `${link}: no such file`);
  }
});

const repoRoot = path.join(pkgDir, '..', '..');
for (const doc of docs) {
  const rel = path.relative(repoRoot, doc);
  for (const { line, code, from } of blocks(doc).filter((b) => b.from)) {
    test(`${rel}:${line} is ${from.path} ${from.how === 'file' ? 'as it is' : '(an excerpt)'}`, () => {
      const text = fs.readFileSync(path.join(repoRoot, from.path), 'utf8');
      if (from.how === 'file') assert.equal(code, text);
      else assert.ok(text.includes(code), 'the excerpt is not in the file as it is now');
    });
  }
}

for (const doc of docs) {
  const rel = path.relative(path.join(pkgDir, '..', '..'), doc);
  for (const { line, code } of jsBlocks(doc)) {
    test(`${rel}:${line} runs as written`, { skip: driverSkip }, () => {
      const esm = /^\s*import\s/m.test(code);
      const file = path.join(app, `${path.basename(doc, '.md')}-${line}.${esm ? 'mjs' : 'cjs'}`);
      fs.writeFileSync(file, code);
      const r = spawnSync(process.execPath, [file], { cwd: app, encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.signal, null, r.stderr);
      assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    });
  }
}
