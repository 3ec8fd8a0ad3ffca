// The volunteer page's DOM handles: every element it renders into, by id, and a text setter that skips no-op writes.

function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el as T;
}

/** Elements by id, under the keys given: `{ key: 'element-id' }`. */
function byIds<K extends string>(ids: Record<K, string>): Record<K, HTMLElement> {
  return Object.fromEntries(Object.entries<string>(ids).map(([k, id]) => [k, $(id)])) as Record<K, HTMLElement>;
}

// the page's sections, one line each: run, costs, GPU check, credit, live view, round, stats, samples
export const ui = {
  ...byIds({ runName: 'run-name', runDesc: 'run-description' }),
  ...byIds({
    costGpu: 'cost-gpu',
    costDown: 'cost-down',
    costUp: 'cost-up',
    costHour: 'cost-hour',
    costMem: 'cost-mem',
    savedModel: 'saved-model',
    savedModelText: 'saved-model-text',
    forgetModel: 'forget-model',
  }),
  ...byIds({
    gpuStatus: 'gpu-status',
    gpuStatusText: 'gpu-status-text',
    cpuOptin: 'cpu-optin',
    gpuHelp: 'gpu-missing-help',
  }),
  useCpu: $<HTMLInputElement>('use-cpu'),
  start: $<HTMLButtonElement>('start'),
  pause: $<HTMLButtonElement>('pause'),
  capRadios: Array.from(document.querySelectorAll<HTMLInputElement>('input[name="cap"]')),
  pauseHidden: $<HTMLInputElement>('pause-hidden'),
  displayName: $<HTMLInputElement>('display-name'),
  saveName: $<HTMLButtonElement>('save-name'),
  ...byIds({
    contributorId: 'contributor-id',
    crTokens: 'cr-tokens',
    crComputed: 'cr-computed',
    crAccepted: 'cr-accepted',
    crRank: 'cr-rank',
  }),
  ...byIds({ live: 'live', conn: 'conn', connText: 'conn-text', phaseText: 'phase-text' }),
  phases: Array.from(document.querySelectorAll<HTMLLIElement>('#phases li')),
  ...byIds({
    phTraining: 'ph-training',
    phUploading: 'ph-uploading',
    busyNote: 'busy-note',
    deviceName: 'device-name',
    deviceSpeed: 'device-speed',
  }),
  ...byIds({
    roundSteps: 'round-steps',
    roundEta: 'round-eta',
    roundProgress: 'round-progress',
    roundFill: 'round-fill',
  }),
  ...byIds({
    sVersion: 's-version',
    sEval: 's-eval',
    sLoss: 's-loss',
    sSpeed: 's-speed',
    sTokens: 's-tokens',
    sRounds: 's-rounds',
    sUp: 's-up',
    sDown: 's-down',
  }),
  ...byIds({ lossChart: 'loss-chart', rejection: 'rejection', log: 'log' }),
  samplePrompt: $<HTMLInputElement>('sample-prompt'),
  sampleGo: $<HTMLButtonElement>('sample-go'),
  ...byIds({ sampleOut: 'sample-out', sampleMeta: 'sample-meta' }),
};

/** Sets text only when it changed (no needless layout work at 10 Hz). */
export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}
