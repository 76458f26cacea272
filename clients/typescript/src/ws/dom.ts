/**
 * The upgrade with the WHATWG `WebSocket` (browsers; also Node 22+'s global).
 * It cannot read the `101`'s headers, so it offers `mcp.resume.cursor-frame`
 * and takes the committed cursor from the first frame (docs/protocol.md 5.1,
 * 5.3); a first frame that is not `{"type":"cursor"}` counts as a missing
 * echo (5.6). It cannot see a refusal's status either: a handshake that fails
 * is reported as refused with no status, and the reader falls back to SSE
 * from the same cursor, where a 409 or a 404 is readable.
 *
 * It cannot set headers, so the cursor travels as `last_event_id` and a
 * bearer token as the `mcp.auth.TOKEN` subprotocol, only over `wss://`
 * (over `ws://` the token would go unprotected: the upgrade then fails with
 * 401 and the reader stays on SSE, where `Authorization` can be sent).
 */

import { utf8Length } from "../link.js";
import type { Connector, FrameHandlers, FrameSocket, Handshake, UpgradeRequest } from "./types.js";
import { AUTH_SUBPROTOCOL_PREFIX, CURSOR_FRAME_SUBPROTOCOL, SUBPROTOCOL } from "./types.js";

/** The part of a WHATWG WebSocket the connector uses (declared here so Node-only projects need no DOM types). */
export interface WebSocketLike {
  readonly protocol: string;
  readonly readyState: number;
  onopen: ((ev: unknown) => unknown) | null;
  onmessage: ((ev: { data: unknown }) => unknown) | null;
  onerror: ((ev: unknown) => unknown) | null;
  onclose: ((ev: { code: number; reason: string }) => unknown) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** The constructor of a WHATWG WebSocket. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** A connector on `WebSocketImpl` (default: the global `WebSocket`). */
export function domConnector(WebSocketImpl?: WebSocketConstructor): Connector {
  return (req: UpgradeRequest): Promise<Handshake> => {
    const Impl = WebSocketImpl ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!Impl) {
      return Promise.reject(new Error("no WebSocket constructor here (Node 20 needs --experimental-websocket, or websocketApi: \"node\")"));
    }
    if (req.signal?.aborted) return Promise.reject(new Error("the WebSocket handshake was aborted"));
    const url = new URL(req.url);
    if (req.prior !== undefined) url.searchParams.set("last_event_id", String(req.prior));
    const maxMessageBytes = req.maxMessageBytes ?? 4 * 1024 * 1024;
    const protocols = [SUBPROTOCOL, CURSOR_FRAME_SUBPROTOCOL];
    if (req.token && url.protocol === "wss:") protocols.push(AUTH_SUBPROTOCOL_PREFIX + req.token);
    return new Promise<Handshake>((resolve) => {
      let settled = false;
      const ws = new Impl(url.toString(), protocols);
      const socket = new DomFrameSocket(ws, maxMessageBytes);
      const onAbort = () => refused("the WebSocket handshake was aborted");
      const settle = (h: Handshake) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.signal?.removeEventListener("abort", onAbort);
        resolve(h);
      };
      const refused = (detail: string) => {
        // Settled first: closing a socket that is still connecting fires its
        // error event again, synchronously in Node's WebSocket (undici).
        settle({ kind: "refused", status: undefined, body: "", detail });
        socket.close(1000, "");
      };
      const timer = setTimeout(() => refused(`the WebSocket handshake took longer than ${req.timeoutMs} ms`), req.timeoutMs);
      req.signal?.addEventListener("abort", onAbort, { once: true });
      ws.onerror = () => refused("the WebSocket handshake failed (a browser does not say why)");
      ws.onclose = (e) => refused(`the WebSocket closed ${e.code} before the cursor frame`);
      ws.onopen = () => {
        if (ws.protocol !== SUBPROTOCOL) {
          refused(`the server selected subprotocol ${JSON.stringify(ws.protocol)}`);
        }
      };
      ws.onmessage = (m) => {
        // The very first frame decides (5.6): the cursor, or not resumable.
        let echo: number | undefined;
        let rawEcho: string | undefined;
        try {
          const f = JSON.parse(String(m.data)) as { type?: unknown; cursor?: unknown };
          if (f.type === "cursor" && Number.isSafeInteger(f.cursor) && (f.cursor as number) >= 0) echo = f.cursor as number;
          else rawEcho = String(m.data).slice(0, 100);
        } catch {
          rawEcho = String(m.data).slice(0, 100);
        }
        socket.listen();
        settle({ kind: "open", socket, echo, rawEcho });
      };
    });
  };
}

class DomFrameSocket implements FrameSocket {
  private handlers: FrameHandlers | undefined;
  private queued: Array<string | { code: number; reason: string }> = [];
  private done = false;
  private closing = false;

  constructor(
    private readonly ws: WebSocketLike,
    private readonly maxMessageBytes: number,
  ) {}

  /** From the handshake on, frames and the end go to the handlers (queued until attached). */
  listen(): void {
    this.ws.onmessage = (m) => {
      if (this.done) return;
      const text = String(m.data);
      // A browser buffers a message whole before handing it over; the limit
      // still holds for what reaches the reader (its UTF-8 bytes: at least one
      // per UTF-16 unit, at most three).
      const max = this.maxMessageBytes;
      if (text.length > max || (text.length * 3 > max && utf8Length(text) > max)) {
        this.emit({ code: 1009, reason: `a message over ${this.maxMessageBytes} bytes` });
        this.close(1009, "message too big");
        return;
      }
      this.emit(text);
    };
    this.ws.onclose = (e) => this.emit({ code: e.code, reason: e.reason });
    this.ws.onerror = () => {};
  }

  attach(handlers: FrameHandlers): void {
    this.handlers = handlers;
    const q = this.queued;
    this.queued = [];
    for (const item of q) this.deliver(item);
  }

  send(text: string): boolean {
    if (this.done || this.ws.readyState !== 1) return false;
    this.ws.send(text);
    return true;
  }

  close(code: number, reason: string): void {
    // Once only: undici fires `error` synchronously when a connecting socket
    // is closed, and its handler closes again; unguarded, that recursed until
    // the stack overflowed before the handshake was settled, and the reader
    // hung (seen as the flaky WHATWG 409 test of refusals.test.mjs).
    if (this.closing) return;
    this.closing = true;
    this.done = true;
    this.handlers = undefined;
    try {
      // Browsers accept only 1000 and 3000-4999 from a page.
      this.ws.close(code === 1000 || (code >= 3000 && code <= 4999) ? code : 1000, reason.slice(0, 120));
    } catch {
      // Not yet open, or gone.
    }
  }

  private emit(item: string | { code: number; reason: string }): void {
    if (this.done) return;
    if (this.handlers) this.deliver(item);
    else this.queued.push(item);
  }

  private deliver(item: string | { code: number; reason: string }): void {
    const h = this.handlers;
    if (!h || this.done) return;
    if (typeof item === "string") h.onText(item);
    else {
      this.done = true;
      this.handlers = undefined;
      h.onClose(item.code, item.reason);
    }
  }
}
