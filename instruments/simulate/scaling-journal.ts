// rows.jsonl of the scaling study: every finished run, one JSON line each, appended as it finishes,
// under a first line that states the protocol. A ladder started again on the same folder (`--out`)
// reads it back and skips the runs done; a folder of another protocol is refused, not mixed in.

import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import type { RowSpec } from './scaling-protocol.ts';
import type { SimRunResult } from './types.ts';

/** One finished run: its spec, its key, the warm start it began from, and its result (curve included). */
export interface JournalRun {
  key: string;
  spec: RowSpec;
  warmTokens: number;
  result: SimRunResult;
}

const revive = (_k: string, v: unknown) => (v === 'Infinity' ? Infinity : v === 'NaN' ? NaN : v);
const replace = (_k: string, v: unknown) =>
  typeof v === 'number' && !Number.isFinite(v) ? (Number.isNaN(v) ? 'NaN' : 'Infinity') : v;

export class Journal {
  readonly runs = new Map<string, JournalRun>();
  /** Runs read back from an earlier start. */
  readonly resumed: number;

  /** Opens `path`: reads the runs of the same `protocol` back, or starts it (a torn last line is dropped). */
  constructor(
    private readonly path: string,
    protocol: unknown,
  ) {
    const head = JSON.stringify({ protocol }, replace);
    if (existsSync(path) && readFileSync(path, 'utf8').trim() !== '') {
      const lines = readFileSync(path, 'utf8').split('\n');
      if (lines[0] !== head)
        throw Object.assign(
          new Error(`${path} holds a ladder of another protocol (its first line differs); give --out a new folder`),
          { code: 'E_BAD_REQUEST' },
        );
      for (const line of lines.slice(1)) {
        if (!line.trim()) continue;
        try {
          const r = JSON.parse(line, revive) as JournalRun;
          if (r.key && r.result) this.runs.set(r.key, r);
        } catch {
          // a line cut short by a stop mid-write: that run runs again
        }
      }
      // a torn last line would glue itself to the next append: rewrite the file whole
      writeFileSync(path, [head, ...[...this.runs.values()].map((r) => JSON.stringify(r, replace))].join('\n') + '\n');
    } else writeFileSync(path, head + '\n');
    this.resumed = this.runs.size;
  }

  add(run: JournalRun): void {
    this.runs.set(run.key, run);
    appendFileSync(this.path, JSON.stringify(run, replace) + '\n');
  }
}
