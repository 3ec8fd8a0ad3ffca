// Byte-level tokenizer: a token is a UTF-8 byte (vocab 256), so any text is valid input.

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

export function encodeText(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Decodes bytes; invalid UTF-8 (a sample cut mid-character) becomes U+FFFD. */
export function decodeTokens(tokens: ArrayLike<number>): string {
  return decoder.decode(Uint8Array.from(tokens));
}
