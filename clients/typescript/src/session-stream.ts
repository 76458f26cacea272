/**
 * The reader of the session stream: SSE or the cursor-safe WebSocket upgrade,
 * every seq checked to be `last + 1`, reconnecting from the cursor on any
 * drop, and loud where continuity cannot be proven (docs/protocol.md 4, 5.6).
 * It follows the Rust reader (crates/client/src/reader), with one difference
 * the SDK's transport contract asks for: events without an id (a plain MCP
 * server without an event store) are delivered too, not dropped.
 *
 * This module holds the reconnect loop, the SSE connection and the cursor's
 * bookkeeping; the upgrade is read by {@link SessionSocket}
 * (session-socket.ts), client messages sent on it are kept by
 * {@link FrameOutbox} (session-outbox.ts), the cursor is saved by
 * {@link CursorSaver} (cursor-saver.ts).
 */

import { ProtocolViolationError, TransientError } from "./errors.js";
import type { JSONRPCMessage, Link } from "./link.js";
import { asError, childController, fetchHeaders, isFatal, mediaType, refusal, sleep, watchdog } from "./link.js";
import { CursorSaver } from "./cursor-saver.js";
import { ResumeBackoff } from "./resume-backoff.js";
import { parseSeq, SeqChecker } from "./seq.js";
import { FrameOutbox } from "./session-outbox.js";
import { SessionSocket } from "./session-socket.js";
import { readSse, SseParser, type SseEvent } from "./sse.js";
import type { CursorStore } from "./stores.js";
import { UpgradeFallback } from "./upgrade-fallback.js";

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

/**
 * One session's reader, from its start (or stored cursor) until the
 * transport closes or the session ends: it owns the session's cursor and
 * decides, connection by connection, between the upgrade and SSE.
 */
export class SessionStream {
  private checker: SeqChecker | undefined;
  /** The last id from a server whose ids are not seqs (a plain Streamable HTTP server). */
  private opaqueId: string | undefined;
  /** Whether the next connection tries the upgrade. */
  private readonly upgrade: UpgradeFallback;
  private readonly backoff: ResumeBackoff;
  private progressed = false;
  private readonly saver: CursorSaver;
  /** Drops the live connection (close, or a watchdog). */
  private drop: (() => void) | undefined;
  private stopped = false;
  /** Aborted by {@link stop} and by the transport's close: every request and wait of this reader. */
  private readonly ac: AbortController;
  private readonly unlink: () => void;
  /** The session this reader reads (the transport's may change with a new initialize). */
  private readonly sid: string;
  /** Client messages sent as frames on the open socket, until the server is shown to have read them. */
  private readonly outbox: FrameOutbox;
  /** The WebSocket upgrade of this reader's connections. */
  private readonly websocket: SessionSocket;

  constructor(
    private readonly link: Link,
    store: CursorStore,
    startCursor: number | undefined,
    /** A session this transport created just now: its stream starts at 0. */
    private fresh: boolean,
    private readonly stats: TransportStats,
  ) {
    this.sid = link.sessionId as string;
    ({ ac: this.ac, unlink: this.unlink } = childController(link.signal));
    this.upgrade = new UpgradeFallback(link.opts.websocket);
    this.backoff = new ResumeBackoff(link.opts, "maxRetries", 1000);
    if (startCursor !== undefined) {
      this.checker = new SeqChecker(startCursor);
      this.fresh = false;
    }
    this.saver = new CursorSaver(store, this.sid, () => this.checker?.cursor, (e) => this.link.report(e), startCursor);
    this.outbox = new FrameOutbox(link);
    this.websocket = new SessionSocket(link, this.sid, this.ac.signal, stats, this.upgrade, this.outbox, {
      stopped: () => this.stopped,
      setDrop: (drop) => (this.drop = drop),
      accept: (message) => {
        this.progressed = true;
        this.deliver(message);
        this.saver.queue();
      },
    });
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
    const left = this.outbox.stop();
    this.drop?.();
    this.ac.abort();
    this.unlink();
    // Requests sent on this reader's socket would be answered on its stream,
    // which nobody reads now: end their calls (a closed transport's are the SDK's).
    if (!this.link.closed) for (const m of left) this.outbox.failRequest(m, "its session's reader stopped (the session ended or was replaced)");
  }

  /**
   * Sends `message` as a `message` frame on the open socket (docs/protocol.md
   * 5.3): true when it went out, false when it must be POSTed instead (no
   * socket, the server refused frames, too many unconfirmed, too large).
   * A request's response comes back as a session-stream event.
   */
  sendFrame(message: JSONRPCMessage): boolean {
    return this.outbox.send(message);
  }

  /** Reads until the transport closes or a fatal error (reported through `fail`). */
  async run(): Promise<void> {
    try {
      await this.loop();
    } finally {
      this.unlink();
    }
  }

  /** Connections one after another, with the backoff between them, until the reader ends. */
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
      this.saver.flush();
      if (link.closed || this.stopped) return;
      if (err === NO_STREAM) return;
      if (isFatal(err)) return link.fail(err);
      if (!this.backoff.failed(this.progressed)) {
        return link.fail(new Error(`gave up after ${link.opts.maxRetries} reconnects without an event: ${err.message}`));
      }
      this.stats.reconnects += 1;
      const wait = this.backoff.delay();
      link.log(`session stream: ${err.message}; resuming after ${this.checker?.cursor ?? this.opaqueId ?? "-"} in ${Math.round(wait)} ms`);
      await sleep(wait, this.ac.signal);
    }
  }

  /** One connection: upgrade when wanted and possible, else SSE. Returns (or throws) why it ended. */
  private async once(): Promise<Error | undefined> {
    const wantWs = this.upgrade.take();
    if (wantWs) {
      if (!this.checker && this.opaqueId === undefined) {
        // Learn where "everything retained" starts from the priming event, so
        // the upgrade carries an explicit cursor (as the Rust reader does).
        const primed = await this.sse(true);
        if (primed !== PRIMED) return primed;
      }
      if (this.checker && !this.upgrade.disabled) {
        const ended = await this.websocket.connect(this.checker);
        if (ended !== "fallback") return ended;
      }
    }
    const ended = await this.sse(false);
    return ended === PRIMED ? undefined : ended;
  }

  // ----------------------------------------------------------------- SSE ---

  /** One SSE GET of the session stream from the cursor; with `stopAtPriming`, only up to its priming event. */
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
            this.saver.queue();
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
    if (ev.retry !== undefined) this.backoff.serverRetry(ev.retry);
    if (ev.id === undefined) {
      // No id: a server that cannot resume this event. Deliver it, as the SDK does.
      if (ev.data) {
        this.upgrade.disable();
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

  /** Ids that are not seqs: the reader resumes by `Last-Event-ID` alone, without the upgrade. */
  private plainServer(id: string): void {
    // Ids that are not seqs: a plain Streamable HTTP server. No cursor-safe
    // upgrade there; resume by Last-Event-ID as the SDK's transport does.
    this.opaqueId = id;
    this.upgrade.disable();
  }

  /** Delivers an event's data, reported (not delivered) when it is not JSON. */
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
    if (this.outbox.lateResponse(message)) return;
    this.link.deliver(message);
  }
}

/** The server has no standalone GET stream (405): the reader stops quietly. */
const NO_STREAM = new Error("no session stream");
