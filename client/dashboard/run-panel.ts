// Run panel: description and configuration, checkpoints with download links, and a
// sample from the current global model.

import type { RunInfo, SampleResponse } from '../../core/api.ts';
import { api } from './api.ts';
import { clear, h, setText } from './dom.ts';
import { fmtBytes, fmtInt, fmtSI, fmtTime } from './format.ts';
import type { Store } from './store.ts';

type Dict = Record<string, unknown>;

/** The longest sample the server gives (GET /api/sample refuses more: E_BAD_REQUEST naming it). */
const SAMPLE_MAX = 256;

function isDict(v: unknown): v is Dict {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Flattens nested config into [dotted.key, value] rows. */
export function flatten(o: object, prefix = '', out: Array<[string, string]> = []): Array<[string, string]> {
  for (const [k, v] of Object.entries(o)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (isDict(v)) flatten(v, key, out);
    else out.push([key, Array.isArray(v) ? JSON.stringify(v) : String(v)]);
  }
  return out;
}

/** The run in words and units: [what, value] rows. */
export function runFacts(r: RunInfo): Array<[string, string]> {
  const m = r.model;
  const c = r.codec;
  const o = r.outer;
  return [
    ['Model', `GPT-2: ${m.nLayer} layers, ${m.nHead} heads, width ${m.nEmbd}, context ${m.blockSize} tokens`],
    ['Parameters', `${fmtSI(r.params)} (${fmtBytes(r.modelBytes)} in fp32)`],
    ['Text', `${r.data.name}: ${fmtBytes(r.data.trainBytes)} to train on, ${fmtBytes(r.data.heldOutBytes)} held out`],
    ['Mode', modeText(r)],
    ['Inner step', `${r.batch} sequences × ${r.seqLen} tokens = ${fmtInt(r.batch * r.seqLen)} tokens`],
    [
      'Inner steps per round',
      r.innerSteps === null
        ? `set per island to fill a ${(r.targetRoundMs / 1000).toFixed(0)} s round`
        : `H = ${r.innerSteps}`,
    ],
    [
      'Codec (Δ upload)',
      c.encoding === 'topk'
        ? `top-k, ${((c.topkFraction ?? 0.01) * 100).toFixed(2)}% of entries`
        : `${c.encoding}${c.blockSize ? `, blocks of ${c.blockSize}` : ''}`,
    ],
    ['Outer optimizer', `${o.kind}, learning rate ${o.lr}, momentum ${o.momentum}`],
    ['Traffic per island and round', `${fmtBytes(r.bytesPerRound.up)} up, ${fmtBytes(r.bytesPerRound.down)} down`],
    ['Largest Δ frame accepted', fmtBytes(r.maxFrameBytes)],
    ['Eval', evalText(r)],
    ['Checkpoints kept', keepText(r.config.checkpoints)],
    ['Protocol version', String(r.protocolVersion)],
  ];
}

/** How the run's outer updates come: per round (sync), per merge window or per arriving Δ (async). */
export function modeText(r: RunInfo): string {
  if (r.mode === 'sync') return 'sync: one outer update per round of all islands';
  const w = r.config.coordinator.asyncWindow;
  if (w.fraction === 0) return 'async: an outer update per arriving Δ';
  const cap = w.capMs > 0 ? `, at most ${(w.capMs / 1000).toFixed(0)} s` : '';
  const window = `a window of ${w.fraction} × the median round${cap}`;
  return `async: the Δs arriving together merge into one outer update (${window})`;
}

/** The eval's size, stated: held-out batches × sequences × the context. */
export function evalText(r: RunInfo): string {
  const e = r.config.eval;
  const tokens = e.batches * e.batchSize * r.model.blockSize;
  const shape = `${e.batches} × ${e.batchSize} × ${r.model.blockSize}`;
  return `held-out loss over ${fmtInt(tokens)} tokens (${shape}; serve --eval-batches)`;
}

/** The checkpoint keep policy in words (server/run/keep-policy.ts; its defaults for older runs). */
export function keepText(c: RunInfo['config']['checkpoints']): string {
  const every = c.every ?? 50;
  return [
    `the last ${c.keep}`,
    ...(every > 0 ? [`the first of every ${every} versions`] : []),
    ...((c.best ?? true) ? ['the best eval'] : []),
  ].join(', ');
}

/** The server's error (core/api.ts ApiError) as one line; a local message as it is. */
export function errorText(body: unknown): string {
  if (isDict(body) && isDict(body.error)) return `${String(body.error.code)}: ${String(body.error.message)}`;
  return typeof body === 'string' ? body.slice(0, 300) : JSON.stringify(body).slice(0, 300);
}

export class RunPanel {
  readonly el: HTMLElement;
  private title = h('h2', { id: 'run-name' }, 'Run');
  private desc = h('p', { class: 'muted', id: 'run-description' });
  private facts = h('tbody');
  private config = h('tbody');
  private ckBody = h('tbody');
  private ckEmpty = h('div', { class: 'empty', id: 'checkpoints-empty', hidden: true }, 'No checkpoints yet.');
  private sampleOut = h('pre', { class: 'sample', id: 'sample-output', 'aria-live': 'polite' });
  private sampleMeta = h('p', { class: 'muted small', id: 'sample-meta' });
  private sampleBtn: HTMLButtonElement;
  private tokensInput: HTMLInputElement;
  private sig = '';

  constructor(private refresh: () => Promise<void>) {
    this.tokensInput = h('input', {
      type: 'number',
      id: 'sample-tokens',
      min: 1,
      max: SAMPLE_MAX,
      value: 200,
      'aria-label': 'Tokens to sample',
    });
    this.tokensInput.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') void this.sample();
    });
    this.sampleBtn = h(
      'button',
      { type: 'button', id: 'sample-button', class: 'primary' },
      'Sample from current model',
    );
    this.sampleBtn.addEventListener('click', () => void this.sample());
    const refreshBtn = h('button', { type: 'button', id: 'checkpoints-refresh' }, 'Refresh');
    refreshBtn.addEventListener('click', () => void this.refresh());
    this.sampleOut.textContent = 'Press the button to generate text from the current global model.';
    const configCard = h(
      'section',
      { class: 'card' },
      this.title,
      this.desc,
      h('table', { class: 'kv', id: 'run-facts' }, h('caption', {}, 'Run'), this.facts),
      h(
        'details',
        { class: 'config', open: true },
        h('summary', {}, 'Full configuration'),
        h('table', { class: 'kv', id: 'run-config' }, this.config),
      ),
    );
    const checkpointsCard = h(
      'section',
      { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', {}, 'Checkpoints'), refreshBtn),
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'grid', id: 'checkpoints-table' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', { class: 'num', scope: 'col' }, 'Version'),
              h('th', { scope: 'col' }, 'Saved'),
              h('th', { class: 'num', scope: 'col' }, 'Size'),
              h('th', { scope: 'col' }, 'Hash'),
              h('th', { scope: 'col' }, 'Kept as'),
              h('th', { scope: 'col' }, 'Download'),
            ),
          ),
          this.ckBody,
        ),
        this.ckEmpty,
      ),
      h(
        'p',
        { class: 'muted small' },
        'Safetensors: npx atoll sample --checkpoint FILE. transformers (.tar): unpack, then ' +
          'GPT2LMHeadModel.from_pretrained(folder) and AutoTokenizer.from_pretrained(folder); ' +
          'the context is limited to the block size.',
      ),
    );
    const sampleCard = h(
      'section',
      { class: 'card' },
      h('h2', {}, 'Sample'),
      h('div', { class: 'toolbar' }, h('label', { for: 'sample-tokens' }, 'Tokens '), this.tokensInput, this.sampleBtn),
      this.sampleOut,
      this.sampleMeta,
    );
    this.el = h('div', { class: 'run' }, configCard, h('div', { class: 'run-side' }, checkpointsCard, sampleCard));
  }

  render(store: Store): void {
    const sig = `${store.rev.run}/${store.rev.checkpoints}`;
    if (sig === this.sig) return;
    this.sig = sig;
    const run = store.run;
    setText(this.title, run?.name ? `Run: ${run.name}` : 'Run');
    setText(this.desc, run?.description ?? (run ? '' : 'Run information is not available yet.'));
    clear(this.facts);
    for (const [k, v] of run ? runFacts(run) : [])
      this.facts.appendChild(h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v)));
    clear(this.config);
    for (const [k, v] of run ? flatten(run.config) : [])
      this.config.appendChild(h('tr', {}, h('th', { scope: 'row' }, k), h('td', {}, v)));
    clear(this.ckBody);
    const cks = store.checkpoints ?? [];
    for (const c of cks) {
      this.ckBody.appendChild(
        h(
          'tr',
          {},
          h('td', { class: 'num' }, fmtInt(c.version)),
          h('td', {}, fmtTime(c.time)),
          h('td', { class: 'num' }, fmtBytes(c.bytes)),
          h('td', { class: 'mono' }, c.hash ? c.hash.slice(0, 12) : '–'),
          h('td', { class: 'kept' }, c.keptFor.join(', ')),
          h(
            'td',
            { class: 'downloads' },
            h('a', { href: c.url, download: c.file, class: 'dl-atoll' }, c.file),
            ' ',
            h(
              'a',
              {
                href: c.hfUrl,
                download: c.hfFile,
                class: 'dl-hf',
                title: 'a transformers GPT-2 folder (GPT2LMHeadModel.from_pretrained), as .tar',
              },
              'transformers (.tar)',
            ),
          ),
        ),
      );
    }
    this.ckEmpty.hidden = cks.length > 0;
  }

  private async sample(): Promise<void> {
    const n = Math.max(1, Math.min(SAMPLE_MAX, Math.round(Number(this.tokensInput.value) || 200)));
    this.sampleBtn.disabled = true;
    setText(this.sampleMeta, 'Sampling…');
    const t0 = performance.now();
    const r = await api(`/api/sample?tokens=${n}`, {}, 60_000);
    this.sampleBtn.disabled = false;
    const ms = Math.round(performance.now() - t0);
    if (!r.ok) {
      this.sampleOut.textContent = '';
      setText(this.sampleMeta, `The server refused (${r.status || 'network'}): ${errorText(r.body)}`);
      return;
    }
    const b = r.body as SampleResponse;
    this.sampleOut.textContent = b.prompt + b.text;
    setText(this.sampleMeta, `${b.tokens} tokens from version ${b.version} in ${ms} ms.`);
  }
}
