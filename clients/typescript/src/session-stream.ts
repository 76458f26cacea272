/**
 * The reader of the session stream: SSE or the cursor-safe WebSocket upgrade,
 * every seq checked to be `last + 1`, reconnecting from the cursor on any
 * drop, and loud where continuity cannot be proven (docs/protocol.md 4, 5.6).
 * It follows the Rust reader (crates/client/src/reader), with one difference
 * the SDK's transport contract asks for: events without an id (a plain MCP
 * server without an event store) are delivered too, not dropped.
 */

import { ProtocolViolationError, SessionNotFoundError, TransientError } from "./errors.js";
import type { JSONRPCMessage, Link } from "./link.js";
import {
  asError,
  backoffDelay,
  childController,
  fetchHeaders,
  isFatal,
  mediaType,
  refusal,
  refusalOf,
  sleep,
  utf8Length,
  watchdog,
} from "./link.js";
import { decideStart, parseSeq, SeqChecker } from "./seq.js";
import { readSse, SseParser, type SseEvent } from "./sse.js";
import type { CursorStore } from "./stores.js";
import type { FrameSocket } from "./ws/types.js";

/** What the transport has done so far; for tests, benchmarks and dashboards. */
export interface TransportStats {
  /** The current (or last) connection of the session stream. */
  transport: "none" | "sse" | "websocket";
  /** Upgrades that passed the echo check. */
  upgrades: number;
  /** Upgrades given up for SSE from the same cursor (426, 503, no echo, a server without the upgrade). */
  fallbacks: number;
  /** Reconnects of the session stream. */
  reconnects: number;
  /** Gaps, duplicates or heartbeats ahead that were healed by resuming from the cursor. */
  gaps: number;
  /** The committed cursor `C` of the last upgrade. */
  lastCommitted?: number;
  /** Request streams resumed after a drop. */
  requestResumes: number;
}

/** Stops the read of one SSE body at the priming event, to upgrade from it. */
const PRIMED = Symbol("primed");

/** Fallbacks in a row where the reason is uncertain (a browser's failed handshake, 503) before the upgrade is no longer tried. */
const MAX_STRIKES = 3;

/**
 * The most client messages sent as `message` frames whose reading by the
 * server is not yet confirmed (docs/protocol.md 3.5: the server handles 64 at
 * once per socket); past it messages go by POST, so the outbox stays bounded.
 */
const MAX_UNCONFIRMED = 64;

/** How many requests failed with their socket are remembered, to recognise their late responses. */
const MAX_ABANDONED = 1024;

/** The JSON-RPC error code of a request whose socket closed before its response (as the SDK's ConnectionClosed). */
export const WEBSOCKET_MESSAGE_LOST = -32000;

/** A client message sent as a `message` frame on the current socket, not yet known to have been read. */
interface Unconfirmed {
  message: JSONRPCMessage;
  /** A request (it has a method and an id): its response confirms it and everything sent before it. */
  request: boolean;
}

export class SessionStream {
  private checker: SeqChecker | undefined;
  /** The last id from a server whose ids are not seqs (a plain Streamable HTTP server). */
  private opaqueId: string | undefined;
  private wsDisabled: boolean;
  private strikes = 0;
  private sseOnce = false;
  private retryMs: number | undefined;
  private failures = 0;
  private progressed = false;
  private savedCursor: number | undefined;
  private saveQueued = false;
  /** Drops the live connection (close, or a watchdog). */
  private drop: (() => void) | undefined;
  private stopped = false;
  /** Aborted by {@link stop} and by the transport's close: every request and wait of this reader. */
  private readonly ac: AbortController;
  private readonly unlink: () => void;
  /** The session this reader reads (the transport's may change with a new initialize). */
  private readonly sid: string;
  /** The socket client messages may be sent on: open, and its echo accepted. */
  private socket: FrameSocket | undefined;
  /** Messages sent on {@link socket} not yet confirmed read by the server, in the order sent. */
  private outbox: Unconfirmed[] = [];
  /** Whether any `message` frame went out on the current socket, and whether one was confirmed. */
  private framesSent = false;
  private framesConfirmed = false;
  /** The server refused `message` frames: every message goes by POST from now on. */
  private framesRefused = false;
  /** Ids of requests failed when their socket closed: their responses, if they come, are reported, not delivered. */
  private readonly abandoned = new Set<string | number>();

  constructor(
    private readonly link: Link,
    private readonly store: CursorStore,
    startCursor: number | undefined,
    /** A session this transport created just now: its stream starts at 0. */
    private fresh: boolean,
    private readonly stats: TransportStats,
  ) {
    this.sid = link.sessionId as string;
    ({ ac: this.ac, unlink: this.unlink } = childController(link.signal));
    this.wsDisabled = !link.opts.websocket;
    if (startCursor !== undefined) {
      this.checker = new SeqChecker(startCursor);
      this.savedCursor = startCursor;
      this.fresh = false;
    }
  }

  /** The seq of the last event handed to the application. */
  get cursor(): number | undefined {
    return this.checker?.cursor;
  }

  /**
   * Ends the reader (the transport closed, or its session ended or was
   * replaced): whatever is in flight is aborted (a GET waiting for its
   * headers, a WebSocket handshake, a body being read, a backoff wait), and
   * nothing is handed to the application after this returns.
   */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.socket = undefined;
    const left = this.outbox;
    this.outbox = [];
    this.drop?.();
    this.ac.abort();
    this.unlink();
    // Requests sent on this reader's socket would be answered on its stream,
    // which nobody reads now: end their calls (a closed transport's are the SDK's).
    if (!this.link.closed) for (const u of left) if (u.request) this.failRequest(u.message, "its session's reader stopped (the session ended or was replaced)");
  }

  /**
   * Sends `message` as a `message` frame on the open socket (docs/protocol.md
   * 5.3): true when it went out, false when it must be POSTed instead (no
   * socket, the server refused frames, too many unconfirmed, too large).
   * A request's response comes back as a session-stream event.
   */
  sendFrame(message: JSONRPCMessage): boolean {
    const socket = this.socket;
    if (!socket || this.stopped || this.framesRefused || !this.link.opts.websocketMessages) return false;
    if (this.outbox.length >= MAX_UNCONFIRMED) return false;
    const text = JSON.stringify({ type: "message", message });
    // The server's limit for a client's message (3.5); a larger one is POSTed and meets 413 there, loudly.
    if (text.length > this.link.opts.maxMessageBytes || utf8Length(text) > this.link.opts.maxMessageBytes) return false;
    if (!socket.send(text)) return false;
    this.framesSent = true;
    this.outbox.push({ message, request: message.method !== undefined && message.id !== undefined });
    return true;
  }

  /** Reads until the transport closes or a fatal error (reported through `fail`). */
  async run(): Promise<void> {
    try {
      await this.loop();
    } finally {
      this.unlink();
    }
  }

  private async loop(): Promise<void> {
    const { link } = this;
    while (!link.closed && !this.stopped) {
      this.progressed = false;
      let err: Error;
      try {
        err = (await this.once()) ?? new TransientError("the stream ended");
      } catch (e) {
        err = asError(e);
      }
      this.flushCursor();
      if (link.closed || this.stopped) return;
      if (err === NO_STREAM) return;
      if (isFatal(err)) return link.fail(err);
      if (this.progressed) this.failures = 0;
      this.failures += 1;
      if (this.failures > link.opts.maxRetries) {
        return link.fail(new Error(`gave up after ${link.opts.maxRetries} reconnects without an event: ${err.message}`));
      }
      this.stats.reconnects += 1;
      const base = link.opts.initialDelayMs ?? this.retryMs ?? 1000;
      const wait = backoffDelay(base, link.opts.maxDelayMs, this.failures);
      link.log(`session stream: ${err.message}; resuming after ${this.checker?.cursor ?? this.opaqueId ?? "-"} in ${Math.round(wait)} ms`);
      await sleep(wait, this.ac.signal);
    }
  }

  /** One connection: upgrade when wanted and possible, else SSE. Returns (or throws) why it ended. */
  private async once(): Promise<Error | undefined> {
    const wantWs = !this.wsDisabled && !this.sseOnce;
    this.sseOnce = false;
    if (wantWs) {
      if (!this.checker && this.opaqueId === undefined) {
        // Learn where "everything retained" starts from the priming event, so
        // the upgrade carries an explicit cursor (as the Rust reader does).
        const primed = await this.sse(true);
        if (primed !== PRIMED) return primed;
      }
      if (this.checker && !this.wsDisabled) {
        const ended = await this.websocket(this.checker);
        if (ended !== "fallback") return ended;
      }
    }
    const ended = await this.sse(false);
    return ended === PRIMED ? undefined : ended;
  }

  // ----------------------------------------------------------------- SSE ---

  private async sse(stopAtPriming: boolean): Promise<Error | typeof PRIMED> {
    const { link } = this;
    const sid = this.sid;
    const { ac, unlink } = childController(this.ac.signal);
    const extra: Record<string, string> = { accept: "text/event-stream" };
    const from = this.checker ? String(this.checker.cursor) : this.opaqueId;
    if (from !== undefined) extra["last-event-id"] = from;
    let dog: ReturnType<typeof watchdog> | undefined;
    try {
      const headers = await link.headers(extra);
      if (this.stopped) return new TransientError("stopped");
      const res = await fetchHeaders(
        (input, init) => link.fetch(input, init),
        link.url,
        { method: "GET", headers },
        link.opts.headersTimeoutMs,
        ac,
      );
      if (this.stopped) {
        await res.body?.cancel().catch(() => {});
        return new TransientError("stopped");
      }
      if (res.status === 405) {
        // A server without a standalone GET stream: nothing to read (the SDK's rule).
        await res.body?.cancel();
        return NO_STREAM;
      }
      if (!res.ok) throw await refusal(res, "GET (session stream)", this.checker?.cursor ?? 0, "session", sid);
      if (mediaType(res) !== "text/event-stream" || !res.body) {
        await res.body?.cancel();
        throw new ProtocolViolationError(`the session stream answered ${res.headers.get("content-type")}, not text/event-stream`);
      }
      this.stats.transport = "sse";
      this.drop = () => ac.abort();
      dog = watchdog(link.opts.idleTimeoutMs, () => ac.abort());
      const parser = new SseParser();
      try {
        await readSse(
          res.body,
          parser,
          (events) => {
            for (const ev of events) {
              if (this.onSseEvent(ev) && stopAtPriming && this.checker) throw PRIMED;
            }
            this.queueSave();
          },
          () => dog?.touch(),
        );
      } catch (e) {
        if (e === PRIMED) {
          ac.abort();
          return PRIMED;
        }
        throw e;
      }
      return new TransientError(`the SSE stream ended${parser.ending ? `: ${parser.ending}` : ""}`);
    } finally {
      dog?.stop();
      this.drop = undefined;
      unlink();
    }
  }

  /** Handles one SSE block; true for a priming event that set or confirmed the cursor. */
  private onSseEvent(ev: SseEvent): boolean {
    if (ev.retry !== undefined) this.retryMs = Math.min(Math.max(ev.retry, 10), 60_000);
    if (ev.id === undefined) {
      // No id: a server that cannot resume this event. Deliver it, as the SDK does.
      if (ev.data) {
        this.wsDisabled = true;
        this.deliverText(ev.data);
      }
      return false;
    }
    const seq = parseSeq(ev.id);
    if (!ev.data) {
      if (seq === undefined) {
        this.plainServer(ev.id);
        return false;
      }
      if (!this.checker) {
        if (this.fresh && seq > 0) {
          // A session created just now primed after `seq`: events 1..seq were
          // trimmed before we read them. Ask from 0 for the server's 409.
          this.checker = new SeqChecker(0);
          this.fresh = false;
          throw new TransientError(`a new session primed after ${seq}; resuming from 0`);
        }
        this.checker = new SeqChecker(seq);
        this.fresh = false;
        return true;
      }
      if (seq !== this.checker.cursor) {
        throw new ProtocolViolationError(`asked to resume after ${this.checker.cursor}, the server primed ${seq}`);
      }
      return true;
    }
    if (seq === undefined) {
      this.plainServer(ev.id);
      this.deliverText(ev.data);
      return false;
    }
    if (!this.checker) this.checker = new SeqChecker(seq - 1);
    const gap = this.checker.onEvent(seq);
    if (gap) {
      this.stats.gaps += 1;
      throw new TransientError(gap.why);
    }
    this.progressed = true;
    this.fresh = false;
    this.deliverText(ev.data);
    return false;
  }

  private plainServer(id: string): void {
    // Ids that are not seqs: a plain Streamable HTTP server. No cursor-safe
    // upgrade there; resume by Last-Event-ID as the SDK's transport does.
    this.opaqueId = id;
    this.wsDisabled = true;
  }

  private deliverText(data: string): void {
    let message: JSONRPCMessage;
    try {
      message = JSON.parse(data) as JSONRPCMessage;
    } catch (e) {
      this.link.report(new ProtocolViolationError(`an event that is not JSON: ${asError(e).message}`));
      return;
    }
    this.deliver(message);
  }

  /**
   * Hands one message of the session stream to the application, unless this
   * reader was stopped. A response to a request sent on the socket confirms
   * it and every frame sent before it (the server reads frames in order); a
   * response to a request already failed with its socket is reported instead.
   */
  private deliver(message: JSONRPCMessage): void {
    if (this.stopped || this.link.closed) throw new TransientError("stopped");
    const id = message.id;
    if (id !== undefined && message.method === undefined) {
      if (this.outbox.length) {
        const i = this.outbox.findIndex((u) => u.request && u.message.id === id);
        if (i >= 0) {
          this.outbox.splice(0, i + 1);
          this.framesConfirmed = true;
        }
      }
      if (this.abandoned.delete(id)) {
        this.link.report(
          new Error(
            `the response to request ${JSON.stringify(id)} arrived after its call was failed when its WebSocket closed: the request did run`,
          ),
        );
        return;
      }
    }
    this.link.deliver(message);
  }

  // ----------------------------------------------------------- WebSocket ---

  /** The upgrade from the checker's cursor; "fallback" to read SSE instead. */
  private async websocket(checker: SeqChecker): Promise<Error | "fallback"> {
    const { link } = this;
    const sid = this.sid;
    const prior = checker.cursor;
    const base = new URL(link.url);
    base.protocol = base.protocol === "https:" ? "wss:" : "ws:";
    base.pathname = `${base.pathname.replace(/\/$/, "")}/session/${sid}/events`;
    const hs = await link.opts.connector({
      url: base.toString(),
      prior,
      sessionId: sid,
      protocolVersion: link.protocolVersion,
      token: await link.token(),
      headers: link.extraHeaders,
      timeoutMs: link.opts.handshakeTimeoutMs,
      signal: this.ac.signal,
      maxMessageBytes: link.opts.maxMessageBytes,
    });
    if (link.closed || this.stopped) {
      if (hs.kind === "open") hs.socket.close(1000, "closing");
      return new TransientError("closed");
    }
    if (hs.kind === "refused") return this.refused(hs.status, hs.body, hs.detail, prior, sid);
    const decision = decideStart(prior, hs.echo);
    if (!decision.ok) {
      // Not resumable: close at once, read nothing from it (5.6).
      hs.socket.close(1000, "no committed cursor");
      this.stats.fallbacks += 1;
      if (decision.why === "missing-echo") this.wsDisabled = true;
      else this.sseOnce = true;
      link.log(`the upgrade is not resumable (${decision.detail}${hs.rawEcho ? `: ${hs.rawEcho}` : ""}); SSE from ${prior}`);
      return "fallback";
    }
    this.strikes = 0;
    this.stats.upgrades += 1;
    this.stats.transport = "websocket";
    this.stats.lastCommitted = decision.committed;
    checker.expectReplayUntil(decision.committed);
    return this.readSocket(hs.socket, checker);
  }

  private refused(status: number | undefined, body: string, detail: string, prior: number, sid: string): Error | "fallback" {
    if (status === 409 || status === 401 || status === 403) return refusalOf(status, body, "the upgrade", prior, "session", sid);
    if (status === 404 && body.includes("session-not-found")) return new SessionNotFoundError(sid, "the upgrade answered 404");
    if (status === 400 && /invalid-cursor|protocol-version|session-mismatch/.test(body)) {
      return refusalOf(status, body, "the upgrade", prior, "session", sid);
    }
    this.stats.fallbacks += 1;
    this.link.log(`the upgrade was refused (${detail}); SSE from ${prior}`);
    if (status === undefined || status === 503) {
      // Maybe passing (a browser cannot tell 426 from a restart): SSE now, the upgrade again next time.
      this.strikes += 1;
      if (this.strikes >= MAX_STRIKES) this.wsDisabled = true;
      else this.sseOnce = true;
    } else {
      // 426, or a server that does not know the upgrade: stay on SSE.
      this.wsDisabled = true;
    }
    return "fallback";
  }

  private readSocket(socket: FrameSocket, checker: SeqChecker): Promise<Error> {
    const { link } = this;
    this.socket = socket;
    this.framesSent = false;
    this.framesConfirmed = false;
    return new Promise<Error>((resolve) => {
      let ended = false;
      const end = (e: Error, code?: number, serverCode?: number) => {
        if (ended) return;
        ended = true;
        dog.stop();
        this.ac.signal.removeEventListener("abort", onAbort);
        this.drop = undefined;
        if (this.socket === socket) this.socket = undefined;
        if (code !== undefined) socket.close(code, e.message);
        this.settleOutbox(serverCode);
        resolve(e);
      };
      const onAbort = () => end(new TransientError("closed"), 1000);
      this.ac.signal.addEventListener("abort", onAbort, { once: true });
      this.drop = onAbort;
      const dog = watchdog(link.opts.idleTimeoutMs, () =>
        end(new TransientError(`no frame for ${link.opts.idleTimeoutMs} ms`), 1000),
      );
      const ack = () => {
        const c = checker.ackDue();
        if (c === undefined) return;
        socket.send(JSON.stringify({ type: "cursor-ack", cursor: c }));
        checker.acked();
      };
      socket.attach({
        onText: (text) => {
          dog.touch();
          try {
            this.onFrame(text, checker);
            ack();
          } catch (e) {
            const err = asError(e);
            end(err, err instanceof ProtocolViolationError ? 4400 : 4409);
          }
        },
        onClose: (code, reason) => {
          if (this.framesSent && REFUSED_FRAME.has(code)) {
            // The server refused what this client sent on the socket: a
            // `message` frame (the only other frame is the ack). The session
            // stream resumes; messages go by POST from now on.
            return end(new TransientError(`the server closed the socket ${code} after a message frame (${reason}); POST from now on`), undefined, code);
          }
          end(closeError(code, reason, this.sid), undefined, code);
        },
      });
      // prior = C: nothing to replay, the gate opens at once.
      try {
        ack();
      } catch (e) {
        end(asError(e), 1000);
      }
    });
  }

  /**
   * What happens to the messages of a socket that ended before the server was
   * shown to have read them (no response to a later request came back). The
   * protocol has no receipt for a frame, so:
   *
   * - a notification or a response (an answer to a server request) is POSTed
   *   again: the server drops an answer it already has (3.4) and a repeated
   *   cancellation changes nothing, so at least once is safe for them;
   * - a request may have run: like a POST whose connection broke before its
   *   answer, its call ends at once with a JSON-RPC error -32000
   *   (`data.reason: "websocket-closed"`) and the application decides; if its
   *   response still arrives on the session stream, it is reported through
   *   `onerror` as proof that it ran, not delivered;
   * - if the server refused the frames (a close of 1003, 1009 or 4400 after
   *   message frames), frames stay off for this transport; when none of this
   *   socket's frames had been confirmed, none was handled, and requests too
   *   are POSTed again.
   */
  private settleOutbox(serverCode: number | undefined): void {
    const left = this.outbox;
    this.outbox = [];
    const refused = serverCode !== undefined && this.framesSent && REFUSED_FRAME.has(serverCode);
    if (refused) {
      this.framesRefused = true;
      this.link.log(`the server refused message frames (close ${serverCode}); client messages go by POST from now on`);
    }
    if (this.stopped || this.link.closed) return;
    const replayRequests = refused && !this.framesConfirmed;
    for (const u of left) {
      if (!u.request || replayRequests) {
        this.link.resend(u.message);
        continue;
      }
      const id = u.message.id as string | number;
      this.abandoned.add(id);
      if (this.abandoned.size > MAX_ABANDONED) this.abandoned.delete(this.abandoned.values().next().value as string | number);
      this.failRequest(u.message, "the WebSocket that carried it closed before its response");
    }
  }

  /** Ends a request's call with a JSON-RPC error made here (-32000, `data.reason: "websocket-closed"`), and reports why. */
  private failRequest(message: JSONRPCMessage, why: string): void {
    const id = message.id as string | number;
    this.link.report(new Error(`request ${JSON.stringify(id)} (${message.method}): ${why}; it may or may not have run`));
    this.link.deliver({
      jsonrpc: "2.0",
      id,
      error: {
        code: WEBSOCKET_MESSAGE_LOST,
        message: `${why}: the request may or may not have run`,
        data: { reason: "websocket-closed", method: message.method },
      },
    });
  }

  private onFrame(text: string, checker: SeqChecker): void {
    let f: { type?: unknown; seq?: unknown; head?: unknown; message?: unknown };
    try {
      f = JSON.parse(text);
    } catch {
      throw new ProtocolViolationError(`a frame that is not JSON: ${text.slice(0, 100)}`);
    }
    if (f.type === "event") {
      if (!Number.isSafeInteger(f.seq) || typeof f.message !== "object" || f.message === null) {
        throw new ProtocolViolationError(`a malformed event frame: ${text.slice(0, 100)}`);
      }
      const gap = checker.onEvent(f.seq as number);
      if (gap) {
        this.stats.gaps += 1;
        throw new TransientError(gap.why);
      }
      this.progressed = true;
      this.deliver(f.message as JSONRPCMessage);
      this.queueSave();
    } else if (f.type === "heartbeat") {
      if (!Number.isSafeInteger(f.head)) throw new ProtocolViolationError(`a malformed heartbeat: ${text.slice(0, 100)}`);
      const gap = checker.onHeartbeat(f.head as number);
      if (gap) {
        this.stats.gaps += 1;
        throw new TransientError(gap.why);
      }
    }
    // Anything else (a cursor frame this reader did not ask for) carries no event.
  }

  // -------------------------------------------------------------- cursor ---

  /** Saves the cursor once per batch (a chunk, a run of frames), after delivery. */
  private queueSave(): void {
    if (this.saveQueued) return;
    this.saveQueued = true;
    queueMicrotask(() => {
      this.saveQueued = false;
      this.flushCursor();
    });
  }

  private flushCursor(): void {
    const c = this.checker?.cursor;
    const sid = this.sid;
    if (c === undefined || c === this.savedCursor) return;
    this.savedCursor = c;
    try {
      const p = this.store.save(sid, c);
      if (p) p.catch((e) => this.link.report(asError(e)));
    } catch (e) {
      this.link.report(asError(e));
    }
  }
}

/** Close codes by which a server refuses what a client sent (docs/protocol.md 5.5: binary, too big, malformed). */
const REFUSED_FRAME = new Set([1003, 1009, 4400]);

/** The server has no standalone GET stream (405): the reader stops quietly. */
const NO_STREAM = new Error("no session stream");

/** What a close code means for the reader (docs/protocol.md 5.5). */
function closeError(code: number, reason: string, sid: string): Error {
  if (code === 4404) return new SessionNotFoundError(sid, `the WebSocket closed 4404 ${reason}`);
  if (code === 1003 || code === 1008 || code === 1009 || code === 4400) {
    return new ProtocolViolationError(`the WebSocket closed ${code}: ${reason}`);
  }
  return new TransientError(`the WebSocket closed ${code}${reason ? ` ${reason}` : ""}; resuming`);
}
