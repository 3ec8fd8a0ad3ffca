// The RTCPeerConnection iceServers an operator hands every butterfly-mixing group member (`atoll
// serve --mix-ice-servers FILE`): STUN for server-reflexive candidates, TURN for peers behind
// symmetric NATs (docs/protocol.md, "WebRTC settings"). They travel in every MixPlanMsg, to
// strangers, so the file is checked and bounded here, once, before the server starts.

import { type Static, Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { type Result, err, ok } from '../../core/result.ts';

const IceUrl = Type.String({ pattern: '^(stun|stuns|turn|turns):\\S{1,250}$' });

export const IceServersSchema = Type.Array(
  Type.Object(
    {
      urls: Type.Union([IceUrl, Type.Array(IceUrl, { minItems: 1, maxItems: 4 })]),
      username: Type.Optional(Type.String({ maxLength: 256 })),
      credential: Type.Optional(Type.String({ maxLength: 256 })),
    },
    { additionalProperties: false },
  ),
  { maxItems: 8 },
);
export type IceServers = Static<typeof IceServersSchema>;

const check = TypeCompiler.Compile(IceServersSchema);

/** A JSON array of iceServers (at most 8; urls stun:, stuns:, turn: or turns:), or why not. */
export function parseIceServers(text: string): Result<IceServers> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return err('E_BAD_CONFIG', `not JSON: ${(e as Error).message}`);
  }
  if (!check.Check(v)) {
    const first = check.Errors(v).First();
    return err(
      'E_BAD_CONFIG',
      `not an iceServers array: ${first ? `${first.path || '/'} ${first.message}` : 'invalid'}`,
    );
  }
  return ok(v);
}
