// The run config: everything a run can be told, as one TypeBox schema (name, description and range
// of each knob), stored as <run-dir>/config.json. RunConfig is its Static type. The serve and
// simulate flags and the Admin PATCH are knobs (KNOBS): each names its place in the config, and its
// help and range are read from the schema there, so a flag, a file key and a PATCH field agree.
//
//   defaults < --config < flags, at start; on resume the stored config takes the defaults' place
//   (server/run/config.ts). A knob whose schema says `fixed` is refused on resume, with its why.

import { type Static, type TSchema, Type } from '@sinclair/typebox';
import { CoordinatorConfigSchema, int, num } from './coord/config-schema.ts';
import type { GPTConfig, PresetName } from './model/config.ts';
import { literals, nodeAt, rangeText } from './schema-walk.ts';

const FIXED_MODEL = "θ's shape is in every checkpoint";
const posInt = (description: string) => int(1, Number.MAX_SAFE_INTEGER, { description });

export const ModelSchema = Type.Unsafe<GPTConfig>(
  Type.Object(
    {
      vocabSize: posInt('V: tokens of the vocabulary'),
      blockSize: posInt('T: longest sequence (the position table)'),
      nLayer: posInt('L: transformer blocks'),
      nHead: posInt('attention heads (nEmbd divisible by it)'),
      nEmbd: posInt('C: embedding width'),
    },
    { description: 'the GPT (core/model/config.ts)', fixed: FIXED_MODEL },
  ),
);

export const RunConfigSchema = Type.Object({
  name: Type.String({
    pattern: '^[\\w.-]{1,64}$',
    description: 'run name: the run folder (runs/<name>)',
    must: '1-64 of [A-Za-z0-9_.-]',
  }),
  title: Type.String({
    minLength: 1,
    maxLength: 120,
    description: 'headline of the volunteer page',
    must: '1-120 characters',
  }),
  description: Type.String({ maxLength: 2000, description: 'run description for the volunteer page' }),
  preset: Type.Unsafe<PresetName | 'custom'>(
    Type.Union(
      ['tiny', 'small', 'base', 'gpt2-mini', 'gpt2', 'custom'].map((p) => Type.Literal(p)),
      {
        description: 'model preset',
        fixed: FIXED_MODEL,
      },
    ),
  ),
  model: ModelSchema,
  // absent in a config stored before it: byte
  tokenizer: Type.Union([Type.Literal('byte'), Type.Literal('gpt2')], {
    description: "token ids: byte (UTF-8 bytes, 256) or gpt2 (GPT-2's BPE, 50,257); default: the model's vocabulary",
    fixed: "θ's vocabulary and the data's ids are its",
  }),
  data: Type.String({
    minLength: 1,
    description:
      'text file, folder of .txt files, a bundled text: moby-dick (default), sotu (byte runs), or a folder of ' +
      "token shards in the run's tokenizer (atoll data prepare --tokenizer byte|gpt2, llm.c or nanoGPT .bin)",
    fixed: 'the train/held-out split and every island stream are cut from it',
  }),
  // not fixed: the bucket may move; absent: this server serves its shards
  dataUrl: Type.Optional(
    Type.String({
      pattern: '^https?://[^\\s?#]+[^/\\s?#]$',
      maxLength: 2048,
      description:
        'a shard run: the static URL (a bucket or CDN holding the --data folder) its islands fetch shards from, ' +
        '<url>/<shard> by HTTP Range',
      must: 'an http(s) URL without a query, fragment or trailing /',
    }),
  ),
  seed: int(0, 2 ** 32 - 1, { description: 'θ init seed', fixed: 'θ0 was drawn from it' }),
  coordinator: CoordinatorConfigSchema,
  eval: Type.Object({
    batches: posInt('held-out batches per evaluation'),
    batchSize: posInt('sequences per held-out batch'),
  }),
  // the keep policy (server/run/keep-policy.ts); every and best absent: its defaults
  checkpoints: Type.Object({
    keep: posInt('checkpoints: keep the newest n'),
    every: Type.Optional(int(0, 1e9, { description: 'checkpoints: keep the first of every k versions (0: none)' })),
    best: Type.Optional(Type.Boolean({ description: 'checkpoints: keep the one of the best eval loss' })),
  }),
  limits: Type.Object({
    helloPerMinute: posInt('hello messages per IP per minute (socket.io)'),
    restPerMinute: posInt('REST requests per IP per minute'),
    maxIslands: posInt('concurrent island connections'),
    maxLogBytes: posInt('events.jsonl is rotated past this many bytes'),
    powBits: Type.Optional(int(0, 32, { description: 'proof of work of a new island identity (0: none)' })),
    newIslandsPerHour: Type.Optional(posInt('new island identities per address per hour')),
    modelChunkBytes: Type.Optional(
      int(1024, 2 ** 30, { description: 'θ chunk of GET /api/model/manifest, bytes (default 4 MiB)' }),
    ),
  }),
  allowOrigins: Type.Array(Type.String(), { description: "origins allowed besides the server's own (CORS)" }),
  mix: Type.Object({
    k: int(0, 16, { description: 'butterfly mixing: group size, 0 (off), 2, 4, 8 or 16' }),
    spotRate: num(0, 1, { description: 'share of fragments a second member recomputes (spot checks)' }),
  }),
  audit: Type.Object({
    rate: num(0, 1, { description: 'fraction of accepted dense-code deltas audited' }),
    banAfter: int(0, 1000, { description: 'failed audits that ban an island (0: never)' }),
  }),
  outerWorkers: int(0, 64, { description: 'worker threads for the outer step, off the event loop (0: on it)' }),
  cluster: Type.Object({
    leaseMs: int(100, 3_600_000, { description: 'with --redis: the aggregator lease, ms' }),
  }),
});
export type RunConfig = Static<typeof RunConfigSchema>;

/** A `--config` file or a resume's changes: any part of RunConfig, nested groups partial too. */
export type RunConfigPatch = {
  [K in keyof RunConfig]?: RunConfig[K] extends object ? DeepPartial<RunConfig[K]> : RunConfig[K];
};
type DeepPartial<T> = T extends unknown[] ? T : { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

/** One knob a flag and the Admin PATCH can set: its place in the config, and its own schema where it has one. */
export interface Knob {
  /** Dotted path in RunConfig. */
  path: string;
  /** The value's name in the flag's help: --outer-lr <lr>. */
  arg: string;
  /** The flag's schema when it differs from the config's leaf (another unit). */
  schema?: TSchema;
  /** config value = flag value × scale (rounded). */
  scale?: number;
  /** A flag of words for a boolean leaf: --keep-best on|off. */
  onOff?: boolean;
}

const k = (path: string, arg: string, more: Partial<Knob> = {}): Knob => ({ path, arg, ...more });

/** Every knob, by its flag's camelCase name (--outer-lr is outerLr, in a PATCH too). */
export const KNOBS = {
  preset: k('preset', 'name'),
  data: k('data', 'path'),
  dataUrl: k('dataUrl', 'url'),
  mode: k('coordinator.mode', 'mode'),
  codec: k('coordinator.uplink.encoding', 'enc'),
  downlink: k('coordinator.downlink.encoding', 'enc'),
  outerLr: k('coordinator.outer.lr', 'lr'),
  outerMomentum: k('coordinator.outer.momentum', 'm'),
  innerLr: k('coordinator.innerLr.maxLr', 'lr'),
  innerMinLr: k('coordinator.innerLr.minLr', 'lr'),
  innerWarmupTokens: k('coordinator.innerLr.warmupTokens', 'n'),
  weightDecay: k('coordinator.innerLr.weightDecay', 'wd'),
  batch: k('coordinator.batchSize', 'n'),
  totalTokens: k('coordinator.totalTokens', 'n'),
  roundTime: k('coordinator.targetRoundMs', 's', {
    scale: 1000,
    schema: num(0, 86_400, { description: 'target round time in seconds (0: fixed inner steps)' }),
  }),
  quorum: k('coordinator.quorum', 'q'),
  maxStaleness: k('coordinator.maxStaleness', 'n'),
  trustRegion: k('coordinator.trustRegion.factor', 'c'),
  innerSteps: k('coordinator.innerSteps', 'n'),
  seed: k('seed', 'n'),
  name: k('name', 'name'),
  title: k('title', 'text'),
  description: k('description', 'text'),
  mixGroup: k('mix.k', 'k'),
  mixSpotRate: k('mix.spotRate', 'f'),
  auditRate: k('audit.rate', 'f'),
  auditBanAfter: k('audit.banAfter', 'n'),
  outerWorkers: k('outerWorkers', 'n'),
  leaseMs: k('cluster.leaseMs', 'ms'),
  evalBatches: k('eval.batches', 'n'),
  keepLast: k('checkpoints.keep', 'n'),
  keepEvery: k('checkpoints.every', 'k'),
  keepBest: k('checkpoints.best', 'on|off', {
    onOff: true,
    schema: Type.Union([Type.Literal('on'), Type.Literal('off')], {
      description: 'checkpoints: keep the one of the best eval loss',
    }),
  }),
} satisfies Record<string, Knob>;
export type KnobName = keyof typeof KNOBS;

/** The knobs of a live run (PATCH /api/admin/config): each takes effect at the next assignment or step. */
export const ADMIN_KNOBS = [
  'outerLr',
  'outerMomentum',
  'innerLr',
  'innerMinLr',
  'innerWarmupTokens',
  'weightDecay',
  'batch',
  'totalTokens',
  'roundTime',
  'quorum',
  'maxStaleness',
  'codec',
  'downlink',
  'innerSteps',
] as const satisfies readonly KnobName[];

/** The knobs `atoll simulate` takes from the same definitions. */
export const SIMULATE_KNOBS = [
  'outerLr',
  'outerMomentum',
  'innerLr',
  'innerSteps',
  'codec',
  'downlink',
  'trustRegion',
] as const;

/** The schema a knob's value is checked against (the flag's own, else the config's leaf). */
export function knobSchema(name: KnobName): TSchema {
  const knob: Knob = KNOBS[name];
  const s = knob.schema ?? nodeAt(RunConfigSchema, knob.path);
  if (!s) throw new Error(`knob ${name}: no ${knob.path} in the run config schema`);
  return s;
}

/** `outer learning rate, [0, 10]`: the knob's description and range, as its flag's help says it. */
export function knobHelp(name: KnobName): string {
  const s = knobSchema(name) as TSchema & { description?: string };
  const range = literals(s) ? '' : rangeText(s);
  return range ? `${s.description}, ${range}` : (s.description ?? name);
}

/** The config value a knob's value makes (another unit scaled). */
export function knobValue(name: KnobName, v: unknown): unknown {
  const { scale, onOff } = KNOBS[name] as Knob;
  if (onOff) return v === 'on' || v === true;
  return scale && typeof v === 'number' ? Math.round(v * scale) : v;
}

/** Sets `value` at the dotted `path` of a nested patch object (creating the groups on the way). */
export function setAt(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let o = target;
  for (const key of keys.slice(0, -1)) {
    if (typeof o[key] !== 'object' || o[key] === null) o[key] = {};
    o = o[key] as Record<string, unknown>;
  }
  o[keys[keys.length - 1]] = value;
}

/** The value at a dotted path, or undefined. */
export function getAt(o: unknown, path: string): unknown {
  let v = o;
  for (const key of path.split('.'))
    v = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[key] : undefined;
  return v;
}
