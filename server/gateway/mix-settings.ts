// Butterfly mixing's settings on the live server: the operator's choices (`atoll serve --mix-group
// k --mix-spot-rate f --mix-ice-servers FILE`) and the timings that follow from the run's config.
// The gateway (mix-gateway.ts) runs on them; the fleet's twin (fleet/twin.ts) simulates with them.

import type { CoordinatorConfig } from '../../core/coord/index.ts';
import type { MixPlanMsg } from '../../core/protocol.ts';

export type IceServer = MixPlanMsg['iceServers'][number];

export interface MixSettings {
  /** Members per group, a power of two ≥ 2. */
  k: number;
  /** Share of fragments a second member recomputes (the spot check), [0, 1]. */
  spotRate: number;
  /**
   * A ready island waits this long for a group of k at least; a short group or a lone island up to twice as long, then
   * a smaller group or a direct upload (ms).
   */
  formWaitMs: number;
  /**
   * The wait grows to this share of the median measured round period (MixConfig.formWaitFraction), at most
   * maxFormWaitMs.
   */
  formWaitFraction: number;
  maxFormWaitMs: number;
  /** A group whose fragments are not all in this long after it formed falls back (ms). */
  exchangeTimeoutMs: number;
  iceServers: IceServer[];
}

/** The operator's choices (`atoll serve --mix-group k --mix-spot-rate f`); the rest follows from the run. */
export interface MixOptions {
  k: number;
  spotRate?: number;
  iceServers?: IceServer[];
  /** Defaults below (tests shorten them). */
  formWaitMs?: number;
  exchangeTimeoutMs?: number;
}

/**
 * A ready island waits for a group as long as the run's merge window would hold its Δ: the async
 * window's fraction (a half by default) of the round, the target round time at first (2 s when
 * the run sets none), then of the median round period measured, 0.5..10 s. The fleet's rounds
 * without a target last 25-45 s and ended further apart than a fixed 2 s: a third of its groups were
 * pairs and some rounds went direct.
 */
export function mixSettings(o: MixOptions, c: CoordinatorConfig): MixSettings {
  const fraction = c.asyncWindow.fraction > 0 ? c.asyncWindow.fraction : 0.25;
  const maxFormWaitMs = Math.min(MAX_FORM_WAIT_MS, c.asyncWindow.capMs || MAX_FORM_WAIT_MS);
  const formWaitMs = c.targetRoundMs > 0 ? Math.min(maxFormWaitMs, Math.max(500, fraction * c.targetRoundMs)) : 2000;
  // opening k − 1 data channels takes ~40 ms or ~1 s on loopback (test/mix-webrtc.test.ts), a page more
  return {
    k: o.k,
    spotRate: o.spotRate ?? 0.1,
    iceServers: o.iceServers ?? [],
    exchangeTimeoutMs: o.exchangeTimeoutMs ?? 15_000,
    // a test's fixed wait stays fixed
    formWaitMs: o.formWaitMs ?? formWaitMs,
    formWaitFraction: o.formWaitMs === undefined ? fraction : 0,
    maxFormWaitMs,
  };
}

const MAX_FORM_WAIT_MS = 10_000;
