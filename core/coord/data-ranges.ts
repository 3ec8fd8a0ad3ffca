// The range ledger of a shard run: which token ranges of the train shards each assignment trains,
// so an epoch covers every train token once across the fleet before any repeat.
//
// - A range is `{shard, offset, length}` in tokens, length a multiple of the assignment's step
//   (unit = batchSize × (seqLen + 1): a step's B rows of T + 1 tokens, each token read once).
// - take() draws from the oldest open epoch's free intervals (shards in index order, low offsets
//   first); when none holds one step, the next epoch opens with every token free. A range shorter
//   than asked (a shard's end) shortens the round.
// - trained(): a kept Δ of `steps` steps marks its range's first steps × unit tokens trained; the
//   rest goes back to the pool. release(): a rejected Δ, or an island gone without one, returns
//   the whole range to its epoch's pool (ranges of older epochs are served first).
// - An epoch closes when none of its ranges is in flight and no free interval holds a step; what is
//   left (each shard's tail shorter than a step) is counted as skipped.
// The ledger's state is plain JSON and travels in the coordinator's snapshot (the checkpoint).

export interface TokenRange {
  shard: string;
  offset: number;
  length: number;
}

export interface RangeShard {
  name: string;
  tokens: number;
}

interface Held {
  islandId: string;
  roundId: number;
  epoch: number;
  unit: number;
  range: TokenRange;
  /** Its Δ was accepted and is held in the open round (an island leaving does not return it). */
  submitted: boolean;
}

interface OpenEpoch {
  epoch: number;
  /** Free intervals, in draw order. */
  free: TokenRange[];
}

export interface DataRangesState {
  shards: RangeShard[];
  epochs: OpenEpoch[];
  held: Held[];
  /** Epochs closed so far. */
  epochsDone: number;
  /** Tokens trained per shard (index order), all epochs. */
  trained: number[];
  /** Tokens skipped by closed epochs (tails shorter than a step). */
  skipped: number;
  /** The last RECENT_KEPT ranges trained (the part a kept Δ trained), oldest first. */
  recent: RangeRecord[];
}

export interface RangeRecord {
  islandId: string;
  roundId: number;
  epoch: number;
  shard: string;
  offset: number;
  length: number;
}

export const RECENT_KEPT = 256;

export interface DataRangesStatus {
  epoch: number;
  epochsDone: number;
  /** Fraction of the current epoch's train tokens trained or in flight. */
  epochProgress: number;
  trainTokens: number;
  skipped: number;
  shards: { name: string; tokens: number; trained: number }[];
  /** `submitted`: its Δ is accepted and waits in the open round or merge window. */
  inFlight: (RangeRecord & { submitted: boolean })[];
  recent: RangeRecord[];
}

const sumFree = (e: OpenEpoch) => e.free.reduce((a, r) => a + r.length, 0);

export class DataRanges {
  private readonly s: DataRangesState;

  constructor(shards: readonly RangeShard[] | DataRangesState) {
    if (!('epochs' in shards)) {
      const list = shards.map((x) => ({ name: x.name, tokens: x.tokens }));
      const trained = list.map(() => 0);
      this.s = { shards: list, epochs: [], held: [], epochsDone: 0, trained, skipped: 0, recent: [] };
    } else this.s = structuredClone(shards);
  }

  /** A copy of the state (for the snapshot). */
  state(): DataRangesState {
    return structuredClone(this.s);
  }

  private get trainTokens(): number {
    return this.s.shards.reduce((a, x) => a + x.tokens, 0);
  }

  /**
   * A range of at most `steps` steps of `unit` tokens for (islandId, roundId), or null when no shard
   * holds one step. Returns the range and its steps.
   */
  take(islandId: string, roundId: number, steps: number, unit: number): { range: TokenRange; steps: number } | null {
    const again = this.find(islandId, roundId); // a round assigned again draws afresh
    if (again && !again.submitted) this.release(islandId, roundId);
    if (steps <= 0 || unit <= 0 || again?.submitted) return null;
    if (!this.s.shards.some((x) => x.tokens >= unit)) return null;
    for (;;) {
      for (const e of this.s.epochs) {
        const i = e.free.findIndex((r) => r.length >= unit);
        if (i < 0) continue;
        const r = e.free[i];
        const n = Math.min(steps, Math.floor(r.length / unit));
        const range = { shard: r.shard, offset: r.offset, length: n * unit };
        if (n * unit === r.length) e.free.splice(i, 1);
        else e.free[i] = { shard: r.shard, offset: r.offset + n * unit, length: r.length - n * unit };
        this.s.held.push({ islandId, roundId, epoch: e.epoch, unit, range, submitted: false });
        return { range: { ...range }, steps: n };
      }
      this.closeEpochs(unit);
      const next = this.s.epochsDone + this.s.epochs.length;
      this.s.epochs.push({
        epoch: next,
        free: this.s.shards.map((x) => ({ shard: x.name, offset: 0, length: x.tokens })),
      });
    }
  }

  /** The range (islandId, roundId) holds, if any (what the server assigned: never the island's claim). */
  rangeOf(islandId: string, roundId: number): TokenRange | undefined {
    const h = this.find(islandId, roundId);
    return h && { ...h.range };
  }

  /** Its Δ was accepted into the open round: the island leaving no longer returns the range. */
  submitted(islandId: string, roundId: number): void {
    const h = this.find(islandId, roundId);
    if (h) h.submitted = true;
  }

  /** Its Δ is in θ, of `tokens` = steps × batchSize × seqLen model tokens: trained() its steps. */
  trainedTokens(islandId: string, roundId: number, tokens: number, seqLen: number): void {
    const h = this.find(islandId, roundId);
    if (h) this.trained(islandId, roundId, Math.floor(tokens / ((h.unit / (seqLen + 1)) * seqLen)));
  }

  /** Its Δ of `steps` steps is in θ: those tokens are trained, the rest of the range is free again. */
  trained(islandId: string, roundId: number, steps: number): void {
    const i = this.s.held.findIndex((h) => h.islandId === islandId && h.roundId === roundId);
    if (i < 0) return;
    const h = this.s.held[i];
    this.s.held.splice(i, 1);
    const done = Math.min(h.range.length, Math.max(0, steps) * h.unit);
    this.s.trained[this.s.shards.findIndex((x) => x.name === h.range.shard)] += done;
    if (done > 0) {
      const { islandId: id, roundId, epoch } = h;
      this.s.recent.push({ islandId: id, roundId, epoch, shard: h.range.shard, offset: h.range.offset, length: done });
      if (this.s.recent.length > RECENT_KEPT) this.s.recent.shift();
    }
    if (done < h.range.length)
      this.free(h.epoch, { shard: h.range.shard, offset: h.range.offset + done, length: h.range.length - done });
    this.closeEpochs(h.unit);
  }

  /** Its Δ was rejected (or will never come): the range goes back to its epoch's pool. */
  release(islandId: string, roundId: number): void {
    const i = this.s.held.findIndex((h) => h.islandId === islandId && h.roundId === roundId);
    if (i < 0) return;
    const h = this.s.held[i];
    this.s.held.splice(i, 1);
    this.free(h.epoch, h.range);
  }

  /** A Δ refused at submit: its range goes back unless a Δ for it was already accepted (a resend refused). */
  refused(islandId: string, roundId: number): void {
    if (this.find(islandId, roundId)?.submitted === false) this.release(islandId, roundId);
  }

  /** Returns every range of `islandId` with no accepted Δ, but those of `keep` (round ids it may still send). */
  releaseIsland(islandId: string, keep?: ReadonlySet<number>): void {
    for (const h of this.s.held.filter((x) => x.islandId === islandId && !x.submitted && !keep?.has(x.roundId)))
      this.release(h.islandId, h.roundId);
  }

  /** Every range held with no accepted Δ, by islands `gone` says are gone (allocates nothing when none is). */
  releaseGone(gone: (islandId: string) => boolean): void {
    for (let i = this.s.held.length - 1; i >= 0; i--) {
      const h = this.s.held[i];
      if (!h.submitted && gone(h.islandId)) {
        this.s.held.splice(i, 1);
        this.free(h.epoch, h.range);
      }
    }
  }

  status(): DataRangesStatus {
    const s = this.s;
    const total = this.trainTokens;
    const cur = s.epochs[s.epochs.length - 1];
    const left = cur ? sumFree(cur) : total;
    return {
      epoch: cur ? cur.epoch : s.epochsDone,
      epochsDone: s.epochsDone,
      epochProgress: total > 0 ? 1 - left / total : 0,
      trainTokens: total,
      skipped: s.skipped,
      shards: s.shards.map((x, i) => ({ name: x.name, tokens: x.tokens, trained: s.trained[i] })),
      inFlight: s.held.map((h) => ({
        islandId: h.islandId,
        roundId: h.roundId,
        epoch: h.epoch,
        ...h.range,
        submitted: h.submitted,
      })),
      recent: s.recent.map((r) => ({ ...r })),
    };
  }

  private find(islandId: string, roundId: number): Held | undefined {
    return this.s.held.find((h) => h.islandId === islandId && h.roundId === roundId);
  }

  /** Back into epoch `epoch`'s pool, merged with its neighbours, in draw order. */
  private free(epoch: number, r: TokenRange): void {
    const e = this.s.epochs.find((x) => x.epoch === epoch);
    if (!e) return; // cannot happen: an epoch with a range held stays open
    const order = (x: TokenRange) => this.s.shards.findIndex((sh) => sh.name === x.shard) * 2 ** 40 + x.offset;
    let i = e.free.findIndex((x) => order(x) > order(r));
    if (i < 0) i = e.free.length;
    e.free.splice(i, 0, { ...r });
    const merge = (a: number) => {
      const x = e.free[a],
        y = e.free[a + 1];
      if (x && y && x.shard === y.shard && x.offset + x.length === y.offset) {
        e.free.splice(a, 2, { shard: x.shard, offset: x.offset, length: x.length + y.length });
        return true;
      }
      return false;
    };
    merge(i);
    if (i > 0) merge(i - 1);
  }

  /** Closes the oldest epochs with nothing in flight and no free interval of a step. */
  private closeEpochs(unit: number): void {
    while (this.s.epochs.length) {
      const e = this.s.epochs[0];
      if (this.s.held.some((h) => h.epoch === e.epoch) || e.free.some((r) => r.length >= unit)) return;
      this.s.skipped += sumFree(e);
      this.s.epochs.shift();
      this.s.epochsDone++;
    }
  }
}
