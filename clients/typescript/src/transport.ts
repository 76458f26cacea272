/**
 * `ResumableClientTransport`: the SDK's `Transport` (1.x and 2.x) over MCP
 * Streamable HTTP, with mcp-resume's guarantee on the client side. Requests
 * are POSTed as the SDK's own transport does; the session stream is read by
 * a {@link SessionStream} (seq-checked, resumed from a stored cursor, over SSE
 * or the cursor-safe WebSocket upgrade) and request streams are followed to
 * their response across drops. Against a plain MCP server it behaves like the
 * SDK's `StreamableHTTPClientTransport`.
 */

import { HttpStatusError, SessionNotFoundError } from "./errors.js";
import type { JSONRPCMessage, Link, ReconnectOptions, Resolved } from "./link.js";
import { asError, mediaType } from "./link.js";
import { followRequestStream } from "./request-stream.js";
import { WEBSOCKET_MESSAGE_LOST } from "./session-outbox.js";
import { SessionStream, type TransportStats } from "./session-stream.js";
import { MemoryCursorStore, type CursorStore } from "./stores.js";
import type { TaskLink } from "./task-connection.js";
import { TaskEventStream, type StreamTaskOptions } from "./task-stream.js";
import { domConnector, type WebSocketConstructor } from "./ws/dom.js";
import { DEFAULT_MAX_MESSAGE_BYTES } from "./ws/frames.js";
import { nodeConnector } from "./ws/node.js";
import type { Connector } from "./ws/types.js";

/** The options of the SDKs' `Transport.send` that this transport reads (both SDKs' fit). */
export interface SendOptions {
  relatedRequestId?: string | number;
  /** Resume a request stream by its last event id instead of POSTing (after a restart of the client). */
  resumptionToken?: string;
  /** Called with every event id of the request stream. */
  onresumptiontoken?: (token: string) => void;
  /** SDK 2.x: extra headers for this message's POST. */
  headers?: Readonly<Record<string, string>>;
}

export interface ResumableTransportOptions {
  /** Upgrade the session stream to a WebSocket (docs/protocol.md 5); false: SSE only. Default true. */
  websocket?: boolean;
  /**
   * Which WebSocket: `node` (reads the `101`'s cursor header and refusal
   * statuses; default in Node), `browser` (the global WHATWG `WebSocket`
   * with the cursor frame; default elsewhere), or a WebSocket constructor.
   */
  websocketApi?: "node" | "browser" | WebSocketConstructor;
  /** Where the cursor is kept; default {@link MemoryCursorStore}. */
  cursorStore?: CursorStore;
  /** A bearer token, or a function returning one (called for every request). */
  authorization?: string | (() => string | undefined | Promise<string | undefined>);
  /** Attach to an existing session instead of initialising one (its cursor comes from the store). */
  sessionId?: string;
  /** The negotiated revision of an attached session, for `MCP-Protocol-Version`. */
  protocolVersion?: string;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** A fetch to use instead of the global one. */
  fetch?: (input: URL, init: RequestInit) => Promise<Response>;
  /** Reconnect timing of the session stream (and request streams). */
  reconnect?: ReconnectOptions;
  /** Resumes in a row without an event before a request stream's call ends with an error; default 10. */
  requestStreamRetries?: number;
  /** A connection silent this long is dropped and resumed; default 45,000 (three heartbeats). */
  idleTimeoutMs?: number;
  /**
   * The longest WebSocket handshake, default 10,000: a server that accepts
   * the connection and never answers the upgrade is given up on, and the
   * reader reconnects with its usual backoff.
   */
  handshakeTimeoutMs?: number;
  /**
   * The longest wait for the response headers of a GET (an SSE resume of the
   * session stream or of a request stream, a task stream), default 10,000:
   * the same bound as the handshake, for the same reason. A stream that has
   * begun is watched by `idleTimeoutMs` instead.
   */
  headersTimeoutMs?: number;
  /**
   * The largest message accepted from the server over a WebSocket (all its
   * fragments) and sent to it as a `message` frame; default 4 MiB, the
   * server's own limit for a client's message (docs/protocol.md 3.5). A
   * server frame that declares more closes the socket with 1009 before its
   * payload is buffered, so a lying server cannot grow this client's memory.
   */
  maxMessageBytes?: number;
  /**
   * Send client messages as `message` frames on the open session-stream
   * WebSocket (docs/protocol.md 5.3) instead of POSTing each; default false.
   * A request's response (and its progress) then comes back as a
   * session-stream event, behind whatever the stream holds before it; POST
   * remains the path when no socket is open, after the server refused a
   * frame, for oversized messages and for messages with per-message headers.
   * What happens to messages on a socket that closes before the server was
   * shown to have read them is described at `FrameOutbox.settle`
   * and in README.md.
   */
  websocketMessages?: boolean;
  /** Diagnostics: reconnects, fallbacks, healed gaps, one line each. */
  log?: (line: string) => void;
}

/** Headers the SDK may not override per message. */
const RESERVED = new Set(["content-type", "accept", "mcp-session-id", "mcp-protocol-version", "authorization", "last-event-id"]);

export class ResumableClientTransport {
  onmessage?: (message: JSONRPCMessage, extra?: unknown) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;

  private readonly url: URL;
  private readonly opts: Resolved;
  private readonly store: CursorStore;
  private readonly extraHeaders: Record<string, string>;
  private readonly auth: ResumableTransportOptions["authorization"];
  private readonly fetchImpl: (input: URL, init: RequestInit) => Promise<Response>;
  private readonly logger: ((line: string) => void) | undefined;
  private readonly ac = new AbortController();
  private _sessionId: string | undefined;
  private _protocolVersion: string | undefined;
  private fresh = false;
  private started = false;
  private closed = false;
  private session: SessionStream | undefined;
  private readonly link: Link;
  private readonly _stats: TransportStats = {
    transport: "none",
    upgrades: 0,
    fallbacks: 0,
    reconnects: 0,
    gaps: 0,
    requestResumes: 0,
  };

  constructor(url: URL | string, options: ResumableTransportOptions = {}) {
    this.url = new URL(url);
    this.store = options.cursorStore ?? new MemoryCursorStore();
    this.extraHeaders = { ...options.headers };
    this.auth = options.authorization;
    this._sessionId = options.sessionId;
    this._protocolVersion = options.protocolVersion;
    this.logger = options.log;
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.opts = {
      websocket: options.websocket ?? true,
      connector: pickConnector(options.websocketApi),
      initialDelayMs: options.reconnect?.initialDelayMs,
      maxDelayMs: options.reconnect?.maxDelayMs ?? 5000,
      maxRetries: options.reconnect?.maxRetries ?? Infinity,
      requestRetries: options.requestStreamRetries ?? 10,
      idleTimeoutMs: options.idleTimeoutMs ?? 45_000,
      handshakeTimeoutMs: options.handshakeTimeoutMs ?? 10_000,
      headersTimeoutMs: options.headersTimeoutMs ?? 10_000,
      maxMessageBytes: options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
      websocketMessages: options.websocketMessages ?? false,
    };
    const self = this;
    this.link = {
      url: this.url,
      opts: this.opts,
      get sessionId() {
        return self._sessionId;
      },
      get protocolVersion() {
        return self._protocolVersion;
      },
      get closed() {
        return self.closed;
      },
      signal: this.ac.signal,
      extraHeaders: this.extraHeaders,
      fetch: (input, init) => this.fetchImpl(input, init),
      headers: (extra) => this.headers(extra),
      token: () => this.token(),
      deliver: (m) => this.onmessage?.(m),
      report: (e) => this.onerror?.(e),
      fail: (e) => {
        if (this.closed) return;
        this.onerror?.(e);
        void this.close();
      },
      resend: (m) => this.resend(m),
      log: (line) => this.logger?.(line),
    };
  }

  /** The session id, once `initialize` was answered (or as given). */
  get sessionId(): string | undefined {
    return this._sessionId;
  }

  /** The negotiated protocol revision sent as `MCP-Protocol-Version`. */
  get protocolVersion(): string | undefined {
    return this._protocolVersion;
  }

  /** The seq of the last session-stream event handed to `onmessage`. */
  get cursor(): number | undefined {
    return this.session?.cursor;
  }

  /** Counters and the current connection of the session stream. */
  get stats(): Readonly<TransportStats> {
    return { ...this._stats };
  }

  async start(): Promise<void> {
    if (this.started) throw new Error("ResumableClientTransport already started (Client.connect calls start itself)");
    this.started = true;
    // An attached session gets no `notifications/initialized` from us: read it now.
    if (this._sessionId !== undefined) await this.openSessionStream();
  }

  setProtocolVersion(version: string): void {
    this._protocolVersion = version;
  }

  /**
   * Sends one client message: as a `message` frame on the session stream's
   * WebSocket when `websocketMessages` is on and a socket is open, else by
   * POST (always for `initialize`, `notifications/initialized`, a resumed
   * request stream, and a message with its own headers).
   */
  async send(message: JSONRPCMessage, options?: SendOptions): Promise<void> {
    if (this.closed) throw new Error("the transport is closed");
    if (this.canFrame(message, options) && this.session?.sendFrame(message)) return;
    try {
      await this.post(message, options);
    } catch (e) {
      const err = withCause(asError(e));
      if (!this.closed) this.onerror?.(err);
      throw err;
    }
  }

  private async post(message: JSONRPCMessage, options?: SendOptions): Promise<void> {
    const isRequest = message.method !== undefined && message.id !== undefined;
    if (options?.resumptionToken && isRequest) {
      this.track(
        followRequestStream(this.link, undefined, {
          requestId: message.id as string | number,
          lastEventId: options.resumptionToken,
          onresumptiontoken: options.onresumptiontoken,
          onResume: () => (this._stats.requestResumes += 1),
        }),
      );
      return;
    }
    const isInit = message.method === "initialize";
    const extra: Record<string, string> = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    };
    for (const [k, v] of Object.entries(options?.headers ?? {})) if (!RESERVED.has(k.toLowerCase())) extra[k] = v;
    const headers = await this.headers(extra, !isInit);
    const res = await this.fetchImpl(this.url, {
      method: "POST",
      headers,
      body: JSON.stringify(message),
      signal: this.ac.signal,
    });
    if (isInit && res.ok) {
      const sid = res.headers.get("mcp-session-id");
      if (sid && sid !== this._sessionId) {
        // A new session: the reader of the old one (if any) stops; the new
        // one's stream opens after its `notifications/initialized`.
        this.session?.stop();
        this.session = undefined;
        this._sessionId = sid;
        this.fresh = true;
      }
    }
    if (!res.ok) {
      const text = await res.text().catch(() => "");
      if (res.status === 404 && this._sessionId !== undefined && !isInit) throw new SessionNotFoundError(this._sessionId, "POST answered 404");
      // A JSON-RPC error for this request (e.g. 400 with -32022 to a probe): the answer itself.
      if (isRequest) {
        try {
          const v = JSON.parse(text) as JSONRPCMessage;
          if (v && v.error !== undefined && v.id === message.id) return this.onmessage?.(v);
        } catch {
          // Not JSON-RPC: a plain HTTP error.
        }
      }
      throw new HttpStatusError("POST", res.status, text);
    }
    if (res.status === 202) {
      await res.body?.cancel().catch(() => {});
      if (message.method === "notifications/initialized") await this.openSessionStream();
      return;
    }
    const type = mediaType(res);
    if (type === "text/event-stream" && isRequest) {
      this.track(
        followRequestStream(this.link, res, {
          requestId: message.id as string | number,
          onresumptiontoken: options?.onresumptiontoken,
          onResume: () => (this._stats.requestResumes += 1),
        }),
      );
      return;
    }
    if (type === "application/json") {
      const data = (await res.json()) as JSONRPCMessage | JSONRPCMessage[];
      for (const m of Array.isArray(data) ? data : [data]) this.onmessage?.(m);
      return;
    }
    await res.body?.cancel().catch(() => {});
    if (isRequest) throw new Error(`unexpected content type ${res.headers.get("content-type")}`);
  }

  /** Whether `message` may go as a WebSocket frame at all (the socket decides the rest). */
  private canFrame(message: JSONRPCMessage, options?: SendOptions): boolean {
    if (!this.opts.websocketMessages || !this.session) return false;
    if (message.method === "initialize" || message.method === "notifications/initialized") return false;
    if (options?.resumptionToken) return false;
    // Per-message headers cannot ride a frame.
    return !Object.keys(options?.headers ?? {}).some((k) => !RESERVED.has(k.toLowerCase()));
  }

  /** POSTs a message a closed socket may not have delivered; see {@link Link.resend}. */
  private resend(message: JSONRPCMessage): void {
    if (this.closed) return;
    this.logger?.(`POSTing again ${message.method ?? `the response to ${JSON.stringify(message.id)}`}: its WebSocket closed before the server confirmed it`);
    this.post(message).catch((e) => {
      if (this.closed) return;
      const err = withCause(asError(e));
      this.onerror?.(err);
      if (message.method !== undefined && message.id !== undefined) {
        this.onmessage?.({
          jsonrpc: "2.0",
          id: message.id,
          error: {
            code: WEBSOCKET_MESSAGE_LOST,
            message: `the request's WebSocket closed and POSTing it failed: ${err.message}`,
            data: { reason: "websocket-closed", method: message.method },
          },
        });
      }
    });
  }

  /**
   * Reads the events of durable task `taskId` (SEP-2694 task event streams,
   * docs/protocol.md 3.9) after `options.after`, as an async iterator that
   * checks every seq, resumes from the last one on any drop, and ends after
   * the task's terminal event: `for await (const e of transport.streamTask(id))`.
   * Tasks belong to the stateless era, so no session is needed (nor started):
   * the requests carry this transport's credentials and headers, never its
   * session id. `via` chooses `tasks/stream` by POST (default), the SSE GET of
   * `P/tasks/{id}/events`, or its cursor-safe WebSocket upgrade. Closing the
   * transport ends the stream.
   */
  streamTask(taskId: string, options: StreamTaskOptions = {}): TaskEventStream {
    if (this.closed) throw new Error("the transport is closed");
    const link: TaskLink = {
      url: this.url,
      opts: this.opts,
      signal: this.ac.signal,
      fetch: (input, init) => this.fetchImpl(input, init),
      headers: (extra) => this.headers(extra, false),
      extraHeaders: this.extraHeaders,
      token: () => this.token(),
      log: (line) => this.logger?.(line),
    };
    return new TaskEventStream(link, taskId, options);
  }

  /** Ends the session on the server (`DELETE`) and forgets its cursor. */
  async terminateSession(): Promise<void> {
    const sid = this._sessionId;
    if (sid === undefined) return;
    const res = await this.fetchImpl(this.url, { method: "DELETE", headers: await this.headers({}), signal: this.ac.signal });
    await res.body?.cancel().catch(() => {});
    if (!res.ok && res.status !== 405 && res.status !== 404) throw new HttpStatusError("DELETE", res.status, "");
    this.session?.stop();
    this.session = undefined;
    await this.store.remove?.(sid);
    this._sessionId = undefined;
  }

  /** Stops reading and fails nothing on the server: the session and its cursor stay for a later attach. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.ac.abort();
    this.session?.stop();
    try {
      await this.store.flush?.();
    } catch (e) {
      this.onerror?.(asError(e));
    }
    this.onclose?.();
  }

  private async openSessionStream(): Promise<void> {
    const sid = this._sessionId;
    if (this.session || sid === undefined || this.closed) return;
    let cursor: number | undefined;
    try {
      cursor = await this.store.load(sid);
    } catch (e) {
      // A cursor that cannot be read must not turn into "from the start" silently.
      this.link.fail(asError(e));
      return;
    }
    this.session = new SessionStream(this.link, this.store, cursor, this.fresh, this._stats);
    void this.session.run();
  }

  private track(p: Promise<void>): void {
    p.catch((e) => this.onerror?.(asError(e)));
  }

  private async token(): Promise<string | undefined> {
    return typeof this.auth === "function" ? await this.auth() : this.auth;
  }

  private async headers(extra: Record<string, string>, withSession = true): Promise<Record<string, string>> {
    const h: Record<string, string> = { ...this.extraHeaders, ...extra };
    if (withSession && this._sessionId !== undefined) {
      h["mcp-session-id"] = this._sessionId;
      if (this._protocolVersion) h["mcp-protocol-version"] = this._protocolVersion;
    }
    const t = await this.token();
    if (t) h.authorization = `Bearer ${t}`;
    return h;
  }
}

function pickConnector(api: ResumableTransportOptions["websocketApi"]): Connector {
  if (typeof api === "function") return domConnector(api);
  const node = typeof process !== "undefined" && !!(process as { versions?: { node?: string } }).versions?.node;
  if (api === "node" || (api === undefined && node)) return nodeConnector;
  return domConnector();
}

/** fetch's "fetch failed" names its cause only in `cause`: put it in the message. */
function withCause(e: Error): Error {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  if (e.message === "fetch failed" && cause) e.message = `fetch failed: ${cause.code ?? cause.message}`;
  return e;
}
