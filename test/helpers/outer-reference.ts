// The coordinator's outer step on whole arrays, in the order commitUpdate runs it (combine in f64,
// propose, downlink encode with error feedback, commit, apply, hash): what the worker-thread outer
// step and the cluster aggregator are checked against.

import { Downlink } from '../../core/coord/downlink.ts';
import { l2 } from '../../core/coord/aggregate.ts';
import { hashParams } from '../../core/coord/hash.ts';
import { type OuterConfig, OuterOptimizer, applyUpdate } from '../../core/coord/outer.ts';

export type { DownlinkSpec as DownlinkCfg } from '../../core/coord/outer-fragment.ts';
import type { DownlinkSpec as DownlinkCfg } from '../../core/coord/outer-fragment.ts';

export class ReferenceOuter {
  theta: Float32Array;
  readonly outer: OuterOptimizer;
  readonly downlink: Downlink;

  constructor(theta: Float32Array) {
    this.theta = theta.slice();
    this.outer = new OuterOptimizer(theta.length);
    this.downlink = new Downlink(theta.length);
  }

  /**
   * g = Σ weights[j]·deltas[j] (f64, in order), or deltas[0] itself when weights is null; period 0 is
   * the plain step, `share` a merge window's share of a step. Null when the step is rejected.
   */
  step(
    deltas: Float32Array[],
    weights: number[] | null,
    outer: OuterConfig,
    downlink: DownlinkCfg,
    scale = 1,
    period = 1,
    share = false,
  ): {
    frame: Uint8Array;
    hash: string;
    updateNorm: number;
    agreement?: { dots: number[]; sqs: number[]; gg: number };
  } | null {
    let g = deltas[0];
    let agreement: { dots: number[]; sqs: number[]; gg: number } | undefined;
    if (weights) {
      const acc = new Float64Array(this.theta.length);
      deltas.forEach((d, j) => {
        for (let i = 0; i < acc.length; i++) acc[i] += weights[j] * d[i];
      });
      g = Float32Array.from(acc);
      const dot = (x: Float32Array, y: Float32Array) => x.reduce((s, xi, i) => s + xi * y[i], 0);
      agreement = { dots: deltas.map((d) => dot(d, g)), sqs: deltas.map((d) => dot(d, d)), gg: dot(g, g) };
    }
    if (!(period === 0 ? this.outer.proposePlain(g, scale) : this.outer.propose(outer, g, scale, period, share)))
      return null;
    const q = this.downlink.encode(this.outer.update, downlink);
    if (!q.ok) return null;
    this.outer.commit();
    applyUpdate(this.theta, q.value.decoded);
    return { frame: q.value.frame, hash: hashParams(this.theta), updateNorm: l2(this.outer.update), agreement };
  }
}
