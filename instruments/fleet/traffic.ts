// The server's traffic as the fleet reads it: /api/status's frames and /metrics' wire bytes and frames out by kind,
// at a mark and at the end, and the steady bytes per accepted token between them.

import type { RunStatus } from '../../core/api.ts';
import type { SteadyTraffic } from './types.ts';

/**
 * The server's counters at one moment: /api/status's frames and /metrics' wire bytes and frames out by kind (null: not
 * counted there).
 */
export interface Traffic {
  status: Pick<RunStatus, 'tokensTotal' | 'version' | 'bytesIn' | 'bytesOut'>;
  wire: { in: number; out: number } | null;
  wireByMessage: { in: Record<string, number>; out: Record<string, number> } | null;
  outByKind: Record<string, number> | null;
  /** The fleet's own θ downloads so far (in the server's model bytes). */
  observed: number;
}

/** Frames out by kind without the fleet's own θ downloads. */
export function islandsOnly(byKind: Record<string, number> | null, observed: number): Record<string, number> | null {
  return byKind && { ...byKind, model: (byKind.model ?? 0) - observed };
}

/** A labelled counter's values in /metrics' text, by its one label's value. */
export function byLabel(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of text.matchAll(new RegExp(`^${name}\\{\\w+="([^"]*)"\\} (\\S+)$`, 'gm'))) out[m[1]] = Number(m[2]);
  return out;
}

const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);

/**
 * /metrics' wire bytes by message and frames out by kind (the embedded server's gateway counts them; the Redis roles'
 * /metrics is the aggregator's).
 */
export async function counters(url: string): Promise<Pick<Traffic, 'wire' | 'wireByMessage' | 'outByKind'>> {
  const text = await fetch(`${url}/metrics`).then(
    (r) => (r.ok ? r.text() : ''),
    () => '',
  );
  const byMessage = {
    in: byLabel(text, 'atoll_wire_bytes_in_total'),
    out: byLabel(text, 'atoll_wire_bytes_out_total'),
  };
  const w = { in: sum(byMessage.in), out: sum(byMessage.out) };
  const byKind = byLabel(text, 'atoll_bytes_out_total');
  return {
    wire: w.in + w.out > 0 ? w : null,
    wireByMessage: w.in + w.out > 0 ? byMessage : null,
    outByKind: Object.keys(byKind).length ? byKind : null,
  };
}

/** Server bytes per accepted token from the mark (none reached: from the start) to the end. */
export function steadyTraffic(mark: Traffic | null, end: Traffic): SteadyTraffic {
  const from: Traffic = mark ?? {
    status: { tokensTotal: 0, version: 0, bytesIn: 0, bytesOut: 0 },
    wire: { in: 0, out: 0 },
    wireByMessage: { in: {}, out: {} },
    outByKind: {},
    observed: 0,
  };
  const a = from.status,
    b = end.status;
  const tokens = Math.max(1, b.tokensTotal - a.tokensTotal);
  const wire =
    from.wire && end.wire
      ? { in: (end.wire.in - from.wire.in) / tokens, out: (end.wire.out - from.wire.out) / tokens }
      : null;
  return {
    fromTokens: a.tokensTotal,
    fromVersion: a.version,
    inPerToken: (b.bytesIn - a.bytesIn) / tokens,
    outPerToken: (b.bytesOut - a.bytesOut - (end.observed - from.observed)) / tokens,
    wireInPerToken: wire?.in ?? null,
    wireOutPerToken: wire?.out ?? null,
    outByKindPerToken:
      from.outByKind && end.outByKind
        ? Object.fromEntries(
            Object.entries(islandsOnly(end.outByKind, end.observed - from.observed)!).map(([k, v]) => [
              k,
              (v - (from.outByKind![k] ?? 0)) / tokens,
            ]),
          )
        : null,
  };
}
