// What the WebGPU engine reads back, and how. Two readers, each owning its mappable buffers:
// - LossRing: each step writes its mean loss to a slot of the GPU loss ring; when the ring is
//   full it is copied to a mappable staging buffer inside that step's submission, and only
//   `take()` maps them, so no promise is pending while steps run (under Node a pending Dawn
//   promise busy-polls a core); take() itself sleeps through most of the steps' expected time
//   (from the last take's GPU ms per step) before it maps.
// - Readback: the one readback buffer every other read goes through (θ, Δ, the moments, logits,
//   eval losses), one read at a time, in chunks of its size (θ's kind a GPUBuffer of it after another).
// No node: imports (runs in a browser or Web Worker too).

import { unpackHalves } from '../../../core/model/ops-f16.ts';
import type { FlatPart } from '../../../shaders/kernel.ts';
import { EVAL_SLOTS, f32b } from './webgpu-plan.ts';

/** Creates a buffer and counts its bytes to the engine. */
export type Alloc = (label: string, size: number, usage: GPUBufferUsageFlags) => GPUBuffer;

/** Usage of a buffer the CPU maps (a function: the GPU globals may be installed after import). */
const mappable = () => GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST;

/** A copy of the loss ring in a mappable buffer: `count` losses from ring slot `first`. */
interface Drain {
  staging: GPUBuffer;
  first: number;
  count: number;
}

/** The losses of enqueued steps: ring slots on the GPU, drained into staging buffers. */
export class LossRing {
  private readonly all: GPUBuffer[] = []; // staging buffers, all of them
  private free: GPUBuffer[] = [];
  private drains: Drain[] = [];
  private steps = 0; // steps recorded (ring slot = steps % R)
  private pending = 0; // losses in the ring not yet copied out
  // take() waits for the GPU without a pending promise for most of the time the steps should take:
  private untaken = 0; // steps recorded since the last take
  private firstAt = 0; // when the first of them was recorded (ms, performance.now)
  private idleAt = 0; // when the last take's map resolved: the queue was empty by then
  private msPerStep: number | null = null; // GPU ms per step, as the last take saw it

  /**
   * `ring`: the GPU loss ring (R slots, then EVAL_SLOTS for evaluation); `stagingBytes`: the first staging buffer's
   * size.
   */
  constructor(
    private readonly gpu: GPUDevice,
    private readonly ring: GPUBuffer,
    private readonly R: number,
    stagingBytes: number,
    private readonly alloc: Alloc,
  ) {
    const staging = alloc('lossStaging', stagingBytes, mappable());
    this.all.push(staging);
    this.free.push(staging);
  }

  /** The ring slot the next step writes its loss to. */
  get slot(): number {
    return this.steps % this.R;
  }

  /** Call once a step is recorded into `enc` (before it is submitted): a full ring is copied out in that submission. */
  recorded(enc: GPUCommandEncoder): void {
    const slot = this.slot;
    if (this.untaken++ === 0) this.firstAt = performance.now();
    this.steps += 1;
    this.pending += 1;
    if (this.pending === this.R) {
      // the ring is full: copy it out in this same submission, map it later
      const staging = this.acquire();
      enc.copyBufferToBuffer(this.ring, 0, staging, 0, this.R * 4);
      this.drains.push({ staging, first: (slot + 1) % this.R, count: this.R });
      this.pending = 0;
    }
  }

  private acquire(): GPUBuffer {
    const s = this.free.pop();
    if (s) return s;
    // every staging buffer holds unread losses: add one (one per lossReadEvery steps not yet taken)
    const b = this.alloc('lossStaging', f32b(this.R + EVAL_SLOTS), mappable());
    this.all.push(b);
    return b;
  }

  /** Losses of the steps since the last call, in order (copied and mapped asynchronously). */
  async take(): Promise<number[]> {
    if (this.pending > 0) {
      const count = this.pending;
      const staging = this.acquire();
      const enc = this.gpu.createCommandEncoder({ label: 'takeLosses' });
      enc.copyBufferToBuffer(this.ring, 0, staging, 0, this.R * 4);
      this.gpu.queue.submit([enc.finish()]);
      this.drains.push({ staging, first: (this.steps - count) % this.R, count });
      this.pending = 0;
    }
    const drains = this.drains;
    this.drains = [];
    const steps = this.untaken;
    this.untaken = 0;
    // the steps ran from `start` at the earliest; sleep through 80 % of their expected time before
    // mapping (a pending map busy-polls a core under Node, the one a CPU adapter would use)
    const start = Math.max(this.idleAt, this.firstAt);
    const wait = this.msPerStep === null ? 0 : start + 0.8 * steps * this.msPerStep - performance.now();
    if (steps > 0 && wait > 2) await new Promise((r) => setTimeout(r, wait));
    const out: number[] = [];
    const R = this.R;
    for (const { staging, first, count } of drains) {
      await staging.mapAsync(GPUMapMode.READ, 0, R * 4);
      const ring = new Float32Array(staging.getMappedRange(0, R * 4));
      for (let i = 0; i < count; i++) out.push(ring[(first + i) % R]);
      staging.unmap();
      this.free.push(staging);
    }
    this.idleAt = performance.now();
    if (steps > 0) this.msPerStep = (this.idleAt - start) / steps;
    return out;
  }

  destroy(): void {
    for (const b of this.all) b.destroy();
  }
}

/** Reads through the one readback buffer (the engine owns and frees it). */
export class Readback {
  private lock: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly gpu: GPUDevice,
    private readonly rb: GPUBuffer,
  ) {}

  /** Runs reads through the readback buffer one at a time. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => {});
    return run;
  }

  /** The first `n` floats already copied into the readback buffer. Call inside `exclusive`. */
  async mapped(n: number): Promise<Float32Array> {
    const rb = this.rb;
    await rb.mapAsync(GPUMapMode.READ, 0, f32b(n));
    const out = new Float32Array(rb.getMappedRange(0, f32b(n)).slice(0, n * 4));
    rb.unmap();
    return out;
  }

  /**
   * `bytes` of `src` from its start, through the readback buffer (READBACK_BYTES: a big model's θ
   * takes several), each chunk handed to `take` while mapped, with its byte offset. `first` records
   * work into the first chunk's submission (readDelta's Δ pass). Call inside `exclusive`.
   */
  async out(
    src: GPUBuffer,
    bytes: number,
    take: (chunk: ArrayBuffer, at: number) => void,
    first?: (enc: GPUCommandEncoder) => void,
  ): Promise<void> {
    const rb = this.rb;
    for (let at = 0; at < bytes; at += rb.size) {
      const n = Math.min(rb.size, Math.ceil((bytes - at) / 4) * 4);
      const enc = this.gpu.createCommandEncoder({ label: `read ${src.label}` });
      if (at === 0) first?.(enc);
      enc.copyBufferToBuffer(src, at, rb, 0, n);
      this.gpu.queue.submit([enc.finish()]);
      await rb.mapAsync(GPUMapMode.READ, 0, n);
      take(rb.getMappedRange(0, n), at);
      rb.unmap();
    }
  }

  /**
   * A flat array as f32, from the buffers that hold it (`parts`: its elements [lo, hi) in each, one part where it is
   * one buffer), a part after another; `halves`: each part holds its values as packed halves (Δ with f16 storage,
   * half the bytes), unpacked here once. `first` as in `out`. Call inside `exclusive`.
   */
  async floats(
    parts: readonly FlatPart[],
    halves = false,
    first?: (enc: GPUCommandEncoder) => void,
  ): Promise<Float32Array> {
    const out = new Float32Array(parts[parts.length - 1].hi);
    for (const [i, { lo, hi, buffer }] of parts.entries()) {
      const n = hi - lo,
        f = i === 0 ? first : undefined;
      if (!halves) await this.out(buffer, 4 * n, (chunk, at) => out.set(new Float32Array(chunk), lo + at / 4), f);
      // chunks hold whole words
      else
        await this.out(
          buffer,
          4 * Math.ceil(n / 2),
          (chunk, at) => {
            const from = lo + at / 2,
              k = Math.min(hi - from, (chunk.byteLength / 4) * 2);
            unpackHalves(new Uint32Array(chunk), k, out.subarray(from, from + k));
          },
          f,
        );
    }
    return out;
  }
}
