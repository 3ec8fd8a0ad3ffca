// The two tokenizers: GPT-2's ids from js-tiktoken's ranks (known ids of r50k_base), the byte
// tokenizer's UTF-8 bytes, and the checks that keep a model's vocabulary and an island's tokenizer
// those of the run.
import { describe, expect, it } from 'vitest';
import {
  checkIslandTokenizer,
  checkVocab,
  checkpointTokenizer,
  loadTokenizer,
  rankBytes,
  gpt2Ranks,
  tokenizerName,
} from '../core/data/tokenizer.ts';
import { getPreset } from '../core/model/config.ts';

describe('tokenizers', () => {
  it('gpt2 gives r50k_base ids, <|endoftext|> as plain text, and decodes back', async () => {
    const t = await loadTokenizer('gpt2');
    expect(t.vocabSize).toBe(50257);
    expect(t.eot).toBe(50256);
    // GPT-2's known ids: "Hello" 15496, " world" 995; "\n" 198
    expect(Array.from(t.encode('Hello world\n'))).toEqual([15496, 995, 198]);
    const literal = Array.from(t.encode('<|endoftext|>'));
    expect(literal).not.toContain(50256); // text is never read as the special token
    const text = 'Call me Ishmael. Some years ago—never mind how long precisely';
    expect(t.decode(t.encode(text))).toBe(text);
    const bytes = rankBytes(await gpt2Ranks());
    expect(bytes.length).toBe(50256);
    expect(new TextDecoder().decode(bytes[15496])).toBe('Hello');
  });

  it('byte is UTF-8', async () => {
    const t = await loadTokenizer('byte');
    expect(Array.from(t.encode('hé'))).toEqual([104, 195, 169]);
    expect(t.decode([104, 195, 169])).toBe('hé');
  });

  it('refuses a vocabulary that does not fit, another island tokenizer, an unknown name', () => {
    expect(() => checkVocab(getPreset('tiny'), 'gpt2')).toThrow(/E_VOCAB_MISMATCH/);
    expect(() => checkVocab(getPreset('gpt2-mini'), 'byte')).toThrow(/E_VOCAB_MISMATCH/);
    expect(() => checkVocab(getPreset('gpt2-mini'), 'gpt2')).not.toThrow();
    expect(checkIslandTokenizer('byte', 'gpt2')).toMatch(/tokenizer is gpt2, the island's byte/);
    expect(checkIslandTokenizer(undefined, 'gpt2')).toBeNull(); // none said: it takes the run's
    expect(checkIslandTokenizer('gpt2', 'gpt2')).toBeNull();
    expect(() => tokenizerName('llama')).toThrow(/E_BAD_TOKENIZER/);
    expect(checkpointTokenizer({}, getPreset('gpt2-mini'))).toBe('gpt2');
    expect(checkpointTokenizer({ tokenizer: 'byte' }, getPreset('tiny'))).toBe('byte');
  });
});
