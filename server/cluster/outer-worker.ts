// One outer-step worker: owns a fragment [a, b) of the parameters (the outer optimizer's momentum
// and buffer and the downlink's error-feedback residual for it) and works on shared θ, shared
// delta slots and the shared downlink frame. See outer-pool.ts for the protocol.
//
// The fragment starts on a downlink block boundary, so its blocks are the whole frame's blocks:
// encoding the fragment with the codec's own encodeWithFeedback and placing its scales and int8
// values at their offsets in the frame gives the same bytes as encoding all of θ at once.

import { parentPort, workerData } from 'node:worker_threads';
import { CodecScratch, ErrorFeedback, decodeDelta, encodeWithFeedback } from '../../core/codec/index.ts';
import { crc32 } from '../../core/codec/crc32.ts';
import { hashParams } from '../../core/coord/hash.ts';
import { type OuterConfig, type OuterState, OuterOptimizer, applyUpdate } from '../../core/coord/outer.ts';

export interface OuterWorkerInit {
  n: number;
  a: number;
  b: number;
  theta: SharedArrayBuffer;
}

export type DownlinkSpec = { encoding: 'int8' | 'f32'; blockSize: number };

export type ToOuterWorker =
  | { id: number; op: 'slot'; slot: number; sab: SharedArrayBuffer }
  | { id: number; op: 'decode'; slot: number; frame: Uint8Array }
  | { id: number; op: 'propose'; slots: number[]; weights: number[] | null; outer: OuterConfig; downlink: DownlinkSpec; scale: number; period: number; frame: SharedArrayBuffer }
  | { id: number; op: 'commit' }
  | { id: number; op: 'abort' }
  | { id: number; op: 'hash' }
  | { id: number; op: 'crc'; frame: SharedArrayBuffer; length: number }
  | { id: number; op: 'export'; momentum: SharedArrayBuffer; buffer: SharedArrayBuffer; residual: SharedArrayBuffer }
  | { id: number; op: 'import'; momentum: SharedArrayBuffer; buffer: SharedArrayBuffer; residual: SharedArrayBuffer; bufferCount: number; steps: number };

export type FromOuterWorker =
  | { id: number; ok: true; norm?: number; sumSq?: number; hash?: string; crc?: number; bufferCount?: number; steps?: number }
  | { id: number; ok: false; code: string; message: string };

/** Byte offsets of a fragment's scales and values inside a frame's payload (after the header). */
export function fragmentLayout(n: number, a: number, b: number, d: DownlinkSpec): { scales: number; scaleBytes: number; values: number; valueBytes: number } {
  if (d.encoding === 'f32') return { scales: 0, scaleBytes: 0, values: 4 * a, valueBytes: 4 * (b - a) };
  const nb = Math.ceil(n / d.blockSize);
  return { scales: 4 * (a / d.blockSize), scaleBytes: 4 * Math.ceil((b - a) / d.blockSize), values: 4 * nb + a, valueBytes: b - a };
}

const HEADER_BYTES = 32;

function run(init: OuterWorkerInit): void {
  const port = parentPort!;
  const { n, a, b } = init;
  const len = b - a;
  const theta = new Float32Array(init.theta, 4 * a, len);
  const slots: Float32Array[] = [];
  let outer = new OuterOptimizer(len);
  const fb = new ErrorFeedback(len);
  const residualBackup = new Float32Array(len);
  const scratch = new CodecScratch();
  const g = new Float32Array(len);
  const acc = new Float64Array(len);
  let decoded: Float32Array | null = null;

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
        // g: the one delta (async) or the weighted mean of the round's (sync, accumulated in f64)
        let gv: Float32Array;
        if (m.weights === null) gv = slots[m.slots[0]].subarray(a, b);
        else {
          acc.fill(0);
          m.slots.forEach((s, j) => {
            const d = slots[s], w = m.weights![j];
            for (let i = 0; i < len; i++) acc[i] += w * d[a + i];
          });
          for (let i = 0; i < len; i++) g[i] = acc[i];
          gv = g;
        }
        if (!outer.propose(m.outer, gv, m.scale, m.period)) return reply({ id: m.id, ok: false, code: 'E_NON_FINITE', message: 'the outer update overflowed' });
        residualBackup.set(fb.residual);
        const q = encodeWithFeedback(outer.update, fb, m.downlink, scratch);
        if (!q.ok) {
          fb.residual.set(residualBackup);
          return reply({ id: m.id, ok: false, code: q.error.code, message: `the outer update could not be encoded: ${q.error.message}` });
        }
        decoded = q.value.decoded;
        const L = fragmentLayout(n, a, b, m.downlink);
        const out = new Uint8Array(m.frame, HEADER_BYTES);
        const src = q.value.frame.subarray(HEADER_BYTES);
        out.set(src.subarray(0, L.scaleBytes), L.scales);
        out.set(src.subarray(L.scaleBytes, L.scaleBytes + L.valueBytes), L.values);
        let sumSq = 0;
        const u = outer.update;
        for (let i = 0; i < len; i++) sumSq += u[i] * u[i];
        return reply({ id: m.id, ok: true, sumSq });
      }
      case 'commit':
        outer.commit();
        applyUpdate(theta, decoded!);
        decoded = null;
        return reply({ id: m.id, ok: true });
      case 'abort':
        if (decoded) fb.residual.set(residualBackup); // only a fragment that encoded this step moved its residual
        decoded = null;
        return reply({ id: m.id, ok: true });
      case 'hash':
        return reply({ id: m.id, ok: true, hash: hashParams(new Float32Array(init.theta, 0, n)) });
      case 'crc': {
        const f = new Uint8Array(m.frame, 0, m.length);
        return reply({ id: m.id, ok: true, crc: crc32(f.subarray(HEADER_BYTES), crc32(f.subarray(0, 28))) });
      }
      case 'export': {
        const s = outer.state;
        new Float32Array(m.momentum, 4 * a, len).set(s.momentum);
        new Float32Array(m.buffer, 4 * a, len).set(s.buffer);
        new Float32Array(m.residual, 4 * a, len).set(fb.residual);
        return reply({ id: m.id, ok: true, bufferCount: s.bufferCount, steps: s.steps });
      }
      case 'import': {
        const st: OuterState = {
          momentum: new Float32Array(m.momentum, 4 * a, len).slice(),
          buffer: new Float32Array(m.buffer, 4 * a, len).slice(),
          bufferCount: m.bufferCount, steps: m.steps,
        };
        outer = new OuterOptimizer(len, st);
        fb.residual.set(new Float32Array(m.residual, 4 * a, len));
        return reply({ id: m.id, ok: true });
      }
    }
  });
}

if (workerData && (workerData as { kind?: string }).kind === 'atoll-outer') run(workerData as OuterWorkerInit);
