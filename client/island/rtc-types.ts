// The shapes butterfly mixing's data channels are built on (mix-webrtc.ts): the parts of the WebRTC API
// used (RTCPeerConnection, its data channel), the server's signalling relay as a member sees it, a
// group's link plan, and the GroupNet a member joins and leaves (WebRtcPeerNet, mix-relay's RelayPeerNet).

import type { MemberPlan, PeerNet } from './mix-member.ts';

/** What connecting a group's or a ring's links needs of its plan. */
export type LinkPlan = Pick<MemberPlan, 'groupId' | 'index' | 'linked' | 'iceServers'> & {
  members: ReadonlyArray<{ islandId: string }>;
};

/** The parts of the standard RTCPeerConnection API used here. */
export interface RtcPeer {
  createDataChannel(label: string, init?: { ordered?: boolean }): RtcChannel;
  createOffer(): Promise<{ type: string; sdp?: string }>;
  createAnswer(): Promise<{ type: string; sdp?: string }>;
  setLocalDescription(d: { type: string; sdp?: string }): Promise<void>;
  setRemoteDescription(d: { type: string; sdp?: string }): Promise<void>;
  readonly localDescription: { type: string; sdp: string } | null;
  readonly iceGatheringState: string;
  readonly connectionState: string;
  addEventListener(
    type: 'icegatheringstatechange' | 'connectionstatechange' | 'datachannel',
    l: (e: { channel?: RtcChannel }) => void,
  ): void;
  close(): void;
}

export interface RtcChannel {
  binaryType: string;
  readonly readyState: string;
  send(data: Uint8Array): void;
  addEventListener(type: 'open' | 'close' | 'message', l: (e: { data?: unknown }) => void): void;
  close(): void;
}

export type RtcPeerConstructor = new (cfg: { iceServers: MemberPlanIce[] }) => RtcPeer;
export type MemberPlanIce = { urls: string | string[]; username?: string; credential?: string };

/** The server's signalling relay (`mix:signal`), and the `mix:lost` report, as the member sees them. */
export interface SignalPort {
  send(groupId: number, to: number, kind: 'offer' | 'answer' | 'candidate', data: string): void;
  onSignal(l: (groupId: number, from: number, kind: 'offer' | 'answer' | 'candidate', data: string) => void): void;
  /** The link with island `peer`, made by group `groupId`'s signalling, is gone (absent: nobody to tell). */
  lost?(peer: string, groupId: number): void;
}

/**
 * A member's data channels to its groups' peers: joined per plan (reusing the links it lists as linked), left when
 * done.
 */
export interface GroupNet extends PeerNet {
  /** Connects to a group's partners; resolves whether every one was already linked (nothing signalled). */
  join(plan: LinkPlan): boolean | Promise<boolean>;
  leave(groupId: number): void;
}
