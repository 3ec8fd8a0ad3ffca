// One outer-step worker thread: owns one Fragment (core/coord/outer-fragment.ts) of the
// parameters and answers the pool's messages (server/outer/pool.ts) on shared θ, shared delta
// slots and the shared downlink frame.

import { parentPort, workerData } from 'node:worker_threads';
import { HEADER_BYTES, decodeDelta, frameCrc, sealFrame } from '../../core/codec/index.ts';
import { HASH_CHUNK_WORDS, hashChunks } from '../../core/coord/hash.ts';
import { OuterOptimizer } from '../../core/coord/outer.ts';
import { type AgreementSums, Fragment, type FragmentStep } from '../../core/coord/outer-fragment.ts';

export interface OuterWorkerInit {
  n: number;
  a: number;
  b: number;
  theta: SharedArrayBuffer;
}

export type ToOuterWorker =
  | { id: number; op: 'slot'; slot: number; sab: SharedArrayBuffer }
  | { id: number; op: 'decode'; slot: number; frame: Uint8Array }
  | ({ id: number; op: 'propose'; frame: SharedArrayBuffer } & FragmentStep)
  | { id: number; op: 'commit' }
  | { id: number; op: 'abort' }
  | { id: number; op: 'hash'; c0: number; c1: number; out: SharedArrayBuffer }
  | { id: number; op: 'seal'; frame: SharedArrayBuffer; length: number; deflate: boolean }
  | { id: number; op: 'export'; momentum: SharedArrayBuffer; buffer: SharedArrayBuffer; residual: SharedArrayBuffer }
  | {
      id: number;
      op: 'import';
      momentum: SharedArrayBuffer;
      buffer: SharedArrayBuffer;
      residual: SharedArrayBuffer;
      bufferCount: number;
      steps: number;
    };

export type FromOuterWorker =
  | {
      id: number;
      ok: true;
      norm?: number;
      sumSq?: number;
      agreement?: AgreementSums;
      crc?: number;
      sealed?: Uint8Array;
      bufferCount?: number;
      steps?: number;
    }
  | { id: number; ok: false; code: string; message: string };

function run(init: OuterWorkerInit): void {
  const port = parentPort!;
  const { n, a, b } = init;
  const len = b - a;
  const theta = new Float32Array(init.theta, 4 * a, len);
  const thetaWords = new Uint32Array(init.theta, 0, n);
  const slots: Float32Array[] = [];
  let frag = new Fragment(len);
  const reply = (m: FromOuterWorker) => port.postMessage(m);

  port.on('message', (m: ToOuterWorker) => {
    switch (m.op) {
      case 'slot':
        slots[m.slot] = new Float32Array(m.sab);
        return reply({ id: m.id, ok: true });
      case 'decode': {
        // a whole delta on this worker: the frame's CRC covers all of it
        const d = decodeDelta(m.frame, n, slots[m.slot]);
        if (!d.ok) return reply({ id: m.id, ok: false, code: d.error.code, message: d.error.message });
        let s = 0;
        const x = d.value;
        for (let i = 0; i < n; i++) s += x[i] * x[i];
        return reply({ id: m.id, ok: true, norm: Math.sqrt(s) });
      }
      case 'propose': {
        const r = frag.propose(slots, m, n, a, m.frame);
        return reply(
          'code' in r ? { id: m.id, ok: false, ...r } : { id: m.id, ok: true, sumSq: r.sumSq, agreement: r.agreement },
        );
      }
      case 'commit':
        frag.commit(theta);
        return reply({ id: m.id, ok: true });
      case 'abort':
        frag.abort();
        return reply({ id: m.id, ok: true });
      case 'hash': // θ's chunks [c0, c1) (any worker's fragment: every commit came before)
        hashChunks(thetaWords, m.c0 * HASH_CHUNK_WORDS, Math.min(n, m.c1 * HASH_CHUNK_WORDS), new Uint32Array(m.out));
        return reply({ id: m.id, ok: true });
      case 'seal': {
        const frame = new Uint8Array(m.frame, 0, m.length);
        // deflated: sealed here, off the event loop, into a frame of its own; else only the CRC
        if (m.deflate) {
          const sealed = sealFrame(frame, true); // a frame of its own when deflate shrank it, else the shared one
          return reply({ id: m.id, ok: true, sealed: sealed === frame ? frame.slice() : sealed });
        }
        return reply({ id: m.id, ok: true, crc: frameCrc(frame, m.length - HEADER_BYTES) });
      }
      case 'export': {
        const s = frag.outer.state;
        new Float32Array(m.momentum, 4 * a, len).set(s.momentum);
        new Float32Array(m.buffer, 4 * a, len).set(s.buffer);
        new Float32Array(m.residual, 4 * a, len).set(frag.fb.residual);
        return reply({ id: m.id, ok: true, bufferCount: s.bufferCount, steps: s.steps });
      }
      case 'import': {
        frag = new Fragment(len);
        frag.outer = new OuterOptimizer(len, {
          momentum: new Float32Array(m.momentum, 4 * a, len).slice(),
          buffer: new Float32Array(m.buffer, 4 * a, len).slice(),
          bufferCount: m.bufferCount,
          steps: m.steps,
        });
        frag.fb.residual.set(new Float32Array(m.residual, 4 * a, len));
        return reply({ id: m.id, ok: true });
      }
    }
  });
}

if (workerData && (workerData as { kind?: string }).kind === 'atoll-outer') run(workerData as OuterWorkerInit);
