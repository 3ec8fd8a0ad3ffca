// The run folder: everything a run needs to resume after a crash, and nothing else.
//
//   <dir>/config.json                      the run config (atomic write)
//   <dir>/checkpoints/v<version>.safetensors  θ + outer optimizer state + coordinator snapshot (last K kept)
//   <dir>/events.jsonl                     append-only event log, one JSON object per line
//
// Durability is group-committed: callers queue log lines and ask for a checkpoint; `commit()`
// writes the newest checkpoint (temp, fsync, rename) and appends every queued line with one
// write + fsync, side by side, then resolves. So one fsync latency covers many events when the
// server is busy. Readers of the log treat a 'resume' line as the truth about the version.

import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, statSync, unlinkSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic, writeFileAtomicAsync } from './fsutil.ts';

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

const CKPT_RE = /^v(\d{8,})\.safetensors$/;

export class RunStore {
  readonly dir: string;
  readonly checkpointDir: string;
  readonly logPath: string;
  private keep: number;
  private log: FileHandle | null = null;
  private queued: string[] = [];
  private hashCache = new Map<string, string | null>();
  private nextCheckpoint: { version: number; encode: () => Uint8Array } | null = null;
  private committing: Promise<void> | null = null;
  private followUp: Promise<void> | null = null;
  private closed = false;
  /** Observers for the operator's log (server/app.ts): each queued line, each checkpoint written. */
  onEvent: ((e: LogEvent) => void) | null = null;
  onCheckpoint: ((version: number, path: string, bytes: number) => void) | null = null;
  /** Bytes and fsyncs, for metrics and the bench. */
  stats = { commits: 0, checkpointsWritten: 0, linesWritten: 0, lastCommitMs: 0 };

  constructor(dir: string, opts: { keep?: number } = {}) {
    this.dir = dir;
    this.checkpointDir = join(dir, 'checkpoints');
    this.logPath = join(dir, 'events.jsonl');
    this.keep = Math.max(1, opts.keep ?? 5);
    mkdirSync(this.checkpointDir, { recursive: true });
  }

  setKeep(k: number): void {
    this.keep = Math.max(1, k);
  }

  async openLog(): Promise<void> {
    if (!this.log) this.log = await open(this.logPath, 'a');
  }

  // --- config -------------------------------------------------------------------------------

  readConfig<T>(): T | null {
    const p = join(this.dir, 'config.json');
    if (!existsSync(p)) return null;
    return JSON.parse(readFileSync(p, 'utf8')) as T;
  }

  writeConfig(config: unknown): void {
    writeFileAtomic(join(this.dir, 'config.json'), JSON.stringify(config, null, 2) + '\n');
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
      } catch { /* pruned meanwhile */ }
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
    } catch { /* unreadable: no hash */ } finally {
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
  requestCheckpoint(version: number, encode: () => Uint8Array): void {
    if (!this.nextCheckpoint || version >= this.nextCheckpoint.version) this.nextCheckpoint = { version, encode };
  }

  // --- event log ----------------------------------------------------------------------------

  /** Queues one event; it reaches the disk at the next commit. */
  append(event: Omit<LogEvent, 't'> & { t?: number }): void {
    if (this.closed) return;
    const e = { t: event.t ?? Date.now(), ...event } as LogEvent;
    this.queued.push(JSON.stringify(e) + '\n');
    this.onEvent?.(e);
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
      try { out.push(JSON.parse(line) as LogEvent); } catch { /* torn tail */ }
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
    this.followUp ??= this.committing.catch(() => {}).then(() => {
      this.followUp = null;
      return this.startCommit();
    });
    return this.followUp;
  }

  private startCommit(): Promise<void> {
    const p = this.doCommit().finally(() => { if (this.committing === p) this.committing = null; });
    this.committing = p;
    return p;
  }

  private async doCommit(): Promise<void> {
    const t0 = performance.now();
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
      const bytes = ck.encode();
      work.push(writeFileAtomicAsync(this.checkpointPath(ck.version), bytes).then(() => {
        this.stats.checkpointsWritten++;
        this.onCheckpoint?.(ck.version, this.checkpointPath(ck.version), bytes.length);
        this.prune();
      }));
    }
    if (lines.length > 0) {
      work.push((async () => {
        await this.openLog();
        await this.log!.write(lines.join(''));
        await this.log!.datasync();
        this.stats.linesWritten += lines.length;
      })());
    }
    await Promise.all(work);
    this.stats.commits++;
    this.stats.lastCommitMs = performance.now() - t0;
  }

  /** Keeps the newest K checkpoints. */
  private prune(): void {
    const all = this.listCheckpoints();
    for (const c of all.slice(this.keep)) {
      try { unlinkSync(c.path); } catch { /* already gone */ }
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
