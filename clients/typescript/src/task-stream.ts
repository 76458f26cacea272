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
 */

import { CursorDiscontinuityError, HttpStatusError, ProtocolViolationError, RpcError, TransientError } from "./errors.js";
import type { JSONRPCMessage, Resolved } from "./link.js";
import { asError, backoffDelay, childController, fetchHeaders, isFatal, mediaType, sleep, watchdog } from "./link.js";
import { decideStart } from "./seq.js";
import { SseParser } from "./sse.js";
import type { FrameSocket } from "./ws/types.js";

/** The prefix of the transport's own status event types (`…/working`, `…/input_required`, `…/completed`, ...). */
export const TASK_STATUS_PREFIX = "dev.mcp-resume/task/";

/** The terminal status events: the stream's last event. */
const TERMINAL = new Set(["completed", "failed", "cancelled"].map((s) => TASK_STATUS_PREFIX + s));
/** The stateless revision `tasks/stream` is sent as. */
const STATELESS_VERSION = "2026-07-28";
/** The extension a `tasks/stream` request declares (3.8: a client without it gets -32021). */
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";
/** `events_gone` (3.9: the cursor is below what the log retains). */
const EVENTS_GONE = -32010;
/** Reasons of an in-stream error after which resuming from the last seq is right (3.9, refusals). */
const RESUMABLE = new Set(["server-stopping", "log-unavailable", "log-gap"]);
/** WebSocket refusals in a row whose reason cannot be seen (a browser) before the upgrade is no longer tried. */
const MAX_STRIKES = 3;

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

/** What one connection hands the reader: an event, or the end of the stream (the request's response, or a WebSocket's 1000). */
type Item = { kind: "event"; message: JSONRPCMessage; id?: string } | { kind: "end"; response?: JSONRPCMessage };

/** Read SSE from the same cursor instead (this once, or from now on). */
class Fallback extends Error {
  constructor(
    message: string,
    readonly always: boolean,
  ) {
    super(message);
  }
}

let nextRequestId = 1;

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

  [Symbol.asyncIterator](): AsyncIterator<TaskEvent> {
    if (this.started) throw new Error("a TaskEventStream is iterated once; start another from its cursor");
    this.started = true;
    return this.run();
  }

  private async *run(): AsyncGenerator<TaskEvent, void, undefined> {
    const { link } = this;
    let failures = 0;
    let wsOff = this.via !== "websocket";
    let sseOnce = false;
    let strikes = 0;
    let retryMs: number | undefined;
    try {
      while (!this.ac.signal.aborted) {
        const mode = this.via === "post" ? "post" : !wsOff && !sseOnce ? "websocket" : "sse";
        sseOnce = false;
        let progressed = false;
        let err: Error;
        const conn = childController(this.ac.signal);
        this._stats.connections += 1;
        this._stats.via = mode;
        try {
          const items =
            mode === "websocket" ? this.socketItems(conn.ac) : this.httpItems(mode, conn.ac, (ms) => (retryMs = ms));
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
          if (err.always || ++strikes >= MAX_STRIKES) wsOff = true;
          else sseOnce = true;
          continue;
        }
        if (mode === "websocket") strikes = 0;
        if (err instanceof RpcError || isFatal(err)) throw err;
        if (progressed) failures = 0;
        failures += 1;
        if (failures > link.opts.requestRetries) {
          throw new Error(`gave up on the stream of task ${this.taskId} after ${link.opts.requestRetries} resumes without an event: ${err.message}`);
        }
        this._stats.resumes += 1;
        const wait = backoffDelay(link.opts.initialDelayMs ?? retryMs ?? 500, link.opts.maxDelayMs, failures);
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
    if (response?.error !== undefined) throw this.rpcRefusal(response.error as Record<string, unknown>, "tasks/stream");
    // A cursor at or past the terminal event is answered with the result at
    // once (3.9). After events without the terminal one, the stream is short.
    if (this.yielded) {
      throw new ProtocolViolationError(`the stream of task ${this.taskId} ended after seq ${this.last} without its terminal event`);
    }
  }

  // ---------------------------------------------------------- POST, GET ---

  private async *httpItems(mode: "post" | "sse", ac: AbortController, onRetry: (ms: number) => void): AsyncGenerator<Item> {
    const { link } = this;
    let res: Response;
    if (mode === "post") {
      const params: Record<string, unknown> = {
        taskId: this.taskId,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
          "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXTENSION]: {} } },
          "io.modelcontextprotocol/clientInfo": { name: "mcp-resume-client", version: "0.1.0" },
        },
      };
      if (this.last !== undefined) params.after = this.last;
      const headers = await link.headers({
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": STATELESS_VERSION,
        "mcp-method": "tasks/stream",
        "mcp-name": this.taskId,
      });
      const body = JSON.stringify({ jsonrpc: "2.0", id: nextRequestId++, method: "tasks/stream", params });
      res = await fetchHeaders((i, init) => link.fetch(i, init), link.url, { method: "POST", headers, body }, link.opts.headersTimeoutMs, ac);
    } else {
      const extra: Record<string, string> = { accept: "text/event-stream" };
      if (this.last !== undefined) extra["last-event-id"] = String(this.last);
      const headers = await link.headers(extra);
      res = await fetchHeaders((i, init) => link.fetch(i, init), this.eventsUrl(), { method: "GET", headers }, link.opts.headersTimeoutMs, ac);
    }
    const what = mode === "post" ? "tasks/stream" : `GET of task ${this.taskId}'s events`;
    if (!res.ok || mediaType(res) !== "text/event-stream" || !res.body) {
      throw this.responseRefusal(res.status, await readText(res), what);
    }
    yield* this.sseItems(res.body, ac, onRetry);
  }

  private async *sseItems(body: ReadableStream<Uint8Array>, ac: AbortController, onRetry: (ms: number) => void): AsyncGenerator<Item> {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    const dog = watchdog(this.link.opts.idleTimeoutMs, () => ac.abort());
    try {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (e) {
          throw new TransientError(ac.signal.aborted ? `no byte for ${this.link.opts.idleTimeoutMs} ms` : `the task stream broke: ${asError(e).message}`);
        }
        if (chunk.done) break;
        dog.touch();
        for (const ev of parser.feed(decoder.decode(chunk.value, { stream: true }))) {
          if (ev.retry !== undefined) onRetry(Math.min(Math.max(ev.retry, 10), 60_000));
          if (!ev.data) continue;
          const item = classify(parseJson(ev.data), ev.id);
          if (item) yield item;
        }
      }
      throw new TransientError(`the task stream ended before its result${parser.ending ? `: ${parser.ending}` : ""}`);
    } finally {
      dog.stop();
      reader.cancel().catch(() => {});
    }
  }

  // ----------------------------------------------------------- WebSocket ---

  private async *socketItems(ac: AbortController): AsyncGenerator<Item> {
    const { link } = this;
    const url = this.eventsUrl();
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const prior = this.last;
    const hs = await link.opts.connector({
      url: url.toString(),
      prior,
      token: await link.token(),
      headers: link.extraHeaders,
      timeoutMs: link.opts.handshakeTimeoutMs,
      signal: ac.signal,
      maxMessageBytes: link.opts.maxMessageBytes,
    });
    if (hs.kind === "refused") {
      // A refusal with a readable body is that of tasks/stream (3.9); one without (426, a browser, 503) reads SSE.
      if (hs.status === 426) throw new Fallback(`the upgrade was refused (${hs.detail})`, true);
      if (hs.status === undefined || hs.status === 101 || hs.status >= 500) throw new Fallback(`the upgrade was refused (${hs.detail})`, false);
      throw this.responseRefusal(hs.status, hs.body, `the upgrade of task ${this.taskId}'s events`);
    }
    const socket = hs.socket;
    if (ac.signal.aborted) {
      socket.close(1000, "closing");
      return;
    }
    if (hs.echo === undefined || (prior !== undefined && !decideStart(prior, hs.echo).ok)) {
      // Not resumable (5.6): close at once, read nothing from it.
      socket.close(1000, "no committed cursor");
      throw new Fallback(
        hs.echo === undefined ? `the upgrade carried no committed cursor${hs.rawEcho ? ` (${hs.rawEcho})` : ""}` : `the committed cursor ${hs.echo} is below ${prior}`,
        hs.echo === undefined,
      );
    }
    yield* this.frames(socket, hs.echo, prior, ac);
  }

  /**
   * The frames of an accepted socket as items. The gate (5.4): the replay is
   * `prior+1 ..= C`, then `C` is acked at once (the deadline runs from the
   * `101`, so the ack does not wait for the application to pull), and only
   * then may events above `C` come. Without a cursor the reader cannot know
   * where the replay starts (the earliest retained event), so it acks at once:
   * what it then checks is that every event is the next one.
   */
  private async *frames(socket: FrameSocket, committed: number, prior: number | undefined, ac: AbortController): AsyncGenerator<Item> {
    const queue: Array<Item | Error> = [];
    let wake: (() => void) | undefined;
    let received = prior;
    let acked = false;
    let finished = false;
    const push = (x: Item | Error) => {
      if (finished) return;
      if (x instanceof Error || x.kind === "end") finished = true;
      queue.push(x);
      wake?.();
    };
    const fail = (e: Error, code: number) => {
      socket.close(code, e.message);
      push(e);
    };
    const ack = () => {
      acked = true;
      socket.send(JSON.stringify({ type: "cursor-ack", cursor: committed }));
    };
    const dog = watchdog(this.link.opts.idleTimeoutMs, () => fail(new TransientError(`no frame for ${this.link.opts.idleTimeoutMs} ms`), 1000));
    const onAbort = () => {
      socket.close(1000, "closing");
      push(new TransientError("closed"));
    };
    ac.signal.addEventListener("abort", onAbort, { once: true });
    socket.attach({
      onText: (text) => {
        dog.touch();
        let f: { type?: unknown; seq?: unknown; message?: unknown };
        try {
          f = JSON.parse(text);
        } catch {
          return fail(new ProtocolViolationError(`a frame that is not JSON: ${text.slice(0, 100)}`), 4400);
        }
        if (f.type !== "event") return; // a cursor frame this reader did not ask for carries nothing
        const m = f.message as JSONRPCMessage | undefined;
        const seq = f.seq;
        if (!Number.isSafeInteger(seq) || typeof m !== "object" || m === null || (m.params as { seq?: unknown } | undefined)?.seq !== seq) {
          return fail(new ProtocolViolationError(`a malformed event frame: ${text.slice(0, 100)}`), 4400);
        }
        if (!acked && (seq as number) > committed) {
          this._stats.gaps += 1;
          return fail(new TransientError(`event ${seq} above the committed cursor ${committed} before the ack (a gate breach)`), 4409);
        }
        received = seq as number;
        push({ kind: "event", message: m });
        if (!acked && received === committed) ack();
      },
      onClose: (code, reason) => push(taskCloseItem(code, reason, this.taskId)),
    });
    if (!acked && (prior === undefined || prior === committed)) ack();
    try {
      for (;;) {
        while (queue.length === 0) await new Promise<void>((r) => (wake = r));
        wake = undefined;
        const x = queue.shift() as Item | Error;
        if (x instanceof Error) throw x;
        yield x;
        if (x.kind === "end") return;
      }
    } finally {
      finished = true;
      dog.stop();
      ac.signal.removeEventListener("abort", onAbort);
      socket.close(1000, "");
    }
  }

  // ------------------------------------------------------------- shared ---

  /** `P/tasks/{taskId}/events` beside the transport's endpoint `P`. */
  private eventsUrl(): URL {
    const u = new URL(this.link.url);
    u.pathname = `${u.pathname.replace(/\/$/, "")}/tasks/${encodeURIComponent(this.taskId)}/events`;
    u.search = "";
    return u;
  }

  /** Why a request for the stream was answered with something other than an event stream. */
  private responseRefusal(status: number, body: string, what: string): Error {
    let v: unknown;
    try {
      v = JSON.parse(body);
    } catch {
      // Not JSON: the status says it.
    }
    const error = (v as { error?: unknown } | undefined)?.error;
    if (error && typeof error === "object") {
      const e = this.rpcRefusal(error as Record<string, unknown>, what);
      // 503 (the log unavailable) is answered with a JSON-RPC error too: passing.
      return status >= 500 || status === 429 ? new TransientError(e.message) : e;
    }
    if (status >= 500 || status === 429) return new TransientError(`${what} answered ${status}: ${body.slice(0, 200)}`);
    if (status >= 200 && status < 300) return new ProtocolViolationError(`${what} answered ${status} without an event stream: ${body.slice(0, 200)}`);
    return new HttpStatusError(what, status, body);
  }

  /** A JSON-RPC error of `tasks/stream` as the error this iterator throws (or resumes after). */
  private rpcRefusal(error: Record<string, unknown>, what: string): Error {
    const data = (error.data && typeof error.data === "object" ? error.data : {}) as Record<string, unknown>;
    const n = (k: string) => (typeof data[k] === "number" ? (data[k] as number) : undefined);
    const reason = typeof data.reason === "string" ? data.reason : undefined;
    const stream = `task ${this.taskId}`;
    if (error.code === EVENTS_GONE || reason === "events_gone") {
      const floor = n("earliestSeq") ?? 0;
      return new CursorDiscontinuityError(
        { reason: "truncated", cursor: this.last ?? 0, head: n("latestSeq") ?? floor - 1, floor, resumeCursor: floor - 1, stream },
        `cursor discontinuity (truncated) on the ${stream} stream: the events after ${this.last} are gone (the earliest retained is ${floor})`,
      );
    }
    if (reason === "after-ahead") {
      const head = n("latestSeq") ?? 0;
      return new CursorDiscontinuityError(
        { reason: "ahead", cursor: this.last ?? 0, head, floor: 0, resumeCursor: head, stream },
        `cursor discontinuity (ahead) on the ${stream} stream: after ${this.last} is past the latest event ${head}`,
      );
    }
    if (reason && RESUMABLE.has(reason)) return new TransientError(`${what} ended: ${String(error.message ?? reason)}`);
    return new RpcError(what, error);
  }
}

/** A message of a task's SSE stream as an item; undefined for anything else. */
function classify(m: JSONRPCMessage, id: string | undefined): Item | undefined {
  if (m.method === "notifications/tasks/event") return { kind: "event", message: m, id };
  if (m.method === undefined && m.id !== undefined && (m.result !== undefined || m.error !== undefined)) return { kind: "end", response: m };
  return undefined;
}

function parseJson(data: string): JSONRPCMessage {
  try {
    const v: unknown = JSON.parse(data);
    if (v && typeof v === "object") return v as JSONRPCMessage;
  } catch {
    // Below.
  }
  throw new ProtocolViolationError(`a task stream event that is not a JSON object: ${data.slice(0, 100)}`);
}

/** What a task socket's close means (3.9): 1000 the end, 4404 the task expired, 4400/1003/1009 a fault, the rest resumable. */
function taskCloseItem(code: number, reason: string, taskId: string): Item | Error {
  if (code === 1000) return { kind: "end" };
  if (code === 4404) return new RpcError(`the stream of task ${taskId}`, { code: -32602, message: reason || "the task expired", data: { reason: "task-expired" } });
  if (code === 1002 || code === 1003 || code === 1007 || code === 1009 || code === 4400) {
    return new ProtocolViolationError(`the task's WebSocket closed ${code}: ${reason}`);
  }
  return new TransientError(`the task's WebSocket closed ${code}${reason ? ` ${reason}` : ""}`);
}

/** A response's body as text, at most 64 KiB of it. */
async function readText(res: Response): Promise<string> {
  const text = await res.text().catch(() => "");
  return text.slice(0, 64 * 1024);
}
