import { defineConfig } from 'vitest/config';

// Files that run three at a time on the two cores, after the shared-worker ones below: in-process, no Chromium,
// no clock in an assertion (kernels against the CPU reference, the simulator, the server on inject), or mostly
// waiting (a child island, a Redis gateway, a WebRTC timeout), so a third keeps both cores busy. Every
// other file, and any new one, runs alone at the end: WebGPU pages, fleets, speed bounds.
const THREE_AT_A_TIME = [
  'bench-tfjs',
  'bounded-state',
  'cluster-island-failover',
  'cluster-outer',
  'island-stop',
  'kernels',
  'kernels-f16',
  'mix',
  'mix-live',
  'mix-webrtc',
  'model-download',
  'multi-device',
  'outer-anneal',
  'server-fuzz',
  'server-gpt2',
  'server-shards',
  'server-sparse',
  'simulate-scaling',
  'simulate-scaling-v1',
  'simulate-settings',
  'sparse-downlink',
  'trust-records',
  'validator',
  'webgpu-head',
  'webgpu-smoke',
].map((f) => `test/${f}.test.ts`);

// The quick in-process files (each under 4 s of tests in CI: no Dawn, no Chromium, no child process, no global
// they change) run first, three at a time in workers that each take many files (isolate: false):
// a fresh process per file spent more on imports than on the tests (these 42 here: 102 s fresh, 52 s reused).
const THREE_IN_SHARED_WORKERS = [
  'admin-codec',
  'architecture-docs',
  'checkpoint-keep',
  'claims',
  'codec-offsets',
  'coord',
  'coord-short-round',
  'coord-trust',
  'corpus',
  'dashboard-axes',
  'dashboard-safety',
  'data-ranges',
  'data-shards',
  'default-run',
  'format',
  'gradcheck',
  'hf-tokenizer',
  'island-quality',
  'islands-merge',
  'metrics-docs',
  'mix-links',
  'mix-rings',
  'mixed-compute',
  'model',
  'package',
  'protocol-docs',
  'run-config',
  'safetensors',
  'server-api',
  'server-data-url',
  'server-model',
  'shaders',
  'simulate',
  'simulate-knobs',
  'structure',
  'tokenizer',
  'trust-audit',
  'tune-scratch',
  'wasm-engine',
  'wasm-kernels',
  'wire-bytes',
  'wire-meter',
].map((f) => `test/${f}.test.ts`);

// Files that run two at a time, next: child processes (a server, islands, the CLI), Dawn in Node, or a
// page whose checks are numbers and bytes, none with a clock in an assertion tighter than a load of two keeps.
// Among them, once alone: island-first-round (its checks are eval losses and the Δ against the CPU engine's;
// the tiny islands' rounds are sized from the speed each measured, whatever the load), mix-page (θ hashes,
// the loss, tokens counted once) and webgpu-engine (numbers against the CPU reference; its one timing check
// compares the loss read's wait with the step time the engine itself measured just before, 2.4× against 1.2×).
// On a shared 2-core box island-first-round beside mix-page took 82 s where one after the other took 102 s;
// beside webgpu-engine too, every check passed.
const TWO_AT_A_TIME = [
  'admin-knobs',
  'bench-cli',
  'bench-server',
  'cli-help',
  'cli-signals',
  'client-build',
  'cluster-chaos',
  'cluster-redis',
  'cluster-roles',
  'codec',
  'dashboard-overlay',
  'data-prepare',
  'device-script',
  'docs-studies',
  'e2e-dashboard-charts',
  'e2e-volunteer-gpt2',
  'e2e-volunteer-shards',
  'file-size',
  'hf-export',
  'island',
  'island-first-round',
  'metrics-out',
  'mix-hostile',
  'mix-page',
  'mix-relay',
  'mix-rings-live',
  'operator',
  'outer-offload',
  'serve-init',
  'server-crash',
  'server-done-ack',
  'server-sparse-downlink',
  'server-training',
  'simulate-metrics',
  'train-cli',
  'train-data',
  'train-gpt2',
  'trust-cli',
  'trust-http',
  'trust-identity',
  'validator-server',
  'wasm-build',
  'wasm-threads',
  'webgpu-browser',
  'webgpu-buffers',
  'webgpu-engine',
  'webgpu-windows',
].map((f) => `test/${f}.test.ts`);

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'three-shared',
          include: THREE_IN_SHARED_WORKERS,
          isolate: false,
          maxWorkers: 3,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'three-at-a-time',
          include: THREE_AT_A_TIME,
          maxWorkers: 3,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: { name: 'two-at-a-time', include: TWO_AT_A_TIME, maxWorkers: 2, sequence: { groupOrder: 2 } },
      },
      {
        extends: true,
        // Chromium pages on SwiftShader are heavy on 2 cores: one file at a time
        test: {
          name: 'alone',
          include: ['test/**/*.test.ts'],
          exclude: [...THREE_IN_SHARED_WORKERS, ...THREE_AT_A_TIME, ...TWO_AT_A_TIME],
          fileParallelism: false,
          sequence: { groupOrder: 3 },
        },
      },
    ],
  },
});
