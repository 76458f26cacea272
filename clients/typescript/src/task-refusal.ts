/**
 * What a task stream's server means when it answers with something other
 * than events (docs/protocol.md 3.9): a JSON-RPC error of `tasks/stream` (in
 * a response body, a refused upgrade's body, or the stream's own end) or a
 * bare HTTP status, turned into the error the iterator throws, or a
 * {@link TransientError} it resumes after.
 */

import { CursorDiscontinuityError, HttpStatusError, ProtocolViolationError, RpcError, TransientError } from "./errors.js";

/** `events_gone` (3.9: the cursor is below what the log retains). */
const EVENTS_GONE = -32010;
/** Reasons of an in-stream error after which resuming from the last seq is right (3.9, refusals). */
const RESUMABLE = new Set(["server-stopping", "log-unavailable", "log-gap"]);

/**
 * Why a request for the stream of `taskId` (read after `cursor`) was
 * answered with something other than an event stream: the JSON-RPC error in
 * the body if there is one, else what the status says.
 */
export function responseRefusal(status: number, body: string, what: string, taskId: string, cursor: number | undefined): Error {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    // Not JSON: the status says it.
  }
  const error = (v as { error?: unknown } | undefined)?.error;
  if (error && typeof error === "object") {
    const e = rpcRefusal(error as Record<string, unknown>, what, taskId, cursor);
    // 503 (the log unavailable) is answered with a JSON-RPC error too: passing.
    return status >= 500 || status === 429 ? new TransientError(e.message) : e;
  }
  if (status >= 500 || status === 429) return new TransientError(`${what} answered ${status}: ${body.slice(0, 200)}`);
  if (status >= 200 && status < 300) return new ProtocolViolationError(`${what} answered ${status} without an event stream: ${body.slice(0, 200)}`);
  return new HttpStatusError(what, status, body);
}

/**
 * A JSON-RPC error of `tasks/stream` as the error the iterator throws (or
 * resumes after): `events_gone` and `after-ahead` are the cursor's
 * discontinuity, passing reasons resume, the rest is the server's refusal.
 */
export function rpcRefusal(error: Record<string, unknown>, what: string, taskId: string, cursor: number | undefined): Error {
  const data = (error.data && typeof error.data === "object" ? error.data : {}) as Record<string, unknown>;
  const n = (k: string) => (typeof data[k] === "number" ? (data[k] as number) : undefined);
  const reason = typeof data.reason === "string" ? data.reason : undefined;
  const stream = `task ${taskId}`;
  if (error.code === EVENTS_GONE || reason === "events_gone") {
    const floor = n("earliestSeq") ?? 0;
    return new CursorDiscontinuityError(
      { reason: "truncated", cursor: cursor ?? 0, head: n("latestSeq") ?? floor - 1, floor, resumeCursor: floor - 1, stream },
      `cursor discontinuity (truncated) on the ${stream} stream: the events after ${cursor} are gone (the earliest retained is ${floor})`,
    );
  }
  if (reason === "after-ahead") {
    const head = n("latestSeq") ?? 0;
    return new CursorDiscontinuityError(
      { reason: "ahead", cursor: cursor ?? 0, head, floor: 0, resumeCursor: head, stream },
      `cursor discontinuity (ahead) on the ${stream} stream: after ${cursor} is past the latest event ${head}`,
    );
  }
  if (reason && RESUMABLE.has(reason)) return new TransientError(`${what} ended: ${String(error.message ?? reason)}`);
  return new RpcError(what, error);
}
