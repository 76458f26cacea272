/**
 * The session stream over the cursor-safe WebSocket upgrade (docs/protocol.md
 * 5): the handshake from the reader's cursor, the echo that must prove the
 * replay covers everything after it, the refusals that end the reader and
 * those that fall back to SSE from the same cursor, the gate's `cursor-ack`,
 * and the frames read into the reader's {@link SeqChecker}.
 */

import { ProtocolViolationError, SessionNotFoundError, TransientError } from "./errors.js";
import type { JSONRPCMessage, Link } from "./link.js";
import { asError, refusalOf, watchdog } from "./link.js";
import { decideStart, type SeqChecker } from "./seq.js";
import type { FrameOutbox } from "./session-outbox.js";
import type { TransportStats } from "./session-stream.js";
import type { UpgradeFallback } from "./upgrade-fallback.js";
import type { FrameSocket } from "./ws/types.js";

/** What a WebSocket connection asks of the session reader that opened it. */
export interface SessionSocketHooks {
  /** Whether the reader was stopped (the session ended or was replaced). */
  stopped(): boolean;
  /** How the reader drops the live connection (close, stop); undefined once it ended. */
  setDrop(drop: (() => void) | undefined): void;
  /** An event that passed the checker: handed to the application, its cursor saved. */
  accept(message: JSONRPCMessage): void;
}

/**
 * The WebSocket side of one session reader: each {@link connect} is one
 * upgrade, read until it ends, or turned down for SSE. It shares the
 * reader's counters, its upgrade fallback and its outbox, which the socket
 * feeds while it is open.
 */
export class SessionSocket {
  constructor(
    private readonly link: Link,
    /** The session the reader reads. */
    private readonly sid: string,
    /** Aborted when the reader stops: ends a handshake or an open socket. */
    private readonly signal: AbortSignal,
    private readonly stats: TransportStats,
    private readonly upgrade: UpgradeFallback,
    private readonly outbox: FrameOutbox,
    private readonly hooks: SessionSocketHooks,
  ) {}

  /** The upgrade from the checker's cursor; "fallback" to read SSE instead. */
  async connect(checker: SeqChecker): Promise<Error | "fallback"> {
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
      signal: this.signal,
      maxMessageBytes: link.opts.maxMessageBytes,
    });
    if (link.closed || this.hooks.stopped()) {
      if (hs.kind === "open") hs.socket.close(1000, "closing");
      return new TransientError("closed");
    }
    if (hs.kind === "refused") return this.refused(hs.status, hs.body, hs.detail, prior, sid);
    const decision = decideStart(prior, hs.echo);
    if (!decision.ok) {
      // Not resumable: close at once, read nothing from it (5.6).
      hs.socket.close(1000, "no committed cursor");
      this.stats.fallbacks += 1;
      if (decision.why === "missing-echo") this.upgrade.disable();
      else this.upgrade.sseOnce();
      link.log(`the upgrade is not resumable (${decision.detail}${hs.rawEcho ? `: ${hs.rawEcho}` : ""}); SSE from ${prior}`);
      return "fallback";
    }
    this.upgrade.clearStrikes();
    this.stats.upgrades += 1;
    this.stats.transport = "websocket";
    this.stats.lastCommitted = decision.committed;
    checker.expectReplayUntil(decision.committed);
    return this.read(hs.socket, checker);
  }

  /** A refused handshake: the error that ends (or resumes) the reader, or "fallback" to SSE from the same cursor. */
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
      this.upgrade.strike();
    } else {
      // 426, or a server that does not know the upgrade: stay on SSE.
      this.upgrade.disable();
    }
    return "fallback";
  }

  /** Reads an accepted socket until it ends; resolves with why. */
  private read(socket: FrameSocket, checker: SeqChecker): Promise<Error> {
    const { link } = this;
    this.outbox.attach(socket);
    return new Promise<Error>((resolve) => {
      let ended = false;
      const end = (e: Error, code?: number, serverCode?: number) => {
        if (ended) return;
        ended = true;
        dog.stop();
        this.signal.removeEventListener("abort", onAbort);
        this.hooks.setDrop(undefined);
        this.outbox.detach(socket);
        if (code !== undefined) socket.close(code, e.message);
        this.outbox.settle(serverCode);
        resolve(e);
      };
      const onAbort = () => end(new TransientError("closed"), 1000);
      this.signal.addEventListener("abort", onAbort, { once: true });
      this.hooks.setDrop(onAbort);
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
          if (this.outbox.refusedBy(code)) {
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

  /** One frame: an event checked to be the next seq and handed on, or a heartbeat checked against the cursor. */
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
      this.hooks.accept(f.message as JSONRPCMessage);
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
}

/** What a close code means for the reader (docs/protocol.md 5.5). */
function closeError(code: number, reason: string, sid: string): Error {
  if (code === 4404) return new SessionNotFoundError(sid, `the WebSocket closed 4404 ${reason}`);
  if (code === 1003 || code === 1008 || code === 1009 || code === 4400) {
    return new ProtocolViolationError(`the WebSocket closed ${code}: ${reason}`);
  }
  return new TransientError(`the WebSocket closed ${code}${reason ? ` ${reason}` : ""}; resuming`);
}
