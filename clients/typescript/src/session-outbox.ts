/**
 * Client messages sent as `message` frames on the session stream's WebSocket
 * (docs/protocol.md 5.3) until the server is shown to have read them, and
 * what becomes of them when their socket closes first. The protocol has no
 * receipt for a frame: a response to a later request is the only proof, so
 * the outbox keeps every frame until one comes, and settles the rest when the
 * socket ends (see {@link FrameOutbox.settle}).
 */

import type { JSONRPCMessage, Link } from "./link.js";
import { utf8Length } from "./link.js";
import type { FrameSocket } from "./ws/types.js";

/**
 * The most client messages sent as `message` frames whose reading by the
 * server is not yet confirmed (docs/protocol.md 3.5: the server handles 64 at
 * once per socket); past it messages go by POST, so the outbox stays bounded.
 */
const MAX_UNCONFIRMED = 64;

/** How many requests failed with their socket are remembered, to recognise their late responses. */
const MAX_ABANDONED = 1024;

/** Close codes by which a server refuses what a client sent (docs/protocol.md 5.5: binary, too big, malformed). */
const REFUSED_FRAME = new Set([1003, 1009, 4400]);

/** The JSON-RPC error code of a request whose socket closed before its response (as the SDK's ConnectionClosed). */
export const WEBSOCKET_MESSAGE_LOST = -32000;

/** A client message sent as a `message` frame on the current socket, not yet known to have been read. */
interface Unconfirmed {
  message: JSONRPCMessage;
  /** A request (it has a method and an id): its response confirms it and everything sent before it. */
  request: boolean;
}

/**
 * The session reader's outgoing side: which socket messages may go on, what
 * was sent there unconfirmed, and which failed requests may still be answered,
 * so no client message is lost silently nor a request's call left waiting.
 */
export class FrameOutbox {
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
  /** The reader stopped: nothing is sent, nothing settled. */
  private stopped = false;

  constructor(private readonly link: Link) {}

  /**
   * Sends `message` as a `message` frame on the open socket (docs/protocol.md
   * 5.3): true when it went out, false when it must be POSTed instead (no
   * socket, the server refused frames, too many unconfirmed, too large).
   */
  send(message: JSONRPCMessage): boolean {
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

  /** A socket whose echo was accepted: messages may go on it, counted afresh. */
  attach(socket: FrameSocket): void {
    this.socket = socket;
    this.framesSent = false;
    this.framesConfirmed = false;
  }

  /** `socket` ended: no message goes on it any more (a later socket may have replaced it already). */
  detach(socket: FrameSocket): void {
    if (this.socket === socket) this.socket = undefined;
  }

  /** Whether a close with `code` refuses what this client sent: a `message` frame (the only other frame is the ack). */
  refusedBy(code: number): boolean {
    return this.framesSent && REFUSED_FRAME.has(code);
  }

  /**
   * A response of the session stream, before it is delivered: it confirms
   * its request and every frame sent before it (the server reads frames in
   * order). True when it answers a request already failed with its socket:
   * it is reported here as proof that the request ran, and not delivered.
   */
  lateResponse(message: JSONRPCMessage): boolean {
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
        return true;
      }
    }
    return false;
  }

  /**
   * The reader stopped: no message goes out any more. Returns the requests
   * sent on its socket and not yet answered; their responses would come on a
   * stream nobody reads now, so the caller ends their calls with
   * {@link failRequest}.
   */
  stop(): JSONRPCMessage[] {
    this.stopped = true;
    this.socket = undefined;
    const left = this.outbox;
    this.outbox = [];
    return left.filter((u) => u.request).map((u) => u.message);
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
  settle(serverCode: number | undefined): void {
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
  failRequest(message: JSONRPCMessage, why: string): void {
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
}
