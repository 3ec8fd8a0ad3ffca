// Work is derived, not claimed: a delta's steps, tokens and speed are checked against the
// assignment the server issued. Each lying claim is rejected with E_BAD_CLAIM, and θ, the token
// count, the budget and the island's credit do not move. The norm bound uses the assignment's
// steps, so a huge claimed `steps` can no longer shrink ‖Δ‖/√steps under the bound.

import { describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator } from '../core/coord/index.ts';
import type { Assignment, DeltaMeta } from '../core/protocol.ts';
import { ErrorCode } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const N = 512;

function vec(seed: number, scale: number): Float32Array {
  const r = gaussian(mulberry32(seed));
  return new Float32Array(N).map(() => scale * r());
}

describe('claims that lie', () => {
  it('steps above the assignment, tokens ≠ steps × batch × seqLen and a huge steps under the norm bound: E_BAD_CLAIM, nothing moves', () => {
    const c = new Coordinator({
      params: vec(1, 0.02),
      config: {
        mode: 'async',
        uplink: { encoding: 'f32' },
        downlink: { encoding: 'f32', blockSize: 64 },
        batchSize: 4,
        seqLen: 8,
        innerSteps: 10,
        dylu: false,
        normBound: { factor: 2, window: 32, minHistory: 3 },
        totalTokens: 1_000_000,
      },
    });
    const j = c.join({ caps: { engine: 'cpu', name: 'liar' } }, 0);
    if (!j.ok || !j.value.assignment) throw new Error('join failed');
    const id = j.value.islandId;
    let a: Assignment = j.value.assignment;
    let seq = 0;
    let now = 0;
    const meta = (o: Partial<DeltaMeta> = {}): DeltaMeta => {
      const steps = o.steps ?? a.innerSteps;
      return {
        islandId: id,
        roundId: a.roundId,
        baseVersion: c.version,
        seq: ++seq,
        steps,
        tokens: steps * a.batchSize * a.seqLen,
        lossFirst: 3,
        lossLast: 2,
        lossMean: 2.5,
        elapsedMs: 1000,
        ...o,
      };
    };
    const submit = (m: DeltaMeta, d: Float32Array) =>
      c.submit({ meta: m, frame: encodeDelta(d, { encoding: 'f32' }) }, (now += 1000));
    const next = () => {
      const r = c.nextAssignment(id, now);
      if (!r.ok || !r.value) throw new Error('no assignment');
      a = r.value;
    };
    // three honest deltas build the norm history (‖Δ‖ ≈ 0.01 · √N)
    for (let k = 0; k < 3; k++) {
      expect(submit(meta(), vec(10 + k, 0.01)).ok).toBe(true);
      next();
    }
    expect(a.innerSteps).toBe(10);
    const before = { hash: c.hash, version: c.version, totals: c.totals(), isl: c.island(id)! };
    const code = (r: ReturnType<typeof submit>) => (r.ok ? 'accepted' : r.error.code);
    const big = vec(99, 1); // 100× the honest norm

    // at the assignment's steps, the norm bound catches it
    expect(code(submit(meta(), big))).toBe(ErrorCode.NORM_BOUND);
    // claiming 10⁶ steps used to divide ‖Δ‖ by 1000 and let it through
    expect(code(submit(meta({ steps: 1_000_000 }), big))).toBe(ErrorCode.BAD_CLAIM);
    expect(code(submit(meta({ steps: a.innerSteps + 1 }), vec(5, 0.01)))).toBe(ErrorCode.BAD_CLAIM);
    // tokens: 10¹⁵, one too many, one too few
    for (const tokens of [1e15, a.innerSteps * 32 + 1, a.innerSteps * 32 - 1]) {
      expect(code(submit(meta({ tokens }), vec(6, 0.01))), `tokens ${tokens}`).toBe(ErrorCode.BAD_CLAIM);
    }
    // a claim about another assignment's round is checked against the run's bounds
    expect(code(submit(meta({ roundId: 0, steps: 1e6 }), vec(7, 0.01)))).toBe(ErrorCode.BAD_CLAIM);

    expect(c.hash).toBe(before.hash);
    expect(c.version).toBe(before.version);
    const t = c.totals();
    expect(t.tokensApplied).toBe(before.totals.tokensApplied);
    // only the norm-bound rejection is charged, at its derived tokens; the lies are charged nothing
    expect(t.tokensSubmitted).toBe(before.totals.tokensSubmitted + a.innerSteps * 4 * 8);
    expect(c.island(id)!.tokensContributed).toBe(before.isl.tokensContributed);
    expect(c.island(id)!.rejected[ErrorCode.BAD_CLAIM]).toBe(6);

    // an honest delta with fewer steps than assigned counts its true tokens
    const ok = submit(meta({ steps: 3 }), vec(8, 0.01));
    expect(ok.ok).toBe(true);
    expect(c.totals().tokensApplied).toBe(before.totals.tokensApplied + 3 * 4 * 8);
  });

  it('a claimed speed is at most twice what the server observed', () => {
    const c = new Coordinator({
      params: vec(2, 0.02),
      config: {
        mode: 'async',
        uplink: { encoding: 'f32' },
        downlink: { encoding: 'f32', blockSize: 64 },
        batchSize: 4,
        seqLen: 8,
        innerSteps: 10,
        dylu: false,
      },
    });
    const j = c.join({ caps: { engine: 'cpu', tokensPerSec: 1e12 } }, 0);
    if (!j.ok || !j.value.assignment) throw new Error('join failed');
    const a = j.value.assignment;
    const tokens = a.innerSteps * a.batchSize * a.seqLen;
    // 1 ms of compute claimed; the server saw 10 s since the assignment
    const r = c.submit(
      {
        meta: {
          islandId: a.islandId,
          roundId: a.roundId,
          baseVersion: 0,
          seq: 1,
          steps: a.innerSteps,
          tokens,
          lossFirst: 3,
          lossLast: 2,
          lossMean: 2.5,
          elapsedMs: 1,
        },
        frame: encodeDelta(vec(3, 0.01), { encoding: 'f32' }),
      },
      10_000,
    );
    expect(r.ok).toBe(true);
    expect(c.island(a.islandId)!.tokensPerSec).toBeCloseTo((2 * tokens) / 10, 6);
  });
});
