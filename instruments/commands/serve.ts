// `atoll serve`: the coordinator server. Builds the client when asked and needed, resolves the run
// config (new run, or resume of the run folder), starts the app, and shuts down cleanly on signals.

import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type AtollServer, createServer } from '../../server/app.ts';
import { buildClientIfNeeded } from '../../server/client-build.ts';
import { unauditable } from '../../core/coord/audit.ts';
import { roundStepsCap } from '../../core/coord/config.ts';
import {
  type RunConfig,
  type RunFlags,
  ConfigError,
  DEFAULT_RUN_NAME,
  buildRunConfig,
  readConfigFile,
  resumeRunConfig,
} from '../../server/run/config.ts';
import { RunStore } from '../../server/run/store.ts';
import type { AuditOptions } from '../../server/run/audit.ts';
import { lockRunFolder, moveRunFolderAside } from '../../server/run/folder.ts';
import { type IceServers, parseIceServers } from '../../server/gateway/ice-servers.ts';
import { type InitRun, initFromFolder } from './serve-init.ts';

export interface ServeCliOptions extends RunFlags {
  config?: string;
  runDir?: string;
  port?: number;
  host?: string;
  buildIfNeeded?: boolean;
  /** Evaluate after updates (default true; `--no-eval`). */
  eval?: boolean;
  /** pino level of the operator's log (default $ATOLL_LOG_LEVEL or info). */
  logLevel?: string;
  /** Scale out on Redis: the run's roles (server/cluster/roles.ts). */
  redis?: string;
  role?: 'gateway' | 'aggregator' | 'all';
  /** Verified work: the validators' token (else $ATOLL_VALIDATOR_TOKEN; none: no audits). */
  validatorToken?: string;
  /** Move the run folder aside (<dir>.old-<time>) and start a new run there. */
  startOver?: boolean;
  /** A JSON file of iceServers (STUN, TURN) every group member gets (server/gateway/ice-servers.ts). */
  mixIceServers?: string;
  /** θ0 from a transformers GPT-2 folder (serve-init.ts): a new run only. */
  init?: string;
}

/** --mix-ice-servers: the file's iceServers, or E_BAD_CONFIG before anything starts. */
export function readIceServers(file: string): IceServers {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError('E_BAD_CONFIG', `--mix-ice-servers: cannot read ${file}: ${(e as Error).message}`);
  }
  const r = parseIceServers(text);
  if (!r.ok) throw new ConfigError('E_BAD_CONFIG', `--mix-ice-servers ${file}: ${r.error.message}`);
  return r.value;
}

/** Fails with a hint before anything is written when another process holds the port. */
async function assertPortFree(port: number, host: string): Promise<void> {
  const { createServer } = await import('node:net');
  await new Promise<void>((done, fail) => {
    const s = createServer();
    s.once('error', (e: NodeJS.ErrnoException) =>
      fail(
        e.code === 'EADDRINUSE'
          ? Object.assign(new Error(`port ${port} is in use (another atoll serve?): choose another with --port N`), {
              code: 'E_PORT_IN_USE',
            })
          : e,
      ),
    );
    s.listen(port, host, () => s.close(() => done()));
  });
}

/** Resolves the run folder and config: resume when the folder holds a run, else a fresh one. */
function resolveRun(o: ServeCliOptions): {
  dir: string;
  config: RunConfig;
  resumePatch: RunConfig['coordinator'] | undefined;
  resumed: boolean;
  init?: InitRun['init'];
} {
  let file = o.config ? readConfigFile(o.config) : null;
  const name = o.name ?? (typeof file?.name === 'string' ? file.name : DEFAULT_RUN_NAME);
  const dir = resolve(o.runDir ?? join('runs', name));
  if (o.startOver) {
    const lock = lockRunFolder(dir); // never from under a live server
    if (!lock.ok) throw Object.assign(new Error(lock.error.message), { code: lock.error.code });
    lock.value();
    const aside = moveRunFolderAside(dir);
    if (aside) process.stdout.write(`atoll serve: --start-over: moved ${dir} aside to ${aside}\n`);
  }
  const stored = existsSync(join(dir, 'config.json')) ? new RunStore(dir).readConfig<RunConfig>() : null;
  if (stored && o.init)
    throw new ConfigError(
      'E_INIT_RESUME',
      `--init starts a new run, and ${dir} holds one (it resumes from its checkpoints): serve without --init, ` +
        'or --start-over, or another --run-dir',
    );
  let init: InitRun['init'] | undefined;
  if (o.init) {
    const r = initFromFolder(o.init, file, o);
    file = r.file;
    o = { ...o, ...r.flags };
    init = r.init;
  }
  if (stored) {
    const { config, patch } = resumeRunConfig(stored, file, o);
    return {
      dir,
      config: auditable(config, o),
      resumePatch: Object.keys(patch).length ? (patch as RunConfig['coordinator']) : undefined,
      resumed: true,
    };
  }
  // Audits recompute a dense Δ: with validators and no codec chosen, the deltas are int8 (said at start).
  const dense =
    validatorToken(o) && o.codec === undefined && !(file?.coordinator as { uplink?: unknown } | undefined)?.uplink;
  if (dense)
    process.stdout.write(
      'atoll serve: validators audit dense deltas: the uplink is int8 (sparse deltas cannot be recomputed; ' +
        'docs/protocol.md, "Verified work")\n',
    );
  return {
    dir,
    config: auditable(buildRunConfig(file, { ...o, name, ...(dense ? { codec: 'int8' } : {}) }), o),
    resumePatch: undefined,
    resumed: false,
    init,
  };
}

/** A run with validators whose uplink no validator can recompute is refused: its audits would sample nothing. */
function auditable(config: RunConfig, o: ServeCliOptions): RunConfig {
  const why = auditOptions(o, config) ? unauditable(config.coordinator.uplink.encoding) : null;
  if (why) throw new ConfigError('E_BAD_CONFIG', `--validator-token: ${why} (--codec), or serve without validators`);
  return config;
}

export async function serve(o: ServeCliOptions): Promise<AtollServer | undefined> {
  const say = (s: string) => process.stdout.write(s + '\n');
  if (o.redis || o.role) {
    await serveRoles(o, say);
    return undefined;
  }
  // checked before anything is built or written
  const { dir, config, resumePatch, resumed, init } = resolveRun(o);
  if (o.mixIceServers && !config.mix.k)
    throw new ConfigError(
      'E_BAD_CONFIG',
      '--mix-ice-servers goes with --mix-group (the iceServers are for group members)',
    );
  const iceServers = o.mixIceServers ? readIceServers(o.mixIceServers) : undefined;
  if (o.buildIfNeeded) buildClientIfNeeded(say);
  const envToken = process.env.ATOLL_ADMIN_TOKEN?.trim();
  const port = o.port ?? (process.env.PORT ? Number(process.env.PORT) : 8080);
  const host = o.host ?? process.env.HOST ?? '0.0.0.0';
  if (port !== 0) await assertPortFree(port, host);
  const server = await createServer({
    dir,
    config,
    resumePatch,
    adminToken: envToken ? envToken : undefined,
    evaluate: o.eval !== false,
    outerWorkers: config.outerWorkers,
    logLevel: o.logLevel ?? process.env.ATOLL_LOG_LEVEL ?? 'info',
    listenOn: { host, port },
    audit: auditOptions(o, config),
    mix: config.mix.k ? { ...config.mix, iceServers } : undefined,
    init,
  });
  const addr = await server.listen(port, host);
  const r = server.run;
  const cc = r.config.coordinator;
  say(
    `atoll serve: run '${r.config.name}' in ${dir} (${resumed ? 'resumed' : 'new'}) at version ${r.version}, ` +
      `θ hash ${r.hash}${init ? `, θ0 from ${init.from}` : ''}`,
  );
  say(
    `  model ${r.config.preset} (${r.paramCount.toLocaleString()} params), data ${r.dataset.name}, ` +
      `${cc.mode} DiLoCo, ${cc.uplink.encoding} deltas, outer ${cc.outer.kind} lr ${cc.outer.lr} momentum ` +
      `${cc.outer.momentum}, ` +
      `${r.outerWorkers ? `outer step on ${r.outerWorkers} worker threads` : 'outer step on the event loop'}`,
  );
  const cap = roundStepsCap(cc);
  if (cc.innerSteps > cap || (cc.maxInnerSteps > cap && cc.targetRoundMs > 0))
    say(
      `  rounds on the ${cc.uplink.encoding} uplink take at most ${cap} inner steps (a longer round's Δ ` +
        'makes θ worse through its frame: docs/studies/cold-start.md); a dense --codec takes longer ones',
    );
  say(
    `  volunteer page ${addr.url}/   dashboard ${addr.url}/dashboard   API ${addr.url}/api/status   metrics ` +
      `${addr.url}/metrics`,
  );
  say(`  islands: npx atoll island --server ${addr.url}`);
  say(
    server.adminTokenFile
      ? `  admin token in ${server.adminTokenFile} (kept across restarts; set ATOLL_ADMIN_TOKEN to choose your own)`
      : '  admin token: $ATOLL_ADMIN_TOKEN',
  );
  say(`atoll serve: listening on ${addr.url}`);

  onSignals(
    say,
    () => server.close(),
    (e) => server.app.log.error({ err: e }, 'unhandled rejection'),
  );
  return server;
}

/** The validators' token (flag, else $ATOLL_VALIDATOR_TOKEN): a secret, never in config.json. */
function validatorToken(o: ServeCliOptions): string | undefined {
  return o.validatorToken ?? (process.env.ATOLL_VALIDATOR_TOKEN?.trim() || undefined);
}

/** Audits when a validator token is given, at the run config's rate and ban threshold. */
function auditOptions(o: ServeCliOptions, config: RunConfig): AuditOptions | undefined {
  const token = validatorToken(o);
  return token ? { token, ...config.audit } : undefined;
}

/** Ctrl-C / SIGTERM close cleanly (a second one exits at once); a stray rejection is logged, not fatal. */
function onSignals(say: (s: string) => void, close: () => Promise<void>, stray: (e: unknown) => void): void {
  let stopping = false;
  const stop = (sig: string) => {
    if (stopping) process.exit(1);
    stopping = true;
    say(`atoll serve: ${sig}: flushing the run folder and closing …`);
    close().then(
      () => process.exit(0),
      (e) => {
        process.stderr.write(`atoll serve: close failed: ${(e as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  // A library's stray rejection must not take the run down with it: log it and keep serving.
  process.on('unhandledRejection', stray);
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}

/** `--redis URL --role gateway|aggregator|all`: this process's part of a scaled-out run. */
async function serveRoles(o: ServeCliOptions, say: (s: string) => void): Promise<void> {
  if (!o.redis || !o.role)
    throw Object.assign(
      new Error('--redis and --role go together: --redis redis://HOST:PORT --role gateway|aggregator|all'),
      { code: 'E_BAD_FLAGS' },
    );
  if (o.init)
    throw new ConfigError('E_BAD_CONFIG', '--init is not available on the Redis roles yet: serve without --redis');
  // the groups live in one gateway's memory, and the roles' port carries no mixing yet
  if (o.mixGroup)
    throw new ConfigError(
      'E_BAD_CONFIG',
      '--mix-group is not available on the Redis roles yet: serve without --redis to mix, or without --mix-group',
    );
  const { startAggregatorRole, startGatewayRole } = await import('../../server/cluster/roles.ts');
  const logLevel = o.logLevel ?? process.env.ATOLL_LOG_LEVEL ?? 'info';
  const closers: Array<() => Promise<void>> = [];
  const closeAll = async () => {
    for (const c of closers.reverse()) await c();
  };
  let name = o.name ?? DEFAULT_RUN_NAME;
  if (o.role !== 'gateway') {
    if (o.buildIfNeeded) buildClientIfNeeded(say);
    const { dir, config, resumePatch, resumed } = resolveRun(o);
    name = config.name;
    const envToken = process.env.ATOLL_ADMIN_TOKEN?.trim();
    const agg = startAggregatorRole({
      dir,
      config,
      resumePatch,
      adminToken: envToken ? envToken : undefined,
      evaluate: o.eval !== false,
      outerWorkers: config.outerWorkers,
      logLevel,
      redis: o.redis,
      run: name,
      leaseMs: config.cluster.leaseMs,
      audit: auditOptions(o, config),
      // deposed: not one more write, not even a flush
      onFenced: (why) => {
        say(`atoll serve: aggregator fenced (${why}): exiting`);
        process.exit(3);
      },
    });
    closers.push(() => agg.close());
    say(`atoll serve: aggregator for run '${name}' in ${dir} on ${o.redis}: standby until it holds the lease`);
    void agg.active.then(
      (on) => {
        if (!on) return;
        const r = agg.host.core!.run;
        say(
          `atoll serve: aggregator active (token ${agg.host.token}), run '${name}' (${resumed ? 'resumed' : 'new'}) ` +
            `at version ${r.version}, θ hash ${r.hash}`,
        );
        if (!agg.host.core!.adminTokenFile) return;
        say(`  admin token in ${agg.host.core!.adminTokenFile}`);
      },
      (e: unknown) => {
        say(`atoll serve: aggregator failed: ${(e as Error).stack ?? String(e)}`);
        process.exit(1);
      },
    );
  }
  if (o.role !== 'aggregator') {
    const port = o.port ?? (process.env.PORT ? Number(process.env.PORT) : 8080);
    const host = o.host ?? process.env.HOST ?? '0.0.0.0';
    if (port !== 0) await assertPortFree(port, host);
    say(`atoll serve: gateway for run '${name}' on ${o.redis}: waiting for an active aggregator …`);
    const gw = await startGatewayRole({ redis: o.redis, run: name, logLevel });
    closers.push(() => gw.close());
    const addr = await gw.listen(port, host);
    say(
      `  volunteer page ${addr.url}/   dashboard ${addr.url}/dashboard   API ${addr.url}/api/status   metrics ` +
        `${addr.url}/metrics`,
    );
    say(`atoll serve: gateway listening on ${addr.url}`);
  }
  onSignals(say, closeAll, (e) =>
    process.stderr.write(`atoll serve: unhandled rejection: ${(e as Error)?.stack ?? String(e)}\n`),
  );
}
