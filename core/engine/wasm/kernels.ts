// Loading the Wasm SIMD kernels (core/engine/wasm/as/kernels.ts, embedded by `npm run build:wasm`) and
// running them on one thread or several. Threads share one WebAssembly.Memory: the tensors and a small
// control block at its base, through which the calling thread hands each kernel call to the others
// (Atomics on the block; no messages per call). The split is a fixed rule of (size, alignment, threads),
// so the same thread count gives the same bits, and the kernels compute each element the same way for
// any split, so any thread count does.

import { KERNELS_SHARED_WASM, KERNELS_WASM } from './kernels.gen.ts';

/** The kernels' exports; every tensor argument is a byte address; the last two are the range [lo, hi). */
export interface KernelExports {
  heapBase(): number;
  gemm(...a: number[]): void;
  packRows(...a: number[]): void;
  packColumns(...a: number[]): void;
  columnSum(...a: number[]): void;
  encoderForward(...a: number[]): void;
  encoderBackward(...a: number[]): void;
  layernormForward(...a: number[]): void;
  layernormBackwardInput(...a: number[]): void;
  layernormBackwardParams(...a: number[]): void;
  attentionForward(...a: number[]): void;
  attentionBackward(...a: number[]): void;
  geluForward(...a: number[]): void;
  geluBackward(...a: number[]): void;
  residualForward(...a: number[]): void;
  crossEntropyForward(...a: number[]): void;
  crossEntropyBackward(...a: number[]): void;
  adamw(...a: number[]): void;
  sumSquares(...a: number[]): void;
  subtract(...a: number[]): void;
}

export type KernelName = Exclude<keyof KernelExports, 'heapBase'>;

/** The kernels by number, the same on every thread (the control block names a call by its index). */
export const KERNEL_NAMES: readonly KernelName[] = [
  'gemm',
  'packRows',
  'packColumns',
  'columnSum',
  'encoderForward',
  'encoderBackward',
  'layernormForward',
  'layernormBackwardInput',
  'layernormBackwardParams',
  'attentionForward',
  'attentionBackward',
  'geluForward',
  'geluBackward',
  'residualForward',
  'crossEntropyForward',
  'crossEntropyBackward',
  'adamw',
  'sumSquares',
  'subtract',
];

/**
 * The work of one unit of a kernel's range (about its multiply-adds), from the call's arguments (the range
 * aside); a kernel missing here is elementwise (1). A call is split over the threads only when each gets at
 * least MIN_SPLIT_WORK of it: waking a helper costs microseconds, more than `tiny`'s small calls take.
 */
const UNIT_WORK: Partial<Record<KernelName, (a: number[]) => number>> = {
  gemm: (a) => a[7] * a[8], // a row: K · N
  packRows: (a) => 8 * a[2], // a stripe: K rows of 8
  packColumns: (a) => 8 * a[2], // a stripe: K rows of 8
  columnSum: (a) => a[2], // a column of M
  layernormForward: (a) => a[6], // a row of C
  layernormBackwardInput: (a) => a[6], // a row of C
  layernormBackwardParams: (a) => a[6], // a column of BT
  encoderForward: (a) => a[5], // a row of C
  encoderBackward: (a) => a[4], // a column of BT
  attentionForward: (a) => (a[3] * a[3] * a[4]) / a[5], // a (b, h) pair: T² · head size
  attentionBackward: (a) => (2 * a[5] * a[5] * a[6]) / a[7], // a (b, h) pair: 2 T² · head size
  crossEntropyForward: (a) => a[3], // a row of V
  crossEntropyBackward: (a) => a[3], // a row of V
  sumSquares: (a) => a[3], // a chunk
};
export const MIN_SPLIT_WORK = 1 << 15;

/** Whether a call of `name` over n units is worth splitting over `threads` (the same bits either way). */
export function worthSplitting(name: KernelName, n: number, align: number, args: number[], threads: number): boolean {
  if (threads === 1 || n < 2 * align) return false;
  return n * (UNIT_WORK[name]?.(args) ?? 1) >= MIN_SPLIT_WORK * threads;
}

const PAGE = 65536;
/** Bytes at the heap base for the control block: 16 i32 words, then up to 16 f64 arguments. */
export const CONTROL_BYTES = 256;
const SEQ = 0,
  DONE = 1,
  OP = 2,
  NARGS = 3,
  SIZE = 4,
  ALIGN = 5,
  STOP = -1;
const ARGS = 8; // f64 index of the first argument

const modules = new Map<boolean, Promise<WebAssembly.Module>>();

function decode(base64: string): Uint8Array<ArrayBuffer> {
  const s = atob(base64);
  const bytes = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
  return bytes;
}

/** The compiled module (once per process): the private-memory build, or the shared one for threads. */
export function kernelModule(shared: boolean): Promise<WebAssembly.Module> {
  let m = modules.get(shared);
  if (!m) {
    m = WebAssembly.compile(decode(shared ? KERNELS_SHARED_WASM : KERNELS_WASM));
    modules.set(shared, m);
  }
  return m;
}

/** A memory of at least `bytes` (fixed size: a shared memory cannot grow past its maximum anyway). */
export function kernelMemory(bytes: number, shared: boolean): WebAssembly.Memory {
  const pages = Math.ceil(bytes / PAGE);
  if (pages > 65536) throw new Error(`E_TOO_LARGE: the Wasm engine needs ${bytes} bytes, more than 4 GiB`);
  return new WebAssembly.Memory({ initial: pages, maximum: pages, shared });
}

export async function instantiateKernels(memory: WebAssembly.Memory, shared: boolean): Promise<KernelExports> {
  const instance = await WebAssembly.instantiate(await kernelModule(shared), { env: { memory } });
  return instance.exports as unknown as KernelExports;
}

/** Thread `tid` of `threads`'s part of [0, n): cut points rounded to multiples of `align`. */
export function splitRange(n: number, align: number, tid: number, threads: number): [number, number] {
  const cut = (i: number) => (i >= threads ? n : Math.min(n, Math.round((n * i) / threads / align) * align));
  return [cut(tid), cut(tid + 1)];
}

/** What a helper thread needs to join: the shared memory, where the control block is, its place. */
export interface KernelThreadInit {
  memory: WebAssembly.Memory;
  control: number;
  tid: number;
  threads: number;
}

/** Starts helper thread `init.tid` (a worker_thread in Node, a Worker in the page) running `serveKernels`. */
export type SpawnKernelThread = (init: KernelThreadInit) => { ready: Promise<void>; terminate(): void };

/** Runs kernel calls on the calling thread and, with threads > 1, on the helpers sharing its memory. */
export class KernelRunner {
  private readonly ctl: Int32Array;
  private readonly args: Float64Array;
  private seq = 0;
  private constructor(
    readonly k: KernelExports,
    readonly memory: WebAssembly.Memory,
    readonly control: number,
    readonly threads: number,
    private readonly helpers: Array<{ terminate(): void }>,
  ) {
    this.ctl = new Int32Array(memory.buffer, control, 16);
    this.args = new Float64Array(memory.buffer, control, CONTROL_BYTES / 8);
  }

  /**
   * A runner on a fresh memory of `bytes` (its first CONTROL_BYTES past the heap base hold the control
   * block; tensors start at `runner.control + CONTROL_BYTES`). threads > 1 needs `spawn`.
   */
  static async create(bytes: number, threads: number, spawn?: SpawnKernelThread): Promise<KernelRunner> {
    if (!Number.isInteger(threads) || threads < 1 || threads > 64)
      throw new Error(`E_BAD_CONFIG: --threads ${threads} must be an integer in 1..64`);
    if (threads > 1 && !spawn) throw new Error('E_BAD_CONFIG: threads > 1 needs a way to start worker threads here');
    const shared = threads > 1;
    if (shared && typeof SharedArrayBuffer === 'undefined')
      throw new Error('E_NO_SHARED_MEMORY: threads need SharedArrayBuffer (a cross-origin isolated page)');
    const probe = await instantiateKernels(kernelMemory(PAGE, shared), shared);
    const control = Math.ceil(probe.heapBase() / 64) * 64;
    const memory = kernelMemory(control + CONTROL_BYTES + bytes, shared);
    const k = await instantiateKernels(memory, shared);
    const helpers: Array<{ ready: Promise<void>; terminate(): void }> = [];
    try {
      for (let tid = 1; tid < threads; tid++) helpers.push(spawn!({ memory, control, tid, threads }));
      await Promise.all(helpers.map((h) => h.ready));
    } catch (e) {
      for (const h of helpers) h.terminate();
      throw e;
    }
    return new KernelRunner(k, memory, control, threads, helpers);
  }

  /** Time (ms) and calls per kernel, by KERNEL_NAMES index, while on (bench cpu); off, no clock is read. */
  profile: { ms: Float64Array; calls: Uint32Array } | null = null;

  /** Calls kernel `name`(...args, lo, hi) over [0, n) split across the threads at multiples of `align`. */
  run(name: KernelName, n: number, align: number, ...args: number[]): void {
    const p = this.profile;
    if (!p) {
      this.dispatch(name, n, align, args);
      return;
    }
    const t0 = performance.now();
    this.dispatch(name, n, align, args);
    const i = KERNEL_NAMES.indexOf(name);
    p.ms[i] += performance.now() - t0;
    p.calls[i] += 1;
  }

  private dispatch(name: KernelName, n: number, align: number, args: number[]): void {
    const fn = this.k[name] as (...a: number[]) => void;
    if (!worthSplitting(name, n, align, args, this.threads)) {
      fn(...args, 0, n);
      return;
    }
    const ctl = this.ctl;
    ctl[OP] = KERNEL_NAMES.indexOf(name);
    ctl[NARGS] = args.length;
    ctl[SIZE] = n;
    ctl[ALIGN] = align;
    for (let i = 0; i < args.length; i++) this.args[ARGS + i] = args[i];
    this.seq = (this.seq + 1) | 0;
    Atomics.store(ctl, SEQ, this.seq);
    Atomics.notify(ctl, SEQ);
    const [lo, hi] = splitRange(n, align, 0, this.threads);
    fn(...args, lo, hi);
    waitFor(ctl, DONE, this.threads - 1);
    Atomics.store(ctl, DONE, 0);
  }

  destroy(): void {
    if (this.helpers.length === 0) return;
    Atomics.store(this.ctl, OP, STOP);
    this.seq = (this.seq + 1) | 0;
    Atomics.store(this.ctl, SEQ, this.seq);
    Atomics.notify(this.ctl, SEQ);
    for (const h of this.helpers.splice(0)) h.terminate();
  }
}

/** Waits until ctl[i] reads `target`: a short spin (a kernel call is often tens of µs), then Atomics.wait. */
function waitFor(ctl: Int32Array, i: number, target: number): void {
  for (let spin = 0; spin < 20000; spin++) if (Atomics.load(ctl, i) === target) return;
  for (let v = Atomics.load(ctl, i); v !== target; v = Atomics.load(ctl, i)) Atomics.wait(ctl, i, v, 50);
}

/** A helper thread's loop: waits for each call in the control block, runs its part, counts itself done. */
export async function serveKernels(init: KernelThreadInit, ready: () => void): Promise<void> {
  const k = await instantiateKernels(init.memory, true);
  const ctl = new Int32Array(init.memory.buffer, init.control, 16);
  const args = new Float64Array(init.memory.buffer, init.control, CONTROL_BYTES / 8);
  let seen = Atomics.load(ctl, SEQ);
  ready();
  for (;;) {
    for (let spin = 0; spin < 20000 && Atomics.load(ctl, SEQ) === seen; spin++);
    while (Atomics.load(ctl, SEQ) === seen) Atomics.wait(ctl, SEQ, seen, 1000);
    seen = Atomics.load(ctl, SEQ);
    const op = ctl[OP];
    if (op === STOP) return;
    const a = Array.from(args.subarray(ARGS, ARGS + ctl[NARGS]));
    const [lo, hi] = splitRange(ctl[SIZE], ctl[ALIGN], init.tid, init.threads);
    if (lo < hi) (k[KERNEL_NAMES[op]] as (...x: number[]) => void)(...a, lo, hi);
    Atomics.add(ctl, DONE, 1);
    Atomics.notify(ctl, DONE);
  }
}
