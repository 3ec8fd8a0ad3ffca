// The Data card of a shard run (`serve --data DIR`): the epoch's progress, the tokens trained per
// shard, and the ranges in flight, from the server's range ledger (GET /api/data). Hidden on a text.

import type { DataStatus } from '../../core/api.ts';
import { clear, h, setText } from './dom.ts';
import { fmtBytes, fmtInt } from './format.ts';
import type { Store } from './store.ts';

/** The ledger in one line (epochs counted from 0, as /api/data): "epoch 1 at 41.5 % of 1,104,997 train tokens (…". */
export function epochText(d: DataStatus, dataUrl: string | undefined): string {
  const done = d.epochsDone === 1 ? '1 epoch done' : `${fmtInt(d.epochsDone)} epochs done`;
  const at = `epoch ${fmtInt(d.epoch)} at ${(100 * d.epochProgress).toFixed(1)} % of ${fmtInt(d.trainTokens)}`;
  const flight = d.inFlight.length === 1 ? '1 range in flight' : `${fmtInt(d.inFlight.length)} ranges in flight`;
  const from = dataUrl
    ? `ranges fetched from ${dataUrl}`
    : `${fmtBytes(d.bytesServed)} of shard data sent by this server`;
  return `${at} train tokens (${done}); ${flight}; ${from}`;
}

export class DataPanel {
  readonly el: HTMLElement;
  private epoch = h('p', { id: 'data-epoch' });
  private shards = h('tbody');
  private flight = h('tbody');
  private flightEmpty = h('p', { class: 'muted small', id: 'data-inflight-empty' }, 'No range in flight.');
  private seen = -1;

  constructor() {
    const head = (...cols: Array<[string, boolean]>) =>
      h('thead', {}, h('tr', {}, ...cols.map(([c, num]) => h('th', { scope: 'col', class: num ? 'num' : '' }, c))));
    this.el = h(
      'section',
      { class: 'card', id: 'data-card', hidden: true },
      h('h2', {}, 'Data'),
      this.epoch,
      h(
        'table',
        { class: 'grid', id: 'data-shards' },
        h('caption', {}, 'Tokens trained per shard (what kept Δs trained, all epochs)'),
        head(['Shard', false], ['Tokens', true], ['Trained', true], ['Of its tokens', false]),
        this.shards,
      ),
      h(
        'table',
        { class: 'grid', id: 'data-inflight' },
        h('caption', {}, 'Ranges in flight'),
        head(['Island', false], ['Shard', false], ['Offset', true], ['Tokens', true], ['State', false]),
        this.flight,
      ),
      this.flightEmpty,
    );
  }

  render(store: Store): void {
    if (store.rev.data === this.seen) return;
    this.seen = store.rev.data;
    const d = store.data;
    this.el.hidden = !d;
    if (!d) return;
    setText(this.epoch, epochText(d, store.run?.config.dataUrl));
    clear(this.shards);
    for (const s of d.shards) {
      const share = s.tokens > 0 ? s.trained / s.tokens : 0;
      this.shards.appendChild(
        h(
          'tr',
          {},
          h('td', { class: 'mono' }, s.name),
          h('td', { class: 'num' }, fmtInt(s.tokens)),
          h('td', { class: 'num' }, fmtInt(s.trained)),
          h('td', {}, h('meter', { min: 0, max: 1, value: Math.min(1, share) }), ` ${(100 * share).toFixed(1)} %`),
        ),
      );
    }
    clear(this.flight);
    for (const r of d.inFlight)
      this.flight.appendChild(
        h(
          'tr',
          {},
          h('td', { class: 'mono' }, r.islandId),
          h('td', { class: 'mono' }, r.shard),
          h('td', { class: 'num' }, fmtInt(r.offset)),
          h('td', { class: 'num' }, fmtInt(r.length)),
          h('td', {}, r.submitted ? 'Δ accepted, waiting for its outer step' : 'training'),
        ),
      );
    this.flightEmpty.hidden = d.inFlight.length > 0;
  }
}
