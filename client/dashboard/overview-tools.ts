// The overview's tools beyond the x axis and smoothing: another run's curves from its metrics JSONL (overlay.ts),
// and the run's config changes listed in words (each is also a marker on the charts).

import { clear, h, setText } from './dom.ts';
import { fmtTime } from './format.ts';
import { changeText } from './markers.ts';
import { OVERLAY_MAX_BYTES, parseScalarsJsonl } from './overlay.ts';
import type { Store } from './store.ts';

/** "Compare with a run": a file input for a scalars.jsonl, the loaded file's name, and a button to drop it. */
export class OverlayControl {
  readonly el: HTMLElement;
  private input: HTMLInputElement;
  private state: HTMLElement;
  private clearButton: HTMLButtonElement;

  constructor(private store: Store) {
    this.input = h('input', {
      type: 'file',
      id: 'overlay-file',
      accept: '.jsonl,.json,application/x-ndjson,application/json,text/plain',
      'aria-describedby': 'overlay-state',
    });
    this.state = h('span', { class: 'muted small', id: 'overlay-state', 'aria-live': 'polite' });
    this.clearButton = h('button', { type: 'button', id: 'overlay-clear', hidden: true }, 'remove');
    this.input.addEventListener('change', () => void this.load());
    this.clearButton.addEventListener('click', () => {
      this.input.value = '';
      this.store.setOverlay(null);
      this.show('', null);
    });
    this.el = h(
      'span',
      { class: 'overlay-control' },
      h(
        'label',
        {
          for: 'overlay-file',
          class: 'muted',
          title: 'metrics/scalars.jsonl of a run folder, or <out>.metrics/ of train',
        },
        'compare with a run',
      ),
      this.input,
      this.clearButton,
      this.state,
    );
  }

  private async load(): Promise<void> {
    const f = this.input.files?.[0];
    if (!f) return;
    if (f.size > OVERLAY_MAX_BYTES) return this.show(`${f.name} is over ${OVERLAY_MAX_BYTES >> 20} MiB`, 'error');
    try {
      const run = parseScalarsJsonl(await f.text(), f.name.replace(/\.jsonl?$/, ''));
      this.store.setOverlay(run);
      const changes = run.changes ? `, ${run.changes} config change${run.changes === 1 ? '' : 's'}` : '';
      this.show(`${run.name}: ${run.rows.length} steps${changes}, dotted on loss, lr and norm`, 'loaded');
    } catch (e) {
      this.store.setOverlay(null);
      this.show((e as Error).message, 'error');
    }
  }

  private show(text: string, verdict: 'loaded' | 'error' | null): void {
    setText(this.state, text);
    this.state.dataset.verdict = verdict ?? '';
    this.state.setAttribute('role', verdict === 'error' ? 'alert' : 'status');
    this.clearButton.hidden = verdict !== 'loaded';
  }
}

/** The run's config changes, newest last: "v12 (2026-01-01 12:00:03): outerLr 0.5". */
export class ChangesList {
  readonly el = h('p', { class: 'config-changes small', id: 'config-changes', hidden: true });
  private seen = -1;

  render(store: Store): void {
    if (store.rev.config === this.seen) return;
    this.seen = store.rev.config;
    const list = store.configChanges;
    this.el.hidden = list.length === 0;
    clear(this.el);
    this.el.append(h('span', { class: 'muted' }, 'Config changes (dashed on the charts): '));
    list.forEach((c, i) => {
      const [v, rest] = changeText(c).split(/: (.*)/s);
      this.el.append(
        h(
          'span',
          { class: 'cfg-change', 'data-version': c.version, title: fmtTime(c.time) },
          h('b', {}, v),
          `: ${rest}`,
        ),
        i < list.length - 1 ? '; ' : '',
      );
    });
  }
}
