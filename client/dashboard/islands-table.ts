// The islands table: sortable, filterable, paginated. Rows are a fixed pool of <tr>
// elements updated in place (text only when it changed), so 1,000+ islands updating
// twice a second cost one sort + one page of text writes, and nothing jumps.

import { h, setAttr, setText } from './dom.ts';
import { fmtAgo, fmtAudits, fmtFixed, fmtInt, fmtNumerics, fmtSI } from './format.ts';
import type { IslandView as Island } from '../../core/api.ts';
import { isOnline, type Store } from './store.ts';
import { PAGE_SIZES, type SortDir, type ViewState } from './url.ts';

interface Column {
  key: string;
  label: string;
  title: string;
  num?: boolean;
  get: (i: Island) => string | number | null;
  cell: (i: Island, now: number) => string;
}

export const COLUMNS: Column[] = [
  { key: 'name', label: 'Island', title: 'display name (id)', get: (i) => i.name.toLowerCase(), cell: (i) => i.name },
  {
    key: 'engine',
    label: 'Engine · adapter',
    title: 'engine type and GPU adapter',
    get: (i) => `${i.engine} ${i.adapter}`.toLowerCase(),
    cell: (i) => [i.engine, i.adapter].filter(Boolean).join(' · ') || '–',
  },
  {
    key: 'numerics',
    label: 'Numerics',
    title: 'storage precision (master weights f32) and devices training data-parallel inside the island',
    get: (i) => `${i.numerics} ${i.devices}`,
    cell: fmtNumerics,
  },
  {
    key: 'speed',
    label: 'Speed',
    title: 'measured speed (tokens/s)',
    num: true,
    get: (i) => i.speed,
    cell: (i) => fmtSI(i.speed),
  },
  {
    key: 'steps',
    label: 'Inner steps',
    title: 'inner steps assigned for the next round',
    num: true,
    get: (i) => i.innerSteps,
    cell: (i) => fmtInt(i.innerSteps),
  },
  {
    key: 'tokens',
    label: 'Tokens',
    title: 'tokens contributed',
    num: true,
    get: (i) => i.tokens,
    cell: (i) => fmtInt(i.tokens),
  },
  {
    key: 'accepted',
    label: 'Accepted',
    title: 'deltas accepted',
    num: true,
    get: (i) => i.accepted,
    cell: (i) => fmtInt(i.accepted),
  },
  {
    key: 'rejected',
    label: 'Rejected',
    title: 'deltas rejected',
    num: true,
    get: (i) => i.rejected,
    cell: (i) => fmtInt(i.rejected),
  },
  {
    key: 'quality',
    label: 'Quality',
    title: 'cosine of its recent Δs with their rounds\u2019 merged Δ (1: agrees, 0: orthogonal, < 0: against)',
    num: true,
    get: (i) => i.cosine,
    cell: (i) => fmtFixed(i.cosine, 2),
  },
  {
    key: 'norm',
    label: 'Norm',
    title: 'its recent ‖Δ‖/√steps ÷ the round\u2019s median (1: typical)',
    num: true,
    get: (i) => i.normRatio,
    cell: (i) => fmtFixed(i.normRatio, 2),
  },
  {
    key: 'staleness',
    label: 'Staleness',
    title: 'staleness τ of the last delta',
    num: true,
    get: (i) => i.staleness,
    cell: (i) => fmtInt(i.staleness),
  },
  {
    key: 'seen',
    label: 'Last seen',
    title: 'last message from the island',
    num: true,
    get: (i) => i.lastSeen,
    cell: (i, now) => fmtAgo(i.lastSeen, now),
  },
  {
    key: 'status',
    label: 'Status',
    title: 'island state',
    get: (i) => i.status,
    cell: (i) => [i.status || '–', fmtAudits(i.audits)].filter(Boolean).join(' · '),
  },
];

export function sortIslands(list: Island[], key: string, dir: SortDir): Island[] {
  const col = COLUMNS.find((c) => c.key === key) ?? COLUMNS[4];
  const sign = dir === 'asc' ? 1 : -1;
  // Decorate once, sort, undecorate: the getter runs n times, not n log n.
  const dec = list.map((i) => ({ i, v: col.get(i) }));
  dec.sort((a, b) => {
    const av = a.v,
      bv = b.v;
    // missing values always last
    if (av === null && bv === null) return a.i.id < b.i.id ? -1 : 1;
    if (av === null) return 1;
    if (bv === null) return -1;
    if (av < bv) return -sign;
    if (av > bv) return sign;
    return a.i.id < b.i.id ? -1 : a.i.id > b.i.id ? 1 : 0;
  });
  return dec.map((d) => d.i);
}

/** Quality filters: the cosine below which an island's Δs disagree with the rest. */
const QUALITY_LINE = 0.5;
const QUALITY_LOW = 'quality<0.5';
const QUALITY_HIGH = 'quality>=0.5';
const STATUS_FILTERS = ['', 'online', 'offline', QUALITY_LOW, QUALITY_HIGH];
const filterLabel = (s: string) =>
  s === '' ? 'all statuses' : s === QUALITY_LOW ? 'quality < 0.5' : s === QUALITY_HIGH ? 'quality ≥ 0.5' : s;

export function filterIslands(list: Iterable<Island>, q: string, status: string): Island[] {
  const terms = q.toLowerCase().split(/\s+/).filter(Boolean);
  const out: Island[] = [];
  for (const i of list) {
    if (status === 'online' && !isOnline(i)) continue;
    if (status === 'offline' && isOnline(i)) continue;
    if (status === QUALITY_LOW && !(i.cosine !== null && i.cosine < QUALITY_LINE)) continue;
    if (status === QUALITY_HIGH && !(i.cosine !== null && i.cosine >= QUALITY_LINE)) continue;
    if (status && !STATUS_FILTERS.includes(status) && i.status !== status) continue;
    if (terms.length) {
      const hay = `${i.name} ${i.id} ${i.engine} ${i.adapter} ${i.status}`.toLowerCase();
      if (!terms.every((t) => hay.includes(t))) continue;
    }
    out.push(i);
  }
  return out;
}

export class IslandsTable {
  readonly el: HTMLElement;
  private tbody: HTMLTableSectionElement;
  private headers = new Map<string, HTMLButtonElement>();
  private ths = new Map<string, HTMLTableCellElement>();
  private rows: HTMLTableRowElement[] = [];
  private filterInput: HTMLInputElement;
  private statusSelect: HTMLSelectElement;
  private sizeSelect: HTMLSelectElement;
  private summary: HTMLElement;
  private pageLabel: HTMLElement;
  private prevBtn: HTMLButtonElement;
  private nextBtn: HTMLButtonElement;
  private firstBtn: HTMLButtonElement;
  private lastBtn: HTMLButtonElement;
  private emptyEl: HTMLElement;
  private sorted: Island[] = [];
  private sig = '';
  private pages = 1;

  constructor(
    private view: () => ViewState,
    private setView: (patch: Partial<ViewState>, push?: boolean) => void,
  ) {
    this.filterInput = h('input', {
      type: 'search',
      id: 'island-filter',
      placeholder: 'Filter by name, id, engine, adapter…',
      'aria-label': 'Filter islands',
      autocomplete: 'off',
      spellcheck: 'false',
    });
    this.filterInput.addEventListener('input', () => this.setView({ q: this.filterInput.value, page: 1 }));
    this.statusSelect = h(
      'select',
      { id: 'island-status', 'aria-label': 'Status filter' },
      ...STATUS_FILTERS.map((s) => h('option', { value: s }, filterLabel(s))),
    );
    this.statusSelect.addEventListener('change', () => this.setView({ status: this.statusSelect.value, page: 1 }));
    this.sizeSelect = h(
      'select',
      { id: 'island-size', 'aria-label': 'Rows per page' },
      ...PAGE_SIZES.map((n) => h('option', { value: String(n) }, `${n} / page`)),
    );
    this.sizeSelect.addEventListener('change', () => this.setView({ size: Number(this.sizeSelect.value), page: 1 }));

    const thead = h(
      'thead',
      {},
      h(
        'tr',
        {},
        ...COLUMNS.map((c) => {
          const b = h(
            'button',
            { type: 'button', class: 'sort', 'data-sort': c.key, title: `Sort by ${c.title}` },
            c.label,
            h('span', { class: 'arrow', 'aria-hidden': 'true' }),
          );
          b.addEventListener('click', () => {
            const v = this.view();
            const dir: SortDir = v.sort === c.key ? (v.dir === 'asc' ? 'desc' : 'asc') : c.num ? 'desc' : 'asc';
            this.setView({ sort: c.key, dir, page: 1 });
          });
          this.headers.set(c.key, b);
          const th = h('th', { scope: 'col', class: c.num ? 'num' : '', 'data-col': c.key }, b);
          this.ths.set(c.key, th);
          return th;
        }),
      ),
    );
    this.tbody = h('tbody');
    // a row opens its island's view
    this.tbody.addEventListener('click', (e) => {
      const id = (e.target as HTMLElement).closest('tr')?.dataset.id;
      if (id) this.setView({ island: id }, true);
    });
    this.emptyEl = h('div', { class: 'empty', id: 'islands-empty', hidden: true });
    const mk = (label: string, aria: string, fn: () => void) => {
      const b = h('button', { type: 'button', class: 'pager-btn', 'aria-label': aria }, label);
      b.addEventListener('click', fn);
      return b;
    };
    this.firstBtn = mk('«', 'First page', () => this.setView({ page: 1 }));
    this.prevBtn = mk('‹', 'Previous page', () => this.setView({ page: Math.max(1, this.view().page - 1) }));
    this.nextBtn = mk('›', 'Next page', () => this.setView({ page: Math.min(this.pages, this.view().page + 1) }));
    this.lastBtn = mk('»', 'Last page', () => this.setView({ page: this.pages }));
    this.pageLabel = h('span', { class: 'page-label', 'aria-live': 'polite' });
    this.summary = h('span', { class: 'summary', id: 'islands-summary' });

    this.el = h(
      'div',
      { class: 'islands' },
      h(
        'div',
        { class: 'toolbar' },
        this.filterInput,
        this.statusSelect,
        this.sizeSelect,
        h('span', { class: 'spacer' }),
        this.summary,
      ),
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'grid', id: 'islands-table' },
          h('colgroup', {}, ...COLUMNS.map((c) => h('col', { class: `c-${c.key}` }))),
          thead,
          this.tbody,
        ),
        this.emptyEl,
      ),
      h('div', { class: 'pager' }, this.firstBtn, this.prevBtn, this.pageLabel, this.nextBtn, this.lastBtn),
    );
  }

  /** Text for the status filter options depends on what the server reports. */
  private syncStatusOptions(store: Store): void {
    const seen = new Set<string>();
    for (const i of store.islands.values()) if (i.status) seen.add(i.status);
    const want = [...STATUS_FILTERS, ...[...seen].filter((s) => !STATUS_FILTERS.includes(s)).sort()];
    const v = this.view().status;
    if (v && !want.includes(v)) want.push(v);
    const have = [...this.statusSelect.options].map((o) => o.value);
    if (have.join('|') !== want.join('|')) {
      this.statusSelect.replaceChildren(...want.map((s) => h('option', { value: s }, filterLabel(s))));
    }
  }

  render(store: Store, now: number): void {
    const v = this.view();
    if (document.activeElement !== this.filterInput && this.filterInput.value !== v.q) this.filterInput.value = v.q;
    this.syncStatusOptions(store);
    if (this.statusSelect.value !== v.status) this.statusSelect.value = v.status;
    if (this.sizeSelect.value !== String(v.size)) this.sizeSelect.value = String(v.size);

    const sig = `${store.rev.islands}/${v.sort}/${v.dir}/${v.q}/${v.status}`;
    if (sig !== this.sig) {
      this.sig = sig;
      this.sorted = sortIslands(filterIslands(store.islands.values(), v.q, v.status), v.sort, v.dir);
    }
    for (const c of COLUMNS) {
      const active = c.key === v.sort;
      setAttr(this.ths.get(c.key)!, 'aria-sort', active ? (v.dir === 'asc' ? 'ascending' : 'descending') : 'none');
      setText(this.headers.get(c.key)!.querySelector('.arrow')!, active ? (v.dir === 'asc' ? '▲' : '▼') : '');
    }

    const total = store.islands.size;
    const n = this.sorted.length;
    this.pages = Math.max(1, Math.ceil(n / v.size));
    const page = Math.min(v.page, this.pages);
    const start = (page - 1) * v.size;
    const slice = this.sorted.slice(start, start + v.size);

    while (this.rows.length < slice.length) {
      const tr = h(
        'tr',
        {},
        ...COLUMNS.map((c, k) =>
          k === 0
            ? h('td', { class: 't-name' }, h('span', { class: 'nm' }), h('span', { class: 'id' }))
            : h('td', { class: c.num ? 'num' : `t-${c.key}` }),
        ),
      );
      this.rows.push(tr);
    }
    for (let r = 0; r < this.rows.length; r++) {
      const tr = this.rows[r];
      const isl = slice[r];
      if (!isl) {
        if (tr.parentNode) tr.remove();
        continue;
      }
      if (tr.parentNode !== this.tbody || this.tbody.children[r] !== tr) this.tbody.appendChild(tr);
      setAttr(tr, 'data-id', isl.id);
      const cells = tr.children;
      setText(cells[0].firstElementChild!, isl.name);
      setText(
        cells[0].lastElementChild!,
        isl.name === isl.id ? '' : isl.id.length > 10 ? isl.id.slice(0, 8) + '…' : isl.id,
      );
      for (let c = 1; c < COLUMNS.length; c++) setText(cells[c], COLUMNS[c].cell(isl, now));
      setAttr(cells[0], 'title', `${isl.name} (${isl.id})`);
      setAttr(cells[COLUMNS.length - 1], 'data-status', isl.status);
    }

    this.emptyEl.hidden = n > 0;
    setText(
      this.emptyEl,
      total === 0
        ? 'No islands have joined yet. Open the volunteer page or start one with: ' +
            'npx atoll island --server <this server>'
        : 'No island matches the filter.',
    );
    setText(
      this.summary,
      n === 0
        ? `0 of ${fmtInt(total)} islands`
        : `${fmtInt(start + 1)}–${fmtInt(start + slice.length)} of ` +
            `${fmtInt(n)}${n !== total ? ` (filtered from ${fmtInt(total)})` : ''} islands`,
    );
    setText(this.pageLabel, `page ${page} of ${this.pages}`);
    this.firstBtn.disabled = this.prevBtn.disabled = page <= 1;
    this.nextBtn.disabled = this.lastBtn.disabled = page >= this.pages;
  }
}
