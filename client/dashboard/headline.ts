// Headline figures: version, tokens trained, tokens/s, islands online, eval loss,
// goodput, upload saved against data-parallel training, and server bytes saved by butterfly
// mixing with its groups per version. Fixed-size cards.

import type { RunStatus } from '../../core/api.ts';
import { h, setAttr, setText } from './dom.ts';
import { fmtInt, fmtLoss, fmtPct, fmtRatio, fmtSI, isNum } from './format.ts';
import type { Store } from './store.ts';

interface Card {
  value: HTMLElement;
  sub: HTMLElement;
  el: HTMLElement;
}

/** Share of the upload saved against data-parallel training (null before any tokens). */
export function uploadSaved(s: RunStatus): number | null {
  return s.bytesDataParallel > 0 ? 1 - s.bytesIn / s.bytesDataParallel : null;
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
      [
        'mix',
        'Mixing saved',
        'server bytes saved by butterfly mixing (islands averaging over WebRTC), net of its checks and signalling; ' +
          'groups formed per version',
      ],
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
    if (!s) return;
    this.set('version', fmtInt(s.version), `hash ${s.hash.slice(0, 10)}`);
    this.set('tokens', fmtInt(s.tokensTotal), fmtSI(s.tokensTotal));
    this.set('tps', fmtSI(s.tokensPerSec), s.paused ? 'paused' : '');
    const known = store.islands.size;
    this.set('islands', fmtInt(s.islandsOnline), known ? `${fmtInt(known)} known` : 'none yet');
    const evalOf = isNum(s.evalVersion) && s.evalVersion !== s.version ? ` · of v${s.evalVersion}` : '';
    this.set('eval', fmtLoss(s.evalLoss), (isNum(s.trainLoss) ? `train ${fmtLoss(s.trainLoss)}` : '') + evalOf);
    this.set('goodput', fmtPct(s.goodput), 'tokens in θ ÷ tokens in all Δs sent');
    const saved = uploadSaved(s);
    this.set(
      'saved',
      fmtPct(saved),
      saved !== null && saved < 1 && s.bytesIn > 0
        ? `${fmtRatio(s.bytesDataParallel / s.bytesIn)} less than data-parallel`
        : '',
    );
    const m = s.mix;
    const perVersion =
      m?.groupsByVersion
        .slice(-6)
        .map((g) => `v${g.version}:${g.groups}`)
        .join(' ') ?? '';
    this.set(
      'mix',
      m ? fmtSI(m.savedBytes, 'B') : 'off',
      m
        ? `k ${m.k} · ${fmtInt(m.mixedGroups)}/${fmtInt(m.groups)} groups ` +
            `mixed${m.mixedGroups ? ` (${(m.mixedMembers / m.mixedGroups).toFixed(1)} each)` : ''} · ` +
            `${fmtInt(m.rings)} rings · ${perVersion}`
        : 'islands upload directly',
    );
    setAttr(this.cards.get('tps')!.el, 'data-paused', s.paused ? 'true' : null);
  }
}
