// The matmul autotuner's split-K scratch fits the buffer limit the engine's plan requests, at every preset:
// the head is tuned at its chunk's width (headChunk), as the engine records it, and a scratch sized with the
// bias (C·OC + OC) once outgrew the device's maxBufferSize by 4·V floats (no device needed for the sizes).

import { describe, expect, it } from 'vitest';
import { PRESETS, DEFAULT_BATCH, type PresetName } from '../core/model/config.ts';
import { headChunk, plan, requiredLimits } from '../client/island/engine/webgpu-plan.ts';
import { modelMatmuls, tunerPartials } from '../client/island/engine/webgpu-tune.ts';

describe('autotune scratch', () => {
  it("is the plan's dwPartials and within its maxBufferSize, for every preset", () => {
    for (const name of Object.keys(PRESETS) as PresetName[]) {
      const config = PRESETS[name];
      const opts = { config, maxBatch: DEFAULT_BATCH[name] };
      const rows = opts.maxBatch * config.blockSize;
      const bytes = 4 * tunerPartials(modelMatmuls(config.nEmbd, headChunk(opts)), rows);
      expect(bytes, name).toBe(plan(opts).storage.get('dwPartials'));
      expect(bytes, name).toBeLessThanOrEqual(requiredLimits(opts).maxBufferSize);
    }
  });
});
