// A sample's bytes as text a person can read: valid UTF-8 as characters, and every byte that is
// not (a broken sequence, a control byte) as a visible \xNN escape, instead of the replacement
// characters and invisible control bytes an early, untrained byte-level model mostly writes.

export interface TextPiece {
  text: string;
  /** true: an escaped byte (render it so it is not mistaken for the model writing "\x"). */
  escaped: boolean;
}

const hex = (b: number) => `\\x${b.toString(16).padStart(2, '0')}`;

/** Length of the valid UTF-8 sequence starting at i (0: not one). */
function sequenceLength(b: Uint8Array, i: number): number {
  const c = b[i];
  let n: number, min: number;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    min = 0x10000;
  } else return 0;
  if (i + n > b.length) return 0;
  let cp = c & (0x7f >> n);
  for (let k = 1; k < n; k++) {
    const d = b[i + k];
    if ((d & 0xc0) !== 0x80) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

/** Splits bytes into readable text and escaped bytes (newline and tab stay as they are). */
export function visibleText(bytes: Uint8Array): TextPiece[] {
  const out: TextPiece[] = [];
  const push = (text: string, escaped: boolean) => {
    const last = out[out.length - 1];
    if (last && last.escaped === escaped) last.text += text;
    else out.push({ text, escaped });
  };
  const decoder = new TextDecoder();
  for (let i = 0; i < bytes.length; ) {
    const c = bytes[i];
    const n = sequenceLength(bytes, i);
    if (n === 0 || (n === 1 && ((c < 0x20 && c !== 0x0a && c !== 0x09) || c === 0x7f))) {
      push(hex(c), true);
      i += 1;
    } else {
      push(decoder.decode(bytes.subarray(i, i + n)), false);
      i += n;
    }
  }
  return out;
}

/** The prompt, then the sample's bytes as DOM nodes: readable text, and escaped bytes marked as such. */
export function sampleNodes(prompt: string, bytes: Uint8Array): Node[] {
  const p = document.createElement('span');
  p.className = 'prompt';
  p.textContent = prompt;
  return [
    p,
    ...visibleText(bytes).map((piece) => {
      if (!piece.escaped) return document.createTextNode(piece.text);
      const e = document.createElement('span');
      e.className = 'esc';
      e.title = 'a byte that is not readable text';
      e.textContent = piece.text;
      return e;
    }),
  ];
}

/** The blinking caret after a sample being written. */
export function caret(): HTMLElement {
  const c = document.createElement('span');
  c.className = 'caret';
  c.setAttribute('aria-hidden', 'true');
  c.textContent = '▍';
  return c;
}
