// Contribution leaderboard: credit per contributor (a volunteer's stable anonymous id, or the
// display name of islands that send none; one volunteer may run several islands), ranked by tokens.

import { h, setAttr, setText } from './dom.ts';
import { fmtAgo, fmtInt, fmtPct } from './format.ts';
import type { IslandView as Island } from '../../core/api.ts';
import { isOnline, type Store } from './store.ts';

export interface Contributor {
  name: string;
  tokens: number;
  accepted: number;
  rejected: number;
  islands: number;
  online: number;
  engines: string[];
  lastSeen: number | null;
}

export function contributors(islands: Iterable<Island>): Contributor[] {
  const by = new Map<string, Contributor & { engineSet: Set<string> }>();
  for (const i of islands) {
    // a volunteer's stable contributor id when the island sent one; else its display name
    const key = i.contributorId && i.contributorId !== i.id ? `c:${i.contributorId}` : `n:${i.name.trim() || i.id}`;
    let c = by.get(key);
    if (!c) {
      c = { name: i.name.trim() || i.id, tokens: 0, accepted: 0, rejected: 0, islands: 0, online: 0, engines: [], lastSeen: null, engineSet: new Set() };
      by.set(key, c);
    }
    c.tokens += i.tokens;
    c.accepted += i.accepted;
    c.rejected += i.rejected;
    c.islands++;
    if (isOnline(i)) c.online++;
    if (i.engine) c.engineSet.add(i.engine);
    if (c.lastSeen === null || i.lastSeen > c.lastSeen) c.lastSeen = i.lastSeen;
  }
  const out = [...by.values()].map(({ engineSet, ...c }) => ({ ...c, engines: [...engineSet].sort() }));
  out.sort((a, b) => b.tokens - a.tokens || b.accepted - a.accepted || (a.name < b.name ? -1 : 1));
  return out;
}

const TOP = 100;

export class Leaderboard {
  readonly el: HTMLElement;
  private tbody = h('tbody');
  private rows: HTMLTableRowElement[] = [];
  private note = h('p', { class: 'muted small', id: 'leaderboard-note' });
  private emptyEl = h('div', { class: 'empty', id: 'leaderboard-empty', hidden: true }, 'No contributions yet. Credit appears here once an island\u2019s first Δ is accepted.');
  private sig = '';

  constructor() {
    const cols = ['#', 'Contributor', 'Tokens', 'Share', 'Accepted Δs', 'Islands', 'Engines', 'Last seen'];
    const num = [true, false, true, false, true, true, false, true];
    this.el = h('div', { class: 'leaderboard' },
      h('div', { class: 'table-wrap' }, h('table', { class: 'grid', id: 'leaderboard-table' },
        h('thead', {}, h('tr', {}, ...cols.map((c, i) => h('th', { scope: 'col', class: num[i] ? 'num' : '' }, c)))), this.tbody), this.emptyEl),
      this.note);
  }

  render(store: Store, now: number): void {
    const sig = `${store.rev.islands}/${Math.floor(now / 5000)}`;
    if (sig === this.sig) return;
    this.sig = sig;
    const all = contributors(store.islands.values()).filter((c) => c.tokens > 0 || c.accepted > 0);
    const total = all.reduce((a, c) => a + c.tokens, 0);
    const top = all.slice(0, TOP);
    while (this.rows.length < top.length) {
      const share = h('td', { class: 'share' }, h('span', { class: 'bar', 'aria-hidden': 'true' }), h('span', { class: 'v' }));
      this.rows.push(h('tr', {}, h('td', { class: 'num' }), h('td', { class: 't-name' }), h('td', { class: 'num' }), share, h('td', { class: 'num' }), h('td', { class: 'num' }), h('td'), h('td', { class: 'num' })));
    }
    for (let r = 0; r < this.rows.length; r++) {
      const tr = this.rows[r];
      const c = top[r];
      if (!c) { if (tr.parentNode) tr.remove(); continue; }
      if (tr.parentNode !== this.tbody || this.tbody.children[r] !== tr) this.tbody.appendChild(tr);
      const td = tr.children;
      const frac = total > 0 ? c.tokens / total : 0;
      setText(td[0], String(r + 1));
      setText(td[1], c.name);
      setText(td[2], fmtInt(c.tokens));
      setAttr(td[3].firstElementChild!, 'style', `width:${(frac * 100).toFixed(1)}%`);
      setText(td[3].lastElementChild!, fmtPct(frac));
      setText(td[4], fmtInt(c.accepted));
      setText(td[5], c.online && c.online !== c.islands ? `${c.islands} (${c.online} on)` : String(c.islands));
      setText(td[6], c.engines.join(', ') || '–');
      setText(td[7], fmtAgo(c.lastSeen, now));
    }
    this.emptyEl.hidden = all.length > 0;
    setText(this.note, all.length > TOP ? `Top ${TOP} of ${fmtInt(all.length)} contributors; ${fmtInt(total)} tokens in all.` : all.length ? `${fmtInt(all.length)} contributor${all.length === 1 ? '' : 's'}; ${fmtInt(total)} tokens in all. Islands of one contributor (or one display name) are credited together.` : '');
  }
}
