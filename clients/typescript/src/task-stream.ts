/**
 * Resumable task event streams (SEP-2694 draft, docs/protocol.md 3.9): a
 * durable task's events read from a cursor, every `seq` checked to be the
 * last plus one, resumed with `after` (or `Last-Event-ID`) on any drop until
 * the task's terminal status event, and loud where the cursor cannot be
 * honoured. The same rules as the session stream, with the task's numbering
 * (seq 0, 1, 2, ...). Three ways to read it, one iterator:
 *
 * - `post`: `tasks/stream {taskId, after}` POSTed in the stateless era (the
 *   draft's own surface; any SEP-2694 server);
 * - `sse`: `GET P/tasks/{taskId}/events` with `Last-Event-ID`;
 * - `websocket`: the same GET upgraded with the cursor-safe handshake of
 *   section 5 (echo of the latest seq `C`, replay up to `C`, then the ack),
 *   falling back to `sse` from the same cursor where the upgrade is refused
 *   or not resumable.
 *
 * It follows the Rust client (crates/client/src/task_stream.rs), with one
 * difference: a gap or a repeated seq within a connection is healed by
 * resuming from the last seq (as the session stream does), not skipped.
 *
 * This module holds the iterator: the reconnect loop and the check of every
 * event. The connections are in task-http.ts (`post`, `sse`) and
 * task-socket.ts (`websocket`); what a refusal means is in task-refusal.ts.
 */

import { ProtocolViolationError, RpcError, TransientError, type CursorDiscontinuityError, type HttpStatusError } from "./errors.js";
import type { JSONRPCMessage } from "./link.js";
import { asError, childController, isFatal, sleep } from "./link.js";
import { ResumeBackoff } from "./resume-backoff.js";
import type { TaskConnection, TaskLink } from "./task-connection.js";
import { httpItems } from "./task-http.js";
import { rpcRefusal } from "./task-refusal.js";
import { Fallback, socketItems } from "./task-socket.js";
import { UpgradeFallback } from "./upgrade-fallback.js";

/** The prefix of the transport's own status event types (`…/working`, `…/input_required`, `…/completed`, ...). */
export const TASK_STATUS_PREFIX = "dev.mcp-resume/task/";

/** The terminal status events: the stream's last event. */
const TERMINAL = new Set(["completed", "failed", "cancelled"].map((s) => TASK_STATUS_PREFIX + s));

/** One event of a task's stream. */
export interface TaskEvent {
  /** Its position in the task's stream: 0, 1, 2, ... with no gap and no repeat. */
  seq: number;
  taskId: string;
  /**
   * `dev.mcp-resume/task/STATUS` for the transport's status events
   * ({@link TASK_STATUS_PREFIX}), a vendor-prefixed type for the task's own.
   */
  type: string;
  /** The event's payload: for a status event, the task as `tasks/get` shows it. */
  payload: Record<string, unknown>;
  /** Whether it is the terminal status event (`completed`, `failed`, `cancelled`): the stream's last. */
  terminal: boolean;
  /** The `notifications/tasks/event` as received. */
  message: JSONRPCMessage;
}

/** How to read a task's events. */
export interface StreamTaskOptions {
  /**
   * The seq of the last event already processed: the stream starts after it.
   * Without it the server starts at the earliest event it retains.
   */
  after?: number;
  /**
   * `post` (default): `tasks/stream`, SEP-2694's own request; `sse`:
   * `GET P/tasks/{taskId}/events`; `websocket`: that GET upgraded with the
   * cursor-safe handshake (SSE from the same cursor where it cannot be used).
   */
  via?: "post" | "sse" | "websocket";
  /** Ends the stream (the iterator finishes without error). */
  signal?: AbortSignal;
}

/** Counters of one task stream, for tests and dashboards. */
export interface TaskStreamStats {
  /** How the current (or last) connection reads: `post`, `sse` or `websocket`. */
  via: "none" | "post" | "sse" | "websocket";
  /** Connections opened. */
  connections: number;
  /** Reconnects after a drop, a timeout or a resumable end. */
  resumes: number;
  /** Upgrades given up for SSE from the same cursor. */
  fallbacks: number;
  /** Gaps or repeats healed by resuming from the last seq. */
  gaps: number;
}

/**
 * A task's events as an async iterator: `for await (const e of stream)`.
 * It ends after the terminal event (or at once when `after` is at or past
 * it), and throws where continuity cannot be proven or the server refuses:
 * {@link CursorDiscontinuityError} (`truncated`: `events_gone`, the events
 * after the cursor are no longer retained, `floor` the earliest retained seq;
 * `ahead`: `after` is past the latest event), {@link RpcError} (an unknown or
 * expired task, a missing capability), {@link HttpStatusError} (credentials),
 * {@link ProtocolViolationError}, or an Error once `requestStreamRetries`
 * resumes in a row brought nothing. `cursor` is the seq to resume after.
 */
export class TaskEventStream implements AsyncIterable<TaskEvent> {
  private last: number | undefined;
  private readonly ac: AbortController;
  private readonly unlink: () => void;
  private readonly via: "post" | "sse" | "websocket";
  private started = false;
  /** Any event handed out by this stream (a result without a terminal event is then a fault). */
  private yielded = false;
  private readonly _stats: TaskStreamStats = { via: "none", connections: 0, resumes: 0, fallbacks: 0, gaps: 0 };

  constructor(
    private readonly link: TaskLink,
    /** The task's id (`taskId` of its `CreateTaskResult`). */
    readonly taskId: string,
    options: StreamTaskOptions = {},
  ) {
    if (options.after !== undefined && !(Number.isSafeInteger(options.after) && options.after >= 0)) {
      throw new TypeError(`after must be a non-negative integer, not ${options.after}`);
    }
    this.last = options.after;
    this.via = options.via ?? "post";
    const fromTransport = childController(link.signal);
    this.ac = fromTransport.ac;
    const outer = options.signal;
    const onOuter = () => this.ac.abort();
    if (outer?.aborted) this.ac.abort();
    else outer?.addEventListener("abort", onOuter, { once: true });
    // Called once the stream is over: neither signal keeps a listener for it.
    this.unlink = () => {
      fromTransport.unlink();
      outer?.removeEventListener("abort", onOuter);
    };
  }

  /** The seq of the last event handed out (or the `after` given): where a new stream resumes. */
  get cursor(): number | undefined {
    return this.last;
  }

  /** Counters and the current way of reading. */
  get stats(): Readonly<TaskStreamStats> {
    return { ...this._stats };
  }

  /** Stops reading; the iterator finishes. */
  close(): void {
    this.ac.abort();
    this.unlink();
  }

  /** The events, read once: a second iteration would repeat or skip events, so it throws. */
  [Symbol.asyncIterator](): AsyncIterator<TaskEvent> {
    if (this.started) throw new Error("a TaskEventStream is iterated once; start another from its cursor");
    this.started = true;
    return this.run();
  }

  /** Connections one after another, each from the last seq handed out, until the terminal event. */
  private async *run(): AsyncGenerator<TaskEvent, void, undefined> {
    const { link } = this;
    const backoff = new ResumeBackoff(link.opts, "requestRetries", 500);
    const upgrade = new UpgradeFallback(this.via === "websocket");
    try {
      while (!this.ac.signal.aborted) {
        const upgrading = upgrade.take();
        const mode = this.via === "post" ? "post" : upgrading ? "websocket" : "sse";
        let progressed = false;
        let err: Error;
        const conn = childController(this.ac.signal);
        this._stats.connections += 1;
        this._stats.via = mode;
        try {
          const c: TaskConnection = { link, taskId: this.taskId, after: this.last, ac: conn.ac };
          const items =
            mode === "websocket" ? socketItems(c, () => (this._stats.gaps += 1)) : httpItems(c, mode, (ms) => backoff.serverRetry(ms));
          let done = false;
          for await (const item of items) {
            if (item.kind === "end") {
              this.ended(item.response);
              done = true;
              break;
            }
            const event = this.check(item.message, item.id);
            progressed = true;
            this.yielded = true;
            this.last = event.seq;
            yield event;
            if (event.terminal) {
              done = true;
              break;
            }
          }
          if (done) return;
          err = new TransientError("the task stream ended before its result");
        } catch (e) {
          err = asError(e);
        } finally {
          conn.ac.abort();
          conn.unlink();
        }
        if (this.ac.signal.aborted) return;
        if (err instanceof Fallback) {
          this._stats.fallbacks += 1;
          link.log(`task ${this.taskId}: ${err.message}; SSE from ${this.last ?? "the start"}`);
          if (err.always) upgrade.disable();
          else upgrade.strike();
          continue;
        }
        if (mode === "websocket") upgrade.clearStrikes();
        if (err instanceof RpcError || isFatal(err)) throw err;
        if (!backoff.failed(progressed)) {
          throw new Error(`gave up on the stream of task ${this.taskId} after ${link.opts.requestRetries} resumes without an event: ${err.message}`);
        }
        this._stats.resumes += 1;
        const wait = backoff.delay();
        link.log(`task ${this.taskId}: ${err.message}; resuming after ${this.last ?? "-"} in ${Math.round(wait)} ms`);
        await sleep(wait, this.ac.signal);
      }
    } finally {
      this.unlink();
    }
  }

  /** The event in `message`, checked to be the next seq (a gap or a repeat resumes from the last one). */
  private check(message: JSONRPCMessage, id: string | undefined): TaskEvent {
    const p = message.params as { seq?: unknown; taskId?: unknown; type?: unknown; payload?: unknown } | undefined;
    const seq = p?.seq;
    if (!p || !Number.isSafeInteger(seq) || (seq as number) < 0 || typeof p.type !== "string") {
      throw new ProtocolViolationError(`a malformed task event: ${JSON.stringify(message).slice(0, 200)}`);
    }
    if (p.taskId !== undefined && p.taskId !== this.taskId) {
      throw new ProtocolViolationError(`an event of task ${String(p.taskId)} on the stream of ${this.taskId}`);
    }
    if (id !== undefined && id !== String(seq)) throw new ProtocolViolationError(`an event with id ${id} and seq ${seq}`);
    const s = seq as number;
    if (this.last !== undefined && s !== this.last + 1) {
      this._stats.gaps += 1;
      throw new TransientError(s <= this.last ? `seq ${s} again after ${this.last}` : `gap: expected seq ${this.last + 1}, got ${s}`);
    }
    const payload = p.payload && typeof p.payload === "object" ? (p.payload as Record<string, unknown>) : {};
    return { seq: s, taskId: this.taskId, type: p.type, payload, terminal: TERMINAL.has(p.type), message };
  }

  /** The stream ended (its response, or a WebSocket's 1000) before a terminal event was handed out. */
  private ended(response: JSONRPCMessage | undefined): void {
    if (response?.error !== undefined) throw rpcRefusal(response.error as Record<string, unknown>, "tasks/stream", this.taskId, this.last);
    // A cursor at or past the terminal event is answered with the result at
    // once (3.9). After events without the terminal one, the stream is short.
    if (this.yielded) {
      throw new ProtocolViolationError(`the stream of task ${this.taskId} ended after seq ${this.last} without its terminal event`);
    }
  }
}
