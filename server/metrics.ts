// Prometheus metrics. One registry per app (tests run several apps in one process), filled by the
// gateway and the run, scraped at GET /metrics (plugins/metrics.ts).

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** What a sent model or update byte was (atoll_bytes_out_total's `kind`). */
export const BYTES_OUT_KINDS = ['update', 'piece', 'catchup', 'model'] as const;
export type BytesOutKind = (typeof BYTES_OUT_KINDS)[number];

/** A kind from the wire (the Redis roles' RPC); anything else counts as a pushed update. */
export function bytesOutKind(v: unknown): BytesOutKind {
  return BYTES_OUT_KINDS.includes(v as BytesOutKind) ? (v as BytesOutKind) : 'update';
}

export class Metrics {
  readonly registry = new Registry();
  readonly islandsOnline = new Gauge({
    name: 'atoll_islands_online',
    help: 'Islands connected and identified',
    registers: [this.registry],
  });
  readonly deltasAccepted = new Counter({
    name: 'atoll_deltas_accepted_total',
    help: 'Deltas accepted into an outer update',
    registers: [this.registry],
  });
  readonly deltasRejected = new Counter({
    name: 'atoll_deltas_rejected_total',
    help: 'Deltas rejected, by error code',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  readonly bytesIn = new Counter({
    name: 'atoll_bytes_in_total',
    help: 'Delta frame bytes received from islands',
    registers: [this.registry],
  });
  /**
   * A Δ the server already held, sent again (its ack was lost): answered with the first ack, its bytes counted in
   * atoll_bytes_in_total.
   */
  readonly deltasResent = new Counter({
    name: 'atoll_deltas_resent_total',
    help: 'Deltas sent again that the server already held, answered with their first ack',
    registers: [this.registry],
  });
  /**
   * By kind: `update` (pushed whole), `piece` (a mixed group's share of one), `catchup` (asked for),
   * `model` (θ whole).
   */
  readonly bytesOut = new Counter({
    name: 'atoll_bytes_out_total',
    help: 'Model and update bytes sent to islands, by kind',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });
  /**
   * Everything on the islands' connections as sent: engine.io packets (pings, JSON, binary attachments) and their
   * WebSocket frame headers.
   */
  readonly wireBytesIn = new Counter({
    name: 'atoll_wire_bytes_in_total',
    help:
      'Bytes islands sent on their socket.io connections: engine.io packets with WebSocket frame headers, ' +
      'by message (wire-meter.ts)',
    labelNames: ['message'] as const,
    registers: [this.registry],
  });
  readonly wireBytesOut = new Counter({
    name: 'atoll_wire_bytes_out_total',
    help:
      'Bytes sent to islands on their socket.io connections: engine.io packets with WebSocket frame headers, ' +
      'by message (wire-meter.ts)',
    labelNames: ['message'] as const,
    registers: [this.registry],
  });
  readonly version = new Gauge({
    name: 'atoll_model_version',
    help: 'Current model version (outer updates applied)',
    registers: [this.registry],
  });
  readonly tokens = new Gauge({
    name: 'atoll_tokens_total',
    help: 'Training tokens folded into the model',
    registers: [this.registry],
  });
  readonly evalLoss = new Gauge({
    name: 'atoll_eval_loss',
    help: 'Held-out loss of the latest evaluated version',
    registers: [this.registry],
  });
  readonly evalVersion = new Gauge({
    name: 'atoll_eval_version',
    help: 'Version of the latest eval',
    registers: [this.registry],
  });
  readonly paused = new Gauge({ name: 'atoll_paused', help: '1 while the run is paused', registers: [this.registry] });
  readonly applySeconds = new Histogram({
    name: 'atoll_delta_apply_seconds',
    help: 'Decode + validate + aggregate time of one delta',
    buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1],
    registers: [this.registry],
  });
  readonly commitSeconds = new Histogram({
    name: 'atoll_commit_seconds',
    help: 'Checkpoint + log fsync time of one group commit',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });

  constructor() {
    // Includes nodejs_eventloop_lag_seconds and its percentiles: the "is the loop responsive" signal.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 20 });
  }
}
