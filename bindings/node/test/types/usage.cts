// Type test of the CommonJS side: require('uvcuda') resolves through
// "exports" > "require" to index.d.ts, as usage.mts resolves "import" to
// index.d.mts; the same names and types on both.
import uvcuda = require('uvcuda');
import { openDevice, type Stream } from 'uvcuda';

export function main(): Stream {
  const dev: uvcuda.Device = openDevice(0);
  const v: string = uvcuda.version;
  // @ts-expect-error a number is no ordinal's device
  const bad: uvcuda.Device = 0;
  void v, bad;
  return dev.createStream();
}
