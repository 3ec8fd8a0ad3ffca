// A served run on GPT-2's tokenizer: `serve --preset gpt2-mini --data DIR` on shards `atoll data prepare
// --tokenizer gpt2` wrote. The index and checkpoints name the tokenizer; a Node island (in-process, Wasm
// engine) trains on its ranges of BPE ids and the held-out loss falls from ≈ ln 50,257; /api/sample
// encodes the prompt and decodes the ids through GPT-2's BPE; an island that says another tokenizer is
// refused at hello; a gpt2 run on a text, or on byte shards, is refused before it listens.

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { io } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataIndex } from '../core/api.ts';
import { readSafetensors } from '../core/safetensors.ts';
import { loadTokenizer } from '../core/data/tokenizer.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { type NodeIsland, startNodeIsland } from '../client/island/node.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { type TestServer, getJson, startTestServer, tempDir, waitFor } from './helpers/server.ts';

const root = tempDir('atoll-gpt2-serve-');
const shards = join(root, 'gpt2');
const SEQ = 32;
const serveGpt2 = (data: string, evaluate = false) =>
  startTestServer({
    flags: { preset: 'gpt2-mini', data },
    evaluate,
    file: {
      eval: { batches: 1, batchSize: 4 },
      coordinator: {
        mode: 'async',
        batchSize: 1,
        seqLen: SEQ,
        ...{ innerSteps: 3, minInnerSteps: 3, maxInnerSteps: 3, dylu: false, targetRoundMs: 0 },
        innerLr: { maxLr: 2e-2, minLr: 1e-2, warmupTokens: 0, localWarmupSteps: 0 },
      },
    },
  });

beforeAll(async () => {
  await prepareMobyShards(root, shards, 'gpt2');
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('serve --preset gpt2-mini --data DIR (GPT-2 BPE shards)', () => {
  let ts: TestServer;
  let island: NodeIsland | null = null;
  beforeAll(async () => {
    ts = await serveGpt2(shards, true);
  });
  afterAll(async () => {
    island?.stop();
    await island?.done;
    await ts?.close();
  });

  it('publishes a gpt2 index and config; an island of another tokenizer is refused at hello', async () => {
    const index = await getJson<DataIndex>(`${ts.url}/api/data/index`);
    expect(index.tokenizer).toBe('gpt2');
    expect(index.vocabSize).toBe(50257);
    const run = await getJson<{ config: { tokenizer: string; model: { vocabSize: number } } }>(`${ts.url}/api/run`);
    expect(run.config.tokenizer).toBe('gpt2');
    expect(run.config.model.vocabSize).toBe(50257);
    const hello = (tokenizer: string) => {
      const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
      const caps = { engine: 'cpu', tokenizer };
      return s
        .timeout(10_000)
        .emitWithAck('hello', { protocolVersion: PROTOCOL_VERSION, caps })
        .finally(() => s.close()) as Promise<{ ok: boolean; error?: { code: string; message: string } }>;
    };
    const byte = await hello('byte');
    expect(byte.ok).toBe(false);
    expect(byte.error!.code).toBe('E_TOKENIZER_MISMATCH');
    expect(byte.error!.message).toMatch(/tokenizer is gpt2, the island's byte/);
    expect((await hello('gpt2')).ok).toBe(true);
  });

  it('an island trains on its BPE ranges, the held-out loss falls, samples decode through GPT-2 BPE', async () => {
    const accepted: number[] = [];
    island = await startNodeIsland({
      server: ts.url,
      engine: 'cpu',
      calibrate: false,
      mix: false,
      name: 'bpe',
      onEvent: (e) => {
        if (e.type === 'submitted' && e.ack.status === 'applied') accepted.push(e.ack.version);
      },
    });
    const evals = await waitFor<number[]>(
      'two evals after accepted Δs',
      async () => {
        const h = await getJson<{ points: { evalLoss: number | null }[] }>(`${ts.url}/api/history`);
        const e = h.points.flatMap((p) => (p.evalLoss === null ? [] : [p.evalLoss]));
        return (e.length >= 3 && accepted.length >= 2 ? e : null) as number[];
      },
      120_000,
    );
    island.stop();
    await island.done;
    expect(evals[0]).toBeGreaterThan(10); // ln 50257 ≈ 10.8
    expect(evals.at(-1)!).toBeLessThan(evals[0] - 0.5);

    const gpt2 = await loadTokenizer('gpt2');
    const s = await getJson<{ prompt: string; text: string; tokens: number }>(
      `${ts.url}/api/sample?tokens=12&prompt=${encodeURIComponent('Call me Ishmael.')}`,
    );
    expect(s.tokens).toBe(12);
    // 12 BPE tokens re-encode to about 12 ids (byte-level decoding would give one per byte and far more)
    const ids = gpt2.encode(s.text);
    expect(ids.length).toBeGreaterThan(4);
    expect(ids.length).toBeLessThanOrEqual(24);

    const { checkpoints } = await getJson<{ checkpoints: { version: number }[] }>(`${ts.url}/api/checkpoints`);
    const ck = await fetch(`${ts.url}/api/checkpoints/${checkpoints.at(-1)!.version}`);
    expect(ck.status).toBe(200);
    const meta = readSafetensors(new Uint8Array(await ck.arrayBuffer()));
    if (!meta.ok) throw new Error(meta.error.message);
    expect(meta.value.metadata.tokenizer).toBe('gpt2');
  }, 180_000);
});

describe('a gpt2 run refuses data not in its ids', () => {
  it('a text corpus (E_DATA_NEEDS_SHARDS) and byte shards (E_TOKENIZER_MISMATCH), before it listens', async () => {
    const refused = (data: string) =>
      serveGpt2(data).then(
        async (t) => {
          await t.close();
          return 'listened';
        },
        (e: Error & { code?: string }) => `${e.code ?? ''} ${e.message}`,
      );
    expect(await refused('moby-dick')).toMatch(/E_DATA_NEEDS_SHARDS.*atoll data prepare --tokenizer gpt2/);
    const byteShards = join(root, 'byte');
    await prepareMobyShards(join(root, 'b'), byteShards);
    expect(await refused(byteShards)).toMatch(/E_TOKENIZER_MISMATCH/);
  });
});
