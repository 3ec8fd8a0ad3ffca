// Admin controls. The token is entered once and kept in sessionStorage (this tab only);
// every action shows the server's answer verbatim. Nothing here changes the page's data
// optimistically: after an accepted action the status is re-read from the server.

import { api, type ApiAnswer } from './api.ts';
import { clear, h, setText } from './dom.ts';
import type { RunConfig } from '../../core/api.ts';
import { DOWNLINK_ENCODINGS, ENCODINGS } from '../../core/codec/encodings.ts';
import { type ADMIN_KNOBS, knobHelp, knobSchema } from '../../core/run-config.ts';
import { rangeText } from '../../core/schema-walk.ts';
import { errorText } from './run-panel.ts';
import type { Store } from './store.ts';

export const TOKEN_KEY = 'atoll.dashboard.adminToken';

interface Field {
  /** Key in the PATCH /api/admin/config body: a live knob (core/run-config.ts ADMIN_KNOBS). */
  key: AdminKnob;
  label: string;
  /** The current value, from /api/run's config, as the form shows it. */
  get: (c: RunConfig) => number | string;
  kind: 'number' | 'select';
  step?: string;
  options?: string[];
  hint?: string;
}

type AdminKnob = (typeof ADMIN_KNOBS)[number];
const rangeOf = (k: AdminKnob) => rangeText(knobSchema(k));

export const CONFIG_FIELDS: Field[] = [
  {
    key: 'outerLr',
    label: 'Outer learning rate',
    get: (c) => c.coordinator.outer.lr,
    kind: 'number',
    step: 'any',
    hint: 'DiLoCo 0.7 · FedAvg 1.0',
  },
  {
    key: 'outerMomentum',
    label: 'Outer momentum',
    get: (c) => c.coordinator.outer.momentum,
    kind: 'number',
    step: 'any',
    hint: 'Nesterov; DiLoCo 0.9',
  },
  {
    key: 'innerLr',
    label: 'Inner learning rate (peak)',
    get: (c) => c.coordinator.innerLr.maxLr,
    kind: 'number',
    step: 'any',
    hint: 'AdamW; from the next assignment',
  },
  {
    key: 'innerMinLr',
    label: 'Inner lr floor',
    get: (c) => c.coordinator.innerLr.minLr,
    kind: 'number',
    step: 'any',
    hint: 'end of the cosine over the budget',
  },
  {
    key: 'innerWarmupTokens',
    label: 'Inner lr warmup (tokens)',
    get: (c) => c.coordinator.innerLr.warmupTokens,
    kind: 'number',
    step: '1',
    hint: 'linear, from the run\u2019s start',
  },
  {
    key: 'weightDecay',
    label: 'Weight decay',
    get: (c) => c.coordinator.innerLr.weightDecay ?? 0.1,
    kind: 'number',
    step: 'any',
    hint: 'AdamW, decoupled',
  },
  {
    key: 'batch',
    label: 'Batch (sequences)',
    get: (c) => c.coordinator.batchSize,
    kind: 'number',
    step: '1',
    hint: 'islands that chose none, within their cap',
  },
  {
    key: 'totalTokens',
    label: 'Token budget',
    get: (c) => c.coordinator.totalTokens,
    kind: 'number',
    step: '1',
    hint: '0 = open-ended; larger trains on',
  },
  {
    key: 'roundTime',
    label: 'Target round time (s)',
    get: (c) => +(c.coordinator.targetRoundMs / 1000).toPrecision(12),
    kind: 'number',
    step: 'any',
    hint: '0 = fixed inner steps',
  },
  {
    key: 'innerSteps',
    label: 'Inner steps (H)',
    get: (c) => c.coordinator.innerSteps,
    kind: 'number',
    step: '1',
    hint: 'of the fastest island',
  },
  {
    key: 'quorum',
    label: 'Quorum',
    get: (c) => c.coordinator.quorum,
    kind: 'number',
    step: 'any',
    hint: 'sync: share of members, 0–1',
  },
  {
    key: 'maxStaleness',
    label: 'Max staleness',
    get: (c) => c.coordinator.maxStaleness,
    kind: 'number',
    step: '1',
    hint: 'versions; older Δs → E_STALE',
  },
  {
    key: 'codec',
    label: 'Codec (uplink Δ)',
    get: (c) => c.coordinator.uplink.encoding,
    kind: 'select',
    options: [...ENCODINGS],
    hint: 'islands\u2019 delta encoding',
  },
  {
    key: 'downlink',
    label: 'Downlink (update)',
    get: (c) => c.coordinator.downlink.encoding,
    kind: 'select',
    options: [...DOWNLINK_ENCODINGS],
    hint: 'the server\u2019s update; after Codec',
  },
];

function readField(el: HTMLInputElement | HTMLSelectElement): string {
  return el instanceof HTMLInputElement && el.type === 'checkbox' ? String(el.checked) : el.value.trim();
}

function writeField(el: HTMLInputElement | HTMLSelectElement, v: string): void {
  if (el instanceof HTMLInputElement && el.type === 'checkbox') el.checked = v === 'true';
  else el.value = v;
}

export class AdminPanel {
  readonly el: HTMLElement;
  private tokenInput: HTMLInputElement;
  private tokenState = h('p', { id: 'admin-token-state', class: 'token-state', 'aria-live': 'polite' });
  private gateNote = h('p', { id: 'admin-gate', class: 'gate' });
  private answer = h(
    'div',
    { id: 'admin-answer', class: 'answer', role: 'status', 'aria-live': 'polite' },
    'No action yet.',
  );
  private log = h('ol', { id: 'admin-log', class: 'log' });
  private controls: Array<HTMLButtonElement | HTMLInputElement | HTMLSelectElement> = [];
  private inputs = new Map<string, HTMLInputElement | HTMLSelectElement>();
  private banInput: HTMLInputElement;
  private banReason: HTMLInputElement;
  private banList = h('datalist', { id: 'ban-candidates' });
  private pausedState = h('span', { id: 'admin-paused' });
  private prefilled = '';
  private verdict: 'unknown' | 'accepted' | 'refused' = 'unknown';
  private banSig = '';

  constructor(
    private store: Store,
    private afterAction: () => void,
  ) {
    this.tokenInput = h('input', {
      type: 'password',
      id: 'admin-token',
      autocomplete: 'off',
      placeholder: 'admin token',
      'aria-label': 'Admin token',
    });
    const saveBtn = h('button', { type: 'submit', id: 'admin-token-save' }, 'Use token');
    const forgetBtn = h('button', { type: 'button', id: 'admin-token-forget' }, 'Forget');
    forgetBtn.addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      this.tokenInput.value = '';
      this.verdict = 'unknown';
      this.sync();
    });
    const tokenForm = h('form', { class: 'toolbar', id: 'admin-token-form' }, this.tokenInput, saveBtn, forgetBtn);
    tokenForm.addEventListener('submit', (e) => {
      e.preventDefault();
      const t = this.tokenInput.value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      else sessionStorage.removeItem(TOKEN_KEY);
      this.tokenInput.value = '';
      this.verdict = 'unknown';
      this.sync();
      void this.checkToken();
    });

    const btn = (id: string, label: string, fn: () => void, cls = '') => {
      const b = h('button', { type: 'button', id, class: cls }, label);
      b.addEventListener('click', fn);
      this.controls.push(b);
      return b;
    };
    const pauseBtn = btn('admin-pause', 'Pause training', () => void this.act('pause', 'POST', '/api/admin/pause'));
    const resumeBtn = btn(
      'admin-resume',
      'Resume training',
      () => void this.act('resume', 'POST', '/api/admin/resume'),
    );
    const ckBtn = btn(
      'admin-checkpoint',
      'Checkpoint now',
      () => void this.act('checkpoint', 'POST', '/api/admin/checkpoint'),
    );

    const rows = CONFIG_FIELDS.map((f) => {
      const id = `cfg-${f.key}`;
      const input =
        f.kind === 'select'
          ? h(
              'select',
              { id, name: f.key },
              h('option', { value: '' }, '–'),
              ...(f.options ?? []).map((o) => h('option', { value: o }, o)),
            )
          : h('input', { type: f.kind, id, name: f.key, step: f.step ?? null, autocomplete: 'off' });
      this.inputs.set(f.key, input);
      this.controls.push(input);
      return h(
        'div',
        { class: `field ${f.kind}` },
        h('label', { for: id }, f.label),
        input,
        h('span', { class: 'hint', title: knobHelp(f.key) }, `${f.hint ?? ''} (${rangeOf(f.key)})`),
      );
    });
    const applyBtn = h('button', { type: 'submit', id: 'admin-config-apply', class: 'primary' }, 'Apply changes');
    this.controls.push(applyBtn);
    const cfgForm = h('form', { id: 'admin-config', class: 'fields' }, ...rows, h('div', { class: 'field' }, applyBtn));
    cfgForm.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.applyConfig();
    });

    this.banInput = h('input', {
      type: 'text',
      id: 'admin-ban-id',
      list: 'ban-candidates',
      placeholder: 'island id',
      autocomplete: 'off',
      'aria-label': 'Island id to ban',
    });
    this.banInput.addEventListener('input', () => this.suggest());
    this.banInput.addEventListener('focus', () => this.suggest());
    this.banReason = h('input', {
      type: 'text',
      id: 'admin-ban-reason',
      placeholder: 'reason (optional)',
      autocomplete: 'off',
      'aria-label': 'Ban reason',
    });
    const banBtn = h('button', { type: 'submit', id: 'admin-ban', class: 'danger' }, 'Ban island');
    this.controls.push(this.banInput, this.banReason, banBtn);
    const banForm = h(
      'form',
      { class: 'toolbar', id: 'admin-ban-form' },
      this.banInput,
      this.banReason,
      banBtn,
      this.banList,
    );
    banForm.addEventListener('submit', (e) => {
      e.preventDefault();
      const id = this.banInput.value.trim();
      if (!id) {
        this.show('ban', { ok: false, status: 0, body: 'Enter an island id first.' }, true);
        return;
      }
      const reason = this.banReason.value.trim();
      void this.act(`ban ${id}`, 'POST', `/api/admin/islands/${encodeURIComponent(id)}/ban`, reason ? { reason } : {});
    });

    this.el = h(
      'div',
      { class: 'admin' },
      h('section', { class: 'card wide' }, h('h2', {}, 'Last server answer'), this.answer),
      h(
        'section',
        { class: 'card' },
        h('h2', {}, 'Admin token'),
        tokenForm,
        this.tokenState,
        h(
          'p',
          { class: 'muted small' },
          'Kept in this tab\u2019s sessionStorage only and sent as Authorization: Bearer. ' +
            'The server checks it on every action.',
        ),
      ),
      h(
        'section',
        { class: 'card' },
        h('h2', {}, 'Training'),
        this.gateNote,
        h('div', { class: 'toolbar' }, pauseBtn, resumeBtn, ckBtn, h('span', { class: 'spacer' }), this.pausedState),
      ),
      h(
        'section',
        { class: 'card' },
        h('h2', {}, 'Hyperparameters'),
        cfgForm,
        h(
          'p',
          { class: 'muted small' },
          'Only the fields you change are sent (PATCH /api/admin/config); ' +
            'the form then shows the server\u2019s config.',
        ),
      ),
      h('section', { class: 'card' }, h('h2', {}, 'Ban an island'), banForm),
      h('section', { class: 'card wide' }, h('h2', {}, 'All answers this session'), this.log),
    );
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) this.verdict = 'unknown';
    this.sync();
    if (saved) void this.checkToken();
  }

  /** Asks the server whether the token is right (GET /api/admin/whoami changes nothing). */
  private async checkToken(): Promise<void> {
    const token = this.token();
    if (!token) return;
    const r = await api('/api/admin/whoami', { headers: { authorization: `Bearer ${token}` } });
    if (token !== this.token()) return; // replaced meanwhile
    if (r.status === 401 || r.status === 403) this.verdict = 'refused';
    else if (r.ok) this.verdict = 'accepted';
    this.sync();
  }

  token(): string | null {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  private sync(): void {
    const has = !!this.token();
    // Usable only once the server accepted the token (GET /api/admin/whoami): a refused one keeps them disabled.
    for (const c of this.controls) c.disabled = !has || this.verdict !== 'accepted';
    setText(
      this.tokenState,
      !has
        ? 'No token entered.'
        : this.verdict === 'accepted'
          ? 'Token set; the server accepted it.'
          : this.verdict === 'refused'
            ? 'Token set, but the server refused it. Enter the right one.'
            : 'Token set for this tab; the server checks it on the first action.',
    );
    this.tokenState.dataset.verdict = has ? this.verdict : 'none';
    setText(
      this.gateNote,
      !has
        ? 'Admin controls are disabled: enter the admin token above.'
        : this.verdict === 'refused'
          ? 'Admin controls are disabled: the server refused this token.'
          : this.verdict === 'unknown'
            ? 'Checking the token with the server…'
            : '',
    );
  }

  render(store: Store): void {
    const s = store.status;
    setText(this.pausedState, s ? (s.paused ? 'Training is paused.' : 'Training is running.') : '');
    this.pausedState.dataset.paused = String(!!s?.paused);
    // Prefill the config form from /api/run once per run revision, without clobbering edits.
    const sig = String(store.rev.run);
    if (store.run && sig !== this.prefilled) {
      this.prefilled = sig;
      for (const f of CONFIG_FIELDS) {
        const input = this.inputs.get(f.key)!;
        const v = String(f.get(store.run.config));
        const edited = readField(input) !== (input.dataset.initial ?? '');
        input.dataset.initial = v;
        if (!edited && document.activeElement !== input) writeField(input, v);
      }
    }
  }

  /** Ban suggestions: the first 50 islands matching what is typed (never 1,000 <option>s). */
  private suggest(): void {
    const q = this.banInput.value.trim().toLowerCase();
    const sig = `${q}/${this.store.rev.islands}`;
    if (sig === this.banSig) return;
    this.banSig = sig;
    const opts: HTMLOptionElement[] = [];
    for (const i of this.store.islands.values()) {
      if (q && !i.id.toLowerCase().includes(q) && !i.name.toLowerCase().includes(q)) continue;
      opts.push(h('option', { value: i.id }, `${i.name} · ${i.engine || '?'} · ${i.status || '?'}`));
      if (opts.length >= 50) break;
    }
    this.banList.replaceChildren(...opts);
  }

  private async applyConfig(): Promise<void> {
    const patch: Record<string, number | string> = {};
    const changed: Array<[Field, string]> = [];
    for (const f of CONFIG_FIELDS) {
      const input = this.inputs.get(f.key)!;
      const v = readField(input);
      if (v === (input.dataset.initial ?? '') || v === '') continue;
      if (f.kind === 'number' && !Number.isFinite(Number(v))) {
        this.show('config', { ok: false, status: 0, body: `${f.label}: '${v}' is not a number.` }, true);
        return;
      }
      patch[f.key] = f.kind === 'number' ? Number(v) : v;
      changed.push([f, v]);
    }
    if (changed.length === 0) {
      this.show('config', { ok: false, status: 0, body: 'Nothing changed: edit a field first.' }, true);
      return;
    }
    const r = await this.act(`config ${JSON.stringify(patch)}`, 'PATCH', '/api/admin/config', patch);
    // Accepted: the server's config is the truth now; the form re-reads it from /api/run.
    if (r?.ok) for (const [f, v] of changed) this.inputs.get(f.key)!.dataset.initial = v;
  }

  private async act(label: string, method: string, path: string, body?: object): Promise<ApiAnswer | null> {
    const token = this.token();
    if (!token) {
      this.show(label, { ok: false, status: 0, body: 'No admin token: nothing was sent.' }, true);
      return null;
    }
    for (const c of this.controls) c.disabled = true;
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await api(path, { method, headers, body: body !== undefined ? JSON.stringify(body) : undefined });
    if (r.status === 401 || r.status === 403) this.verdict = 'refused';
    else if (r.ok) this.verdict = 'accepted';
    this.show(label, r);
    this.sync();
    if (r.ok) this.afterAction();
    return r;
  }

  private show(label: string, r: ApiAnswer, local = false): void {
    const refused = r.status === 401 || r.status === 403;
    const head = local
      ? 'not sent'
      : r.status === 0
        ? 'no answer'
        : `${r.status}${r.ok ? ' OK' : refused ? ' refused' : ' error'}`;
    const detail = r.ok ? (typeof r.body === 'string' ? r.body : JSON.stringify(r.body)) : errorText(r.body);
    const cls = r.ok ? 'ok' : refused ? 'refused' : 'err';
    this.answer.className = `answer ${cls}`;
    this.answer.dataset.status = String(r.status);
    clear(this.answer);
    this.answer.append(
      h('strong', {}, `${label}: ${head}`),
      ' ',
      h('span', { class: 'mono' }, (detail ?? '').slice(0, 500)),
      ...(refused ? [h('span', { class: 'refusal' }, ' — the server refused this token; nothing was changed.')] : []),
    );
    const li = h(
      'li',
      { class: cls },
      h('time', {}, new Date().toLocaleTimeString(undefined, { hour12: false })),
      ` ${label}: ${head} `,
      h('span', { class: 'mono' }, (detail ?? '').slice(0, 300)),
    );
    this.log.prepend(li);
    while (this.log.children.length > 30) this.log.lastElementChild!.remove();
  }
}
