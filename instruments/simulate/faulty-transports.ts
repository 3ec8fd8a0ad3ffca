// The simulator's misbehaving island links: a client that rewrites its Δ before sending (the attacks the
// coordinator's validation must survive), and one that crashes as it uploads.

import type { HelloResult, Transport } from '../../client/island/transport.ts';
import { decodeDelta, encodeDelta, peekHeader } from '../../core/codec/index.ts';
import type { AckMsg, Assignment, DeltaMeta, HelloMsg, ModelSnapshotMsg, UpdateMsg } from '../../core/protocol.ts';
import { gaussian, mixSeed, mulberry32 } from '../../core/random.ts';
import { type Result, err } from '../../core/result.ts';
import type { Behaviour } from './types.ts';

/** Every call passed to the inner transport: the base of the simulator's misbehaving links. */
class PassThrough implements Transport {
  constructor(protected readonly inner: Transport) {}
  hello(m: HelloMsg): Promise<Result<HelloResult>> {
    return this.inner.hello(m);
  }
  fetchModel(): Promise<Result<ModelSnapshotMsg>> {
    return this.inner.fetchModel();
  }
  nextAssignment(): Promise<Result<Assignment>> {
    return this.inner.nextAssignment();
  }
  fetchUpdates(v: number): Promise<Result<UpdateMsg[]>> {
    return this.inner.fetchUpdates(v);
  }
  onUpdate(l: (m: UpdateMsg) => void): () => void {
    return this.inner.onUpdate(l);
  }
  close(r: string): Promise<void> {
    return this.inner.close(r);
  }
  submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    return this.inner.submitDelta(meta, frame);
  }
}

/**
 * A modified client: it trains honestly, then rewrites its delta before sending (the attacks the
 * coordinator's validation must survive). Same codec settings as the honest frame.
 */
export class TamperingTransport extends PassThrough {
  private readonly randn: () => number;
  constructor(
    inner: Transport,
    private readonly behaviour: Behaviour,
    private readonly n: number,
    seed: number,
  ) {
    super(inner);
    this.randn = gaussian(mulberry32(seed));
  }
  override submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const h = peekHeader(frame);
    const d = decodeDelta(frame, this.n);
    if (!h.ok || !d.ok) return this.inner.submitDelta(meta, frame);
    const x = d.value;
    switch (this.behaviour) {
      case 'scaled':
        for (let i = 0; i < x.length; i++) x[i] *= 100;
        break;
      case 'scale4':
        for (let i = 0; i < x.length; i++) x[i] *= 4;
        break;
      case 'sign-flip':
        for (let i = 0; i < x.length; i++) x[i] = -x[i];
        break;
      case 'noise':
        sameNorm(x, this.randn);
        break;
      case 'collude':
        sameNorm(x, gaussian(mulberry32(mixSeed(0xc011, meta.baseVersion))));
        break;
      case 'nan':
        for (let i = 0; i < x.length; i += 97) x[i] = NaN;
        break;
      default:
        return this.inner.submitDelta(meta, frame);
    }
    const enc = h.value.encoding;
    // topk keeps k of n; sparse keeps k of each chunk of blockSize
    const topkFraction = h.value.k ? h.value.k / (enc === 'sparse' ? h.value.blockSize : this.n) : undefined;
    const forged = encodeDelta(x, {
      encoding: enc,
      blockSize: h.value.blockSize || undefined,
      deflate: h.value.deflated,
      topkFraction,
      strided: h.value.strided,
      valueBits: h.value.valueBits === 1 ? 1 : undefined,
    });
    return this.inner.submitDelta(meta, forged);
  }
}

/** Replaces x by Gaussian noise from `randn` with the same L2 norm. */
function sameNorm(x: Float32Array, randn: () => number): void {
  let ss = 0,
    rr = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  for (let i = 0; i < x.length; i++) {
    x[i] = randn();
    rr += x[i] * x[i];
  }
  const c = Math.sqrt(ss / Math.max(rr, 1e-30));
  for (let i = 0; i < x.length; i++) x[i] *= c;
}

/** A link whose `submitDelta` crashes the island instead when `draw()` says so: the Δ never arrives. */
export class DropOnUpload extends PassThrough {
  constructor(
    inner: Transport,
    private readonly draw: () => boolean,
    private readonly crash: () => void,
  ) {
    super(inner);
  }
  override submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    if (!this.draw()) return this.inner.submitDelta(meta, frame);
    this.crash();
    return Promise.resolve(err('E_TRANSPORT', 'crashed as it uploaded (simulated)'));
  }
}
