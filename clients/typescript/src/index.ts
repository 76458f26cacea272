/**
 * mcp-resume-client: a resumable MCP client transport for the official
 * TypeScript SDK. See README.md.
 */

export { ResumableClientTransport } from "./transport.js";
export type { ResumableTransportOptions, SendOptions } from "./transport.js";
export type { TransportStats } from "./session-stream.js";
export type { JSONRPCMessage, ReconnectOptions } from "./link.js";
export { FileCursorStore, LocalStorageCursorStore, MemoryCursorStore } from "./stores.js";
export type { CursorStore, SavedCursor, StorageLike } from "./stores.js";
export {
  CursorDiscontinuityError,
  HttpStatusError,
  ProtocolViolationError,
  RpcError,
  SessionNotFoundError,
} from "./errors.js";
export { TASK_STATUS_PREFIX, TaskEventStream } from "./task-stream.js";
export type { StreamTaskOptions, TaskEvent, TaskStreamStats } from "./task-stream.js";
export type { DiscontinuityDetails, DiscontinuityReason } from "./errors.js";
export { REQUEST_STREAM_LOST } from "./request-stream.js";
export { WEBSOCKET_MESSAGE_LOST } from "./session-outbox.js";
export type { WebSocketConstructor, WebSocketLike } from "./ws/dom.js";
