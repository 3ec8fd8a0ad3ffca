// What the REST API and the dashboard see of one island: the coordinator's record, whether its
// socket is connected here, and its quality summary (island-quality.ts).

import type { IslandRecord } from '../../core/coord/index.ts';
import type { IslandView } from '../../core/api.ts';

export function islandView(
  r: IslandRecord,
  connected: boolean,
  quality: { cosine: number | null; normRatio: number | null },
): IslandView {
  let rejected = 0;
  for (const v of Object.values(r.rejected)) rejected += v;
  return {
    id: r.id,
    name: r.name,
    contributorId: r.contributorId ?? r.id,
    engine: r.engine,
    adapter: r.adapter,
    numerics: r.caps.numerics ?? 'f32',
    devices: r.caps.devices ?? 1,
    speed: r.tokensPerSec ?? null,
    tokens: r.tokensContributed,
    tokensSubmitted: r.tokensSubmitted,
    accepted: r.accepted,
    rejected,
    rejectedByCode: r.rejected,
    lastSeen: r.lastSeen,
    status: r.status === 'online' && !connected ? 'offline' : r.status,
    connected,
    innerSteps: r.assignedSteps,
    batchSize: r.batchSize,
    staleness: r.lastStaleness,
    joinedAt: r.joinedAt,
    ...quality,
    ...(r.audits ? { audits: { ...r.audits } } : {}),
  };
}
