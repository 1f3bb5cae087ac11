// Types of the ESM entry (index.mjs): the same names as index.d.ts, and
// as the default export the CommonJS module's exports, as index.mjs has
// them. A file of its own, so that TypeScript's node16/nodenext see an ES
// module's types for `import` (not CommonJS types "masquerading" as ESM).
import * as uvcuda from './index.js';

export * from './index.js';
export default uvcuda;
