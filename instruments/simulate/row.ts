// Runs one comparison row in virtual time: a DiLoCo configuration through the real coordinator,
// codec and IslandRuntime, or a baseline (DDP, single island) on the same data and token budget.

import { VirtualClock } from './clock.ts';
import { LocalHub, type Link, type LocalTransport } from './local.ts';
import { MixMember } from '../../client/island/mix-member.ts';
import { IslandRuntime } from '../../client/island/runtime.ts';
import type { Clock, Transport } from '../../client/island/transport.ts';
import { Coordinator } from '../../core/coord/index.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { numParams } from '../../core/model/config.ts';
import { initParams } from '../../core/model/gpt.ts';
import { hashString, mixSeed, mulberry32 } from '../../core/random.ts';
import { SimAuditor, fakeWork } from './audit-sim.ts';
import { type EngineMaker, holdClock } from './engines.ts';
import { SimMixHub } from './mix-sim.ts';
import { SimEngine } from './sim-engine.ts';
import type { CurvePoint, IslandReport, NetworkSpec, SimCommon, SimRow, SimRunResult } from './types.ts';
import { runBaseline } from './baseline.ts';
import { DropOnUpload, TamperingTransport } from './faulty-transports.ts';
import { type RowContext, Evaluator, emptyResult, modelConfig, rowData, rowEngines } from './row-shared.ts';
import { evalRows, versionRows } from './metrics.ts';

/** A row stops once its islands have computed this many times its token budget. */
const STALL_FACTOR = 5;

interface ServerCount {
  in: number;
  out: number;
  byMessage: Record<string, { in: number; out: number }>;
}

/** An island's link to the server; `count` sums what the server receives (in) and sends (out), also by message. */
function linkFor(clock: Clock, net: NetworkSpec, count: ServerCount): Link {
  const of = (what = 'other') => (count.byMessage[what] ??= { in: 0, out: 0 });
  return {
    up: (bytes, what) => {
      count.in += bytes;
      of(what).in += bytes;
      return clock.sleep(net.latencyMs + (1000 * bytes) / net.upBytesPerSec);
    },
    down: (bytes, what) => {
      count.out += bytes;
      of(what).out += bytes;
      return clock.sleep(net.latencyMs + (1000 * bytes) / net.downBytesPerSec);
    },
  };
}

export async function runRow(row: SimRow, ctx: RowContext): Promise<SimRunResult> {
  const ds = ctx.ds ?? rowData(ctx.common);
  const t0 = performance.now();
  const res =
    row.kind === 'diloco' ? await runDiloco(row, ctx.common, ds, ctx) : await runBaseline(row, ctx.common, ds, ctx);
  res.realTimeMs = performance.now() - t0;
  return res;
}

// ── DiLoCo through the real coordinator and island runtime ──────────────────

async function runDiloco(row: SimRow, common: SimCommon, ds: TextDataset, ctx: RowContext): Promise<SimRunResult> {
  const engines = await rowEngines(common, Math.max(...row.islands.map((s) => s.batchSize)));
  try {
    return await runDilocoOn(engines, row, common, ds, ctx);
  } finally {
    await engines.dispose();
  }
}

async function runDilocoOn(
  engines: EngineMaker,
  row: SimRow,
  common: SimCommon,
  ds: TextDataset,
  { log, progress }: RowContext,
): Promise<SimRunResult> {
  const config = modelConfig(common);
  const n = numParams(config);
  const T = common.seqLen;
  const clock = new VirtualClock();
  const coord = new Coordinator({
    params: common.init ?? initParams(config, common.seed),
    now: 0,
    config: {
      mode: row.mode,
      seqLen: T,
      batchSize: row.islands[0]?.batchSize ?? 8,
      maxBatchSize: 1024,
      totalTokens: row.tokens,
      dataSeed: common.seed,
      innerLr: { maxLr: row.lr.maxLr, minLr: row.lr.minLr, warmupTokens: row.lr.warmupTokens, localWarmupSteps: 0 },
      uplink: {
        encoding: row.codec.encoding,
        blockSize: row.codec.blockSize,
        deflate: row.codec.deflate,
        topkFraction: row.codec.topkFraction,
        feedbackDecay: row.codec.feedbackDecay,
        strided: row.codec.strided,
        valueBits: row.codec.valueBits,
      },
      // a crash is a disconnect (leave); no heartbeat traffic is simulated
      islandTimeoutMs: 1e10,
      ...row.coordinator,
    },
  });
  const evaluator = await Evaluator.create(engines, common, ds, clock);
  const simEngines: SimEngine[] = [];
  const curve: CurvePoint[] = [];
  const evalEvery = row.tokens / common.evals;
  let nextEval = evalEvery;
  const computed = () => simEngines.reduce((a, e) => a + e.tokensComputed, 0);
  // A row whose islands compute STALL_FACTOR × its budget without reaching it (every delta
  // rejected, say) is stopped and reported as stalled instead of running forever.
  let stalled = false;
  const stall = () => (stalled ||= computed() > STALL_FACTOR * row.tokens);
  const notes: string[] = [];
  const init = await evaluator.loss(coord.model().params);
  curve.push({ tokens: 0, tokensComputed: 0, timeMs: 0, evalLoss: init, version: 0 });
  const serverBytes: ServerCount = { in: 0, out: 0, byMessage: {} };
  let mixHub: SimMixHub | null = null;
  const hub = new LocalHub(coord, {
    clock,
    route: (u, t) => mixHub?.route(u, t) ?? false,
    // the "checkpoint" of the simulator: record the eval curve at the durable point
    persist: async (ev) => {
      progress?.(ev.update.totalTokens / row.tokens);
      if (ev.update.totalTokens >= nextEval) {
        while (nextEval <= ev.update.totalTokens) nextEval += evalEvery;
        const l = await evaluator.loss(coord.params() as Float32Array);
        curve.push({
          tokens: ev.update.totalTokens,
          tokensComputed: computed(),
          timeMs: clock.now(),
          evalLoss: l,
          version: ev.update.version,
        });
        log?.(
          `${row.name}: v${ev.update.version} tokens ${ev.update.totalTokens} eval ` +
            `${l.toFixed(4)} t=${(clock.now() / 1000).toFixed(1)}s`,
        );
      }
    },
  });

  if (row.mix) mixHub = new SimMixHub(hub, clock, row.mix, n, coord.config().uplink, mixSeed(common.seed, 0x313c));
  const reports: IslandReport[] = [];
  let snapshots = 0;
  const memberStats = { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 };
  const auditor = row.audit
    ? new SimAuditor(hub, row.audit, ds.train, config, T, common.seed, Math.max(...row.islands.map((s) => s.batchSize)))
    : null;
  const agents = row.islands.map(async (spec, idx) => {
    const rep: IslandReport = {
      name: spec.name,
      speed: spec.speed,
      batchSize: spec.batchSize,
      behaviour: spec.behaviour,
      bytesUp: 0,
      bytesDown: 0,
      tokensComputed: 0,
      rounds: 0,
      accepted: 0,
      acceptedTokens: 0,
      rejected: {},
      drops: 0,
    };
    reports[idx] = rep;
    const tps = spec.speed * row.baseTokensPerSec;
    const made = await clock.hold(
      engines.make({ config, maxBatch: spec.batchSize, maxT: T, precision: spec.precision }),
    );
    const engine = new SimEngine(
      engines.kind === 'cpu' ? made : holdClock(made, clock),
      clock,
      tps,
      spec.numerics,
      spec.devices,
    );
    const train = spec.shard
      ? ds.train.subarray(Math.floor(spec.shard[0] * ds.train.length), Math.floor(spec.shard[1] * ds.train.length))
      : ds.train;
    simEngines.push(engine);
    const rand = mulberry32(mixSeed(common.seed, hashString(spec.name), 0xd209));
    let islandId: string | undefined;
    if (spec.joinAtMs > 0) await clock.sleep(spec.joinAtMs);
    while (clock.now() < spec.leaveAtMs) {
      const serverLink = linkFor(clock, spec.network, serverBytes);
      const local: LocalTransport = hub.connect(serverLink);
      // the validator sees what the server sees: it wraps the link, the island's own changes wrap it
      let link: Transport = auditor ? auditor.wrap(local, spec.behaviour !== 'honest') : local;
      let crashed = false;
      let rt: IslandRuntime | null = null;
      if (mixHub) {
        const mh = mixHub;
        const crash = () => {
          crashed = true;
          local.kill();
          if (local.id) mh.kill(local.id);
          rt?.stop();
        };
        // a member that drops mid-exchange: with probability mixDropProb per Δ, in its first group's
        // first stage (a random part of it); a Δ regrouped after another member dropped is not drawn again
        let drawn = -1;
        const onGrouped = (seq: number) => {
          if (seq === drawn) return;
          drawn = seq;
          if (spec.mixDropProb && rand() < spec.mixDropProb)
            void clock.sleep(rand() * 2 * spec.network.latencyMs).then(crash);
        };
        const { port, peers } = mh.attach(local, serverLink, spec.network, onGrouped);
        link = new MixMember(link, port, peers, n, {
          stats: memberStats,
          tamper:
            spec.behaviour === 'lie-fragment'
              ? (f) => {
                  for (let i = 0; i < f.length; i++) f[i] = -f[i];
                }
              : undefined,
        });
      } else if (spec.mixDropProb) {
        // the twin without groups: the same draw per Δ, the crash as the island hands its Δ on (it never arrives)
        const p = spec.mixDropProb;
        link = new DropOnUpload(
          link,
          () => rand() < p,
          () => {
            crashed = true;
            local.kill();
            rt?.stop();
          },
        );
      }
      const honest = spec.behaviour === 'honest' || spec.behaviour === 'lie-fragment';
      const transport: Transport = honest
        ? link
        : (fakeWork(link, spec.behaviour) ??
          new TamperingTransport(link, spec.behaviour, n, mixSeed(common.seed, idx)));
      rt = new IslandRuntime({
        engine,
        train,
        transport,
        clock,
        resumeIslandId: islandId,
        caps: { name: spec.name, tokensPerSec: tps, batchSize: spec.batchSize, maxBatch: spec.batchSize },
      });
      let killAt = Infinity;
      rt.on((e) => {
        if (e.type === 'synced' && e.via === 'update') rep.hashChecks = (rep.hashChecks ?? 0) + 1;
        if (e.type === 'error' && /HASH/.test(e.error.code)) rep.hashMismatches = (rep.hashMismatches ?? 0) + 1;
        if (e.type === 'submitted' && e.ack.status === 'applied') rep.acceptedTokens += e.meta.tokens;
        if (e.type === 'assignment') {
          killAt =
            spec.dropProb > 0 && rand() < spec.dropProb
              ? clock.now() +
                (0.2 + 0.6 * rand()) * ((1000 * e.assignment.innerSteps * e.assignment.batchSize * T) / tps)
              : Infinity;
        }
      });
      engine.afterStep = () => {
        if (clock.now() >= killAt || clock.now() >= spec.leaveAtMs || stall()) {
          crashed = clock.now() >= killAt;
          local.kill();
          if (local.id) mixHub?.kill(local.id);
          rt!.stop();
        }
      };
      const summary = await rt.start();
      engine.afterStep = null;
      islandId = summary.islandId ?? islandId;
      const p = summary.progress;
      rep.bytesUp += p.bytesUp;
      rep.bytesDown += p.bytesDown;
      rep.rounds += p.rounds;
      snapshots += p.snapshots;
      rep.accepted += p.accepted;
      for (const [k, v] of Object.entries(p.rejected)) rep.rejected[k] = (rep.rejected[k] ?? 0) + v;
      if (summary.reason === 'done' || !crashed || stalled) break;
      rep.drops += 1;
      await clock.sleep(spec.offlineMs);
      await engine.resetOptimizerState(); // a crashed tab loses its AdamW state
    }
    rep.tokensComputed = engine.tokensComputed;
  });
  await clock.run(Promise.all(agents));
  hub.close();
  await hub.dispatch();

  const out = emptyResult(row, row.islands.length);
  const totals = coord.totals();
  const finalLoss = await evaluator.loss(coord.params() as Float32Array);
  curve.push({
    tokens: totals.tokensApplied,
    tokensComputed: computed(),
    timeMs: clock.now(),
    evalLoss: finalLoss,
    version: coord.version,
  });
  out.evalLoss = finalLoss;
  out.tokens = totals.tokensApplied;
  out.tokensComputed = computed();
  out.goodput = out.tokens / Math.max(1, out.tokensComputed);
  out.bytesUpPerIsland = reports.reduce((a, r) => a + r.bytesUp, 0) / reports.length;
  out.bytesDownPerIsland = reports.reduce((a, r) => a + r.bytesDown, 0) / reports.length;
  out.accepted = totals.accepted;
  out.rejected = totals.rejected;
  delete out.rejected['E_DONE']; // work finished after the budget was reached: not a validation failure
  if (totals.rejected['E_DONE'])
    notes.push(`${totals.rejected['E_DONE']} deltas arrived after the token budget was reached (counted as lost work)`);
  out.versions = coord.version;
  out.outerSteps = coord.history().map(({ version, totalTokens, updateNorm, trustGain }) => ({
    version,
    totalTokens,
    updateNorm: Number(updateNorm.toPrecision(5)),
    ...(trustGain !== undefined ? { trustGain } : {}),
  }));
  out.trustClips = totals.trustClips ?? 0;
  out.shortRounds = totals.shortRounds ?? 0;
  out.virtualTimeMs = clock.now();
  out.curve = curve;
  if (common.scalars) out.scalars = [...versionRows(coord.history(), coord.config()), ...evalRows(curve)];
  out.perIsland = reports;
  if (auditor) out.audits = auditor.report();
  const snapshotBytes = snapshots * 4 * n;
  const perToken = (b: number) => b / Math.max(1, totals.tokensApplied);
  out.server = {
    bytesIn: serverBytes.in,
    bytesOut: serverBytes.out - snapshotBytes,
    snapshotBytes,
    inPerToken: perToken(serverBytes.in),
    outPerToken: perToken(serverBytes.out - snapshotBytes),
    byMessage: serverBytes.byMessage,
  };
  if (mixHub)
    out.mix = { ...mixHub.totals, piecesOk: memberStats.piecesOk, piecesRefetched: memberStats.piecesRefetched };
  if (!Number.isFinite(finalLoss)) notes.push('θ diverged');
  if (stalled)
    notes.push(
      `stalled: islands computed ${STALL_FACTOR}× the token budget, but θ holds only ${totals.tokensApplied} tokens`,
    );
  out.notes = notes;
  log?.(
    `${row.name}: eval ${finalLoss.toFixed(4)} after ${out.tokens} tokens, ${coord.version} versions, ` +
      `goodput ${out.goodput.toFixed(3)}`,
  );
  return out;
}
