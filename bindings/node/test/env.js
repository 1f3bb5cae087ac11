'use strict';
// Where the tests run: the package, the test kernels, and what driver a
// fresh process can load. Loads nothing native into this process: the
// driver is probed in a child, so a missing or broken driver (or addon)
// turns into skip reasons, not a crash of the test file.
//
//   driverSkip: false, or why no CUDA driver is loadable (tests that need
//               any driver: the simulation or a GPU)
//   simSkip:    false, or why the loaded driver is not uvcuda's simulation
//               (tests that check exact simulated behaviour)
//   gpuSkip:    false, or why there is no real GPU

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const pkgDir = path.join(__dirname, '..');

// The test kernels (PTX; the simulation models them by name): $UVCUDA_TEST_PTX,
// else the copy in the package, else the repository's.
const ptxPath = [
  process.env.UVCUDA_TEST_PTX,
  path.join(pkgDir, 'kernels', 'kernels.ptx'),
  path.join(pkgDir, '..', '..', 'support', 'kernels.ptx'),
].find((p) => p && fs.existsSync(p)) || path.join(pkgDir, 'kernels', 'kernels.ptx');

function probe() {
  const r = spawnSync(process.execPath, ['-e', `
    let out;
    try {
      const info = require(${JSON.stringify(pkgDir)}).driverInfo();
      out = { ok: true, simulated: info.simulated, devices: info.deviceCount };
    } catch (e) {
      out = { ok: false, why: (e.code ? e.code + ': ' : '') + e.message };
    }
    console.log(JSON.stringify(out));`], { encoding: 'utf8', timeout: 60_000 });
  try {
    return JSON.parse(r.stdout.trim().split('\n').pop());
  } catch {
    return { ok: false, why: `probe failed (status ${r.status}, signal ${r.signal}): ` +
      `${r.stderr.trim().split('\n').slice(-3).join(' ')}` };
  }
}

// Probed once per test run: children and workers of the tests inherit it.
const driver = process.env.UVCUDA_TEST_DRIVER_PROBE
  ? JSON.parse(process.env.UVCUDA_TEST_DRIVER_PROBE) : probe();
process.env.UVCUDA_TEST_DRIVER_PROBE = JSON.stringify(driver);
const simHint = 'set UVCUDA_LIBCUDA to uvcuda\'s simulated driver (libsimcuda.so)';
const driverSkip = driver.ok ? false : `no loadable CUDA driver (${driver.why}); ${simHint}`;
const simSkip = !driver.ok ? driverSkip
  : driver.simulated ? false
  : `needs uvcuda's simulated driver, not a real one: ${simHint}`;
const gpuSkip = !driver.ok ? driverSkip
  : driver.simulated ? 'the loaded driver is the simulation, not a GPU'
  : driver.devices < 1 ? 'no CUDA device' : false;
if (!ptxPath || !fs.existsSync(ptxPath)) {
  throw Object.assign(new Error(`test kernels not found at ${ptxPath}`),
    { code: 'ERR_UVCUDA_TEST_PTX' });
}

module.exports = { pkgDir, ptxPath, driver, driverSkip, simSkip, gpuSkip };
