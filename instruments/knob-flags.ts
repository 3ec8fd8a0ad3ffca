// Command-line flags: number parsers that name the range, and the run config's knobs as commander
// options (core/run-config.ts KNOBS): a knob's flag name, help, range and choices come from the schema.

import { InvalidArgumentError, Option } from 'commander';
import { type KnobName, KNOBS, knobHelp, knobSchema } from '../core/run-config.ts';
import { literals } from '../core/schema-walk.ts';

/** A plain decimal as a flag may spell it (no hex, no blank, no NaN or Infinity). */
const DECIMAL = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$/;

/** An integer flag in [min, max]: anything else stops the command before any work, one line naming the flag. */
export function intIn(min: number, max: number): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!DECIMAL.test(v.trim()) || !Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`must be an integer in [${min}, ${max}]`);
    return n;
  };
}

/** A number flag in [min, max] ((min, max] with `aboveMin`). */
export function numIn(min: number, max: number, aboveMin = false): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!DECIMAL.test(v.trim()) || !Number.isFinite(n) || n < min || n > max || (aboveMin && n === min)) {
      throw new InvalidArgumentError(`must be a number in ${aboveMin ? '(' : '['}${min}, ${max}]`);
    }
    return n;
  };
}

/** `outerLr` → `outer-lr`. */
export const kebab = (name: string) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** A knob as a flag: `--outer-lr <lr>`, its help and range from the schema, `more` said after them. */
export function knobOption(name: KnobName, more = ''): Option {
  const s = knobSchema(name) as { type?: string; minimum?: number; maximum?: number; exclusiveMinimum?: number };
  const o = new Option(`--${kebab(name)} <${KNOBS[name].arg}>`, more ? `${knobHelp(name)} ${more}` : knobHelp(name));
  const lits = literals(s);
  if (lits) return o.choices(lits.map(String));
  const lo = s.exclusiveMinimum ?? s.minimum;
  if (lo !== undefined && s.maximum !== undefined) {
    if (s.type === 'integer') o.argParser(intIn(lo, s.maximum));
    else if (s.type === 'number') o.argParser(numIn(lo, s.maximum, s.exclusiveMinimum !== undefined));
  }
  return o;
}
