/**
 * What every connection of a task stream shares, whichever way it reads
 * (`tasks/stream` by POST, the SSE GET, its WebSocket upgrade): what it is
 * given (the transport, the task, the cursor) and what it hands back to the
 * reader, which checks each event's seq the same way for all three.
 */

import type { JSONRPCMessage, Resolved } from "./link.js";

/** What a task stream needs from the transport. */
export interface TaskLink {
  readonly url: URL;
  readonly opts: Resolved;
  /** Aborted when the transport closes. */
  readonly signal: AbortSignal;
  fetch(input: URL, init: RequestInit): Promise<Response>;
  /** Credentials and the caller's extra headers, without a session: task streams are of the stateless era. */
  headers(extra: Record<string, string>): Promise<Record<string, string>>;
  readonly extraHeaders: Record<string, string>;
  token(): Promise<string | undefined>;
  log(line: string): void;
}

/** One connection of a task stream: where it reads, from which cursor, and how it is ended. */
export interface TaskConnection {
  readonly link: TaskLink;
  /** The task whose events are read. */
  readonly taskId: string;
  /** The seq of the last event handed out (undefined: from the earliest retained): the connection starts after it. */
  readonly after: number | undefined;
  /** Aborted to end the connection (the stream closed, or the reader moved on). */
  readonly ac: AbortController;
}

/** What one connection hands the reader: an event, or the end of the stream (the request's response, or a WebSocket's 1000). */
export type TaskItem = { kind: "event"; message: JSONRPCMessage; id?: string } | { kind: "end"; response?: JSONRPCMessage };

/** `P/tasks/{taskId}/events` beside the transport's endpoint `P`: the SSE GET, and the URL its upgrade starts from. */
export function eventsUrl(url: URL, taskId: string): URL {
  const u = new URL(url);
  u.pathname = `${u.pathname.replace(/\/$/, "")}/tasks/${encodeURIComponent(taskId)}/events`;
  u.search = "";
  return u;
}
