// The faulty run's schedule for `atoll chaos` (chaos.ts): each fault at a fraction of the run's
// tokens, spread over the first `span` of them (default 0.5, so the second half shows the run
// recovering). A fault fires once θ's tokens pass its mark while the run still trains; one that
// comes due only once the run is done (a mark past the budget, or passed over by the last update)
// is reported as not fired, never applied to a finished run nor waited on (takeDue). θ's tokens at
// or past the budget count as done: the status can say so one poll after the tokens do. A fault's
// waits (a pause's 3 s, a standby's takeover) run beside the schedule (`later`), not in its way.

import type { ChildProcess } from 'node:child_process';
import type { FaultProxy } from '../../server/cluster/proxy.ts';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitUntil(what: string, ms: number, f: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await f()) return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > end) throw new Error(`E_CHAOS_TIMEOUT: ${what} within ${ms / 1000} s`);
    await sleep(200);
  }
}

export interface Fault {
  /** Fraction of the run's tokens at which it fires. */
  at: number;
  what: string;
  act: () => Promise<void> | void;
}

/** What the faults act on: chaos.ts's islands and servers, as they are when each fires. */
export interface FaultHost {
  islands: Array<{ child: ChildProcess; proxy: FaultProxy; exited: Promise<void> }>;
  /** Takes a killed island (kept for the counts) and starts its replacement. */
  replace(victim: FaultHost['islands'][number]): Promise<void>;
  /** Roles: gateway 0 (kill -9), and the active aggregator's failover (kill -9, wait for the standby); ms. */
  killGateway?: () => Promise<void>;
  failOver?: () => Promise<number>;
  counts: {
    islandKills: number;
    connectionDrops: number;
    pauses: number;
    gatewayKills: number;
    aggregatorKills: number;
  };
  failoverMs: number[];
  /** Takes what a fault waits for (a pause's 3 s, a standby's takeover), so the schedule goes on meanwhile. */
  later(p: Promise<void>): void;
}

/**
 * Kill -9 of ⌈failFraction · N⌉ islands, two connection drops, one SIGSTOP; on the roles also a gateway and the
 * aggregator.
 */
export function faultSchedule(o: { islands: number; failFraction: number; span: number }, h: FaultHost): Fault[] {
  const s = o.span / 0.5; // the marks below are for a span of half the tokens
  const out: Fault[] = [];
  const kills = Math.ceil(o.failFraction * o.islands);
  for (let j = 0; j < kills; j++)
    out.push({
      at: s * (0.1 + (0.4 * (j + 0.5)) / kills),
      what: 'kill -9 island',
      act: async () => {
        const victim = h.islands.splice(j % h.islands.length, 1)[0];
        victim.child.kill('SIGKILL');
        await victim.exited;
        await victim.proxy.close();
        h.counts.islandKills++;
        await h.replace(victim);
      },
    });
  const { killGateway, failOver } = h;
  if (killGateway && failOver) {
    out.push({
      at: s * 0.25,
      what: 'kill -9 gateway 0',
      act: async () => {
        await killGateway();
        h.counts.gatewayKills++;
      },
    });
    out.push({
      at: s * 0.35,
      what: 'kill -9 the active aggregator',
      act: () => {
        // failOver kills at once; the standby's takeover is waited on beside the schedule
        h.counts.aggregatorKills++;
        h.later(failOver().then((ms) => void h.failoverMs.push(ms)));
      },
    });
  }
  for (const p of [0.2, 0.4])
    out.push({
      at: s * p,
      what: 'drop connections',
      act: () => {
        h.islands[0].proxy.dropAll();
        h.counts.connectionDrops++;
      },
    });
  out.push({
    at: s * 0.3,
    what: 'SIGSTOP island for 3 s',
    act: () => {
      const c = h.islands[h.islands.length - 1].child;
      c.kill('SIGSTOP');
      h.counts.pauses++;
      h.later(sleep(3000).then(() => void c.kill('SIGCONT')));
    },
  });
  return out.sort((a, b) => a.at - b.at);
}

/**
 * Takes the faults due at `progress` (fraction of the tokens) off the front of `schedule`: to fire
 * while the run trains; once it is done, every fault left is not fired (a finished run has nothing
 * to recover, and a fault acted on it, an island started for it, has nothing to wait for).
 */
export function takeDue(schedule: Fault[], progress: number, done: boolean): { fire: Fault[]; notFired: Fault[] } {
  // θ past its budget is done, whether or not the status has said so yet
  if (done || progress >= 1) return { fire: [], notFired: schedule.splice(0) };
  let n = 0;
  while (n < schedule.length && schedule[n].at <= progress) n++;
  return { fire: schedule.splice(0, n), notFired: [] };
}

/** Fires the faults due at the run's progress; once it is done, reports the rest as not fired. */
export async function fireDue(
  schedule: Fault[],
  st: { tokensTotal: number; done: boolean },
  tokens: number,
  faults: { fired: string[]; notFired: string[] },
  log: (s: string) => void,
): Promise<void> {
  const progress = st.tokensTotal / tokens;
  const due = takeDue(schedule, progress, st.done);
  for (const f of due.notFired) {
    faults.notFired.push(markOf(f));
    log(`chaos: ${markOf(f)}: not fired, the run reached its budget first`);
  }
  for (const f of due.fire) {
    faults.fired.push(markOf(f));
    log(`chaos: ${f.what} at ${(100 * progress).toFixed(0)} % of the tokens`);
    await f.act();
  }
}

export const markOf = (f: Fault) => `${f.what} at ${(100 * f.at).toFixed(0)} %`;
