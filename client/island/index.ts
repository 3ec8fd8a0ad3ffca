// The island runtime: engine-agnostic and transport-agnostic (browser worker, Node island, simulator).
export {
  IslandRuntime,
  type IslandEvent,
  type IslandProgress,
  type IslandRunSummary,
  type IslandRuntimeOptions,
  type IslandStatusName,
} from './runtime.ts';
export { type Clock, type HelloResult, type Transport, wallClock } from './transport.ts';
export { backoff } from '../../core/random.ts';
export { SocketIoTransport, type HelloIdentity, type SocketIoTransportOptions } from './transport-socketio.ts';
