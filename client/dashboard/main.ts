// Atoll dashboard: live view of one training run for the researchers who run it.
//
// Data flows socket.io /dashboard (or REST polling) → Store (normalised, revisioned)
// → one coalesced render at most every 500 ms, inside requestAnimationFrame, that
// touches only the visible tab. View state (tab, sort, filter, page, x-axis) is in the
// URL hash, so links and reloads restore the view.

import './dashboard.css';
import { AdminPanel } from './admin.ts';
import { LiveSource, type Connection } from './api.ts';
import { Charts } from './charts.ts';
import { DataPanel } from './data-panel.ts';
import { $, h, setAttr, setText } from './dom.ts';
import { fmtAgo } from './format.ts';
import { Headline } from './headline.ts';
import { IslandPanel } from './island-view.ts';
import { IslandsTable } from './islands-table.ts';
import { Leaderboard } from './leaderboard.ts';
import { ChangesList, OverlayControl } from './overview-tools.ts';
import { RunPanel } from './run-panel.ts';
import { Store } from './store.ts';
import { parseView, serializeView, SMOOTHINGS, TABS, type Tab, type ViewState } from './url.ts';

/** At most two renders a second, whatever the message rate. */
export const MIN_RENDER_INTERVAL_MS = 500;

const TAB_LABELS: Record<Tab, string> = {
  overview: 'Overview',
  islands: 'Islands',
  leaderboard: 'Leaderboard',
  run: 'Run',
  admin: 'Admin',
};

const store = new Store();
const source = new LiveSource(store);
let view: ViewState = parseView(location.hash);

// ---------------------------------------------------------------- instrumentation (read by the e2e tests)
const perf = { renders: 0, renderMs: [] as number[], maxRenderMs: 0 };
(window as unknown as { __atollDashboard: unknown }).__atollDashboard = {
  perf,
  get view() {
    return view;
  },
  get connection() {
    return source.connection;
  },
  get messages() {
    return source.messages;
  },
  get islands() {
    return store.islands.size;
  },
  get historyPoints() {
    return store.history.length;
  },
  get status() {
    return store.status;
  },
  get lastPoint() {
    return store.history[store.history.length - 1] ?? null;
  },
};

// ---------------------------------------------------------------- layout
const app = $('#app');
const connDot = h(
  'span',
  { class: 'conn', id: 'connection', 'data-state': 'connecting', role: 'status', 'aria-live': 'polite' },
  'connecting…',
);
const runName = h('span', { class: 'run-name', id: 'header-run' }, '');
const modeBadge = h('span', { class: 'badge', id: 'header-mode', hidden: true });
const pausedBadge = h('span', { class: 'badge warn', id: 'header-paused', hidden: true }, 'paused');
const doneBadge = h(
  'span',
  { class: 'badge', id: 'header-done', hidden: true, title: 'the run reached its token budget' },
  'finished',
);
const updated = h('span', { class: 'muted small', id: 'header-updated' });
const headline = new Headline();

const tabButtons = new Map<Tab, HTMLButtonElement>();
const panels = new Map<Tab, HTMLElement>();
const tablist = h('nav', { class: 'tabs', role: 'tablist', 'aria-label': 'Dashboard sections' });
for (const t of TABS) {
  const b = h(
    'button',
    { type: 'button', role: 'tab', id: `tab-${t}`, 'aria-controls': `panel-${t}`, 'data-tab': t },
    TAB_LABELS[t],
  );
  b.addEventListener('click', () => setView({ tab: t, island: '' }, true));
  b.addEventListener('keydown', (e) => {
    const i = TABS.indexOf(t);
    let next: Tab | null = null;
    if (e.key === 'ArrowRight') next = TABS[(i + 1) % TABS.length];
    else if (e.key === 'ArrowLeft') next = TABS[(i + TABS.length - 1) % TABS.length];
    else if (e.key === 'Home') next = TABS[0];
    else if (e.key === 'End') next = TABS[TABS.length - 1];
    if (next) {
      e.preventDefault();
      setView({ tab: next }, true);
      tabButtons.get(next)!.focus();
    }
  });
  tabButtons.set(t, b);
  tablist.appendChild(b);
  panels.set(
    t,
    h('section', {
      class: 'panel',
      role: 'tabpanel',
      id: `panel-${t}`,
      'aria-labelledby': `tab-${t}`,
      tabindex: 0,
      hidden: true,
    }),
  );
}

// overview: x-axis toggle + smoothing + charts
const xToggle = h('div', { class: 'segmented', role: 'radiogroup', 'aria-label': 'Chart x axis' });
for (const x of ['time', 'tokens'] as const) {
  const id = `x-${x}`;
  const input = h('input', { type: 'radio', name: 'xaxis', id, value: x });
  input.addEventListener('change', () => {
    if (input.checked) setView({ x });
  });
  xToggle.append(input, h('label', { for: id }, x === 'time' ? 'vs time' : 'vs tokens'));
}
const smoothSelect = h(
  'select',
  { id: 'smoothing', 'aria-label': 'Train loss smoothing' },
  ...SMOOTHINGS.map((s) => h('option', { value: String(s) }, s === 0 ? 'no smoothing' : `EMA ${s}`)),
);
smoothSelect.addEventListener('change', () => setView({ smooth: Number(smoothSelect.value) }));
const logBox = h('input', { type: 'checkbox', id: 'loss-log' });
logBox.addEventListener('change', () => setView({ log: logBox.checked }));
const overlay = new OverlayControl(store);
const changesList = new ChangesList();
const chartGrid = h('div', { class: 'charts', id: 'charts' });
panels
  .get('overview')!
  .append(
    h(
      'div',
      { class: 'toolbar' },
      h('span', { class: 'muted' }, 'x axis'),
      xToggle,
      h('span', { class: 'muted' }, 'train loss'),
      smoothSelect,
      h('label', { class: 'check' }, logBox, 'log loss axis'),
      overlay.el,
    ),
    changesList.el,
    chartGrid,
  );
const charts = new Charts(chartGrid, () => invalidate(true));

const table = new IslandsTable(() => view, setView);
panels.get('islands')!.append(table.el);
const leaderboard = new Leaderboard();
panels.get('leaderboard')!.append(leaderboard.el);
const runPanel = new RunPanel(async () => {
  await Promise.all([source.refreshCheckpoints(), source.refreshRun()]);
});
panels.get('run')!.append(runPanel.el);
const dataPanel = new DataPanel();
panels.get('run')!.append(dataPanel.el);
const admin = new AdminPanel(store, () => {
  void source.refreshStatus();
  void source.refreshHistory(); // a config change: its marker
  void source.refreshCheckpoints();
  void source.refreshRun();
});
panels.get('admin')!.append(admin.el);
const islandPanel = new IslandPanel(() => setView({ island: '' }, true));
const islandSection = h(
  'section',
  { class: 'panel', id: 'panel-island', 'aria-label': 'Island', hidden: true },
  islandPanel.el,
);

app.replaceChildren(
  h(
    'header',
    { class: 'top' },
    h('h1', {}, 'Atoll'),
    runName,
    modeBadge,
    pausedBadge,
    doneBadge,
    h('span', { class: 'spacer' }),
    updated,
    connDot,
  ),
  headline.el,
  tablist,
  ...panels.values(),
  islandSection,
);

// ---------------------------------------------------------------- view state
function setView(patch: Partial<ViewState>, push = false): void {
  const next = { ...view, ...patch };
  const hash = serializeView(next);
  const changedTab = next.tab !== view.tab;
  view = next;
  if (hash !== location.hash) {
    if (push) history.pushState(null, '', hash);
    else history.replaceState(null, '', hash);
  }
  if (changedTab && view.tab === 'overview') charts.invalidate();
  if (changedTab && view.tab === 'run') void source.refreshCheckpoints();
  invalidate(true);
}

window.addEventListener('hashchange', () => {
  view = parseView(location.hash);
  charts.invalidate();
  invalidate(true);
});
window.addEventListener('popstate', () => {
  view = parseView(location.hash);
  charts.invalidate();
  invalidate(true);
});
// Canonical hash from the start (so a copied link always carries the tab).
if (location.hash !== serializeView(view)) history.replaceState(null, '', serializeView(view));

// ---------------------------------------------------------------- render loop
let scheduled = false;
let urgent = false;
let lastRender = -Infinity;
let timer: ReturnType<typeof setTimeout> | null = null;

/** Coalesces: whatever arrives, at most one render per MIN_RENDER_INTERVAL_MS (user actions: next frame). */
function invalidate(now = false): void {
  if (now) urgent = true;
  if (scheduled && !(now && timer)) return;
  if (timer) {
    clearTimeout(timer);
    timer = null;
  }
  scheduled = true;
  const wait = urgent ? 0 : Math.max(0, lastRender + MIN_RENDER_INTERVAL_MS - performance.now());
  timer = setTimeout(() => {
    timer = null;
    requestAnimationFrame(frame);
  }, wait);
}

function frame(): void {
  scheduled = false;
  urgent = false;
  lastRender = performance.now();
  const t0 = performance.now();
  render();
  const ms = performance.now() - t0;
  perf.renders++;
  perf.renderMs.push(ms);
  if (perf.renderMs.length > 200) perf.renderMs.shift();
  if (ms > perf.maxRenderMs) perf.maxRenderMs = ms;
}

let renderedTab: Tab | null = null;

function render(): void {
  const now = Date.now();
  // The frame that reveals a tab only shows it; heavy first builds (charts) start next frame.
  const revealed = renderedTab !== view.tab;
  renderedTab = view.tab;
  const s = store.status;
  setText(runName, s?.run ?? '');
  modeBadge.hidden = !s?.mode;
  setText(modeBadge, s?.mode ?? '');
  pausedBadge.hidden = !s?.paused;
  doneBadge.hidden = !s?.done;
  setText(updated, store.statusAt ? `updated ${fmtAgo(store.statusAt, now)}` : '');
  headline.render(store);
  for (const t of TABS) {
    const active = t === view.tab;
    const b = tabButtons.get(t)!;
    setAttr(b, 'aria-selected', String(active));
    setAttr(b, 'tabindex', active ? '0' : '-1');
    panels.get(t)!.hidden = !active || !!view.island;
  }
  islandSection.hidden = !view.island;
  islandPanel.changes = store.configChanges;
  islandPanel.show(view.island);
  if (view.island) return;
  for (const input of xToggle.querySelectorAll('input')) input.checked = input.value === view.x;
  if (smoothSelect.value !== String(view.smooth)) smoothSelect.value = String(view.smooth);
  logBox.checked = view.log;
  switch (view.tab) {
    case 'overview':
      if (revealed) {
        charts.invalidate();
        invalidate(true);
      } else {
        charts.render(store, view.x, view.smooth, view.log);
        changesList.render(store);
      }
      break;
    case 'islands':
      table.render(store, now);
      break;
    case 'leaderboard':
      leaderboard.render(store, now);
      break;
    case 'run':
      runPanel.render(store);
      dataPanel.render(store);
      break;
    case 'admin':
      admin.render(store);
      break;
  }
}

function showConnection(c: Connection): void {
  connDot.dataset.state = c;
  setText(connDot, c === 'live' ? 'live' : c === 'polling' ? 'polling' : c === 'offline' ? 'offline' : 'connecting…');
  setAttr(
    connDot,
    'title',
    c === 'live'
      ? 'socket.io /dashboard stream'
      : c === 'polling'
        ? 'socket down: polling the REST API every 2 s'
        : c === 'offline'
          ? 'no answer from the server: retrying'
          : '',
  );
}

store.onChange(() => invalidate());
source.onConnection = (c) => {
  showConnection(c);
  invalidate();
};
setInterval(() => invalidate(), 1000); // "last seen" / "updated" clocks
void source.start();
invalidate(true);
