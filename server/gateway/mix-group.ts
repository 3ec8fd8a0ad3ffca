// One butterfly mixing group on the live server while it exchanges and settles: its members' sockets,
// the fragments they uploaded (or the settle's waits for them), the settle's verdicts and the
// `mix:fragment` acks waiting for them, and the requests the settle sends a member (spot checks, replays).

import type { Socket } from 'socket.io';
import type { Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { FragmentUpload, GroupPlan } from '../../core/mix/broker.ts';
import { mixWeights } from '../../core/mix/butterfly.ts';
import { type AckMsg, MixAnswerSchema, MixCheckAnswerSchema } from '../../core/protocol.ts';
import { ok } from '../../core/result.ts';
import type { Ack } from './socket-events.ts';

const checkAnswer = TypeCompiler.Compile(MixAnswerSchema);
const checkCheckAnswer = TypeCompiler.Compile(MixCheckAnswerSchema);

export type Verdict = AckMsg | 'direct' | 'regroup';

/** What a group's requests need of the gateway: the limits, and where received bytes are counted. */
export interface GroupLink {
  exchangeTimeoutMs: number;
  maxFrameBytes(): number;
  /** Bytes of spot checks (their hashes) and replays received. */
  noteCheckBytes(bytes: number): void;
  noteBytesIn(bytes: number): void;
}

export class MixGroup {
  readonly ids: string[];
  /** Fragment waits of the settle, by member index; uploads that came first. */
  readonly fragWaits = new Map<number, (u: FragmentUpload | null) => void>();
  readonly uploads = new Map<number, FragmentUpload | null>();
  /** The settle's verdicts, and the members' `mix:fragment` acks waiting for them. */
  readonly verdicts = new Map<number, Verdict>();
  readonly acks = new Map<number, Ack>();

  constructor(
    readonly plan: GroupPlan,
    /** Member sockets, by member index. */
    readonly sockets: Socket[],
    private readonly link: GroupLink,
  ) {
    this.ids = plan.members.map((m) => m.islandId);
  }

  /** Member j's upload (a frame, or null: none): its ack waits for the verdict, the settle's wait ends. */
  upload(j: number, up: FragmentUpload | null, ack: Ack): void {
    const done = this.verdicts.get(j);
    if (done !== undefined) ack(ok(done));
    else this.acks.set(j, ack);
    const wait = this.fragWaits.get(j);
    this.uploads.set(j, up);
    if (wait) {
      this.fragWaits.delete(j);
      wait(up);
    }
  }

  /** Member j's socket closed: the settle's wait for it ends, or its fragment counts as none. */
  gone(j: number): void {
    const wait = this.fragWaits.get(j);
    if (wait) {
      this.fragWaits.delete(j);
      wait(null);
    } else if (!this.uploads.has(j)) this.uploads.set(j, null);
  }

  /**
   * The fragment of member j: uploaded, or null when it never came within the exchange timeout
   * (`stalled` is told when the member is connected and silent past the deadline).
   */
  fragment(j: number, deadline: number, stalled: (islandId: string) => void): Promise<FragmentUpload | null> {
    if (this.uploads.has(j)) return Promise.resolve(this.uploads.get(j)!);
    if (!this.sockets[j].connected) return Promise.resolve(null);
    return new Promise((resolve) => {
      const t = setTimeout(
        () => {
          this.fragWaits.delete(j);
          if (this.sockets[j].connected) stalled(this.ids[j]);
          resolve(null);
        },
        Math.max(0, deadline - Date.now()),
      );
      this.fragWaits.set(j, (u) => {
        clearTimeout(t);
        resolve(u);
      });
    });
  }

  /** A request to member j and its answer (`mix:check`, `mix:replay`); null: gone or no answer in time. */
  private async ask(j: number, event: 'mix:check' | 'mix:replay', body: object): Promise<unknown> {
    const s = this.sockets[j];
    if (!s.connected) return null;
    try {
      return await s.timeout(this.link.exchangeTimeoutMs).emitWithAck(event, body);
    } catch {
      return null; // no answer in time
    }
  }

  /** Member c's hash of fragment j (a spot check); null: gone, late, malformed or another group's. */
  async spotCheck(c: number, j: number): Promise<string | null> {
    const a = await this.ask(c, 'mix:check', { groupId: this.plan.groupId, j });
    if (!checkCheckAnswer.Check(a) || a.groupId !== this.plan.groupId || !a.hash) return null;
    this.link.noteCheckBytes(a.hash.length);
    return a.hash;
  }

  /** Member j's committed Δ frame (an audit's replay); null: gone, late, malformed, oversized or another group's. */
  async replay(j: number): Promise<Uint8Array | null> {
    const a = await this.ask(j, 'mix:replay', { groupId: this.plan.groupId });
    if (!checkAnswer.Check(a)) return null;
    const { groupId, frame } = a as Static<typeof MixAnswerSchema>;
    if (groupId !== this.plan.groupId || !frame || frame.length > this.link.maxFrameBytes()) return null;
    this.link.noteCheckBytes(frame.length);
    this.link.noteBytesIn(frame.length);
    return frame;
  }

  /** Member j's verdict (the first one holds), to its waiting ack if any. */
  verdict(j: number, v: Verdict): void {
    if (this.verdicts.has(j)) return;
    this.verdicts.set(j, v);
    const ack = this.acks.get(j);
    if (ack) {
      this.acks.delete(j);
      ack(ok(v));
    }
  }
}

/** The plan with its members in `order` (their weights follow them; the ranges depend on k only). */
export function inOrderOf(plan: GroupPlan, order: string[]): GroupPlan {
  const members = order.map((id) => plan.members.find((m) => m.islandId === id)!);
  return { ...plan, members, weights: mixWeights(members.map((m) => m.tokens)) };
}
