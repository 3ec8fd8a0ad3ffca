import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // WebGPU (Dawn/SwiftShader) and Chromium are heavy on 2 cores: run files one at a time.
    fileParallelism: false,
    pool: 'forks',
  },
});
