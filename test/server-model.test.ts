// θ by chunks (server/plugins/model.ts): GET /api/model/manifest cuts the safetensors file of GET /api/model
// in chunks with a CRC-32 each; Range asks one chunk (206, Content-Range); If-Match pins every chunk to one
// version (a version that moved on: 412 E_MODEL_MOVED); bad ranges are 400 E_BAD_REQUEST or 416
// E_RANGE_NOT_SATISFIABLE; a whole GET is as before. The version moves by the durable θ the views read.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelManifest } from '../core/api.ts';
import { crc32 } from '../core/codec/crc32.ts';
import { hashParams } from '../core/coord/index.ts';
import { MODEL_CHUNK_BYTES } from '../server/run/views.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const CHUNK = 4096;

describe('GET /api/model by chunks', () => {
  let ts: TestServer;
  beforeAll(async () => {
    ts = await startTestServer({ file: { limits: { modelChunkBytes: CHUNK } } });
  });
  afterAll(async () => {
    await ts?.close();
  });

  const get = (url: string, headers: Record<string, string> = {}) =>
    ts.server.app.inject({ method: 'GET', url, headers });
  const manifest = async () => (await get('/api/model/manifest')).json() as ModelManifest;

  it('the manifest cuts the whole file in chunks whose CRC-32s it lists', async () => {
    const whole = await get('/api/model');
    expect(whole.statusCode).toBe(200);
    expect(whole.headers['accept-ranges']).toBe('bytes');
    const bytes = new Uint8Array(whole.rawPayload);
    const m = await manifest();
    expect(m.chunkBytes).toBe(CHUNK);
    expect(m.bytes).toBe(bytes.length);
    expect(`"${m.hash}"`).toBe(whole.headers.etag);
    expect(m.version).toBe(ts.server.run.durable.version);
    expect(m.crc32.length).toBe(Math.ceil(bytes.length / CHUNK));
    expect(m.crc32.length).toBeGreaterThan(10);
    expect(m.crc32).toEqual(m.crc32.map((_, i) => crc32(bytes.subarray(i * CHUNK, (i + 1) * CHUNK))));
  });

  it('the chunks by Range, If-Match the hash, put together are the file', async () => {
    const m = await manifest();
    const parts: Uint8Array[] = [];
    for (let i = 0; i < m.crc32.length; i++) {
      const end = Math.min(m.bytes, (i + 1) * CHUNK) - 1;
      const r = await get('/api/model', { range: `bytes=${i * CHUNK}-${end}`, 'if-match': `"${m.hash}"` });
      expect(r.statusCode).toBe(206);
      expect(r.headers['content-range']).toBe(`bytes ${i * CHUNK}-${end}/${m.bytes}`);
      const part = new Uint8Array(r.rawPayload);
      expect(crc32(part)).toBe(m.crc32[i]);
      parts.push(part);
    }
    const whole = new Uint8Array((await get('/api/model')).rawPayload);
    expect(Buffer.concat(parts).equals(whole)).toBe(true);
    // an open end is the last byte; an end past the file is the last byte
    const tail = await get('/api/model', { range: `bytes=${m.bytes - 10}-` });
    expect(tail.statusCode).toBe(206);
    expect(tail.rawPayload.length).toBe(10);
    expect((await get('/api/model', { range: `bytes=0-${m.bytes + 99}` })).rawPayload.length).toBe(m.bytes);
  });

  it('bad ranges are 416 or 400 with their codes', async () => {
    const m = await manifest();
    const past = await get('/api/model', { range: `bytes=${m.bytes}-` });
    expect(past.statusCode).toBe(416);
    expect(past.headers['content-range']).toBe(`bytes */${m.bytes}`);
    expect(past.json().error.code).toBe('E_RANGE_NOT_SATISFIABLE');
    expect((await get('/api/model', { range: 'bytes=9-3' })).json().error.code).toBe('E_RANGE_NOT_SATISFIABLE');
    for (const range of ['bytes=0-1,5-9', 'bytes=-100', 'items=0-9', 'bytes=a-b']) {
      const r = await get('/api/model', { range });
      expect(r.statusCode).toBe(400);
      expect(r.json().error.code).toBe('E_BAD_REQUEST');
    }
  });

  it('once θ moves on, a chunk of the old version is 412 E_MODEL_MOVED and the manifest is new', async () => {
    const before = await manifest();
    const d = ts.server.run.durable;
    const theta = d.theta.slice();
    theta[0] += 0.5;
    d.set({ version: d.version + 1, hash: hashParams(theta), totalTokens: d.totalTokens, theta });
    const r = await get('/api/model', { range: `bytes=0-${CHUNK - 1}`, 'if-match': `"${before.hash}"` });
    expect(r.statusCode).toBe(412);
    expect(r.json().error.code).toBe('E_MODEL_MOVED');
    expect(r.headers['x-atoll-version']).toBe(String(before.version + 1));
    const after = await manifest();
    expect(after.version).toBe(before.version + 1);
    expect(after.hash).not.toBe(before.hash);
    // θ[0] is in one chunk: the others are the same bytes (what a page holding v keeps)
    const changed = after.crc32.filter((c, i) => c !== before.crc32[i]).length;
    expect(changed).toBeGreaterThanOrEqual(1);
    expect(changed).toBeLessThan(after.crc32.length / 2);
    const ok = await get('/api/model', { range: `bytes=0-${CHUNK - 1}`, 'if-match': `"${after.hash}"` });
    expect(ok.statusCode).toBe(206);
  });

  it('the default chunk is 4 MiB', () => {
    expect(MODEL_CHUNK_BYTES).toBe(4 * 1024 * 1024);
  });
});
