// The volunteer's local settings: a stable anonymous contributor id, an optional
// public display name, the usage cap and the pause-while-hidden choice. All in
// localStorage; failures (private mode, disabled storage) fall back to memory.

import type { Calibration } from './messages.ts';

const KEY = 'atoll.volunteer.v1';

export interface VolunteerPrefs {
  contributorId: string;
  displayName: string;
  dutyCycle: number;
  pauseWhenHidden: boolean;
  /** This device's last measured speed (re-used on reload when engine, device and shape match). */
  calibration: Calibration | null;
}

function validCalibration(c: unknown): Calibration | null {
  const x = c as Partial<Calibration> | null;
  if (!x || typeof x !== 'object' || typeof x.key !== 'string') return null;
  const pos = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;
  return pos(x.tokensPerSec) &&
    pos(x.stepMs) &&
    pos(x.ms) &&
    pos(x.at) &&
    typeof x.estimated === 'boolean' &&
    Array.isArray(x.timed)
    ? (x as Calibration)
    : null;
}

export const DUTY_CYCLES = [0.25, 0.5, 0.75, 1] as const;

function randomId(): string {
  const c: Crypto = globalThis.crypto;
  if (typeof c.randomUUID === 'function') return c.randomUUID(); // needs a secure context
  const b = c.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** Trims, drops control characters, caps at 40 characters. */
export function cleanDisplayName(s: string): string {
  return s
    .replace(/[\u0000-\u001f\u007f]/g, '')
    .trim()
    .slice(0, 40);
}

export function loadPrefs(storage: Storage | null = safeStorage()): VolunteerPrefs {
  let saved: Partial<VolunteerPrefs> = {};
  try {
    saved = JSON.parse(storage?.getItem(KEY) ?? '{}') as Partial<VolunteerPrefs>;
  } catch {
    /* corrupt: start over, keeping nothing */
  }
  const prefs: VolunteerPrefs = {
    contributorId:
      typeof saved.contributorId === 'string' && /^[\w-]{8,64}$/.test(saved.contributorId)
        ? saved.contributorId
        : randomId(),
    displayName: typeof saved.displayName === 'string' ? cleanDisplayName(saved.displayName) : '',
    dutyCycle: DUTY_CYCLES.includes(saved.dutyCycle as (typeof DUTY_CYCLES)[number]) ? (saved.dutyCycle as number) : 1,
    pauseWhenHidden: saved.pauseWhenHidden === true,
    calibration: validCalibration(saved.calibration),
  };
  savePrefs(prefs, storage);
  return prefs;
}

export function savePrefs(p: VolunteerPrefs, storage: Storage | null = safeStorage()): void {
  try {
    storage?.setItem(KEY, JSON.stringify(p));
  } catch {
    /* storage full or disabled: keep the in-memory copy */
  }
}

function safeStorage(): Storage | null {
  try {
    return globalThis.localStorage ?? null;
  } catch {
    return null;
  }
}
