// The live knobs of PATCH /api/admin/config: the body's keys are knob names (core/run-config.ts
// ADMIN_KNOBS, the serve flags' names), each checked against the run config's schema, so a bad
// value's error names the field and its range. A change holds from the next assignment (inner lr,
// batch, weight decay, H) or the next outer step (outer lr, momentum), and is logged with its version.

import { Type } from '@sinclair/typebox';
import type { DownlinkEncoding, Encoding } from '../../core/codec/index.ts';
import {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  codecSetting,
  downlinkSetting,
} from '../../core/coord/index.ts';
import { ErrorCode } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { ADMIN_KNOBS, KNOBS, type KnobName, knobHelp, knobSchema, knobValue, setAt } from '../../core/run-config.ts';
import type { RunConfig } from '../../core/run-config.ts';
import { schemaProblems } from '../../core/schema-walk.ts';

/** The live knobs, each with its schema (description, range): what a PATCH body may hold. */
export const ConfigPatchSchema = Type.Object(
  Object.fromEntries(ADMIN_KNOBS.map((n) => [n, Type.Optional(knobSchema(n))])),
  { additionalProperties: false, minProperties: 1 },
);
/**
 * The route's body schema: any object, so that parseConfigPatch, not the generic validator, answers a
 * bad knob (naming it and its range, where the validator said "must NOT have additional properties").
 */
export const ConfigPatchBody = Type.Object({}, { additionalProperties: true });
export type ConfigPatch = Partial<Record<(typeof ADMIN_KNOBS)[number], unknown>>;

/** The live knobs, each with its help ('outer learning rate, [0, 10]'): the Admin tab's list. */
export const ADMIN_KNOB_HELP = Object.fromEntries(ADMIN_KNOBS.map((n) => [n, knobHelp(n)]));

/**
 * The body as one coordinator patch: E_BAD_REQUEST naming the first unknown knob (and the known ones)
 * or each bad value with its range.
 */
export function parseConfigPatch(body: unknown): Result<CoordinatorConfigPatch> {
  if (typeof body !== 'object' || body === null || Array.isArray(body) || Object.keys(body).length === 0)
    return err(ErrorCode.BAD_REQUEST, `the body must be an object of one or more knobs: ${ADMIN_KNOBS.join(', ')}`);
  const problems: string[] = [];
  const p: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(body)) {
    if (!(ADMIN_KNOBS as readonly string[]).includes(name)) {
      const why = name in KNOBS ? 'is fixed while the run is live' : 'is not a knob';
      problems.push(`${name} ${why} (the live knobs: ${ADMIN_KNOBS.join(', ')})`);
      continue;
    }
    const knob = name as KnobName;
    const bad = schemaProblems(knobSchema(knob), v, {}, name);
    if (bad.length) {
      problems.push(`${bad.join('; ')} (${knobHelp(knob)})`);
      continue;
    }
    // a codec is its whole setting, uplink and downlink, as `serve --codec v` gives it (a named downlink wins)
    if (knob === 'codec') Object.assign(p, codecSetting(v as Encoding), p.downlink ? { downlink: p.downlink } : {});
    else if (knob === 'downlink') p.downlink = downlinkSetting(v as DownlinkEncoding);
    else setAt(p, KNOBS[knob].path.replace(/^coordinator\./, ''), knobValue(knob, v));
  }
  if (problems.length) return err(ErrorCode.BAD_REQUEST, problems.join('; '));
  return ok(p as CoordinatorConfigPatch);
}

/** What applying a patch needs of the run (server/run/run.ts's Run). */
export interface KnobbedRun {
  readonly coord: { config(): CoordinatorConfig; readonly version: number };
  readonly admin: {
    setConfig(patch: CoordinatorConfigPatch, changes: Record<string, unknown>): Promise<Result<RunConfig>>;
  };
}

/**
 * Checks and applies an Admin PATCH body; the change is in events.jsonl and the history with its version (admin.ts).
 */
export async function applyConfigPatch(run: KnobbedRun, body: unknown): Promise<Result<RunConfig>> {
  const patch = parseConfigPatch(body);
  if (!patch.ok) return patch;
  const changes = body as Record<string, unknown>;
  return run.admin.setConfig(patch.value, changes);
}
