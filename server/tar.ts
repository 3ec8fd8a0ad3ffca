// A minimal POSIX ustar writer: regular files in one folder, for downloads of a folder as one file.

const BLOCK = 512;

function field(h: Uint8Array, at: number, len: number, s: string): void {
  h.set(new TextEncoder().encode(s).subarray(0, len), at);
}

const octal = (n: number, len: number) => n.toString(8).padStart(len - 1, '0');

/** `files` (name → bytes) under `folder/` as a tar archive. Names must be ASCII and short. */
export function tarFolder(folder: string, files: Record<string, Uint8Array>, mtimeMs = Date.now()): Uint8Array {
  const entries = Object.entries(files);
  let size = 2 * BLOCK; // two zero blocks end the archive
  for (const [, b] of entries) size += BLOCK + Math.ceil(b.length / BLOCK) * BLOCK;
  const out = new Uint8Array(size);
  let at = 0;
  for (const [name, bytes] of entries) {
    const h = out.subarray(at, at + BLOCK);
    field(h, 0, 100, `${folder}/${name}`);
    field(h, 100, 8, octal(0o644, 8));
    field(h, 108, 8, octal(0, 8));
    field(h, 116, 8, octal(0, 8));
    field(h, 124, 12, octal(bytes.length, 12));
    field(h, 136, 12, octal(Math.floor(mtimeMs / 1000), 12));
    field(h, 148, 8, '        '); // checksum counted as spaces
    field(h, 156, 1, '0');
    field(h, 257, 8, 'ustar\u000000');
    let sum = 0;
    for (const b of h) sum += b;
    field(h, 148, 8, `${octal(sum, 7)}\u0000`);
    out.set(bytes, at + BLOCK);
    at += BLOCK + Math.ceil(bytes.length / BLOCK) * BLOCK;
  }
  return out;
}
