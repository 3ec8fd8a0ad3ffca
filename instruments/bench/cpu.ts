// `atoll bench cpu`: the training step of each preset on the CPU engines in one run: the Wasm SIMD
// engine (core/engine/wasm.ts) at each thread count against the JS reference (core/engine/js.ts),
// on the same batches from the same θ0. Tokens/s and GFLOP/s from the median step; the ratio is the
// Wasm engine's speed over the JS engine's, measured in the same run.

import { availableParallelism, loadavg } from 'node:os';
import { createCpuEngine } from '../../core/engine/cpu.ts';
import { WasmEngine } from '../../core/engine/wasm.ts';
import type { Batch, TrainingEngine } from '../../core/engine/index.ts';
import { type PresetName, PRESETS, flopsPerToken } from '../../core/model/config.ts';
import { initParams } from '../../core/model/gpt.ts';
import { spawnNodeKernelThread } from '../../client/island/engine/wasm-threads.ts';
import { median, randomArray } from './timing.ts';

export interface CpuBenchOptions {
  presets: PresetName[];
  /** Timed steps per engine, at least (a fast step repeats for MIN_TIMED_MS), after the warm-up. */
  steps: number;
  /** The Wasm engine's thread counts. */
  threads: number[];
  log?: (line: string) => void;
}

export interface CpuBenchRow {
  preset: PresetName;
  engine: 'wasm' | 'js';
  threads: number;
  batch: number;
  seqLen: number;
  msPerStep: number;
  tokensPerSec: number;
  gflops: number;
  /** This row's speed over the JS engine's on the same preset (1 for the JS row). */
  vsJs: number;
  /** The Wasm rows: ms per step in each kernel (all its calls), slowest first, from separate profiled steps. */
  ops?: Array<{ kernel: string; msPerStep: number; callsPerStep: number }>;
  /** The Wasm rows: wall ms per profiled step, the clock's cost included; `ops` sums to a part of it. */
  profiledMsPerStep?: number;
}

/** Steps with each kernel timed, after the timed ones (reading the clock per call would slow those). */
const PROFILED_STEPS = 2;

async function profileSteps(engine: WasmEngine, batch: Batch): Promise<Pick<CpuBenchRow, 'ops' | 'profiledMsPerStep'>> {
  engine.profileKernels(true);
  const t0 = performance.now();
  for (let s = 0; s < PROFILED_STEPS; s++) await engine.step(batch, { lr: 1e-3, gradClip: 1 });
  await engine.takeLosses();
  const profiledMsPerStep = (performance.now() - t0) / PROFILED_STEPS;
  const ops = engine
    .profileKernels(false)
    .map((r) => ({ kernel: r.kernel, msPerStep: r.ms / PROFILED_STEPS, callsPerStep: r.calls / PROFILED_STEPS }))
    .sort((a, b) => b.msPerStep - a.msPerStep);
  return { ops, profiledMsPerStep };
}

/** Sequences per step: `tiny` and `small` at the browser's batch, `base` smaller (the JS step takes a minute). */
const BATCH: Partial<Record<PresetName, number>> = { tiny: 8, small: 8, base: 2 };

function batchOf(preset: PresetName, seed: number): Batch {
  const c = PRESETS[preset];
  const B = BATCH[preset] ?? 4,
    T = c.blockSize;
  const ids = randomArray(B * T + 1, seed);
  const tokens = Uint8Array.from(ids, (x) => Math.floor((x + 0.5) * c.vocabSize) % c.vocabSize);
  return { inputs: tokens.subarray(0, B * T), targets: tokens.subarray(1, B * T + 1), B, T };
}

/**
 * Warm-up and timing by the clock as well as by count: a 2 ms `tiny` step needs a few hundred calls before
 * V8 has tiered every kernel up from its baseline compiler, and a median of five such steps is noise.
 */
const MIN_WARMUP_MS = 300;
const MIN_TIMED_MS = 1000;
/** A turn of one engine in the interleaved timing: one step, or this long of steps. */
const TURN_MS = 500;

interface Timed {
  engine: TrainingEngine;
  /** Timed steps this engine needs at least. */
  steps: number;
  ms: number[];
  timedMs: number;
}

async function stepOnce(engine: TrainingEngine, batch: Batch): Promise<number> {
  const s0 = performance.now();
  await engine.step(batch, { lr: 1e-3, gradClip: 1 });
  await engine.takeLosses(); // the CPU engines are done when step resolves; this keeps the queue empty
  return performance.now() - s0;
}

/**
 * Each engine's median step, the engines taking turns (one step, or TURN_MS of them, each) until every one
 * has its steps and MIN_TIMED_MS: the host's speed here moves by half within a minute, and turns make the
 * ratio between engines see the same host.
 */
async function timeInterleaved(engines: Timed[], batch: Batch, params: Float32Array): Promise<number[]> {
  for (const e of engines) {
    await e.engine.setParams(params);
    const w0 = performance.now();
    do
      await stepOnce(e.engine, batch); // warm-up: JIT, first-touch of the memory
    while (performance.now() - w0 < MIN_WARMUP_MS);
  }
  const pending = (e: Timed) => e.ms.length < e.steps || e.timedMs < MIN_TIMED_MS;
  while (engines.some(pending)) {
    // every engine takes its turn while any needs more: a fast one gathers more steps meanwhile
    for (const e of engines) {
      const t0 = performance.now();
      do {
        const ms = await stepOnce(e.engine, batch);
        e.ms.push(ms);
        e.timedMs += ms;
      } while (performance.now() - t0 < TURN_MS);
    }
  }
  return engines.map((e) => median(e.ms));
}

export interface CpuBenchReport {
  rows: CpuBenchRow[];
  /** The machine's 1-minute load average before and after the run, and its cores (a noisy run shows). */
  load: { before: number; after: number; cpus: number };
  note: string;
}

export async function benchCpu(o: CpuBenchOptions): Promise<CpuBenchReport> {
  const rows: CpuBenchRow[] = [];
  const before = loadavg()[0];
  for (const preset of o.presets) {
    const config = PRESETS[preset];
    const batch = batchOf(preset, 7);
    const opts = { config, maxBatch: batch.B, maxT: batch.T };
    const params = initParams(config, 1337);
    const tokens = batch.B * batch.T;
    const row = (engine: 'wasm' | 'js', threads: number, ms: number, jsMs: number): CpuBenchRow => ({
      preset,
      engine,
      threads,
      batch: batch.B,
      seqLen: batch.T,
      msPerStep: ms,
      tokensPerSec: (tokens * 1000) / ms,
      gflops: (flopsPerToken(config, batch.T) * tokens) / ms / 1e6,
      vsJs: jsMs / ms,
    });
    const js = await createCpuEngine('js', opts);
    const wasms: TrainingEngine[] = [];
    for (const threads of o.threads)
      wasms.push(await createCpuEngine('cpu', opts, { count: threads, spawn: spawnNodeKernelThread }));
    const timed = (engine: TrainingEngine, steps: number): Timed => ({ engine, steps, ms: [], timedMs: 0 });
    const jsSteps = Math.max(1, preset === 'base' ? Math.min(o.steps, 2) : o.steps);
    const [jsMs, ...wasmMs] = await timeInterleaved(
      [timed(js, jsSteps), ...wasms.map((w) => timed(w, o.steps))],
      batch,
      params,
    );
    js.destroy();
    rows.push(row('js', 1, jsMs, jsMs));
    o.log?.(`${preset}: js ${jsMs.toFixed(1)} ms/step`);
    for (const [i, threads] of o.threads.entries()) {
      const wasm = wasms[i],
        ms = wasmMs[i];
      const profiled = wasm instanceof WasmEngine ? await profileSteps(wasm, batch) : {};
      wasm.destroy();
      rows.push({ ...row('wasm', threads, ms, jsMs), ...profiled });
      o.log?.(`${preset}: wasm ×${threads} ${ms.toFixed(1)} ms/step (${(jsMs / ms).toFixed(1)}× js)`);
    }
  }
  return {
    rows,
    load: { before, after: loadavg()[0], cpus: availableParallelism() },
    note:
      `median step (forward, backward, clip, AdamW) on one batch of random bytes, after ${MIN_WARMUP_MS} ms of ` +
      `warm-up, over at least --steps steps and ${MIN_TIMED_MS} ms, the engines taking turns of ${TURN_MS} ms; ` +
      'GFLOP/s by flopsPerToken ' +
      "(6N + attention); base at batch 2 and at most 2 JS steps; ops: each Wasm kernel's ms per step over " +
      `${PROFILED_STEPS} more steps with the clock read around every call`,
  };
}
