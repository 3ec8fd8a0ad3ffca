// TensorBoard's event file format, written by hand (it is small): a file is a sequence of TFRecords,
// each an `Event` protobuf. `tensorboard --logdir` reads such files, and trackers (W&B, Aim) import them.
//
//   record = uint64 LE length · uint32 masked CRC32C(length bytes) · data · uint32 masked CRC32C(data)
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }
//   Summary { repeated Value value = 1 }   Value { string tag = 1; float simple_value = 2 }
//
// The first record of a file is the event { wall_time, file_version: "brain.Event:2" }.

export const FILE_VERSION = 'brain.Event:2';

const CRC32C_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1; // Castagnoli, reflected
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC32C_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotate right by 15, add a constant (so a CRC of CRCs is not trivially 0). */
export function maskedCrc32c(bytes: Uint8Array): number {
  const c = crc32c(bytes);
  return (((c >>> 15) | (c << 17)) + 0xa282ead8) >>> 0;
}

/** One TFRecord around `data`. */
export function tfRecord(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(8 + 4 + data.length + 4);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(data.length), true);
  view.setUint32(8, maskedCrc32c(out.subarray(0, 8)), true);
  out.set(data, 12);
  view.setUint32(12 + data.length, maskedCrc32c(data), true);
  return out;
}

/** Protobuf bytes, appended field by field. */
class ProtoWriter {
  private readonly parts: number[] = [];

  varint(x: number | bigint): this {
    let v = BigInt.asUintN(64, BigInt(x));
    while (v >= 0x80n) {
      this.parts.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    this.parts.push(Number(v));
    return this;
  }

  tag(field: number, wireType: number): this {
    return this.varint((field << 3) | wireType);
  }

  double(field: number, x: number): this {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setFloat64(0, x, true);
    return this.tag(field, 1).raw(b);
  }

  float(field: number, x: number): this {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, x, true);
    return this.tag(field, 5).raw(b);
  }

  bytes(field: number, b: Uint8Array): this {
    return this.tag(field, 2).varint(b.length).raw(b);
  }

  string(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }

  raw(b: Uint8Array): this {
    for (const x of b) this.parts.push(x);
    return this;
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

export interface TfEvent {
  /** Seconds since the epoch. */
  wallTime: number;
  step: number;
  fileVersion?: string;
  /** tag → value (a Summary of simple_value scalars). */
  scalars?: Record<string, number>;
}

/** The Event protobuf of `e`. */
export function encodeEvent(e: TfEvent): Uint8Array {
  const w = new ProtoWriter().double(1, e.wallTime).tag(2, 0).varint(Math.trunc(e.step));
  if (e.fileVersion !== undefined) w.string(3, e.fileVersion);
  if (e.scalars) {
    const summary = new ProtoWriter();
    for (const [tag, value] of Object.entries(e.scalars))
      summary.bytes(1, new ProtoWriter().string(1, tag).float(2, value).finish());
    w.bytes(5, summary.finish());
  }
  return w.finish();
}

/** An event file's name: TensorBoard picks up files whose name holds "tfevents". */
export function eventFileName(wallTimeSec: number, host: string): string {
  return `events.out.tfevents.${Math.floor(wallTimeSec)}.${host.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
}
