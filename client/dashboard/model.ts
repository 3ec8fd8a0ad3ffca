// The dashboard's view of the server's data, and the normalisers that turn whatever
// the REST API / socket.io stream sends into it. The normalisers are deliberately
// forgiving (alternative field names, seconds or ms or ISO times, arrays or maps),
// so the page keeps working while the server's payloads evolve; anything missing
// becomes null and renders as "–".

export type Dict = Record<string, unknown>;

export interface Status {
  run: string;
  mode: string;
  version: number | null;
  hash: string;
  paused: boolean;
  /** The run reached its token budget. */
  done: boolean;
  islandsOnline: number | null;
  tokensTotal: number | null;
  tokensPerSec: number | null;
  evalLoss: number | null;
  /** Version the eval loss is of (evals lag the newest version). */
  evalVersion: number | null;
  trainLoss: number | null;
  bytesIn: number | null;
  bytesOut: number | null;
  /** Fraction of trained tokens that made it into the model, if the server says. */
  goodput: number | null;
  /** Bytes a data-parallel run would have uploaded for the same tokens, if the server says. */
  bytesDataParallel: number | null;
  /** Server time of this status (ms), for "last update". */
  time: number | null;
}

export interface Island {
  id: string;
  name: string;
  /** Credit on the leaderboard adds up per contributor (a volunteer's stable anonymous id). */
  contributorId: string;
  engine: string;
  adapter: string;
  speed: number | null;
  innerSteps: number | null;
  tokens: number;
  accepted: number;
  rejected: number;
  staleness: number | null;
  lastSeen: number | null;
  status: string;
}

export interface HistoryPoint {
  version: number;
  time: number | null; // ms
  tokens: number | null;
  trainLoss: number | null;
  evalLoss: number | null;
  islandsOnline: number | null;
  bytesIn: number | null;
  bytesOut: number | null;
  tokensPerSec: number | null;
  /** tokens/s by engine type, when the server breaks it down. */
  byEngine: Record<string, number> | null;
  /** accepted deltas by staleness τ, in this version. */
  staleness: Record<string, number> | null;
  accepted: number | null;
  rejectedByCode: Record<string, number> | null;
  /** f32 bytes of the counted deltas ÷ their frame bytes, this version (server figure). */
  compressionRatio: number | null;
  /** Cumulative tokens in θ ÷ tokens in every delta received (server figure). */
  goodput: number | null;
  contributors: number | null;
}

export interface RunInfo {
  name: string;
  description: string;
  /** The run config (server RunConfig: model, coordinator, eval, limits, ...). */
  config: Dict;
  /** Everything else /api/run says (params, bytesPerRound, data, ...). */
  info: Dict;
}

export interface Checkpoint {
  version: number;
  time: number | null;
  bytes: number | null;
  url: string;
  hash: string;
}

// ---------------------------------------------------------------- primitives

export function isDict(v: unknown): v is Dict {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** First finite number among the keys (numeric strings accepted). Keys may be dotted paths. */
export function pickNum(o: Dict, ...keys: string[]): number | null {
  for (const k of keys) {
    const v = path(o, k);
    if (typeof v === 'number' && Number.isFinite(v)) return v;
    if (typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v))) return Number(v);
  }
  return null;
}

export function pickStr(o: Dict, ...keys: string[]): string | null {
  for (const k of keys) {
    const v = path(o, k);
    if (typeof v === 'string' && v !== '') return v;
    if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  }
  return null;
}

function path(o: Dict, k: string): unknown {
  if (!k.includes('.')) return o[k];
  let cur: unknown = o;
  for (const part of k.split('.')) {
    if (!isDict(cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

/** ms since the epoch from ms, seconds, or an ISO string. */
export function toMs(v: unknown): number | null {
  if (typeof v === 'number' && Number.isFinite(v)) return v < 1e11 ? v * 1000 : v;
  if (typeof v === 'string' && v) {
    const n = Number(v);
    if (Number.isFinite(n)) return toMs(n);
    const t = Date.parse(v);
    return Number.isFinite(t) ? t : null;
  }
  return null;
}

function pickTime(o: Dict, ...keys: string[]): number | null {
  for (const k of keys) {
    const t = toMs(path(o, k));
    if (t !== null) return t;
  }
  return null;
}

/** {key: n} from an object of numbers or an array indexed by key. */
export function toCounts(v: unknown): Record<string, number> | null {
  if (Array.isArray(v)) {
    const out: Record<string, number> = {};
    v.forEach((n, i) => {
      if (typeof n === 'number' && Number.isFinite(n)) out[String(i)] = n;
      else if (isDict(n)) {
        // [{ staleness: 0, count: 3 }] or [{ code, count }]
        const key = pickStr(n, 'key', 'code', 'staleness', 'tau', 'bucket');
        const c = pickNum(n, 'count', 'n', 'value');
        if (key !== null && c !== null) out[key] = (out[key] ?? 0) + c;
      }
    });
    return out;
  }
  if (isDict(v)) {
    const out: Record<string, number> = {};
    for (const [k, n] of Object.entries(v)) if (typeof n === 'number' && Number.isFinite(n)) out[k] = n;
    return out;
  }
  return null;
}

// ---------------------------------------------------------------- normalisers

export function normStatus(raw: unknown): Status | null {
  if (!isDict(raw)) return null;
  const o = isDict(raw.status) ? raw.status : raw;
  const run = o.run;
  return {
    run: typeof run === 'string' ? run : (isDict(run) ? pickStr(run, 'name', 'id') : null) ?? pickStr(o, 'runName', 'name') ?? '',
    mode: pickStr(o, 'mode') ?? '',
    version: pickNum(o, 'version', 'outerVersion', 'v'),
    hash: pickStr(o, 'hash', 'modelHash') ?? '',
    paused: o.paused === true || o.paused === 'true',
    done: o.done === true,
    islandsOnline: pickNum(o, 'islandsOnline', 'islands.online', 'online'),
    tokensTotal: pickNum(o, 'tokensTotal', 'tokens', 'tokensTrained'),
    tokensPerSec: pickNum(o, 'tokensPerSec', 'tokensPerSecond', 'tps'),
    evalLoss: pickNum(o, 'evalLoss', 'eval.loss'),
    evalVersion: pickNum(o, 'evalVersion', 'eval.version'),
    trainLoss: pickNum(o, 'trainLoss', 'loss'),
    bytesIn: pickNum(o, 'bytesIn', 'bytes.in', 'bytesUp'),
    bytesOut: pickNum(o, 'bytesOut', 'bytes.out', 'bytesDown'),
    goodput: pickNum(o, 'goodput'),
    bytesDataParallel: pickNum(o, 'bytesDataParallel', 'dataParallelBytes', 'bytesDp'),
    time: pickTime(o, 'time', 'now', 'serverTime'),
  };
}

export function normIsland(raw: unknown): Island | null {
  if (!isDict(raw)) return null;
  const id = pickStr(raw, 'id', 'islandId', 'socketId');
  if (id === null) return null;
  const engine = raw.engine;
  const eng = isDict(engine) ? engine : {};
  const accepted = raw.accepted;
  const rejected = raw.rejected;
  return {
    id,
    name: pickStr(raw, 'name', 'displayName', 'display_name') ?? id,
    contributorId: pickStr(raw, 'contributorId') ?? id,
    engine: (typeof engine === 'string' ? engine : pickStr(eng, 'kind', 'type', 'name')) ?? '',
    adapter: pickStr(raw, 'adapter', 'adapterName', 'device', 'gpu', 'adapter.description', 'adapter.name') ?? pickStr(eng, 'adapter') ?? '',
    speed: pickNum(raw, 'speed', 'tokensPerSec', 'tokensPerSecond', 'stepsPerSec'),
    innerSteps: pickNum(raw, 'assignedSteps', 'innerSteps', 'assignedInnerSteps', 'steps', 'H'),
    tokens: pickNum(raw, 'tokensContributed', 'tokens', 'tokensTotal') ?? 0,
    accepted: (typeof accepted === 'number' ? accepted : null) ?? pickNum(raw, 'deltasAccepted', 'accepted.count') ?? 0,
    rejected: (typeof rejected === 'number' ? rejected : isDict(rejected) ? sumValues(rejected) : null) ?? pickNum(raw, 'deltasRejected') ?? 0,
    staleness: pickNum(raw, 'staleness', 'lastStaleness', 'tau'),
    lastSeen: pickTime(raw, 'lastSeen', 'lastSeenAt', 'seenAt', 'updatedAt'),
    status: (pickStr(raw, 'status', 'state') ?? (raw.online === false ? 'offline' : raw.online === true ? 'online' : '')).toLowerCase(),
  };
}

function positive(v: number | null): number | null {
  return v !== null && v > 0 ? v : null;
}

function sumValues(o: Dict): number {
  let s = 0;
  for (const v of Object.values(o)) if (typeof v === 'number' && Number.isFinite(v)) s += v;
  return s;
}

/** The islands array out of `[...]`, `{ islands: [...] }` or `{ items: [...] }`. */
export function islandList(raw: unknown): unknown[] | null {
  if (Array.isArray(raw)) return raw;
  if (isDict(raw)) {
    for (const k of ['islands', 'items', 'data', 'rows']) if (Array.isArray(raw[k])) return raw[k] as unknown[];
  }
  return null;
}

export function normPoint(raw: unknown, fallbackVersion: number): HistoryPoint | null {
  if (!isDict(raw)) return null;
  const rej = raw.rejected;
  let rejectedByCode = toCounts(raw.rejectedByCode ?? raw.rejections ?? (isDict(rej) ? rej : undefined));
  if (rejectedByCode === null && typeof rej === 'number') rejectedByCode = rej > 0 ? { rejected: rej } : {};
  const acc = raw.accepted;
  return {
    version: pickNum(raw, 'version', 'v', 'outerVersion') ?? fallbackVersion,
    time: pickTime(raw, 'time', 't', 'timestamp', 'at'),
    // VersionStats (core/coord): `tokens` is what this update added, `totalTokens` the running total.
    tokens: pickNum(raw, 'totalTokens', 'tokensTotal', 'tokensTrained') ?? pickNum(raw, 'tokens'),
    trainLoss: pickNum(raw, 'trainLoss', 'loss', 'train.loss'),
    evalLoss: pickNum(raw, 'evalLoss', 'eval.loss', 'eval'),
    islandsOnline: pickNum(raw, 'islandsOnline', 'islands', 'online'),
    bytesIn: pickNum(raw, 'bytesIn', 'bytes.in', 'bytesUp'),
    bytesOut: pickNum(raw, 'bytesOut', 'bytes.out', 'bytesDown'),
    tokensPerSec: pickNum(raw, 'tokensPerSec', 'tokensPerSecond'),
    byEngine: toCounts(raw.tokensPerSecByEngine ?? raw.byEngine),
    staleness: toCounts(raw.stalenessHist ?? raw.stalenessHistogram ?? raw.staleness),
    compressionRatio: positive(pickNum(raw, 'compressionRatio')),
    goodput: pickNum(raw, 'goodput'),
    contributors: pickNum(raw, 'contributors'),
    accepted: typeof acc === 'number' ? acc : isDict(acc) ? sumValues(acc) : pickNum(raw, 'deltasAccepted'),
    rejectedByCode,
  };
}

/** History as an array of points from `[...]`, `{ points|history|series: [...] }` or columns `{ version: [...], ... }`. */
export function historyList(raw: unknown): unknown[] | null {
  if (Array.isArray(raw)) return raw;
  if (!isDict(raw)) return null;
  for (const k of ['points', 'history', 'series', 'items', 'data']) {
    const v = raw[k];
    if (Array.isArray(v)) return v;
    if (isDict(v)) { const inner = historyList(v); if (inner) return inner; }
  }
  // columnar: { version: number[], time: number[], ... }
  const cols = Object.entries(raw).filter(([, v]) => Array.isArray(v)) as Array<[string, unknown[]]>;
  if (cols.length > 0 && (Array.isArray(raw.version) || Array.isArray(raw.time))) {
    const n = Math.max(...cols.map(([, v]) => v.length));
    const out: Dict[] = [];
    for (let i = 0; i < n; i++) {
      const p: Dict = {};
      for (const [k, v] of cols) p[k] = v[i];
      out.push(p);
    }
    return out;
  }
  return null;
}

export function normRun(raw: unknown): RunInfo | null {
  if (!isDict(raw)) return null;
  const o = isDict(raw.run) ? raw.run : raw;
  const config = isDict(o.config) ? o.config : {};
  const info: Dict = {};
  for (const [k, v] of Object.entries(o)) if (k !== 'config' && k !== 'name' && k !== 'description') info[k] = v;
  return {
    name: pickStr(o, 'name', 'run', 'id') ?? pickStr(config, 'name') ?? '',
    description: pickStr(o, 'description', 'desc') ?? pickStr(config, 'description') ?? '',
    config,
    info,
  };
}

export function normCheckpoints(raw: unknown): Checkpoint[] {
  const list = Array.isArray(raw) ? raw : isDict(raw) ? (Array.isArray(raw.checkpoints) ? raw.checkpoints : Array.isArray(raw.items) ? raw.items : []) : [];
  const out: Checkpoint[] = [];
  for (const c of list) {
    if (typeof c === 'number') { out.push({ version: c, time: null, bytes: null, url: `/api/checkpoints/${c}`, hash: '' }); continue; }
    if (!isDict(c)) continue;
    const version = pickNum(c, 'version', 'v');
    if (version === null) continue;
    out.push({
      version,
      time: pickTime(c, 'time', 'createdAt', 'at', 'mtime'),
      bytes: pickNum(c, 'bytes', 'size', 'sizeBytes'),
      url: pickStr(c, 'url', 'href', 'download') ?? `/api/checkpoints/${version}`,
      hash: pickStr(c, 'hash', 'sha256') ?? '',
    });
  }
  out.sort((a, b) => b.version - a.version);
  return out;
}

// ---------------------------------------------------------------- derived figures

/** Parameter count of the run's model: the server's figure, else computed from the GPT config. */
export function runParams(run: RunInfo): number | null {
  return pickNum(run.info, 'params', 'nParams', 'paramCount') ?? paramCount(run.config) ?? paramCount(run.info);
}

/** Tokens per inner step of the run (batch × sequence length). */
export function runTokensPerStep(run: RunInfo): number | null {
  return tokensPerStep(run.config) ?? (() => {
    const B = pickNum(run.info, 'batch', 'batchSize');
    const T = pickNum(run.info, 'seqLen', 'model.blockSize');
    return B !== null && T !== null ? B * T : null;
  })();
}

/** Parameter count of a GPT preset-shaped config (tied LM head), from the run config if it has one. */
export function paramCount(config: Dict): number | null {
  const direct = pickNum(config, 'params', 'nParams', 'paramCount', 'model.params', 'model.nParams');
  if (direct !== null) return direct;
  const m = isDict(config.model) ? config.model : isDict(config.gpt) ? config.gpt : config;
  const V = pickNum(m, 'vocabSize'), T = pickNum(m, 'blockSize'), L = pickNum(m, 'nLayer'), C = pickNum(m, 'nEmbd');
  if (V === null || T === null || L === null || C === null) return null;
  // wte + wpe + per layer (2 LN + qkv + attproj + 2 LN + fc + fcproj) + final LN, as in core/model/config.ts
  return V * C + T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C;
}

/** Tokens per inner step (batch × sequence length), from the run config. */
export function tokensPerStep(config: Dict): number | null {
  const direct = pickNum(config, 'tokensPerStep');
  if (direct !== null) return direct;
  const T = pickNum(config, 'coordinator.seqLen', 'seqLen', 'model.blockSize', 'blockSize');
  const B = pickNum(config, 'coordinator.batchSize', 'batchSize', 'batch', 'microBatch');
  return T !== null && B !== null ? T * B : null;
}
