// The live half of `atoll fleet`: a real run on loopback. `atoll serve` (embedded, or on Redis as
// one aggregator and two gateways), Node islands as separate processes (island-child.ts) and
// headless Chromium volunteer pages that open the real page and click Start. The fleet polls
// /api/status, fires the schedule (joins, leaves, kill -9 and restart) as θ's tokens pass each mark,
// keeps θ (GET /api/model) at evaluation marks, and at the budget reads what every island did.
// Every child process, browser and temp folder goes away with the fleet, on error or signal too.

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { IslandView, RunConfig, RunStatus } from '../../core/api.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import { readConfigFile } from '../../server/run/config.ts';
import type { LaunchedBrowser } from './chromium.ts';
import type { ChildLine, FleetSpec, LiveIsland, LiveRun, SteadyTraffic, ThetaSnapshot } from './types.ts';
import { parseFleetEngine } from './engine-spec.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const CHILD = join(ROOT, 'instruments/fleet/island-child.ts');
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
/**
 * --redis: the one aggregator's lease. No standby takes over, so a lease lapsed under a starved event loop would end
 * the run (3 s did, at 16 islands on 2 busy cores).
 */
const AGGREGATOR_LEASE_MS = 30_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface LiveHooks {
  log(line: string): void;
  /** A free TCP port on 127.0.0.1 (for the servers). */
  freePort(): Promise<number>;
  /** Fraction of the token budget in θ. */
  progress(frac: number): void;
}

/** What the page exposes on window.__atoll.view (client/volunteer/main.ts), the parts the fleet reads. */
interface PageView {
  lastRejection: { code: string; message: string } | null;
  islandId: string | null;
  round: { step: number; total: number } | null;
  roundsAccepted: number;
  roundsRejected: number;
  tokensContributed: number;
  tokensPerSec: number | null;
  bytesUp: number;
  bytesDown: number;
  engine: string | null;
  phase: string;
  stepsDone: number;
  hashChecks: number;
  hashMismatches: number;
  roundsMixed: number;
}

type Proc = { child: ChildProcess; out: string; exited: Promise<void> };

function spawnProc(args: string[], env: NodeJS.ProcessEnv = process.env): Proc {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env });
  const p: Proc = { child, out: '', exited: new Promise<void>((r) => child.once('exit', () => r())) };
  const keep = (b: Buffer) => {
    p.out = (p.out + b.toString()).slice(-64_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return p;
}

const alive = (p: Proc) => p.child.exitCode === null && p.child.signalCode === null;

async function waitUntil(what: string, ms: number, f: () => Promise<boolean> | boolean): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await f()) return;
    } catch {
      /* not yet */
    }
    if (Date.now() > end)
      throw Object.assign(new Error(`${what} within ${Math.round(ms / 1000)} s`), { code: 'E_FLEET_TIMEOUT' });
    await sleep(200);
  }
}

async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`GET ${url} answered ${r.status}`);
  return (await r.json()) as T;
}

/**
 * Updates as the run folder's events.jsonl holds them: a 'resume' at version v (an aggregator takeover) drops what
 * the log said past v (never made durable, never acknowledged).
 */
export function loggedUpdates(events: string): Array<{
  version: number;
  tokens: number;
  totalTokens?: number;
  contributors: Array<{ island: string; seq: number }>;
}> {
  let updates: ReturnType<typeof loggedUpdates> = [];
  for (const line of events.split('\n')) {
    if (line.includes('"type":"resume"')) {
      const v = (JSON.parse(line) as { version: number }).version;
      updates = updates.filter((u) => u.version <= v);
    } else if (line.includes('"type":"update"')) updates.push(JSON.parse(line));
  }
  return updates;
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
  const runFlags = [
    '--preset',
    spec.preset,
    '--run-dir',
    runDir,
    '--config',
    join(dir, 'run.json'),
    '--seed',
    String(spec.seed),
    '--name',
    'fleet',
    '--no-eval',
    '--log-level',
    'warn',
    ...(spec.data ? ['--data', spec.data] : []),
    ...(spec.mode ? ['--mode', spec.mode] : []),
    ...(spec.codec ? ['--codec', spec.codec] : []),
    ...(spec.mixGroup ? ['--mix-group', String(spec.mixGroup)] : []),
  ];
  const atoll = join(ROOT, 'bin/atoll.js');
  const env = {
    ...process.env,
    ATOLL_ADMIN_TOKEN: 'fleet',
    ...(existsSync(SWIFTSHADER_ICD) && !process.env.VK_ICD_FILENAMES ? { VK_ICD_FILENAMES: SWIFTSHADER_ICD } : {}),
  };
  const servers: Proc[] = [];
  const nodes: NodeChild[] = [];
  const pages: Array<{ isl: LiveIsland; b: LaunchedBrowser; view: PageView | null; logSeen: number }> = [];
  const cleanup = async () => {
    for (const n of nodes) if (alive(n.proc)) n.proc.child.kill('SIGKILL');
    await Promise.all(pages.map((p) => p.b.close()));
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
  const t0 = Date.now();
  try {
    const ports: number[] = [];
    // the pages load the client build: vite build when dist/client is missing or older than its sources
    if (spec.browsers > 0) {
      const ms = (await import('../../server/client-build.ts')).ensureClientBuild();
      if (ms > 0) hooks.log(`fleet: built the client (vite build, ${(ms / 1000).toFixed(0)} s)`);
    }
    if (spec.redis !== undefined) {
      if (spec.redis === true)
        throw Object.assign(new Error('runLive needs the Redis URL (the fleet command starts redis-server)'), {
          code: 'E_BAD_REQUEST',
        });
      const url = spec.redis;
      servers.push(
        spawnProc(
          [
            atoll,
            'serve',
            '--redis',
            url,
            '--role',
            'aggregator',
            '--lease-ms',
            String(AGGREGATOR_LEASE_MS),
            ...runFlags,
          ],
          env,
        ),
      );
      for (let g = 0; g < 2; g++) {
        ports.push(await hooks.freePort());
        servers.push(
          spawnProc(
            [
              atoll,
              'serve',
              '--redis',
              url,
              '--role',
              'gateway',
              '--name',
              'fleet',
              '--port',
              String(ports[g]),
              '--host',
              '127.0.0.1',
              '--log-level',
              'warn',
            ],
            env,
          ),
        );
      }
    } else {
      ports.push(await hooks.freePort());
      servers.push(spawnProc([atoll, 'serve', '--port', String(ports[0]), '--host', '127.0.0.1', ...runFlags], env));
    }
    // localhost: a secure context, so the pages are offered WebGPU
    const urls = ports.map((p) => `http://localhost:${p}`);
    for (const u of urls) {
      await waitUntil(`atoll serve to answer at ${u}`, 120_000, async () => {
        if (servers.some((s) => !alive(s)))
          throw Object.assign(
            new Error(
              `atoll serve exited:\n${servers
                .map((s) => s.out)
                .join('\n')
                .slice(-2000)}`,
            ),
            { code: 'E_FLEET_SERVE' },
          );
        return (await fetch(`${u}/api/status`)).ok;
      }).catch((e: Error & { code?: string }) => {
        throw e.code === 'E_FLEET_SERVE'
          ? e
          : Object.assign(
              new Error(
                `${e.message}\n${servers
                  .map((s) => s.out)
                  .join('\n')
                  .slice(-2000)}`,
              ),
              { code: e.code },
            );
      });
    }
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
    // runs out
    if (spec.browsers > 0) {
      const { launchChromium } = await import('./chromium.ts');
      await Promise.all(
        Array.from({ length: spec.browsers }, async (_, i) => {
          const b = await launchChromium({ webgpu: true, logConsole: false });
          const isl = newIsland(`page-${i + 1}`, 'page', 'webgpu', 0, 1);
          pages.push({ isl, b, view: null, logSeen: 0 });
          await b.page.goto(`${urls[i % urls.length]}/`);
          await b.page.waitForFunction(
            () => {
              const a = (globalThis as unknown as { __atoll?: { probe: unknown; run: unknown } }).__atoll;
              return !!(a?.probe && a.run);
            },
            null,
            { timeout: 60_000 },
          );
          await b.page.click('#start');
        }),
      );
      // the Node islands start once every page had its first delta accepted: a page on SwiftShader
      // is slow, and fast islands could spend the whole budget before its first round lands
      hooks.log(
        `fleet: ${spec.browsers} volunteer page(s) clicked Start; ` +
          `the Node islands start once each had a delta accepted`,
      );
      let said = Date.now();
      await waitUntil('every page to have a delta accepted', 600_000, async () => {
        await readPages();
        if (Date.now() - said > 30_000) {
          said = Date.now();
          // what each page said since the last look (its activity log: rejections, back-offs, reconnects)
          for (const p of pages) {
            const log = await p.b.page
              .evaluate(() =>
                (globalThis as unknown as { __atoll: { log: Array<{ text: string }> } }).__atoll.log.map((l) => l.text),
              )
              .catch(() => [] as string[]);
            const fresh = log.slice(p.logSeen);
            p.logSeen = log.length;
            if (fresh.length) hooks.log(`fleet: ${p.isl.name}: ${fresh.slice(-6).join(' | ')}`);
          }
          const page = ({ isl, view: v }: (typeof pages)[number]) =>
            `${isl.name} ${v?.phase ?? '?'} step ${v?.round?.step ?? '-'}/${v?.round?.total ?? '-'} ` +
            `accepted ${v?.roundsAccepted ?? 0}${v?.lastRejection ? ` (${v.lastRejection.code})` : ''}`;
          hooks.log(`fleet: pages: ${pages.map(page).join(', ')}`);
        }
        return pages.every((p) => (p.view?.roundsAccepted ?? 0) > 0);
      });
    }

    async function readPages(): Promise<void> {
      for (const p of pages) {
        const v = await p.b.page
          .evaluate(() => (globalThis as unknown as { __atoll: { view: PageView } }).__atoll.view)
          .catch(() => null);
        if (!v) continue;
        if (v.round && p.isl.joinAtMs < 0) p.isl.joinAtMs = Date.now() - t0;
        if (v.islandId && !p.isl.ids.includes(v.islandId)) p.isl.ids.push(v.islandId);
        p.view = v;
      }
    }

    let next = 0;
    const startNode = (base?: LiveIsland) => {
      const k = next++;
      const engine = base?.engine ?? spec.engines[k % spec.engines.length];
      const e = parseFleetEngine(engine) ?? { kind: 'cpu' as EngineKind, precision: 'f32', devices: 1 };
      const batch = base?.batchSize || (spec.batches.length ? spec.batches[k % spec.batches.length] : cc.batchSize);
      const duty = base?.duty ?? spec.duty[k % spec.duty.length];
      const isl = newIsland(base ? `${base.name}-restart` : `node-${k + 1}`, 'node', engine, batch, duty);
      const opts = {
        server: ports.map((_, j) => urls[(k + j) % urls.length]).join(','),
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
      nodes.length >= initial &&
      nodes.every((n) => n.isl.stepTokens > 0 || !alive(n.proc)) &&
      pages.every((p) => (p.view?.stepsDone ?? 0) > 0);
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
      if (last.tokensTotal >= nextSnap) {
        while (nextSnap <= last.tokensTotal) nextSnap += spec.tokens / spec.evals;
        await snap();
      }
      if (Date.now() - lastPages > 1000) {
        lastPages = Date.now();
        await readPages();
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
    await readPages();
    const served = (await getJson<{ islands: IslandView[] }>(`${url}/api/islands`)).islands;
    // stop: islands first (an in-flight delta still gets its ack), then the servers
    for (const n of nodes) if (alive(n.proc)) n.proc.child.kill('SIGTERM');
    await Promise.race([Promise.all(nodes.map((n) => n.proc.exited)), sleep(15_000)]);
    for (const p of pages) {
      const v = p.view;
      if (!v) continue;
      Object.assign(p.isl, {
        bytesUp: v.bytesUp,
        bytesDown: v.bytesDown,
        tokensPerSec: v.tokensPerSec ?? 0,
        engine: v.engine ?? 'webgpu',
        hashChecks: v.hashChecks,
        hashMismatches: v.hashMismatches,
        roundsMixed: v.roundsMixed,
      });
      p.isl.stepTokens = v.tokensContributed;
      p.isl.pageAccepted = v.roundsAccepted;
    }
    await Promise.all(pages.map((p) => p.b.close()));
    for (const s of [...servers].reverse()) {
      if (alive(s)) s.child.kill('SIGTERM');
      await Promise.race([s.exited, sleep(15_000)]);
    }

    const events = readFileSync(join(runDir, 'events.jsonl'), 'utf8');
    const updates = loggedUpdates(events);
    const logged = new Map<string, number>();
    const byIsland = new Map<string, number>();
    for (const u of updates)
      for (const c of u.contributors) {
        logged.set(`${c.island}#${c.seq}`, (logged.get(`${c.island}#${c.seq}`) ?? 0) + 1);
        byIsland.set(c.island, (byIsland.get(c.island) ?? 0) + 1);
      }
    const islands = [...nodes.map((n) => n.isl), ...pages.map((p) => p.isl)];
    let lost = 0;
    for (const isl of islands) {
      const rows = served.filter((v) => isl.ids.includes(v.id));
      isl.accepted = rows.reduce((a, v) => a + v.accepted, 0);
      isl.rejected = rows.reduce((a, v) => a + v.rejected, 0);
      for (const v of rows)
        for (const [k, c] of Object.entries(v.rejectedByCode)) isl.rejectedByCode[k] = (isl.rejectedByCode[k] ?? 0) + c;
      if (isl.kind === 'page' && rows[0]) isl.batchSize = rows[0].batchSize;
      // an ack the island saw whose delta the run folder does not hold is lost
      if (isl.kind === 'node') lost += isl.acks.filter(([id, seq]) => !logged.has(`${id}#${seq}`)).length;
      else lost += Math.max(0, (isl.pageAccepted ?? 0) - isl.ids.reduce((a, id) => a + (byIsland.get(id) ?? 0), 0));
      // between consecutive steps of a round; an island whose rounds were all of one step: its runtime's own figure
      if (isl.kind === 'node')
        isl.tokensPerSec = isl.computeMs > 0 ? (1000 * isl.computeTokens) / isl.computeMs : isl.stepSpeed;
    }
    const duplicated = [...logged.values()].filter((c) => c > 1).length;
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
      events,
      serverLog: servers.map((s, i) => `── server ${i + 1} of ${servers.length} ──\n${s.out}`).join('\n'),
    };
  } finally {
    process.off('exit', onExit);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

/**
 * The server's counters at one moment: /api/status's frames and /metrics' wire bytes and frames out by kind (null: not
 * counted there).
 */
interface Traffic {
  status: Pick<RunStatus, 'tokensTotal' | 'version' | 'bytesIn' | 'bytesOut'>;
  wire: { in: number; out: number } | null;
  wireByMessage: { in: Record<string, number>; out: Record<string, number> } | null;
  outByKind: Record<string, number> | null;
  /** The fleet's own θ downloads so far (in the server's model bytes). */
  observed: number;
}

/** Frames out by kind without the fleet's own θ downloads. */
function islandsOnly(byKind: Record<string, number> | null, observed: number): Record<string, number> | null {
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
async function counters(url: string): Promise<Pick<Traffic, 'wire' | 'wireByMessage' | 'outByKind'>> {
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
function steadyTraffic(mark: Traffic | null, end: Traffic): SteadyTraffic {
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

/** Tokens in θ at each version, from the logged updates. */
async function historyTokens(updates: ReturnType<typeof loggedUpdates>): Promise<Map<number, number>> {
  const m = new Map<number, number>([[0, 0]]);
  let total = 0;
  for (const u of updates) {
    total += u.tokens;
    m.set(u.version, u.totalTokens ?? total);
  }
  return m;
}

function newIsland(
  name: string,
  kind: LiveIsland['kind'],
  engine: string,
  batchSize: number,
  duty: number,
): LiveIsland {
  return {
    name,
    kind,
    engine,
    batchSize,
    duty,
    ids: [],
    joinAtMs: -1,
    leaveAtMs: null,
    lastMs: 0,
    killed: false,
    computeMs: 0,
    computeTokens: 0,
    stepTokens: 0,
    tokensPerSec: 0,
    accepted: 0,
    rejected: 0,
    rejectedByCode: {},
    bytesUp: 0,
    bytesDown: 0,
    reconnects: 0,
    hashChecks: 0,
    hashMismatches: 0,
    roundsMixed: 0,
    stepSpeed: 0,
    acks: [],
  };
}

function nodeLine(isl: LiveIsland, m: ChildLine): void {
  if (m.kind === 'assignment') {
    if (isl.joinAtMs < 0) isl.joinAtMs = m.t;
    if (!isl.ids.includes(m.island)) isl.ids.push(m.island);
    isl.lastMs = m.t;
    return;
  }
  Object.assign(isl, m.counters);
  if (m.kind === 'submitted') {
    isl.lastMs = m.t;
    if (m.status === 'applied') isl.acks.push([m.island, m.seq]);
  }
}
