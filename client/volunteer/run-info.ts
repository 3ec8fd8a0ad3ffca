// What the page learns from GET /api/run before anything starts: which model is
// trained, for whom, and what a round costs. Parsed defensively: the page must
// still explain itself when a field is missing.

import { type GPTConfig, numParams } from '../../core/model/config.ts';

export interface RunInfo {
  /** The run's folder name, and the headline a person reads (the folder name when it has none). */
  name: string;
  title: string;
  description: string;
  config: GPTConfig;
  params: number;
  /** Sequences per inner step and tokens per sequence. */
  batch: number;
  seqLen: number;
  /** Inner steps per round (null when the server sizes rounds per island). */
  innerSteps: number | null;
  /** The round time DyLU aims each island at, ms (0: rounds are sized by steps), and its step bounds. */
  targetRoundMs: number;
  minInnerSteps: number;
  maxInnerSteps: number;
  /** Delta encoding, e.g. "int8". */
  codec: string;
  /** Bytes an island sends per round (its compressed Δ) and receives (the outer update). */
  bytesUpPerRound: number | null;
  bytesDownPerRound: number | null;
  /** Full model snapshot size, downloaded once when joining. */
  modelBytes: number;
  /** Training text the island downloads once (null when unknown). */
  trainBytes: number | null;
}

type Json = Record<string, unknown>;

const obj = (x: unknown): Json | null => (x && typeof x === 'object' && !Array.isArray(x) ? (x as Json) : null);
const num = (...xs: unknown[]): number | null => {
  for (const x of xs) if (typeof x === 'number' && Number.isFinite(x)) return x;
  return null;
};
const str = (...xs: unknown[]): string | null => {
  for (const x of xs) if (typeof x === 'string' && x.length > 0) return x;
  return null;
};

function parseConfig(x: unknown): GPTConfig | null {
  const c = obj(x);
  if (!c) return null;
  const model = obj(c.model) ?? c;
  const keys = ['vocabSize', 'blockSize', 'nLayer', 'nHead', 'nEmbd'] as const;
  const out: Partial<GPTConfig> = {};
  for (const k of keys) {
    const v = model[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) return null;
    out[k] = v;
  }
  return out as GPTConfig;
}

export function parseRunInfo(json: unknown): RunInfo {
  const r = obj(json);
  if (!r) throw new Error('E_BAD_RUN_INFO: /api/run did not return an object');
  const cfgRoot = obj(r.config);
  const config = parseConfig(r.model) ?? parseConfig(r.config) ?? parseConfig(cfgRoot?.model) ?? parseConfig(r);
  if (!config) throw new Error('E_BAD_RUN_INFO: /api/run has no model config');
  const island = obj(r.island) ?? obj(cfgRoot?.island) ?? obj(cfgRoot?.inner) ?? obj(r.inner) ?? {};
  const codecObj = obj(r.codec) ?? obj(cfgRoot?.codec);
  const bytes = obj(r.bytesPerRound) ?? obj(r.bandwidth) ?? {};
  const params = num(r.params, r.paramCount, r.numParams, r.parameters) ?? numParams(config);
  const coord = obj(cfgRoot?.coordinator) ?? {};
  const name = str(r.name, r.runName, cfgRoot?.name) ?? 'Atoll run';
  return {
    name,
    title: str(r.title, cfgRoot?.title) ?? name,
    description: str(r.description, cfgRoot?.description) ?? '',
    config,
    params,
    batch: num(r.batch, r.batchSize, island.batch, island.batchSize, cfgRoot?.batch) ?? 8,
    seqLen: num(r.seqLen, island.seqLen, island.T, cfgRoot?.seqLen) ?? config.blockSize,
    innerSteps: num(r.innerSteps, r.H, island.innerSteps, island.steps, island.H, cfgRoot?.innerSteps),
    targetRoundMs: num(r.targetRoundMs, coord.targetRoundMs) ?? 0,
    minInnerSteps: num(coord.minInnerSteps) ?? 1,
    maxInnerSteps: num(coord.maxInnerSteps) ?? Infinity,
    codec: str(codecObj?.encoding, r.codec, r.encoding) ?? 'int8',
    bytesUpPerRound: num(bytes.up, bytes.upload, bytes.island, r.bytesUpPerRound, r.bytesPerRound),
    bytesDownPerRound: num(bytes.down, bytes.download, bytes.server, r.bytesDownPerRound),
    modelBytes: num(r.modelBytes, r.snapshotBytes) ?? params * 4,
    trainBytes: num(obj(r.data)?.trainBytes, r.trainBytes),
  };
}

/** Rough GPU memory for training: θ, grads, Adam m and v, plus activations (llm.c's list). */
export function estimateTrainingBytes(c: GPTConfig, B: number, T: number): number {
  const { nLayer: L, nEmbd: C, nHead: NH, vocabSize: V } = c;
  const P = numParams(c);
  const perLayer = B * T * (C * 16 + 4 * C + 8 * C) + 2 * B * NH * T * T;
  const acts = L * perLayer + B * T * (C * 3 + V * 2);
  return (4 * P + acts * 2) * 4;
}

/** What the page shows about the global model, from GET /api/status. */
export interface GlobalStatus {
  version: number | null;
  evalLoss: number | null;
  evalVersion: number | null;
  islandsOnline: number | null;
  tokensTotal: number | null;
  paused: boolean;
  done: boolean;
}

export function parseStatus(json: unknown): GlobalStatus {
  const r = obj(json) ?? {};
  return {
    version: num(r.version),
    evalLoss: num(r.evalLoss),
    evalVersion: num(r.evalVersion),
    islandsOnline: num(r.islandsOnline),
    tokensTotal: num(r.tokensTotal),
    paused: r.paused === true,
    done: r.done === true,
  };
}
