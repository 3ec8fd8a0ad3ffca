// safetensors reader and writer (https://github.com/huggingface/safetensors, "Format"):
//
//   8 bytes   N, unsigned little-endian u64: header length
//   N bytes   UTF-8 JSON: {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}
//             padded with spaces (0x20) so the byte buffer starts 8-byte aligned
//   rest      the byte buffer; offsets are relative to its start; tensors are contiguous,
//             little-endian, row-major, and cover it exactly (no gaps, no overlaps)
//
// Checkpoints are written with this, so Python's `safetensors.safe_open` / `load_file` read them.

import { type Result, err, ok } from './result.ts';
import { f16Table } from './model/f16.ts';

export type Dtype = 'F32' | 'F16' | 'I32' | 'U8' | 'I64';

/** Bytes per element of each supported dtype. */
export const DTYPE_BYTES: Readonly<Record<Dtype, number>> = { F32: 4, F16: 2, I32: 4, U8: 1, I64: 8 };

export interface TensorInput {
  dtype: Dtype;
  shape: number[];
  /** shape product × dtype size bytes, host (little-endian) layout */
  data: ArrayBufferView;
}

export interface TensorView {
  dtype: Dtype;
  shape: number[];
  /** a view into the file's bytes (no copy); any alignment */
  data: Uint8Array;
}

export interface SafetensorsFile {
  tensors: Record<string, TensorView>;
  metadata: Record<string, string>;
}

export const SafetensorsErrorCode = {
  /** shorter than 8 bytes, or the header runs past the end */
  TRUNCATED: 'E_TRUNCATED',
  /** header is not UTF-8, not JSON, not an object, or has bad __metadata__ */
  BAD_HEADER: 'E_BAD_HEADER',
  /** unknown dtype, bad shape, offsets out of range, overlapping, leaving gaps, or size mismatch */
  BAD_TENSOR: 'E_BAD_TENSOR',
} as const;

const METADATA_KEY = '__metadata__';
/** The reference implementation refuses headers over 100 MB; so do we, before decoding them. */
const MAX_HEADER_BYTES = 100_000_000;
const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

function isDtype(s: unknown): s is Dtype {
  return typeof s === 'string' && Object.hasOwn(DTYPE_BYTES, s);
}

/** Number of elements of `shape`, or -1 if it is not a list of non-negative safe integers. */
function elementCount(shape: unknown): number {
  if (!Array.isArray(shape)) return -1;
  let count = 1;
  for (const d of shape) {
    if (!Number.isSafeInteger(d) || d < 0) return -1;
    count *= d;
    if (!Number.isSafeInteger(count)) return -1;
  }
  return count;
}

/** Reverses the bytes of each element in place (little-endian <-> big-endian host order). */
function swapBytes(bytes: Uint8Array, size: number): void {
  for (let i = 0; i + size <= bytes.length; i += size) {
    for (let a = i, b = i + size - 1; a < b; a++, b--) {
      const t = bytes[a];
      bytes[a] = bytes[b];
      bytes[b] = t;
    }
  }
}

/**
 * Serialises tensors, laid out contiguously in the iteration order of `tensors`, to safetensors
 * bytes. Throws RangeError on inconsistent input (a programmer error): unknown dtype, bad shape,
 * data byte length ≠ shape product × dtype size, or a tensor named __metadata__.
 */
export function writeSafetensors(tensors: Record<string, TensorInput>, metadata?: Record<string, string>): Uint8Array {
  return concatBytes(safetensorsParts(tensors, metadata));
}

/** The parts one after the other in one new buffer. */
export function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.length;
  }
  return out;
}

/**
 * The same file as writeSafetensors, as its parts in order: the length and header, then each
 * tensor's bytes as a view of its data (no copy on a little-endian host), for a writer that
 * writes them one after the other: a large checkpoint is never gathered into one buffer.
 */
export function safetensorsParts(
  tensors: Record<string, TensorInput>,
  metadata?: Record<string, string>,
): Uint8Array[] {
  const parts: string[] = [];
  if (metadata !== undefined) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') throw new RangeError(`metadata value for ${k} is not a string`);
    }
    parts.push(`${JSON.stringify(METADATA_KEY)}:${JSON.stringify(metadata)}`);
  }
  const entries = Object.entries(tensors);
  let offset = 0;
  for (const [name, t] of entries) {
    if (name === METADATA_KEY) throw new RangeError(`a tensor cannot be named ${METADATA_KEY}`);
    if (!isDtype(t.dtype)) throw new RangeError(`tensor ${name}: unknown dtype ${String(t.dtype)}`);
    const count = elementCount(t.shape);
    if (count < 0) throw new RangeError(`tensor ${name}: bad shape ${JSON.stringify(t.shape)}`);
    const bytes = count * DTYPE_BYTES[t.dtype];
    if (bytes !== t.data.byteLength) {
      throw new RangeError(
        `tensor ${name}: shape ${JSON.stringify(t.shape)} ${t.dtype} needs ${bytes} bytes, ` +
          `data has ${t.data.byteLength}`,
      );
    }
    const entry = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    parts.push(`${JSON.stringify(name)}:${JSON.stringify(entry)}`);
    offset += bytes;
  }
  const json = new TextEncoder().encode(`{${parts.join(',')}}`);
  const headerLen = json.length + ((8 - (json.length % 8)) % 8);
  const head = new Uint8Array(8 + headerLen);
  const dv = new DataView(head.buffer);
  dv.setUint32(0, headerLen, true); // u64: low word, then a zero high word (headers are < 4 GiB)
  dv.setUint32(4, 0, true);
  head.set(json, 8);
  head.fill(0x20, 8 + json.length);
  const out: Uint8Array[] = [head];
  for (const [, t] of entries) {
    const src = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    if (LITTLE_ENDIAN_HOST) out.push(src);
    else {
      const copy = src.slice();
      swapBytes(copy, DTYPE_BYTES[t.dtype]);
      out.push(copy);
    }
  }
  return out;
}

/**
 * Parses and validates safetensors bytes. Tensor data are views into `bytes` (no copy). Never
 * throws; errors carry a SafetensorsErrorCode.
 */
export function readSafetensors(bytes: Uint8Array): Result<SafetensorsFile> {
  try {
    return readUnchecked(bytes);
  } catch (e) {
    return err(SafetensorsErrorCode.BAD_HEADER, `unreadable file: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function readUnchecked(bytes: Uint8Array): Result<SafetensorsFile> {
  const { TRUNCATED, BAD_HEADER, BAD_TENSOR } = SafetensorsErrorCode;
  if (bytes.length < 8) return err(TRUNCATED, `file of ${bytes.length} bytes has no 8-byte header length`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, 8);
  const lenLo = dv.getUint32(0, true);
  const lenHi = dv.getUint32(4, true);
  const headerLen = lenHi * 2 ** 32 + lenLo; // exact below 2^53, and anything that large fails below
  if (headerLen > bytes.length - 8)
    return err(TRUNCATED, `header of ${headerLen} bytes runs past the ${bytes.length}-byte file`);
  if (headerLen > MAX_HEADER_BYTES) return err(BAD_HEADER, `header of ${headerLen} bytes exceeds ${MAX_HEADER_BYTES}`);

  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes.subarray(8, 8 + headerLen));
  } catch {
    return err(BAD_HEADER, 'header is not valid UTF-8');
  }
  if (!text.startsWith('{')) return err(BAD_HEADER, 'header does not start with {');
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (e) {
    return err(BAD_HEADER, `header is not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) {
    return err(BAD_HEADER, 'header is not a JSON object');
  }

  const metadata: Record<string, string> = {};
  const dataStart = 8 + headerLen;
  const dataLen = bytes.length - dataStart;
  const tensors: Record<string, TensorView> = {};
  const spans: Array<{ name: string; begin: number; end: number }> = [];
  for (const [name, value] of Object.entries(header as Record<string, unknown>)) {
    if (name === METADATA_KEY) {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        return err(BAD_HEADER, '__metadata__ is not an object');
      }
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        if (typeof v !== 'string') return err(BAD_HEADER, `__metadata__.${k} is not a string`);
        defineEntry(metadata, k, v);
      }
      continue;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      return err(BAD_TENSOR, `tensor ${name}: entry is not an object`);
    }
    const { dtype, shape, data_offsets: offsets } = value as Record<string, unknown>;
    if (!isDtype(dtype)) return err(BAD_TENSOR, `tensor ${name}: unknown dtype ${JSON.stringify(dtype)}`);
    const count = elementCount(shape);
    if (count < 0) return err(BAD_TENSOR, `tensor ${name}: bad shape ${JSON.stringify(shape)}`);
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !Number.isSafeInteger(offsets[0]) ||
      !Number.isSafeInteger(offsets[1]) ||
      offsets[0] < 0 ||
      offsets[1] < offsets[0]
    ) {
      return err(BAD_TENSOR, `tensor ${name}: bad data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    if (end > dataLen)
      return err(BAD_TENSOR, `tensor ${name}: data_offsets [${begin}, ${end}] past the ${dataLen}-byte buffer`);
    if (count * DTYPE_BYTES[dtype] !== end - begin) {
      return err(
        BAD_TENSOR,
        `tensor ${name}: shape ${JSON.stringify(shape)} ${dtype} needs ${count * DTYPE_BYTES[dtype]} bytes, offsets ` +
          `span ${end - begin}`,
      );
    }
    spans.push({ name, begin, end });
    defineEntry(tensors, name, {
      dtype,
      shape: (shape as number[]).slice(),
      data: bytes.subarray(dataStart + begin, dataStart + end),
    });
  }

  // The tensors must tile the byte buffer exactly.
  spans.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let expected = 0;
  for (const s of spans) {
    if (s.begin !== expected) {
      const what = s.begin > expected ? `a gap at [${expected}, ${s.begin})` : `an overlap at ${s.begin}`;
      return err(BAD_TENSOR, `tensor ${s.name}: ${what}`);
    }
    expected = s.end;
  }
  if (expected !== dataLen) return err(BAD_TENSOR, `${dataLen - expected} bytes after the last tensor`);
  return ok({ tensors, metadata });
}

/** Sets an own enumerable property, safe for names like "__proto__". */
function defineEntry<T>(obj: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * The tensor as Float32Array: F32 data are returned as a view when 4-byte aligned (aliasing the
 * file bytes) and copied otherwise; F16 data are converted. Throws TypeError for other dtypes.
 */
export function tensorAsFloat32(t: { dtype: Dtype; data: Uint8Array }): Float32Array {
  const { data } = t;
  if (t.dtype === 'F16') {
    const n = data.length >> 1;
    const out = new Float32Array(n);
    const table = f16Table();
    for (let i = 0; i < n; i++) out[i] = table[data[2 * i] | (data[2 * i + 1] << 8)];
    return out;
  }
  if (t.dtype !== 'F32') throw new TypeError(`tensorAsFloat32: dtype ${t.dtype} is not a float type`);
  const n = data.length >> 2;
  if (LITTLE_ENDIAN_HOST) {
    if ((data.byteOffset & 3) === 0) return new Float32Array(data.buffer, data.byteOffset, n);
    const out = new Float32Array(n);
    new Uint8Array(out.buffer).set(data.subarray(0, 4 * n));
    return out;
  }
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
  return out;
}
