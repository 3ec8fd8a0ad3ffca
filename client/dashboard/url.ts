// View state that lives in the URL hash, so a link or a reload restores the view:
//   /dashboard#tab=islands&sort=tokens&dir=desc&q=alice&status=online&page=2&x=tokens&log=1
//   /dashboard#island=ID opens the island view of one island

export const TABS = ['overview', 'islands', 'leaderboard', 'run', 'admin'] as const;
export type Tab = (typeof TABS)[number];
export type XAxis = 'time' | 'tokens';
export type SortDir = 'asc' | 'desc';

export interface ViewState {
  tab: Tab;
  sort: string;
  dir: SortDir;
  q: string;
  status: string; // '' = all
  page: number; // 1-based
  size: number; // rows per page
  x: XAxis;
  smooth: number; // EMA weight for train loss, 0..0.99
  log: boolean; // the loss chart on a log y axis
  island: string; // '' = none; else the island view of that id
}

export const DEFAULT_VIEW: ViewState = {
  tab: 'overview',
  sort: 'tokens',
  dir: 'desc',
  q: '',
  status: '',
  page: 1,
  size: 50,
  x: 'time',
  smooth: 0.6,
  log: false,
  island: '',
};

export const PAGE_SIZES = [25, 50, 100, 250];
export const SMOOTHINGS = [0, 0.6, 0.9, 0.97];

export function parseView(hash: string): ViewState {
  const p = new URLSearchParams(hash.replace(/^#/, ''));
  const v: ViewState = { ...DEFAULT_VIEW };
  const tab = p.get('tab');
  if (tab && (TABS as readonly string[]).includes(tab)) v.tab = tab as Tab;
  const sort = p.get('sort');
  if (sort && /^[a-z]{1,20}$/i.test(sort)) v.sort = sort;
  const dir = p.get('dir');
  if (dir === 'asc' || dir === 'desc') v.dir = dir;
  v.q = (p.get('q') ?? '').slice(0, 200);
  v.status = (p.get('status') ?? '').slice(0, 40);
  const page = Number(p.get('page'));
  if (Number.isInteger(page) && page >= 1) v.page = page;
  const size = Number(p.get('size'));
  if (PAGE_SIZES.includes(size)) v.size = size;
  const x = p.get('x');
  if (x === 'time' || x === 'tokens') v.x = x;
  const smooth = p.get('smooth');
  if (smooth !== null && SMOOTHINGS.includes(Number(smooth))) v.smooth = Number(smooth);
  v.log = p.get('log') === '1';
  v.island = (p.get('island') ?? '').slice(0, 64);
  return v;
}

export function serializeView(v: ViewState): string {
  const p = new URLSearchParams();
  const d = DEFAULT_VIEW;
  p.set('tab', v.tab);
  if (v.sort !== d.sort) p.set('sort', v.sort);
  if (v.dir !== d.dir) p.set('dir', v.dir);
  if (v.q) p.set('q', v.q);
  if (v.status) p.set('status', v.status);
  if (v.page !== 1) p.set('page', String(v.page));
  if (v.size !== d.size) p.set('size', String(v.size));
  if (v.x !== d.x) p.set('x', v.x);
  if (v.smooth !== d.smooth) p.set('smooth', String(v.smooth));
  if (v.log) p.set('log', '1');
  if (v.island) p.set('island', v.island);
  return '#' + p.toString();
}
