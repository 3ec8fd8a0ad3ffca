// Held-out evaluation and text sampling in a worker_thread, so the event loop that answers
// islands never runs a forward pass. The main thread side is `EvalService`; the worker side is
// the block at the bottom that runs when this file is a worker's entry point.
//
// Coalescing: at most one eval runs at a time and at most one waits. A newer version replaces the
// waiting one, so when updates come faster than evals the freshest θ is evaluated next and stale
// versions are skipped rather than queued without bound.

import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import type { GPTConfig } from '../../core/model/config.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';

export interface EvalWorkerInit {
  kind: 'atoll-eval';
  config: GPTConfig;
  heldOut: TokenArray;
  batchSize: number;
  nBatches: number;
}

type ToWorker =
  | { type: 'eval'; id: number; version: number; params: Float32Array }
  | {
      type: 'sample';
      id: number;
      params: Float32Array;
      prompt: TokenArray;
      tokens: number;
      temperature: number;
      seed: number;
    };

type FromWorker =
  | { type: 'eval'; id: number; version: number; loss: number; ms: number }
  | { type: 'sample'; id: number; bytes: Uint32Array; ms: number }
  | { type: 'error'; id: number; message: string };

export interface EvalResult {
  version: number;
  loss: number;
  ms: number;
}

const REGISTER_URL = new URL('../../bin/register.js', import.meta.url).href;

export class EvalService {
  private readonly worker: Worker;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (v: FromWorker) => void; reject: (e: Error) => void }>();
  private evalRunning = false;
  private pendingEval: { version: number; params: Float32Array } | null = null;
  private closed = false;
  /** Called for every finished eval (the app records it in history and the event log). */
  onResult: (r: EvalResult) => void = () => {};
  onError: (e: Error) => void = () => {};

  constructor(init: Omit<EvalWorkerInit, 'kind'>) {
    const data: EvalWorkerInit = { kind: 'atoll-eval', ...init };
    this.worker = new Worker(new URL(import.meta.url), { workerData: data, execArgv: ['--import', REGISTER_URL] });
    this.worker.unref(); // never keeps the process alive on its own
    this.worker.on('message', (m: FromWorker) => {
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.type === 'error') w.reject(new Error(m.message));
      else w.resolve(m);
    });
    this.worker.on('error', (e) => this.failAll(e));
    this.worker.on('exit', (code) => {
      if (!this.closed) this.failAll(new Error(`eval worker exited with code ${code}`));
    });
  }

  /** True while an eval is running or waiting. */
  get busy(): boolean {
    return this.evalRunning || this.pendingEval !== null;
  }

  /** Schedules an eval of θ at `version`. `params` is copied, so the caller may keep mutating its θ. */
  requestEval(version: number, params: Float32Array): void {
    if (this.closed) return;
    this.pendingEval = { version, params: params.slice() };
    if (!this.evalRunning) void this.pump();
  }

  /** Resolves when no eval is running or waiting (tests and shutdown). */
  async idle(): Promise<void> {
    while (this.busy && !this.closed) await new Promise((r) => setTimeout(r, 10));
  }

  async sample(
    params: Float32Array,
    opts: { prompt: TokenArray; tokens: number; temperature: number; seed: number },
  ): Promise<Uint32Array> {
    const copy = params.slice();
    const r = await this.call({ type: 'sample', id: 0, params: copy, ...opts }, [copy.buffer as ArrayBuffer]);
    if (r.type !== 'sample') throw new Error('unexpected reply from the eval worker');
    return r.bytes;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.pendingEval = null;
    this.failAll(new Error('eval service closed'));
    await this.worker.terminate();
  }

  private async pump(): Promise<void> {
    while (this.pendingEval && !this.closed) {
      const job = this.pendingEval;
      this.pendingEval = null;
      this.evalRunning = true;
      try {
        const r = await this.call({ type: 'eval', id: 0, version: job.version, params: job.params }, [
          job.params.buffer as ArrayBuffer,
        ]);
        if (r.type === 'eval') this.onResult({ version: r.version, loss: r.loss, ms: r.ms });
      } catch (e) {
        if (!this.closed) this.onError(e as Error);
      } finally {
        this.evalRunning = false;
      }
    }
  }

  private call(msg: ToWorker, transfer: ArrayBuffer[]): Promise<FromWorker> {
    if (this.closed) return Promise.reject(new Error('eval service closed'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ ...msg, id }, transfer);
    });
  }

  private failAll(e: Error): void {
    for (const w of this.waiting.values()) w.reject(e);
    this.waiting.clear();
  }
}

// ---------------------------------------------------------------------------------------------
// Worker side

async function runWorker(init: EvalWorkerInit): Promise<void> {
  const { createCpuEngine } = await import('../../core/engine/cpu.ts');
  const { evalBatches } = await import('../../core/data/dataset.ts');
  const { generate } = await import('../../core/sample.ts');
  const T = init.config.blockSize;
  // the ids as they came (bytes or GPT-2's uint16 ids): a copy into bytes would cut ids above 255
  const batches = evalBatches(init.heldOut, init.batchSize, T, init.nBatches);
  const engine = await createCpuEngine('cpu', { config: init.config, maxBatch: Math.max(1, init.batchSize) });
  const port = parentPort!;
  // One job at a time: eval and sample share the engine's θ.
  let chain = Promise.resolve();
  port.on('message', (m: ToWorker) => {
    chain = chain.then(() => handle(m));
  });
  async function handle(m: ToWorker): Promise<void> {
    const t0 = performance.now();
    try {
      await engine.setParams(m.params);
      if (m.type === 'eval') {
        let s = 0;
        for (const b of batches) s += await engine.evalLoss(b);
        const reply: FromWorker = {
          type: 'eval',
          id: m.id,
          version: m.version,
          loss: s / batches.length,
          ms: performance.now() - t0,
        };
        port.postMessage(reply);
      } else {
        const bytes = await generate(engine, m.prompt, { tokens: m.tokens, temperature: m.temperature, seed: m.seed });
        const reply: FromWorker = { type: 'sample', id: m.id, bytes, ms: performance.now() - t0 };
        port.postMessage(reply, [bytes.buffer as ArrayBuffer]);
      }
    } catch (e) {
      port.postMessage({ type: 'error', id: m.id, message: (e as Error).message } satisfies FromWorker);
    }
  }
}

if (!isMainThread && (workerData as EvalWorkerInit | undefined)?.kind === 'atoll-eval') {
  void runWorker(workerData as EvalWorkerInit);
}
