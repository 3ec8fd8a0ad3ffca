// The operator's log: one structured line (Fastify's pino) per join, leave, outer update,
// rejection, admin action and checkpoint, from the run's own event lines (store.ts).

import type { FastifyBaseLogger } from 'fastify';
import type { LogEvent } from './store.ts';

type Rejection = { island: string; seq: number; round: number; code: string };

export function logRunEvent(log: FastifyBaseLogger, e: LogEvent): void {
  switch (e.type) {
    case 'join':
      log.info(
        { event: 'join', island: e.island, name: e.name, engine: e.engine, adapter: e.adapter, resumed: e.resumed },
        'island joined',
      );
      break;
    case 'leave':
      log.info({ event: 'leave', island: e.island, reason: e.reason }, 'island left');
      break;
    case 'update': {
      const contributors = Array.isArray(e.contributors) ? e.contributors.length : 0;
      log.info(
        {
          event: 'update',
          version: e.version,
          hash: e.hash,
          tokens: e.tokens,
          totalTokens: e.totalTokens,
          trainLoss: e.trainLoss,
          contributors,
        },
        'outer update',
      );
      for (const r of (Array.isArray(e.rejected) ? e.rejected : []) as Rejection[])
        log.warn({ event: 'rejected', ...r }, 'delta rejected');
      break;
    }
    case 'delta':
      if (e.status === 'rejected')
        log.warn(
          { event: 'rejected', island: e.island, seq: e.seq, round: e.round, code: e.code, bytes: e.bytes },
          'delta rejected',
        );
      else
        log.debug(
          { event: 'delta', island: e.island, seq: e.seq, status: e.status, staleness: e.staleness, bytes: e.bytes },
          'delta received',
        );
      break;
    case 'dropped':
      for (const r of (Array.isArray(e.rejected) ? e.rejected : []) as Rejection[])
        log.warn({ event: 'rejected', ...r }, 'delta rejected');
      break;
    case 'admin':
      log.info({ event: 'admin', action: e.action, island: e.island, patch: e.patch }, `admin ${String(e.action)}`);
      break;
    case 'eval':
      log.debug({ event: 'eval', version: e.version, loss: e.loss, ms: e.ms }, 'eval');
      break;
    default:
      log.debug({ event: e.type }, e.type);
  }
}

export function logCheckpoint(log: FastifyBaseLogger, version: number, path: string, bytes: number): void {
  log.info({ event: 'checkpoint', version, path, bytes }, 'checkpoint written');
}
