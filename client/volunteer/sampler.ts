// Samples of the global model, written on the volunteer's own device without hurting training:
// tokens are generated in the gaps between training steps (training takes precedence), each gap
// used for under a third of a usual step, so no step waits more than that for a sample.
// `answerSample` serves the page's 'sample' request for the island worker.

import { createCpuEngine } from '../../core/engine/cpu.ts';
import { WebGpuEngine } from '../island/engine/webgpu.ts';
import type { TrainingEngine } from '../../core/engine/index.ts';
import { type SampleOptions, sampleToken } from '../../core/sample.ts';
import { mulberry32 } from '../../core/random.ts';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import { type TokenArray, loadTokenizer, textBytes, tokenizerOfVocab } from '../../core/data/tokenizer.ts';
import type { IslandRuntime } from '../island/index.ts';
import type { EngineKind, FromWorker, ModelShape, ToWorker } from './messages.ts';
import type { ResilientEngine } from './resilient-engine.ts';
import { cpuName, engineOptions } from './worker-gpu.ts';

/** Where sample tokens get their GPU time: the training engine's gaps between steps. */
export interface StepGate {
  between(): Promise<{ release: () => void; budgetMs: number }>;
  readonly stepWaiting: boolean;
}

interface Held {
  kind: EngineKind;
  engine: TrainingEngine;
  /** The training engine's device it shares (null: its own device, or the CPU). */
  shared: GPUDevice | null;
  dead: boolean;
}

/** The engine samples are written with (batch 1), kept between samples. */
export class SamplerEngines {
  private held: Held | null = null;

  /**
   * On WebGPU it shares the training engine's device when there is one (Dawn reuses the compiled
   * pipelines); before Start it opens its own through `openOwn`.
   */
  async get(
    kind: EngineKind,
    shape: ModelShape,
    training: ResilientEngine | null,
    openOwn: (s: ModelShape) => Promise<TrainingEngine>,
  ): Promise<TrainingEngine> {
    const shared = kind === 'webgpu' && training?.kind === 'webgpu' ? training.gpuDevice : null;
    const h = this.held;
    if (h && h.kind === kind && !h.dead && h.shared === shared) return h.engine;
    // a shared engine frees its buffers; an own one (a ResilientEngine) its device too
    h?.engine.destroy();
    const small: ModelShape = { config: shape.config, maxBatch: 1 };
    let e: TrainingEngine;
    if (kind === 'cpu') e = await createCpuEngine('cpu', engineOptions(small));
    else if (shared) e = await WebGpuEngine.create(shared, { ...engineOptions(small), adapterInfo: training!.device });
    else e = await openOwn(small);
    const held: Held = { kind, engine: e, shared, dead: false };
    if (e instanceof WebGpuEngine)
      void e.lost.then(() => {
        held.dead = true;
      });
    this.held = held;
    return e;
  }

  /** Its device may have been lost (or replaced under the training engine): build it again next time. */
  invalidate(): boolean {
    if (!this.held) return false;
    this.held.dead = true;
    return true;
  }
}

/**
 * generate() of core/sample.ts (same tokens for the same seed), reporting the ids so far
 * every few tokens. With a gate, each token waits for a gap between training steps.
 */
export async function generateBetweenSteps(
  e: TrainingEngine,
  prompt: TokenArray,
  o: SampleOptions,
  gate: StepGate | null,
  onProgress: (sofar: Uint32Array) => void,
): Promise<Uint32Array> {
  const rand = mulberry32(o.seed ?? 1);
  // an empty prompt starts at a newline, as generate() does
  const ctx = Array.from(prompt.length > 0 ? prompt : [e.config.vocabSize > 256 ? 198 : 10]);
  const out = new Uint32Array(o.tokens);
  let shown = performance.now();
  let slot: { release: () => void; budgetMs: number; at: number } | null = null;
  /** The longest recent token, ms: a token starts only if it fits what is left of the gap. */
  let tokenMs = 0;
  try {
    for (let i = 0; i < o.tokens; i++) {
      // a waiting step goes first once the next token would overrun this gap's budget (one token per gap at least)
      if (slot && gate!.stepWaiting && performance.now() - slot.at + tokenMs > slot.budgetMs) {
        slot.release();
        slot = null;
      }
      if (gate && !slot) slot = { ...(await gate.between()), at: performance.now() };
      const t0 = performance.now();
      const logits = await e.nextTokenLogits(Uint32Array.from(ctx.slice(-e.config.blockSize)));
      out[i] = sampleToken(logits, o.temperature ?? 0.8, o.topK ?? 40, rand);
      ctx.push(out[i]);
      const now = performance.now();
      tokenMs = Math.max(0.8 * tokenMs, now - t0);
      if (now - shown > 250) {
        shown = now;
        onProgress(out.subarray(0, i + 1));
      }
    }
  } finally {
    slot?.release();
  }
  return out;
}

/** What answering a sample request needs of the island worker. */
export interface SampleContext {
  /** The engine kind samples run on. */
  kind: EngineKind;
  /** The training engine now (its device is shared, its gaps used), or null before Start. */
  training(): ResilientEngine | null;
  /** The island's replica of the global model, when it has one; else `modelUrl()` is fetched. */
  replica: Pick<IslandRuntime, 'replicaState' | 'replicaParams'> | null;
  modelUrl(): string;
  /** Fetches bytes (the worker counts them as downloaded). */
  fetchBytes(url: string): Promise<Uint8Array>;
  /** Opens the sampler's own WebGPU engine (before Start). */
  openOwn(shape: ModelShape): Promise<TrainingEngine>;
  post(m: FromWorker): void;
}

/** θ of the global model: the island's replica when it has one, else the server's checkpoint. */
async function globalModel(
  shape: ModelShape,
  c: SampleContext,
): Promise<{ params: Float32Array; version: number | null }> {
  const state = c.replica?.replicaState;
  const params = c.replica?.replicaParams();
  if (state && params) return { params, version: state.version };
  const bytes = await c.fetchBytes(c.modelUrl());
  const ck = decodeCheckpoint(bytes, shape.config);
  if (!ck.ok) throw new Error(`${ck.error.code}: ${ck.error.message}`);
  const v = Number(ck.value.meta.version);
  return { params: ck.value.params, version: Number.isFinite(v) ? v : null };
}

/** Writes the requested sample, posting progress and then the sample or its error (once retried on a lost device). */
export async function answerSample(
  samplers: SamplerEngines,
  m: Extract<ToWorker, { type: 'sample' }>,
  c: SampleContext,
): Promise<void> {
  const t0 = performance.now();
  try {
    const kind = c.kind;
    const g = await globalModel(m.shape, c);
    // the run's tokenizer is the one its vocabulary fits (gpt2's ranks load only for a gpt2 run)
    const tokenizer = await loadTokenizer(tokenizerOfVocab(m.shape.config.vocabSize) ?? 'byte');
    let out: Uint32Array | null = null;
    let e: TrainingEngine | null = null;
    for (let attempt = 0; !out; attempt++) {
      try {
        e = await samplers.get(kind, m.shape, c.training(), c.openOwn);
        // setParams queues a write only; the tokens themselves wait for gaps between training steps
        await e.setParams(g.params);
        out = await generateBetweenSteps(
          e,
          tokenizer.encode(m.prompt),
          { tokens: m.tokens, temperature: m.temperature, seed: m.seed },
          c.training(),
          (sofar) => {
            const bytes = textBytes(tokenizer, sofar);
            c.post({ type: 'sample-progress', id: m.id, bytes, written: sofar.length, tokens: m.tokens });
          },
        );
      } catch (err) {
        if (attempt > 0 || !samplers.invalidate()) throw err;
      }
    }
    const device = kind === 'cpu' ? cpuName() : e!.device;
    const bytes = textBytes(tokenizer, out);
    const ms = performance.now() - t0;
    c.post({ type: 'sample', id: m.id, ok: true, bytes, tokens: out.length, version: g.version, ms, device });
  } catch (e) {
    const msg = (e as Error).message;
    const code = /^(E_[A-Z_0-9]+)/.exec(msg)?.[1] ?? 'E_SAMPLE';
    c.post({ type: 'sample', id: m.id, ok: false, code, message: msg.replace(/^E_[A-Z_0-9]+:\s*/, '') });
  }
}
