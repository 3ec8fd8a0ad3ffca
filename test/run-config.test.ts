// One run config (core/run-config.ts): defaults < --config < flags at start, and on resume the
// stored config in the defaults' place; a fixed knob refused by name with its why; a finished run
// extended by a larger totalTokens trains on; the flags' help and ranges read from the schema.

import { describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator, RUNTIME_KEYS } from '../core/coord/index.ts';
import { CoordinatorConfigSchema } from '../core/coord/config-schema.ts';
import { ErrorCode } from '../core/protocol.ts';
import { ADMIN_KNOBS, KNOBS, type RunConfig, knobHelp } from '../core/run-config.ts';
import { buildRunConfig, resumeRunConfig } from '../server/run/config.ts';
import { knobOption } from '../instruments/knob-flags.ts';

const stored = () => buildRunConfig({ coordinator: { totalTokens: 30_000 } }, { preset: 'tiny', name: 'r' });

describe('the run config on resume', () => {
  it('applies --config over the stored config, then the flags over both', () => {
    const { config, patch } = resumeRunConfig(
      stored(),
      { coordinator: { totalTokens: 60_000, outer: { lr: 0.5 } } },
      { outerMomentum: 0.8 },
    );
    expect(config.coordinator.totalTokens).toBe(60_000);
    expect(config.coordinator.outer).toMatchObject({ lr: 0.5, momentum: 0.8 });
    expect(patch).toMatchObject({ totalTokens: 60_000, outer: { lr: 0.5, momentum: 0.8 } });
    // a flag wins over the file
    expect(
      resumeRunConfig(stored(), { coordinator: { outer: { lr: 0.5 } } }, { outerLr: 0.3 }).config.coordinator.outer.lr,
    ).toBe(0.3);
    // nothing given: nothing changes
    expect(resumeRunConfig(stored(), null, {}).patch).toEqual({});
  });

  it('refuses a knob that cannot change, naming it and why, never dropping it', () => {
    const refuse = (file: object | null, flags: object) => {
      try {
        resumeRunConfig(stored(), file, flags);
        return 'accepted';
      } catch (e) {
        return `${(e as { code: string }).code}: ${(e as Error).message}`;
      }
    };
    expect(refuse(null, { preset: 'small' })).toMatch(/^E_CONFIG_MISMATCH: .*--preset small \(run uses tiny/);
    expect(refuse({ coordinator: { mode: 'sync' } }, {})).toMatch(
      /coordinator\.mode sync \(run uses async: sync rounds/,
    );
    expect(refuse({ coordinator: { seqLen: 16 } }, {})).toMatch(/coordinator\.seqLen 16 \(run uses 32: /);
    expect(refuse(null, { seed: 7 })).toMatch(/--seed 7 \(run uses 1337: θ0 was drawn from it\)/);
    expect(refuse({ model: { vocabSize: 256, blockSize: 32, nLayer: 3, nHead: 2, nEmbd: 32 } }, {})).toMatch(
      /model\.nLayer 3 \(run uses 2: θ's shape/,
    );
    // the same values again are no change
    expect(refuse({ preset: 'tiny', coordinator: { mode: 'async' } }, { preset: 'tiny', seed: 1337 })).toBe('accepted');
  });

  it("the coordinator's fixed keys are the schema's: RUNTIME_KEYS are the rest", () => {
    const fixed = Object.entries(CoordinatorConfigSchema.properties)
      .filter(([, s]) => (s as { fixed?: string }).fixed)
      .map(([k]) => k);
    expect(fixed.sort()).toEqual(['dataSeed', 'maxIslandRecords', 'mode', 'seqLen']);
    const all = Object.keys(CoordinatorConfigSchema.properties);
    expect([...RUNTIME_KEYS].sort()).toEqual(all.filter((k) => !fixed.includes(k)).sort());
  });

  it('a finished run restarted with a larger totalTokens trains on', () => {
    const cfg = buildRunConfig(
      { coordinator: { mode: 'sync', totalTokens: 256, dylu: false, innerSteps: 4, batchSize: 4, seqLen: 16 } },
      { preset: 'tiny', codec: 'f32' },
    );
    const params = new Float32Array(1000).fill(0.01);
    let c = new Coordinator({ params, config: cfg.coordinator, now: 0 });
    const j = c.join({ caps: { engine: 'cpu' } }, 0);
    if (!j.ok) throw new Error(j.error.message);
    const a = j.value.assignment!;
    const meta = {
      islandId: a.islandId,
      roundId: a.roundId,
      baseVersion: a.baseVersion,
      seq: 1,
      steps: a.innerSteps,
      tokens: a.innerSteps * a.batchSize * a.seqLen,
      lossFirst: 3,
      lossLast: 2,
      lossMean: 2.5,
      elapsedMs: 10,
    };
    expect(c.submit({ meta, frame: encodeDelta(new Float32Array(1000).fill(1e-3), { encoding: 'f32' }) }, 1).ok).toBe(
      true,
    );
    c.drainEvents();
    expect(c.nextAssignment(a.islandId, 2)).toMatchObject({ ok: false, error: { code: ErrorCode.DONE } });
    // restart: the stored config with --config {"coordinator":{"totalTokens":60000}}
    const r = Coordinator.restore(c.snapshot());
    if (!r.ok) throw new Error(r.error.message);
    c = r.value;
    const { config, patch } = resumeRunConfig(cfg, { coordinator: { totalTokens: 60_000 } }, {});
    expect(config.coordinator.totalTokens).toBe(60_000);
    expect(c.setConfig(patch).ok).toBe(true);
    const next = c.nextAssignment(a.islandId, 3);
    expect(next.ok).toBe(true);
    expect(next.ok && next.value?.lr.totalTokens).toBe(60_000);
  });
});

describe('the knobs', () => {
  it('every knob has a place in the schema, a description and a range; its flag reads them', () => {
    for (const name of Object.keys(KNOBS) as Array<keyof typeof KNOBS>) expect(knobHelp(name), name).not.toBe(name);
    expect(knobHelp('outerLr')).toBe('outer learning rate, [0, 10]');
    expect(knobHelp('roundTime')).toBe('target round time in seconds (0: fixed inner steps), [0, 86400]');
    const o = knobOption('innerLr');
    expect(o.flags).toBe('--inner-lr <lr>');
    expect(() => o.parseArg?.('11', undefined)).toThrow(/must be a number in \[0, 10\]/);
    expect(knobOption('codec').argChoices).toContain('sparse');
    expect(ADMIN_KNOBS).toEqual(expect.arrayContaining(['innerLr', 'batch', 'totalTokens', 'weightDecay']));
  });
});

describe('the vocabulary of a served run', () => {
  it("is the byte tokenizer's: a model of another vocabulary is refused with a code before any work", () => {
    const why = (file: Parameters<typeof buildRunConfig>[0], flags: Parameters<typeof buildRunConfig>[1]) => {
      try {
        buildRunConfig(file, flags);
        return 'accepted';
      } catch (e) {
        return (e as Error & { code?: string }).code + ': ' + (e as Error).message;
      }
    };
    // a byte corpus under a 1024-wide head would sample ids ≥ 256 and export a vocab_size beside 256 entries
    const tiny = buildRunConfig(null, { preset: 'tiny' }).model;
    expect(why({ model: { ...tiny, vocabSize: 1024 } }, {})).toMatch(/^E_VOCAB_MISMATCH: model.vocabSize 1024/);
    expect(why({ tokenizer: 'gpt2' }, { preset: 'tiny' })).toMatch(/^E_VOCAB_MISMATCH: .* the run's gpt2 tokenizer/);
    expect(why(null, { preset: 'tiny' })).toBe('accepted');
  });

  it("takes the tokenizer the model's vocabulary fits, unless told; a stored config without one is byte", () => {
    expect(buildRunConfig(null, { preset: 'gpt2-mini' }).tokenizer).toBe('gpt2');
    expect(buildRunConfig(null, { preset: 'tiny' }).tokenizer).toBe('byte');
    const custom = { ...buildRunConfig(null, { preset: 'gpt2-mini' }).model, nLayer: 1 };
    expect(buildRunConfig({ model: custom }, {}).tokenizer).toBe('gpt2');
    const { tokenizer: _t, ...old } = buildRunConfig(null, { preset: 'tiny' });
    const resumed = resumeRunConfig(old as RunConfig, null, {});
    expect(resumed.config.tokenizer).toBe('byte');
    expect(() => resumeRunConfig(old as RunConfig, { tokenizer: 'gpt2' }, {})).toThrow(
      /tokenizer gpt2 \(run uses byte/,
    );
  });
});
