// The run folder: everything a run needs to resume after a crash, and nothing else. Every path in
// it is named here (runPaths); the modules that write the other files take their path from it.
//
//   <dir>/config.json                      the run config (atomic write)
//   <dir>/checkpoints/v<version>.safetensors  θ + outer optimizer state + coordinator snapshot (keep-policy.ts)
//   <dir>/events.jsonl                     append-only event log, one JSON object per line
//   <dir>/events.<n>.jsonl                 rotated logs (the last LOGS_KEPT); never read back
//   <dir>/islands.json                     the full island records (island-file.ts)
//   <dir>/deltas/v<version>.bin            each version's deltas, for reverts (delta-archive.ts)
//   <dir>/secret.key                       the resume tokens' secret (resume-tokens.ts)
//   <dir>/server.lock, <dir>/admin-token   the operator's files (folder.ts)
//
// Durability is group-committed: callers queue log lines and ask for a checkpoint; `commit()`
// writes the newest checkpoint (temp, fsync, rename) and appends every queued line with one
// write + fsync, side by side, then resolves. So one fsync latency covers many events when the
// server is busy. Readers of the log treat a 'resume' line as the truth about the version.
//
// Past `maxLogBytes` the log is rotated before the next commit's lines: the new file starts with
// the line the `carry` option returns (what a reader of the old files would have learnt), so
// startup reads one bounded file, never the whole history of the run.
//
// It reports through events: 'event' for each queued line, 'checkpoint' for each checkpoint
// written (the operator's log, server/app.ts). A process that may no longer write (a deposed
// aggregator, server/cluster/run-host.ts) fences it: `fence(check)`.

import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  renameSync,
  statSync,
  unlinkSync,
} from 'node:fs';
import { EventEmitter } from 'node:events';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic, writeFileAtomicAsync } from '../fsutil.ts';
import { type EvalMark, type KeepPolicy, type KeepReason, DEFAULT_KEEP, keptVersions } from './keep-policy.ts';

export interface CheckpointInfo {
  version: number;
  path: string;
  bytes: number;
  mtimeMs: number;
}

/** One line of events.jsonl. `t` is ms since the epoch; the rest depends on `type`. */
export interface LogEvent {
  t: number;
  type: string;
  [k: string]: unknown;
}

/** Every path of a run folder. */
export interface RunPaths {
  dir: string;
  config: string;
  checkpoints: string;
  log: string;
  /** The rotated log number n. */
  rotated(n: number): string;
  islands: string;
  deltas: string;
  secret: string;
  lock: string;
  adminToken: string;
}

export function runPaths(dir: string): RunPaths {
  return {
    dir,
    config: join(dir, 'config.json'),
    checkpoints: join(dir, 'checkpoints'),
    log: join(dir, 'events.jsonl'),
    rotated: (n) => join(dir, `events.${n}.jsonl`),
    islands: join(dir, 'islands.json'),
    deltas: join(dir, 'deltas'),
    secret: join(dir, 'secret.key'),
    lock: join(dir, 'server.lock'),
    adminToken: join(dir, 'admin-token'),
  };
}

export interface RunStoreOptions {
  keep?: number | KeepPolicy;
  maxLogBytes?: number;
  /** The first line of a rotated-to log (the run's: history.carryLine). */
  carry?: () => Omit<LogEvent, 't'>;
}

/** What the store reports: each queued line; each checkpoint written (version, path, bytes). */
export interface RunStoreEvents {
  event: [event: LogEvent];
  checkpoint: [version: number, path: string, bytes: number];
}

const CKPT_RE = /^v(\d{8,})\.safetensors$/;
const ROTATED_RE = /^events\.(\d+)\.jsonl$/;
/** Rotated logs kept beside the current one (for people; the server never reads them). */
const LOGS_KEPT = 2;

export class RunStore extends EventEmitter<RunStoreEvents> {
  readonly dir: string;
  readonly paths: RunPaths;
  readonly checkpointDir: string;
  readonly logPath: string;
  private readonly policy: KeepPolicy;
  private readonly mark: EvalMark = { best: null, evaluated: -1 };
  private readonly maxLogBytes: number;
  private logBytes = 0;
  private log: FileHandle | null = null;
  private readonly carry: () => Omit<LogEvent, 't'>;
  private queued: string[] = [];
  private hashCache = new Map<string, string | null>();
  private nextCheckpoint: { version: number; encode: () => Uint8Array[] } | null = null;
  private committing: Promise<void> | null = null;
  private followUp: Promise<void> | null = null;
  private closed = false;
  /** Bytes and fsyncs, for metrics and the bench. */
  stats = { commits: 0, checkpointsWritten: 0, linesWritten: 0, lastCommitMs: 0 };
  private refuse: () => string | null = () => null;

  constructor(dir: string, opts: RunStoreOptions = {}) {
    super();
    this.dir = dir;
    this.paths = runPaths(dir);
    this.checkpointDir = this.paths.checkpoints;
    this.logPath = this.paths.log;
    const keep = opts.keep ?? DEFAULT_KEEP;
    this.policy = typeof keep === 'number' ? { keep, every: 0, best: false } : keep;
    this.maxLogBytes = opts.maxLogBytes ?? 64 * 1024 * 1024;
    this.carry = opts.carry ?? (() => ({ type: 'carry' }));
    mkdirSync(this.checkpointDir, { recursive: true });
  }

  /**
   * From now on every commit first asks `check` why this process may not write (a deposed
   * aggregator: server/cluster/run-host.ts); a reason fails the commit with E_FENCED, writing nothing.
   */
  fence(check: () => string | null): void {
    this.refuse = check;
  }

  async openLog(): Promise<void> {
    if (this.log) return;
    this.log = await open(this.logPath, 'a');
    this.logBytes = (await this.log.stat()).size;
  }

  // --- config -------------------------------------------------------------------------------

  readConfig<T>(): T | null {
    const p = this.paths.config;
    if (!existsSync(p)) return null;
    return JSON.parse(readFileSync(p, 'utf8')) as T;
  }

  writeConfig(config: unknown): void {
    writeFileAtomic(this.paths.config, JSON.stringify(config, null, 2) + '\n');
  }

  // --- checkpoints --------------------------------------------------------------------------

  checkpointPath(version: number): string {
    return join(this.checkpointDir, `v${String(version).padStart(8, '0')}.safetensors`);
  }

  /** Checkpoints on disk, newest first. Leftover temp files are ignored. */
  listCheckpoints(): CheckpointInfo[] {
    const out: CheckpointInfo[] = [];
    for (const f of readdirSync(this.checkpointDir)) {
      const m = CKPT_RE.exec(f);
      if (!m) continue;
      const path = join(this.checkpointDir, f);
      try {
        const st = statSync(path);
        out.push({ version: Number(m[1]), path, bytes: st.size, mtimeMs: st.mtimeMs });
      } catch {
        /* pruned meanwhile */
      }
    }
    return out.sort((a, b) => b.version - a.version);
  }

  /** The θ hash a checkpoint's metadata records (its header only is read; cached per file). */
  checkpointHash(c: CheckpointInfo): string | null {
    const key = `${c.path}:${c.mtimeMs}`;
    const cached = this.hashCache.get(key);
    if (cached !== undefined) return cached;
    let hash: string | null = null;
    let fd: number | null = null;
    try {
      fd = openSync(c.path, 'r');
      const len = Buffer.alloc(8);
      readSync(fd, len, 0, 8, 0);
      const n = Number(len.readBigUInt64LE(0));
      if (n > 0 && n <= 64 * 1024 * 1024) {
        const header = Buffer.alloc(n);
        readSync(fd, header, 0, n, 8);
        const meta = JSON.parse(header.toString('utf8')).__metadata__;
        if (meta && typeof meta.hash === 'string') hash = meta.hash;
      }
    } catch {
      /* unreadable: no hash */
    } finally {
      if (fd !== null) closeSync(fd);
    }
    if (this.hashCache.size > 64) this.hashCache.clear();
    this.hashCache.set(key, hash);
    return hash;
  }

  readCheckpoint(version: number): Uint8Array | null {
    try {
      return new Uint8Array(readFileSync(this.checkpointPath(version)));
    } catch {
      return null;
    }
  }

  /**
   * Asks for a checkpoint of `version` in the next commit. `encode` runs at commit time, so a
   * burst of updates writes only the newest; it must capture its state now (copy θ) if that
   * state may change before then — callers pass a closure over copies.
   */
  requestCheckpoint(version: number, encode: () => Uint8Array[]): void {
    if (!this.nextCheckpoint || version >= this.nextCheckpoint.version) this.nextCheckpoint = { version, encode };
  }

  // --- event log ----------------------------------------------------------------------------

  /** Queues one event; it reaches the disk at the next commit. */
  append(event: Omit<LogEvent, 't'> & { t?: number }): void {
    if (this.closed) return;
    const e = { t: event.t ?? Date.now(), ...event } as LogEvent;
    this.queued.push(JSON.stringify(e) + '\n');
    this.emit('event', e);
  }

  /** A checkpoint was requested and is not written yet. */
  get checkpointPending(): boolean {
    return this.nextCheckpoint !== null;
  }

  get pendingLines(): number {
    return this.queued.length;
  }

  /** Every line of the log that parses (a torn last line after a crash is skipped). */
  readEvents(): LogEvent[] {
    if (!existsSync(this.logPath)) return [];
    const out: LogEvent[] = [];
    for (const line of readFileSync(this.logPath, 'utf8').split('\n')) {
      if (!line) continue;
      try {
        out.push(JSON.parse(line) as LogEvent);
      } catch {
        /* torn tail */
      }
    }
    return out;
  }

  // --- commit -------------------------------------------------------------------------------

  /**
   * Makes everything queued so far durable: the requested checkpoint, then the log lines.
   * Concurrent calls share work; a call made while a commit runs waits for the next one, so
   * what it queued is covered when it resolves.
   */
  commit(): Promise<void> {
    if (!this.committing) return this.startCommit();
    // Everyone who asks while a commit runs shares the single next one.
    this.followUp ??= this.committing
      .catch(() => {})
      .then(() => {
        this.followUp = null;
        return this.startCommit();
      });
    return this.followUp;
  }

  private startCommit(): Promise<void> {
    const p = this.doCommit().finally(() => {
      if (this.committing === p) this.committing = null;
    });
    this.committing = p;
    return p;
  }

  private async doCommit(): Promise<void> {
    const t0 = performance.now();
    const refused = this.refuse();
    if (refused) throw Object.assign(new Error(refused), { code: 'E_FENCED' });
    const ck = this.nextCheckpoint;
    this.nextCheckpoint = null;
    const lines = this.queued;
    this.queued = [];
    // The checkpoint and the log lines are written side by side: a commit costs one fsync latency,
    // not two. If a crash lands between the two, the log may name a version the newest checkpoint
    // lacks; the restart logs a 'resume' line at the checkpoint's version, and readers drop what the
    // log said past it (nothing there was acknowledged: acks wait for both writes).
    const work: Array<Promise<void>> = [];
    if (ck) {
      const parts = ck.encode();
      const bytes = parts.reduce((s, p) => s + p.length, 0);
      work.push(
        writeFileAtomicAsync(this.checkpointPath(ck.version), parts).then(() => {
          this.stats.checkpointsWritten++;
          this.emit('checkpoint', ck.version, this.checkpointPath(ck.version), bytes);
          this.prune();
        }),
      );
    }
    if (lines.length > 0) {
      work.push(
        (async () => {
          await this.openLog();
          if (this.logBytes >= this.maxLogBytes) await this.rotate(lines);
          const text = lines.join('');
          this.logBytes += Buffer.byteLength(text);
          await this.log!.write(text);
          await this.log!.datasync();
          this.stats.linesWritten += lines.length;
        })(),
      );
    }
    await Promise.all(work);
    this.stats.commits++;
    this.stats.lastCommitMs = performance.now() - t0;
  }

  /** Renames the log to events.<n>.jsonl and starts a new one with the carry line. */
  private async rotate(lines: string[]): Promise<void> {
    await this.log!.close();
    this.log = null;
    const rotated = readdirSync(this.dir)
      .map((f) => ROTATED_RE.exec(f))
      .filter((m) => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    renameSync(this.logPath, this.paths.rotated((rotated.at(-1) ?? 0) + 1));
    for (const n of rotated.slice(0, Math.max(0, rotated.length + 1 - LOGS_KEPT))) {
      try {
        unlinkSync(this.paths.rotated(n));
      } catch {
        /* already gone */
      }
    }
    await this.openLog();
    lines.unshift(JSON.stringify({ t: Date.now(), ...this.carry() }) + '\n');
  }

  /**
   * An eval loss of `version`: the best so far keeps its checkpoint (if it is still on disk), and
   * checkpoints newer than the newest eval wait for theirs.
   */
  noteEval(version: number, loss: number): void {
    this.mark.evaluated = Math.max(this.mark.evaluated, version);
    if (this.mark.best && this.mark.best.loss <= loss) return;
    if (existsSync(this.checkpointPath(version))) this.mark.best = { version, loss };
  }

  /** Why the keep policy keeps each checkpoint on disk (by version). */
  keptFor(list = this.listCheckpoints()): Map<number, KeepReason[]> {
    return keptVersions(
      list.map((c) => c.version),
      this.policy,
      this.mark,
    );
  }

  /** Deletes the checkpoints the keep policy does not keep. */
  private prune(): void {
    const all = this.listCheckpoints();
    const kept = this.keptFor(all);
    for (const c of all.filter((x) => !kept.has(x.version))) {
      try {
        unlinkSync(c.path);
      } catch {
        /* already gone */
      }
    }
  }

  async close(): Promise<void> {
    if (this.committing) await this.committing.catch(() => {});
    if (this.queued.length > 0 || this.nextCheckpoint) await this.commit().catch(() => {});
    this.closed = true;
    await this.log?.close().catch(() => {});
    this.log = null;
  }
}
