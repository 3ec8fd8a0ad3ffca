// Small deterministic PRNGs and hashes shared by init, data sampling and tests.

/** mulberry32: a fast 32-bit PRNG; returns floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Mixes several 32-bit integers into one seed (splitmix-style finaliser per word). */
export function mixSeed(...words: number[]): number {
  let h = 0x9e3779b9;
  for (const w of words) {
    h ^= w >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** FNV-1a of a string, for turning island ids into seeds. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Standard normal samples via Box-Muller over a uniform source. */
export function gaussian(rand: () => number): () => number {
  let spare: number | null = null;
  return () => {
    if (spare !== null) {
      const s = spare;
      spare = null;
      return s;
    }
    let u = 0;
    while (u === 0) u = rand();
    const v = rand();
    const r = Math.sqrt(-2 * Math.log(u));
    spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  };
}

/** Exponential backoff: base · 2^attempt ms, at most cap, then ± jitter (a fraction; 0 = exact). */
export function backoff(attempt: number, base: number, cap: number, jitter = 0): number {
  const d = Math.min(cap, base * 2 ** Math.min(attempt, 20));
  return Math.max(0, d * (1 + jitter * (2 * Math.random() - 1)));
}
