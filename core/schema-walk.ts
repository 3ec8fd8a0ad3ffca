// Reading the run config's TypeBox schema (core/run-config.ts): the problems of a value against it,
// each naming its path and what is allowed; the node at a dotted path; a node's range as a reader
// writes it. One walker serves config.json, `--config` files, the Admin PATCH and the flags' help.

import type { TSchema } from '@sinclair/typebox';

/** The JSON-schema fields the walker reads (TypeBox schemas are plain JSON schema). */
interface Node {
  type?: string;
  description?: string;
  properties?: Record<string, Node>;
  required?: string[];
  items?: Node;
  anyOf?: Node[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  /** Ours: why the knob cannot change once the run has begun (absent: it may change on resume). */
  fixed?: string;
  /** Ours: what a string must be, as the error says it. */
  must?: string;
}

export interface WalkOptions {
  /** A patch: missing keys are fine (a `--config` file, an Admin PATCH). */
  partial?: boolean;
  /** Name keys the schema does not know (user input); a stored config ignores them. */
  strict?: boolean;
}

const kindOf = (y: unknown) => (Array.isArray(y) ? 'array' : y === null ? 'null' : typeof y);
const show = (v: unknown) => (JSON.stringify(v) ?? String(v)).slice(0, 40);

/** The literals of a union of literals (`'sync' | 'async'`), else null. */
export function literals(s: TSchema | Node): unknown[] | null {
  const n = s as Node;
  if (n.const !== undefined) return [n.const];
  if (!n.anyOf?.every((a) => a.const !== undefined)) return null;
  return n.anyOf.map((a) => a.const);
}

/** `[0, 10]`, `(0, 1]`, or an integer's `1..10,000,000`; '' for a node without bounds. */
export function rangeText(s: TSchema | Node): string {
  const n = s as Node;
  const lits = literals(n);
  if (lits) return lits.join('|');
  if (n.type !== 'number' && n.type !== 'integer') return '';
  const lo = n.exclusiveMinimum ?? n.minimum;
  const hi = n.maximum;
  if (lo === undefined || hi === undefined) return '';
  if (n.type === 'integer') return `${lo.toLocaleString('en-US')}..${hi.toLocaleString('en-US')}`;
  return `${n.exclusiveMinimum !== undefined ? '(' : '['}${lo}, ${hi}]`;
}

/** The node at `a.b.c` (through objects' properties), or undefined. */
export function nodeAt(schema: TSchema, path: string): TSchema | undefined {
  let n: Node | undefined = schema as Node;
  for (const k of path.split('.')) n = n?.properties?.[k];
  return n as TSchema | undefined;
}

/** Every leaf of the schema with its dotted path (objects are walked, everything else is a leaf). */
export function leaves(schema: TSchema, at = ''): Array<[string, TSchema]> {
  const n = schema as Node;
  if (n.type !== 'object' || !n.properties) return [[at, schema]];
  return Object.entries(n.properties).flatMap(([k, v]) => leaves(v as TSchema, at ? `${at}.${k}` : k));
}

/** What is wrong with `v` at `path` (empty: nothing). */
export function schemaProblems(schema: TSchema, v: unknown, opts: WalkOptions = {}, path = ''): string[] {
  const n = schema as Node;
  const name = path || 'the value';
  const lits = literals(n);
  if (lits) {
    if (lits.includes(v)) return [];
    const allowed = lits.length === 2 ? `${lits[0]} or ${lits[1]}` : `one of ${lits.join('|')}`;
    return [`${name} must be ${allowed}, got ${show(v)}`];
  }
  switch (n.type) {
    case 'object': {
      if (kindOf(v) !== 'object') return [`${name} must be an object, got ${show(v)}`];
      const o = v as Record<string, unknown>;
      const out: string[] = [];
      for (const [k, x] of Object.entries(o)) {
        const sub = n.properties?.[k];
        const p = path ? `${path}.${k}` : k;
        if (!sub) {
          if (opts.strict) out.push(`unknown key ${p}`);
        } else if (x !== undefined) out.push(...schemaProblems(sub as TSchema, x, opts, p));
      }
      if (!opts.partial)
        for (const k of n.required ?? []) if (o[k] === undefined) out.push(`${path ? `${path}.${k}` : k} is missing`);
      return out;
    }
    case 'number':
    case 'integer': {
      const int = n.type === 'integer';
      const what = int ? 'an integer' : 'a number';
      if (typeof v !== 'number') return [`${name} must be a number, got ${show(v)}`];
      const lo = n.exclusiveMinimum ?? n.minimum ?? -Infinity;
      const hi = n.maximum ?? Infinity;
      const bad = !Number.isFinite(v) || (int && !Number.isInteger(v)) || v < lo || v > hi || v === n.exclusiveMinimum;
      if (!bad) return [];
      const range = Number.isFinite(lo) && Number.isFinite(hi) ? ` in ${rangeText({ ...n, type: 'number' })}` : '';
      return [`${name} must be ${what}${range}, got ${show(v)}`];
    }
    case 'boolean':
      return typeof v === 'boolean' ? [] : [`${name} must be a boolean, got ${show(v)}`];
    case 'string': {
      const ok =
        typeof v === 'string' &&
        v.length >= (n.minLength ?? 0) &&
        v.length <= (n.maxLength ?? Infinity) &&
        (!n.pattern || new RegExp(n.pattern).test(v));
      return ok ? [] : [`${name} must be ${n.must ?? 'a string'}, got ${show(v)}`];
    }
    case 'array': {
      if (!Array.isArray(v)) return [`${name} must be a list, got ${show(v)}`];
      return v.some((x) => schemaProblems(n.items as TSchema, x, opts).length)
        ? [`${name} must be a list of ${n.items?.type === 'string' ? 'strings' : 'valid entries'}`]
        : [];
    }
    default:
      return [];
  }
}
