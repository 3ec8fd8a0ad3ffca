// Headline figures: version, tokens trained, tokens/s, islands online, eval loss,
// goodput, and upload saved against data-parallel training. Fixed-size cards.

import { h, setAttr, setText } from './dom.ts';
import { fmtInt, fmtLoss, fmtPct, fmtRatio, fmtSI, isNum } from './format.ts';
import { runParams, runTokensPerStep } from './model.ts';
import { isOnline, type Store } from './store.ts';

interface Card { value: HTMLElement; sub: HTMLElement; el: HTMLElement }

export interface Figures {
  goodput: number | null;
  goodputHow: string;
  uploadSaved: number | null;
  dpBytes: number | null;
}

/** Goodput and upload saved, from the server's figures when it has them, else derived. */
export function figures(store: Store): Figures {
  const s = store.status;
  const lastGoodput = lastOf(store.history, (p) => p.goodput);
  let goodput = s?.goodput ?? lastGoodput;
  let goodputHow = 'tokens in θ ÷ tokens in all Δs sent';
  if (goodput === null) {
    let acc = 0, rej = 0;
    for (const p of store.history) {
      acc += p.accepted ?? 0;
      for (const v of Object.values(p.rejectedByCode ?? {})) rej += v;
    }
    if (acc + rej === 0) for (const i of store.islands.values()) { acc += i.accepted; rej += i.rejected; }
    goodput = acc + rej > 0 ? acc / (acc + rej) : null;
    goodputHow = 'accepted Δs ÷ all Δs received';
  }
  let dpBytes = s?.bytesDataParallel ?? null;
  if (dpBytes === null && s && store.run && isNum(s.tokensTotal)) {
    const n = runParams(store.run);
    const tps = runTokensPerStep(store.run);
    // Data-parallel: one fp32 gradient uploaded per inner step of every island.
    if (n && tps) dpBytes = (s.tokensTotal / tps) * 4 * n;
  }
  const uploadSaved = dpBytes && s && isNum(s.bytesIn) && dpBytes > 0 ? 1 - s.bytesIn / dpBytes : null;
  return { goodput, goodputHow, uploadSaved, dpBytes };
}

/** The latest non-null value of f over the points, scanning from the end. */
function lastOf<T>(xs: readonly T[], f: (x: T) => number | null): number | null {
  for (let i = xs.length - 1; i >= 0; i--) {
    const v = f(xs[i]);
    if (isNum(v)) return v;
  }
  return null;
}

export class Headline {
  readonly el: HTMLElement;
  private cards = new Map<string, Card>();

  constructor() {
    const defs: Array<[string, string, string]> = [
      ['version', 'Version', 'outer updates applied to the global model'],
      ['tokens', 'Tokens trained', 'tokens folded into the global model'],
      ['tps', 'Tokens / s', 'accepted training throughput, all islands'],
      ['islands', 'Islands online', 'islands connected now'],
      ['eval', 'Eval loss', 'held-out loss of the global model'],
      ['goodput', 'Goodput', 'share of the islands\u2019 work that made it into the model'],
      ['saved', 'Upload saved', 'upload bytes saved against data-parallel training (fp32 gradient every step)'],
    ];
    this.el = h('div', { class: 'headline', role: 'list', 'aria-label': 'Headline figures' });
    for (const [id, label, title] of defs) {
      const value = h('div', { class: 'value', id: `fig-${id}` }, '–');
      const sub = h('div', { class: 'sub' }, '\u00a0');
      const el = h('div', { class: 'fig', role: 'listitem', title }, h('div', { class: 'label' }, label), value, sub);
      this.cards.set(id, { value, sub, el });
      this.el.appendChild(el);
    }
  }

  private set(id: string, value: string, sub: string): void {
    const c = this.cards.get(id)!;
    setText(c.value, value);
    setText(c.sub, sub || '\u00a0');
  }

  render(store: Store): void {
    const s = store.status;
    const f = figures(store);
    const known = store.islands.size;
    let online = 0;
    for (const i of store.islands.values()) if (isOnline(i)) online++;
    this.set('version', fmtInt(s?.version), s?.hash ? `hash ${s.hash.slice(0, 10)}` : '');
    this.set('tokens', fmtInt(s?.tokensTotal), isNum(s?.tokensTotal) ? fmtSI(s!.tokensTotal) : '');
    this.set('tps', fmtSI(s?.tokensPerSec), s?.paused ? 'paused' : '');
    this.set('islands', fmtInt(s?.islandsOnline ?? (known ? online : null)), known ? `${fmtInt(known)} known` : 'none yet');
    const train = s?.trainLoss ?? lastOf(store.history, (p) => p.trainLoss);
    const evalLoss = s?.evalLoss ?? lastOf(store.history, (p) => p.evalLoss);
    const evalOf = isNum(s?.evalVersion) && isNum(s?.evalLoss) && s!.evalVersion !== s!.version ? ` · of v${s!.evalVersion}` : '';
    this.set('eval', fmtLoss(evalLoss), (isNum(train) ? `train ${fmtLoss(train)}` : '') + evalOf);
    this.set('goodput', fmtPct(f.goodput), f.goodput !== null ? f.goodputHow : '');
    this.set('saved', fmtPct(f.uploadSaved), f.uploadSaved !== null && f.uploadSaved < 1 && f.dpBytes && s?.bytesIn ? `${fmtRatio(f.dpBytes / s.bytesIn)} less than data-parallel` : '');
    setAttr(this.cards.get('tps')!.el, 'data-paused', s?.paused ? 'true' : null);
  }
}
