// The kernel modules against their WGSL, without a device: every entry point's dispatch
// binds exactly the storage its WGSL reaches, writes only fields its `struct Params` has,
// and fills every {{NAME}} (an unfilled one throws, naming the shader). Each entry point
// has a CPU twin (defineKernel checks that on import). Adding an entry point to a .wgsl
// without a case below fails the coverage check.

import { describe, expect, it } from 'vitest';
import {
  type DispatchSpec,
  bindStorage,
  defineKernel,
  entryBindings,
  paramsLayout,
  writeParams,
} from '../shaders/kernel.ts';
import * as op from '../shaders/ops.ts';
import { TILE_VARIANTS } from '../client/island/engine/webgpu-tune.ts';

const buf = {} as GPUBuffer; // never touched without a device
const d = { C: 48, OC: 144, wOff: 4, biasOff: 8, partials: buf };
const tiles = [undefined, ...TILE_VARIANTS];
const specs: DispatchSpec[] = [
  op.encoderForward(buf, buf, buf, { C: 48, V: 51, maxT: 32, wteOff: 0, wpeOff: 8 }),
  ...op.encoderBackward(buf, buf, buf, { C: 48, V: 51, maxT: 32, wteOff: 0, wpeOff: 8 }),
  op.layernormForward(buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48 }),
  op.residualLayernormForward(buf, buf, buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48 }),
  ...op.layernormBackward(buf, buf, buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48, partials: buf }),
  ...tiles.flatMap((tile) =>
    [false, true].flatMap((vec4) => [
      op.matmulForward(buf, buf, buf, { ...d, vec4, tile, geluOff: 16 }),
      ...op.matmulBackward(buf, buf, buf, buf, buf, { ...d, vec4, dwVec4: vec4, tile, dwTile: tile }),
    ]),
  ),
  op.attentionForward(buf, buf, buf, { C: 48, NH: 4 }),
  ...op.attentionBackward(buf, buf, buf, buf, buf, buf, { C: 48, NH: 4 }),
  op.geluForward(buf, buf, { width: 192 }),
  op.geluBackward(buf, buf, buf, { width: 192 }),
  op.meanLoss(buf, buf),
  op.crossEntropyChunkForward(buf, buf, buf, buf, { v0: 64, width: 51, first: false, last: true }),
  op.crossEntropyChunkBackward(buf, buf, buf, { v0: 64, width: 51 }),
  ...op.gradNorm(buf, buf, buf, { N: 20011 }),
  // binding windows: the grad norm's partial sums in pieces (a running sum carried between them)
  ...op.gradNorm(buf, buf, buf, {
    N: 20011,
    pieces: [
      [0, 10240],
      [10240, 20011],
    ],
    carry: buf,
  }),
  op.adamwUpdate(buf, buf, buf, buf, buf, {
    N: 20011,
    ranges: [
      [0, 10, true],
      [10, 20011, false],
    ],
  }),
  op.pseudoGradient(buf, buf, buf, { N: 20011 }),
  // --precision f16: half.wgsl and the LayerNorm in both storage forms, and the f16 forms of the
  // encoder, matmul, attention, adamw
  op.encoderForwardF16(buf, buf, buf, { C: 48, V: 51, maxT: 32, wteOff: 0, wpeOff: 8 }),
  ...op.HALF_FORMS.flatMap((form) => [
    op.layernormForwardF16(buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48, form }),
    op.residualLayernormForwardF16(buf, buf, buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48, form }),
    ...op.layernormBackward(buf, buf, buf, buf, buf, buf, buf, { C: 48, wOff: 0, bOff: 48, partials: buf, half: form }),
    op.geluBackwardF16(buf, buf, { width: 192, form }),
    op.pseudoGradientF16(buf, buf, buf, { N: 20011, form }),
    op.packF16(buf, buf, { N: 20011, form }),
  ]),
  op.matmulForward(buf, buf, buf, { ...d, geluOff: 16, half: { inp: true, w: true, out: true } }),
  ...op.matmulBackward(buf, buf, buf, buf, buf, { ...d, half: { inp: true, w: true } }),
  op.attentionForward(buf, buf, buf, { C: 48, NH: 4, half: true }),
  ...op.attentionBackward(buf, buf, buf, buf, buf, buf, { C: 48, NH: 4, half: true }),
  op.adamwUpdate(buf, buf, buf, buf, buf, {
    N: 20011,
    ranges: [
      [0, 10, true],
      [10, 20011, false],
    ],
    copy: buf,
  }),
];

describe('kernel modules read their WGSL', () => {
  it('every entry point of every kernel is dispatched here, and each dispatch is consistent with its WGSL', () => {
    const all = op.KERNELS.flatMap((k) => [...k.entries.keys()].map((e) => `${k.file} ${e}`));
    expect(new Set(specs.map((s) => `${s.kernel.file} ${s.entry}`))).toEqual(new Set(all));
    for (const s of specs) {
      const where = `${s.kernel.file} ${s.entry}`;
      expect(
        bindStorage(s).map(([b]) => b),
        where,
      ).toEqual(s.kernel.entries.get(s.entry)!.bindings);
      writeParams(
        s.kernel.params,
        s.params({ B: 3, T: 17 }),
        new DataView(new ArrayBuffer(s.kernel.params.bytes)),
        0,
        where,
      );
      expect(s.kernel.source(s.defines)).not.toMatch(/\{\{/);
    }
    expect(op.MAX_STORAGE_BINDINGS).toBe(7); // residual_layernorm_forward; browsers guarantee 8
  });

  it('an unfilled placeholder fails when the source is made, naming the shader', () => {
    expect(() => op.attention.source({})).toThrow('attention.wgsl: placeholder {{HS}} left unfilled');
    expect(op.attention.requiredDefines).toEqual(['HS']);
    const k = defineKernel(
      'probe',
      'struct Params { n: u32 }\n@compute @workgroup_size({{WG}})\nfn probe_main() {}\nconst X: u32 = {{X=4}}u;\n',
      { probe_main: () => 0 },
    );
    expect(k.requiredDefines).toEqual(['WG']);
    expect(() => k.source({})).toThrow('probe.wgsl: placeholder {{WG}} left unfilled');
    expect(k.source({ WG: 64 })).toContain('@workgroup_size(64)');
  });

  it('Params layouts and bindings follow the WGSL rules and the calls an entry makes', () => {
    const p = paramsLayout(
      'struct Params {\n  n: u32,\n  s: f32, // c\n  v: vec4<u32>,\n  r: array<vec4<u32>, 2>,\n}',
      'x.wgsl',
    );
    expect([...p.fields].map(([k, f]) => [k, f.type, f.offsets[0], f.offsets.length])).toEqual([
      ['n', 'u32', 0, 1],
      ['s', 'f32', 4, 1],
      ['v', 'u32', 16, 4],
      ['r', 'u32', 32, 8],
    ]);
    expect(p.bytes).toBe(64);
    const b = entryBindings(
      [
        '@group(0) @binding(1) var<storage, read_write> out: array<f32>;',
        '@group(0) @binding(2) var<storage, read> inp: array<f32>;',
        '@group(0) @binding(3) var<storage, read> unused: array<f32>;',
        '@group(0) @binding(8) var<uniform> st: Step;',
        'fn helper(i: u32) -> f32 { return inp[i] * st.lr; } // unused[i]',
        '@compute @workgroup_size(1)\nfn a(@builtin(local_invocation_index) i: u32) { out[i] = helper(i); }',
        '@compute @workgroup_size(1)\nfn b(@builtin(local_invocation_index) i: u32) { out[i] = p.unused; }',
      ].join('\n'),
    );
    expect(b.get('a')).toEqual({ bindings: [1, 2], step: true });
    expect(b.get('b')).toEqual({ bindings: [1], step: false });
    expect(() => defineKernel('twinless', '@compute @workgroup_size(1)\nfn t_main() {}\n', {})).toThrow(
      'twinless.wgsl: entry points without a CPU twin: [t_main]',
    );
  });

  it('a dispatch naming a wrong buffer or Params field fails with the entry named', () => {
    const spec = op.geluForward(buf, buf, { width: 4 });
    expect(() => bindStorage({ ...spec, buffers: { out: buf } })).toThrow(
      'gelu.wgsl gelu_forward: buffers for bindings [1] given, the entry binds [1,2]',
    );
    expect(() => bindStorage({ ...spec, buffers: { out: buf, input: buf } })).toThrow(
      'gelu.wgsl has no storage variable input',
    );
    expect(() =>
      writeParams(spec.kernel.params, { n: 1 }, new DataView(new ArrayBuffer(8)), 0, 'gelu_forward'),
    ).toThrow('gelu_forward: Params has no field n');
  });
});
