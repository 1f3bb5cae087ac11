// ESM entry of uvcuda (package.json "exports" > "import"): the CommonJS
// module's exports as named exports, so that
//   import { openDevice } from 'uvcuda';
// works (CommonJS named exports are not reliably visible to ESM otherwise).
// test/esm.test.js checks that this list matches index.js.
// Loaded with require, not a static import: Node 20 reports an error thrown
// while a statically imported CommonJS module loads (no addon, say) as
// uncaught even where the app catches import('uvcuda').
import { createRequire } from 'node:module';

const uvcuda = createRequire(import.meta.url)('./index.js');

export default uvcuda;
export const {
  include_dir,
  targets,
  version,
  Device,
  Stream,
  DeviceMemory,
  Module,
  Kernel,
  AbortError,
  driverInfo,
  deviceCount,
  openDevice,
  fence,
  configure,
  stats,
  errorName,
  strerror,
} = uvcuda;
