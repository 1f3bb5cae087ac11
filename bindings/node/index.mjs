// ESM entry of uvcuda (package.json "exports" > "import"): the CommonJS
// module's exports as named exports, so that
//   import { openDevice } from 'uvcuda';
// works (CommonJS named exports are not reliably visible to ESM otherwise).
// test/esm.test.js checks that this list matches index.js.
import uvcuda from './index.js';

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
