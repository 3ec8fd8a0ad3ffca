// The live half of `atoll fleet`: a real run on loopback. `atoll serve` (embedded, or on Redis as
// one aggregator and two gateways), Node islands as separate processes (island-child.ts) and
// headless Chromium volunteer pages that open the real page and click Start. The fleet polls
// /api/status, fires the schedule (joins, leaves, kill -9 and restart) as θ's tokens pass each mark,
// keeps θ (GET /api/model) at evaluation marks, and at the budget reads what every island did.
// Every child process, browser and temp folder goes away with the fleet, on error or signal too.

import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { metricsDir } from '../../server/run/scalars.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataStatus, IslandView, RunConfig, RunStatus } from '../../core/api.ts';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { readConfigFile } from '../../server/run/config.ts';
import { parseFleetEngine } from './engine-spec.ts';
import { newIsland, nodeLine } from './island-record.ts';
import { FleetPages } from './pages.ts';
import { type Proc, ROOT, alive, getJson, sleep, spawnProc, waitUntil } from './procs.ts';
import { startServers } from './servers.ts';
import { dataLedger, historyTokens, loggedUpdates, tally } from './tally.ts';
import { type Traffic, counters, islandsOnly, steadyTraffic } from './traffic.ts';
import type { FleetSpec, LiveIsland, LiveRun, ThetaSnapshot } from './types.ts';

const CHILD = join(ROOT, 'instruments/fleet/island-child.ts');
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

export interface LiveHooks {
  log(line: string): void;
  /** A free TCP port on 127.0.0.1 (for the servers). */
  freePort(): Promise<number>;
  /** Fraction of the token budget in θ. */
  progress(frac: number): void;
}

/** A Node island process and what its JSON lines said. */
interface NodeChild {
  isl: LiveIsland;
  proc: Proc;
}

/** Runs the live fleet to its token budget. Cleans up whatever happens. */
export async function runLive(spec: FleetSpec, hooks: LiveHooks): Promise<LiveRun> {
  const dir = mkdtempSync(join(tmpdir(), 'atoll-fleet-'));
  const runDir = join(dir, 'run');
  const file = spec.config ? readConfigFile(spec.config) : {};
  writeFileSync(
    join(dir, 'run.json'),
    JSON.stringify({ ...file, coordinator: { ...(file.coordinator ?? {}), totalTokens: spec.tokens } }),
  );
  const env = {
    ...process.env,
    ATOLL_ADMIN_TOKEN: 'fleet',
    ...(existsSync(SWIFTSHADER_ICD) && !process.env.VK_ICD_FILENAMES ? { VK_ICD_FILENAMES: SWIFTSHADER_ICD } : {}),
  };
  const t0 = Date.now();
  const servers: Proc[] = [];
  const nodes: NodeChild[] = [];
  const pages = new FleetPages(t0, (line) => hooks.log(line));
  const cleanup = async () => {
    for (const n of nodes) if (alive(n.proc)) n.proc.child.kill('SIGKILL');
    await pages.close();
    for (const s of servers) if (alive(s)) s.child.kill('SIGKILL');
    await Promise.all([...servers, ...nodes.map((n) => n.proc)].map((p) => p.exited));
    rmSync(dir, { recursive: true, force: true });
  };
  // the parent going away takes everything with it (children are SIGKILLed synchronously on exit)
  const onExit = () => {
    for (const p of [...nodes.map((n) => n.proc), ...servers]) if (alive(p)) p.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = (sig: NodeJS.Signals) => {
    hooks.log(`fleet: ${sig}: stopping every island, page and server`);
    void cleanup().finally(() => process.exit(130));
  };
  process.once('exit', onExit);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    // the pages load the client build: vite build when dist/client is missing or older than its sources
    if (spec.browsers > 0) {
      const ms = (await import('../../server/client-build.ts')).ensureClientBuild();
      if (ms > 0) hooks.log(`fleet: built the client (vite build, ${(ms / 1000).toFixed(0)} s)`);
    }
    const urls = await startServers(spec, { dir: runDir, config: join(dir, 'run.json') }, env, hooks.freePort, servers);
    const url = urls[urls.length - 1];
    const runConfig = JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')) as RunConfig;
    const cc = runConfig.coordinator;
    hooks.log(
      `fleet: run on ${spec.redis !== undefined ? 'Redis roles (1 aggregator, 2 gateways)' : 'the embedded server'}: ` +
        `${runConfig.preset}, data ${runConfig.data}, ${cc.mode} DiLoCo, ${cc.uplink.encoding} up, ` +
        `${cc.downlink.encoding} down, to ${spec.tokens.toLocaleString()} tokens`,
    );

    // θ at evaluation marks: v0, every budget/evals tokens, and the end
    const snapshots: ThetaSnapshot[] = [];
    // the server counts these downloads as model bytes sent: they are the harness's, not the islands', and come off its
    // figures
    let observed = 0;
    const snap = async () => {
      const r = await fetch(`${url}/api/model`);
      if (!r.ok) return;
      const body = new Uint8Array(await r.arrayBuffer());
      observed += body.length;
      const c = decodeCheckpoint(body);
      if (!c.ok) throw Object.assign(new Error(`GET /api/model: ${c.error.message}`), { code: 'E_FLEET_MODEL' });
      // the version from the checkpoint itself (a gateway forwards the body, not every header)
      const version = Number(c.value.meta.version ?? r.headers.get('x-atoll-version'));
      if (snapshots.some((s) => s.version === version)) return;
      snapshots.push({ version, timeMs: version === 0 ? 0 : Date.now() - t0, params: c.value.params });
    };
    await snap();

    // pages first: compiling WebGPU pipelines on SwiftShader is slow, and a page must be training before the budget
    // runs out; the Node islands start once every page had its first delta accepted
    if (spec.browsers > 0) await pages.open(spec.browsers, urls, spec.timeoutMs);

    let next = 0;
    const startNode = (base?: LiveIsland) => {
      const k = next++;
      const engine = base?.engine ?? spec.engines[k % spec.engines.length];
      const e = parseFleetEngine(engine) ?? { kind: 'cpu' as EngineKind, precision: 'f32', devices: 1 };
      const batch = base?.batchSize || (spec.batches.length ? spec.batches[k % spec.batches.length] : cc.batchSize);
      const duty = base?.duty ?? spec.duty[k % spec.duty.length];
      const isl = newIsland(base ? `${base.name}-restart` : `node-${k + 1}`, 'node', engine, batch, duty);
      const opts = {
        server: urls.map((_, j) => urls[(k + j) % urls.length]).join(','),
        name: isl.name,
        engine: e.kind,
        precision: e.precision,
        devices: e.devices,
        batch,
        duty,
        t0,
      };
      const proc = spawnProc(['--import', join(ROOT, 'bin/register.js'), CHILD, JSON.stringify(opts)], env);
      let partial = '';
      proc.child.stdout?.on('data', (b: Buffer) => {
        const lines = (partial + b.toString()).split('\n');
        partial = lines.pop() ?? '';
        for (const line of lines) if (line.startsWith('{')) nodeLine(isl, JSON.parse(line));
      });
      nodes.push({ isl, proc });
      return isl;
    };
    const initial = spec.islands - spec.schedule.filter((e) => e.action === 'join').reduce((a, e) => a + e.count, 0);
    for (let i = 0; i < Math.max(0, initial); i++) startNode();
    hooks.log(`fleet: ${Math.max(0, initial)} Node island(s) started (${spec.engines.join(', ')})`);

    const schedule = [...spec.schedule].sort((a, b) => a.at - b.at);
    const faults: string[] = [];
    let nextSnap = spec.tokens / spec.evals;
    let last = await getJson<RunStatus>(`${url}/api/status`);
    let lastPages = 0;
    // the steady traffic's mark: every island (of the first ones) has downloaded θ and steps
    let mark: Traffic | null = null;
    const training = () =>
      nodes.length >= initial && nodes.every((n) => n.isl.stepTokens > 0 || !alive(n.proc)) && pages.training();
    const deadline = t0 + spec.timeoutMs;
    while (!last.done) {
      if (Date.now() > deadline)
        throw Object.assign(
          new Error(
            `the run did not reach ${spec.tokens} tokens in ${Math.round(spec.timeoutMs / 60_000)} min (at ` +
              `${last.tokensTotal})`,
          ),
          { code: 'E_FLEET_TIMEOUT' },
        );
      await sleep(250);
      const dead = servers.find((sv) => !alive(sv));
      if (dead)
        throw Object.assign(
          new Error(
            `a server process exited (${dead.child.exitCode ?? dead.child.signalCode}): ` +
              `${dead.child.spawnargs.slice(2, 6).join(' ')}\n${dead.out.slice(-3000)}`,
          ),
          { code: 'E_FLEET_SERVE' },
        );
      try {
        last = await getJson<RunStatus>(`${url}/api/status`);
      } catch {
        continue;
      }
      hooks.progress(last.tokensTotal / spec.tokens);
      if (!mark && training()) mark = { status: last, observed, ...(await counters(url)) };
      if (Date.now() - lastPages > 1000) {
        lastPages = Date.now();
        await pages.read();
      }
      while (schedule.length && schedule[0].at * spec.tokens <= last.tokensTotal) {
        const ev = schedule[0];
        // a leave or kill waits for islands that are training (the pages may have run alone so far)
        const victims = nodes
          .filter((n) => alive(n.proc) && n.isl.leaveAtMs === null && n.isl.joinAtMs >= 0)
          .slice(0, ev.count);
        if (ev.action !== 'join' && victims.length < ev.count) break;
        schedule.shift();
        faults.push(`${ev.action} ${ev.count} at ${(100 * ev.at).toFixed(0)} %`);
        hooks.log(
          `fleet: ${ev.action} ${ev.count} island(s) at ${((100 * last.tokensTotal) / spec.tokens).toFixed(0)} % of ` +
            `the tokens`,
        );
        if (ev.action === 'join') {
          for (let j = 0; j < ev.count; j++) startNode();
          continue;
        }
        for (const victim of victims) {
          victim.isl.leaveAtMs = Date.now() - t0;
          victim.isl.killed = ev.action === 'kill';
          victim.proc.child.kill(ev.action === 'kill' ? 'SIGKILL' : 'SIGTERM');
          if (ev.action === 'kill') {
            await victim.proc.exited;
            startNode(victim.isl);
          }
        }
      }
      // after the faults: an eval of θ takes a while, and a fault due now must not wait on it
      if (last.tokensTotal >= nextSnap) {
        while (nextSnap <= last.tokensTotal) nextSnap += spec.tokens / spec.evals;
        await snap();
      }
    }
    // an event still waiting for a training victim when the run ended is reported, not dropped
    for (const ev of schedule) {
      const line =
        `${ev.action} ${ev.count} at ${(100 * ev.at).toFixed(0)} %: did not fire (fewer than ` +
        `${ev.count} Node island(s) training before the run reached its tokens)`;
      faults.push(line);
      hooks.log(`fleet: warning: ${line}`);
    }
    const seconds = (Date.now() - t0) / 1000;
    // `done` comes from the coordinator, the status's tokens from the durable point just behind it
    await waitUntil('the last update to be durable', 30_000, async () => {
      last = await getJson<RunStatus>(`${url}/api/status`);
      return last.tokensTotal >= spec.tokens;
    });
    const end: Traffic = { status: last, observed, ...(await counters(url)) };
    await waitUntil('the last version to be served', 30_000, async () => {
      await snap();
      return snapshots.some((s) => s.version === last.version);
    });
    await pages.read();
    const served = (await getJson<{ islands: IslandView[] }>(`${url}/api/islands`)).islands;
    const ledger = await fetch(`${url}/api/data`); // 404 on a text
    const indexBytes = async () => (await (await fetch(`${url}/api/data/index`)).text()).length;
    const data = ledger.ok ? dataLedger((await ledger.json()) as DataStatus, await indexBytes()) : null;
    // stop: islands first (an in-flight delta still gets its ack), then the servers
    for (const n of nodes) if (alive(n.proc)) n.proc.child.kill('SIGTERM');
    await Promise.race([Promise.all(nodes.map((n) => n.proc.exited)), sleep(15_000)]);
    pages.fold();
    await pages.close();
    for (const s of [...servers].reverse()) {
      if (alive(s)) s.child.kill('SIGTERM');
      await Promise.race([s.exited, sleep(15_000)]);
    }

    const events = readFileSync(join(runDir, 'events.jsonl'), 'utf8');
    const updates = loggedUpdates(events);
    const islands = [...nodes.map((n) => n.isl), ...pages.list.map((p) => p.isl)];
    const { lost, duplicated } = tally(islands, served, updates);
    const history = await historyTokens(updates);
    return {
      topology: spec.redis !== undefined ? 'roles' : 'embedded',
      runConfig,
      seconds,
      versions: last.version,
      tokens: last.tokensTotal,
      bytesIn: end.status.bytesIn,
      bytesOut: end.status.bytesOut - end.observed,
      wireIn: end.wire?.in ?? null,
      wireOut: end.wire?.out ?? null,
      outByKind: islandsOnly(end.outByKind, end.observed),
      wireByMessage: end.wireByMessage,
      steady: steadyTraffic(mark, end),
      mix: last.mix ?? null,
      snapshots: snapshots
        .map((s) => ({ ...s, tokens: history.get(s.version) ?? 0 }))
        .sort((a, b) => a.version - b.version),
      islands,
      lost,
      duplicated,
      faults,
      data,
      events,
      serverLog: servers.map((s, i) => `── server ${i + 1} of ${servers.length} ──\n${s.out}`).join('\n'),
      metrics: readMetrics(metricsDir(runDir)),
    };
  } finally {
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

/** The files of the served run's metrics folder (it is removed with the run folder): none when it wrote none. */
function readMetrics(dir: string): LiveRun['metrics'] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => ({ name: e.name, data: readFileSync(join(dir, e.name)) }));
}
