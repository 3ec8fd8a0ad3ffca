// The committed Wasm kernels are what `npm run build:wasm` builds from their source today.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KERNELS_GENERATED, buildKernelsModule } from '../bin/build-wasm.ts';

describe('npm run build:wasm', () => {
  it('rebuilds core/engine/wasm/kernels.gen.ts byte for byte', async () => {
    const fresh = await buildKernelsModule();
    expect(fresh).toContain('export const KERNELS_SHARED_WASM');
    expect(fresh === readFileSync(KERNELS_GENERATED, 'utf8')).toBe(true);
  }, 120_000);
});
