// An independent reader of TensorBoard event files (test/metrics-out.test.ts, test/simulate-metrics.test.ts): the
// TFRecord framing (length, masked CRC32C of the length, data, masked CRC32C of the data; CRC32C bit by bit, the
// writer uses a table) and the Event and Summary protobufs field by field, none of it the writer's own code.

import { expect } from 'vitest';

/** CRC32C bit by bit (the writer uses a table). */
function crc32cBitwise(b: Uint8Array): number {
  let c = ~0 >>> 0;
  for (const x of b) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}
const masked = (b: Uint8Array) => {
  const c = crc32cBitwise(b);
  return ((((c >>> 15) | (c << 17)) >>> 0) + 0xa282ead8) % 2 ** 32;
};

interface Field {
  no: number;
  wire: number;
  int?: bigint;
  bytes?: Uint8Array;
  f64?: number;
  f32?: number;
}

function protoFields(b: Uint8Array): Field[] {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: Field[] = [];
  let i = 0;
  const varint = () => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      const x = b[i++];
      v |= BigInt(x & 0x7f) << shift;
      if (!(x & 0x80)) return v;
      shift += 7n;
    }
  };
  while (i < b.length) {
    const key = Number(varint());
    const f: Field = { no: key >> 3, wire: key & 7 };
    if (f.wire === 0) f.int = varint();
    else if (f.wire === 1) {
      f.f64 = view.getFloat64(i, true);
      i += 8;
    } else if (f.wire === 2) {
      const n = Number(varint());
      f.bytes = b.subarray(i, i + n);
      i += n;
    } else if (f.wire === 5) {
      f.f32 = view.getFloat32(i, true);
      i += 4;
    } else throw new Error(`wire type ${f.wire}`);
    out.push(f);
  }
  return out;
}

export interface ReadEvent {
  wallTime: number;
  step: number;
  fileVersion?: string;
  scalars: Record<string, number>;
}

export function readEventFile(bytes: Uint8Array): ReadEvent[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const events: ReadEvent[] = [];
  let i = 0;
  while (i < bytes.length) {
    const len = Number(view.getBigUint64(i, true));
    expect(view.getUint32(i + 8, true), `length CRC at ${i}`).toBe(masked(bytes.subarray(i, i + 8)));
    const data = bytes.subarray(i + 12, i + 12 + len);
    expect(view.getUint32(i + 12 + len, true), `data CRC at ${i}`).toBe(masked(data));
    i += 16 + len;
    const e: ReadEvent = { wallTime: 0, step: 0, scalars: {} };
    for (const f of protoFields(data)) {
      if (f.no === 1) e.wallTime = f.f64!;
      else if (f.no === 2) e.step = Number(f.int);
      else if (f.no === 3) e.fileVersion = new TextDecoder().decode(f.bytes);
      else if (f.no === 5)
        for (const v of protoFields(f.bytes!).filter((x) => x.no === 1)) {
          const value = protoFields(v.bytes!);
          const tag = new TextDecoder().decode(value.find((x) => x.no === 1)!.bytes);
          e.scalars[tag] = value.find((x) => x.no === 2)!.f32!;
        }
    }
    events.push(e);
  }
  return events;
}
