// What the page learns from the server before anything starts: GET /api/run (which model is trained,
// for whom, what a round costs) and GET /api/status. The shapes are core/api.ts's, the server's own;
// the page checks only that the answer is one, so a wrong server gets a clear error.

import type { RunInfo, RunStatus } from '../../core/api.ts';
import { type GPTConfig, numParams } from '../../core/model/config.ts';

export type { RunInfo };

export function parseRunInfo(json: unknown): RunInfo {
  const r = json as Partial<RunInfo> | null;
  if (!r || typeof r !== 'object' || Array.isArray(r))
    throw new Error('E_BAD_RUN_INFO: /api/run did not return an object');
  if (
    typeof r.model?.nEmbd !== 'number' ||
    typeof r.batch !== 'number' ||
    typeof r.seqLen !== 'number' ||
    !r.bytesPerRound ||
    !r.config?.coordinator
  ) {
    throw new Error('E_BAD_RUN_INFO: /api/run lacks the model, batch shape, round bytes or coordinator config');
  }
  return r as RunInfo;
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
export type GlobalStatus = Pick<
  RunStatus,
  'version' | 'evalLoss' | 'evalVersion' | 'islandsOnline' | 'tokensTotal' | 'paused' | 'done' | 'bytesPerUpdate'
>;

export function parseStatus(json: unknown): GlobalStatus {
  const r = json as Partial<RunStatus> | null;
  if (!r || typeof r !== 'object' || typeof r.version !== 'number')
    throw new Error('E_BAD_STATUS: /api/status did not return a run status');
  return r as RunStatus;
}
