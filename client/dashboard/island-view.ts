// The island view (/dashboard#island=ID): one island's facts, its rejections by code, and its
// accepted Δs over versions: cosine with the round's merged Δ, norm against the round's median,
// staleness. Loaded from GET /api/islands/:id while open (every 2 s).

import uPlot from 'uplot';
import type { ConfigChange, IslandDetail } from '../../core/api.ts';
import { api } from './api.ts';
import { ChartBox, PALETTE } from './chart-box.ts';
import { clear, h, setText } from './dom.ts';
import { fmtAgo, fmtAudits, fmtFixed, fmtInt, fmtNumerics, fmtSI, fmtTime } from './format.ts';
import { changeText } from './markers.ts';
import { errorText } from './run-panel.ts';

const REFRESH_MS = 2000;

export class IslandPanel {
  readonly el: HTMLElement;
  private title = h('h2', { id: 'island-name' });
  private note = h('p', { class: 'muted', id: 'island-note' });
  private facts = h('tbody');
  private rejections = h('tbody');
  private chart = new ChartBox('island-quality', 'Quality of its accepted Δs');
  private id = '';
  private detail: IslandDetail | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** The run's config changes (Store.configChanges): markers at their versions on the quality chart. */
  changes: ConfigChange[] = [];

  constructor(private close: () => void) {
    const back = h('button', { type: 'button', id: 'island-back' }, '← all islands');
    back.addEventListener('click', () => this.close());
    this.el = h(
      'div',
      { class: 'island-view', id: 'island-view' },
      h('div', { class: 'card-head' }, this.title, back),
      this.note,
      h(
        'div',
        { class: 'run' },
        h('section', { class: 'card' }, h('table', { class: 'kv', id: 'island-facts' }, this.facts)),
        h(
          'div',
          { class: 'run-side' },
          this.chart.el,
          h(
            'section',
            { class: 'card' },
            h('h2', {}, 'Rejections by code'),
            h('table', { class: 'kv', id: 'island-rejections' }, this.rejections),
          ),
        ),
      ),
    );
  }

  /** Shows island `id` (''  hides the view and stops refreshing). */
  show(id: string): void {
    if (id === this.id) return;
    this.id = id;
    this.detail = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (id) void this.load();
  }

  private async load(): Promise<void> {
    const id = this.id;
    const r = await api(`/api/islands/${encodeURIComponent(id)}`);
    if (id !== this.id) return;
    if (r.ok) this.detail = r.body as IslandDetail;
    this.render(r.ok ? null : errorText(r.body));
    this.timer = setTimeout(() => void this.load(), REFRESH_MS);
  }

  private render(error: string | null): void {
    const d = this.detail;
    if (!d) {
      setText(this.title, `Island ${this.id}`);
      setText(this.note, error ?? 'Loading…');
      return;
    }
    const i = d.island;
    setText(this.title, `Island ${i.name}`);
    setText(this.note, `${i.id} · ${i.status}${error ? ` · ${error}` : ''}`);
    const rows: Array<[string, string]> = [
      ['Engine', [i.engine, i.adapter].filter(Boolean).join(' · ')],
      ['Numerics', fmtNumerics(i)],
      ['Status', [i.status, fmtAudits(i.audits)].filter(Boolean).join(' · ')],
      ['Audits passed / failed', i.audits ? `${fmtInt(i.audits.passed)} / ${fmtInt(i.audits.failed)}` : '–'],
      ['Speed', i.speed === null ? '–' : `${fmtSI(i.speed)} tokens/s`],
      ['Inner steps (next round)', fmtInt(i.innerSteps)],
      ['Batch', `${i.batchSize} sequences`],
      ['Staleness of its last Δ', `τ = ${fmtInt(i.staleness)}`],
      ['Tokens in θ', fmtInt(i.tokens)],
      ['Δs accepted / rejected', `${fmtInt(i.accepted)} / ${fmtInt(i.rejected)}`],
      ['Quality (cosine, last 10)', fmtFixed(i.cosine, 3)],
      ['Norm ÷ round median (last 10)', fmtFixed(i.normRatio, 2)],
      ['Joined', fmtTime(i.joinedAt)],
      ['Last seen', fmtAgo(i.lastSeen)],
    ];
    clear(this.facts);
    for (const [k, v] of rows) this.facts.appendChild(h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v)));
    clear(this.rejections);
    const codes = Object.entries(i.rejectedByCode).sort((a, b) => b[1] - a[1]);
    if (codes.length === 0) this.rejections.appendChild(h('tr', {}, h('td', {}, 'none')));
    for (const [code, n] of codes)
      this.rejections.appendChild(h('tr', {}, h('th', { scope: 'row' }, code), h('td', {}, fmtInt(n))));
    const cs = d.contributions;
    this.chart.update({
      key: 'island-quality',
      x: 'linear',
      xLabel: 'version',
      xValues: (v) => (Number.isInteger(v) ? `v${v}` : ''),
      markers: this.changes.map((c) => ({ x: c.version, version: c.version, label: changeText(c) })),
      data: [cs.map((c) => c.version), cs.map((c) => c.cosine), cs.map((c) => c.normRatio), cs.map((c) => c.staleness)],
      series: [
        {
          label: 'cosine',
          stroke: PALETTE[0],
          width: 2,
          value: (_u, v) => fmtFixed(v, 3),
          points: { show: true, size: 5 },
        },
        {
          label: 'norm ÷ median',
          stroke: PALETTE[1],
          width: 1.5,
          dash: [5, 3],
          value: (_u, v) => fmtFixed(v, 2),
          points: { show: true, size: 4 },
        },
        {
          label: 'staleness τ',
          stroke: PALETTE[4],
          width: 1,
          paths: uPlot.paths.stepped?.({ align: 1 }),
          value: (_u, v) => fmtInt(v),
          points: { show: false },
        },
      ],
      yFmt: (v) => v.toFixed(1),
      empty:
        cs.length === 0
          ? 'No accepted Δ yet'
          : cs.every((c) => c.cosine === null)
            ? 'Quality is measured in sync rounds; this run is async'
            : null,
      note:
        'Per accepted Δ: cosine with its round\u2019s merged Δ (1 agrees, 0 orthogonal), ‖Δ‖/√steps ÷ the ' +
        'round\u2019s median, and staleness.',
    });
  }
}
