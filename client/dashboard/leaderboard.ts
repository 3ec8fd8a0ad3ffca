// Contribution leaderboard: credit per contributor (core/credit.ts), ranked by the tokens of their
// Δs merged into θ, with the tokens they computed beside them.

import { h, setAttr, setText } from './dom.ts';
import { fmtAgo, fmtInt, fmtPct } from './format.ts';
import { contributors } from '../../core/credit.ts';
import type { Store } from './store.ts';

const TOP = 100;

export class Leaderboard {
  readonly el: HTMLElement;
  private tbody = h('tbody');
  private rows: HTMLTableRowElement[] = [];
  private note = h('p', { class: 'muted small', id: 'leaderboard-note' });
  private emptyEl = h(
    'div',
    { class: 'empty', id: 'leaderboard-empty', hidden: true },
    'No contributions yet. Credit appears here once an island\u2019s first Δ is accepted.',
  );
  private sig = '';

  constructor() {
    const cols = [
      '#',
      'Contributor',
      'Tokens merged',
      'Share',
      'Tokens computed',
      'Accepted Δs',
      'Islands',
      'Engines',
      'Last seen',
    ];
    const num = [true, false, true, false, true, true, true, false, true];
    this.el = h(
      'div',
      { class: 'leaderboard' },
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'grid', id: 'leaderboard-table' },
          h('thead', {}, h('tr', {}, ...cols.map((c, i) => h('th', { scope: 'col', class: num[i] ? 'num' : '' }, c)))),
          this.tbody,
        ),
        this.emptyEl,
      ),
      this.note,
    );
  }

  render(store: Store, now: number): void {
    const sig = `${store.rev.islands}/${Math.floor(now / 5000)}`;
    if (sig === this.sig) return;
    this.sig = sig;
    const all = contributors(store.islands.values()).filter((c) => c.tokens > 0 || c.accepted > 0);
    const total = all.reduce((a, c) => a + c.tokens, 0);
    const top = all.slice(0, TOP);
    while (this.rows.length < top.length) {
      const share = h(
        'td',
        { class: 'share' },
        h('span', { class: 'bar', 'aria-hidden': 'true' }),
        h('span', { class: 'v' }),
      );
      this.rows.push(
        h(
          'tr',
          {},
          h('td', { class: 'num' }),
          h('td', { class: 't-name' }),
          h('td', { class: 'num' }),
          share,
          h('td', { class: 'num' }),
          h('td', { class: 'num' }),
          h('td', { class: 'num' }),
          h('td'),
          h('td', { class: 'num' }),
        ),
      );
    }
    for (let r = 0; r < this.rows.length; r++) {
      const tr = this.rows[r];
      const c = top[r];
      if (!c) {
        if (tr.parentNode) tr.remove();
        continue;
      }
      if (tr.parentNode !== this.tbody || this.tbody.children[r] !== tr) this.tbody.appendChild(tr);
      const td = tr.children;
      const frac = total > 0 ? c.tokens / total : 0;
      setText(td[0], String(r + 1));
      setText(td[1], c.name);
      setText(td[2], fmtInt(c.tokens));
      setAttr(td[3].firstElementChild!, 'style', `width:${(frac * 100).toFixed(1)}%`);
      setText(td[3].lastElementChild!, fmtPct(frac));
      setText(td[4], fmtInt(c.tokensComputed));
      setText(td[5], fmtInt(c.accepted));
      setText(td[6], c.online && c.online !== c.islands ? `${c.islands} (${c.online} on)` : String(c.islands));
      setText(td[7], c.engines.join(', ') || '–');
      setText(td[8], fmtAgo(c.lastSeen, now));
    }
    this.emptyEl.hidden = all.length > 0;
    setText(
      this.note,
      all.length > TOP
        ? `Top ${TOP} of ${fmtInt(all.length)} contributors; ${fmtInt(total)} tokens in all.`
        : all.length
          ? `${fmtInt(all.length)} contributor${all.length === 1 ? '' : 's'}; ${fmtInt(total)} tokens in all. ` +
            `Islands of one contributor (or one display name) are credited together.`
          : '',
    );
  }
}
