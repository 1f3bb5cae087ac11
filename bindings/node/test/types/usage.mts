// Type test of index.d.ts (tsc --strict --noEmit -p test/types): the API as
// an app writes it, `import ... from 'uvcuda'` resolved through the
// package's own "exports", readonly (`as const`) inputs accepted, and the
// mistakes the types must catch marked @ts-expect-error (tsc fails if one
// of them compiles). Never run: `declare`d values stand for what only
// exists at run time.
import uvcuda, {
  openDevice, fence, Stream, AbortError,
  type AbortSignalLike, type Dim3, type KernelArg, type ParamType, type UvcudaError,
} from 'uvcuda';

declare const ptx: string;
// What Node's AbortController gives (no @types/node here).
declare const controller: { readonly signal: AbortSignalLike; abort(reason?: unknown): void };
const { signal } = controller;

export async function main(): Promise<void> {
  const dev = openDevice(0);
  const same: uvcuda.Device = new uvcuda.Device();
  const s = dev.createStream();
  const mod = dev.loadModule(ptx);

  // Readonly signatures, dims and arguments.
  const sig = ['ptr', 'u32', 'u32'] as const;
  const add = mod.getFunction('uvcuda_add_u32', sig);
  const sleep = mod.getFunction('uvcuda_sleep_ns', ['u64']);
  const mem = dev.alloc(4 * 1024);
  const grid = [4, 1] as const;
  const block: Dim3 = [256] as const;
  const args = [mem, 1024, 7] as const;
  const gridVar = [4, 2]; // number[]: accepted, as at run time
  await s.launch(add, gridVar, 256, args);
  const params: readonly ParamType[] = add.signature;
  const more: readonly KernelArg[] = [mem, 1, 2];

  await s.copyToDevice(mem, new Uint32Array(1024));
  await s.copyToDevice(mem, new Uint8Array(16), 16, { signal });
  await s.launch(add, grid, block, args);
  await s.launch(add, 4, 256, more, { signal });
  await s.launch(add, [1, 1, 1] as const, 1, args, 0, { signal });
  await s.launch(sleep, 1, 1, [20_000_000n], { signal });
  const out: Uint32Array = await s.copyFromDevice(new Uint32Array(1024), mem, { signal });
  const dv: DataView = await s.copyFromDevice(new DataView(new ArrayBuffer(8)), mem, 8);
  await s.copyDevice(mem, mem, 8, 16, 0, { signal });
  await s.memset(mem, 0, { signal });
  await s.fence({ signal });
  // Forwarding an optional signal: { signal: opts.signal } may be undefined.
  const fwd: { signal?: AbortSignalLike | undefined } = {};
  await s.fence({ signal: fwd.signal });
  await s.fenceOnThreadPool();
  await fence(s, { signal });
  await fence(s.handle, dev, { signal });
  await Stream.fromHandle(s.handle).fence();

  // Faults and recovery.
  const health: string = dev.health;
  dev.on('fault', (e) => {
    const code: string = e.code;
    const ordinal: number | undefined = e.ordinal;
    void code; void ordinal;
  });
  dev.once('reset', (e) => { if (e !== null) void e.message; });
  dev.off('fault', () => {});
  await dev.reset({ signal });

  // Peer access: device 0's work may then use device 1's memory.
  const none: void = dev.enablePeerAccess(openDevice(1));
  // @ts-expect-error: a peer is a Device, not an ordinal
  dev.enablePeerAccess(1);

  // Errors.
  try {
    await s.fence({ signal });
  } catch (e) {
    if (e instanceof AbortError) {
      const code: 'ABORT_ERR' = e.code;
      void code;
    } else {
      const err = e as UvcudaError;
      void [err.code, err.errno, err.cudaResult];
    }
  }

  // Options: readonly, and undefined for "the default".
  const opts = { completion: 'auto', adaptive: undefined, spinBudgetUs: 20 } as const;
  uvcuda.configure(opts);
  uvcuda.configure(); // every option its default
  uvcuda.configure(undefined);
  // @ts-expect-error: null is not an options bag
  uvcuda.configure(null);
  const st: uvcuda.Stats = uvcuda.stats();
  void st.spinBudgetNs;
  // @ts-expect-error: not a strategy
  uvcuda.configure({ completion: 'fast' });
  // @ts-expect-error: errno is a number
  uvcuda.errorName('EBUSY');

  // @ts-expect-error: dims are numbers
  await s.launch(add, ['1'], 1, args);
  // @ts-expect-error: 'int' is not a parameter type
  mod.getFunction('k', ['int']);
  // @ts-expect-error: a string is not host memory
  await s.copyToDevice(mem, 'bytes');
  // @ts-expect-error: kernel signatures are read-only
  add.signature.push('u8');
  // @ts-expect-error: not a signal
  await s.fence({ signal: 'stop' });
  // @ts-expect-error: streams come from createStream() or Stream.fromHandle()
  new Stream();
  // @ts-expect-error: a kernel argument is not a string
  await s.launch(add, 1, 1, ['x']);
  // @ts-expect-error: health is read-only
  dev.health = 'healthy';

  void same; void out; void dv; void health; void params; void none;
}
