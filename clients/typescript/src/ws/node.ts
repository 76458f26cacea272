/**
 * A minimal RFC 6455 client on `node:http`, for one reason: the cursor-safe
 * upgrade is decided by headers and statuses that the WHATWG `WebSocket`
 * hides. The `101` carries the committed cursor in `X-MCP-Resume-Cursor`,
 * and a refusal says what to do by its status (426 or 503: stay on SSE; 409:
 * the cursor cannot be honoured; 404: the session is gone). It also sends
 * `Authorization` over `ws://`, which a browser cannot.
 *
 * Text frames only (the protocol has no binary frames); ping is answered,
 * fragments are joined, client frames are masked. What the server sends is
 * read by {@link FrameParser} (src/ws/frames.ts): bounded per message,
 * linear in the bytes received, and strict about RFC 6455's rules. Node's built-ins are
 * imported when first used so that the module costs a browser bundle nothing.
 */

import { DEFAULT_MAX_MESSAGE_BYTES, FrameParser } from "./frames.js";
import type { Connector, FrameHandlers, FrameSocket, Handshake, UpgradeRequest } from "./types.js";
import { SUBPROTOCOL } from "./types.js";

type NodeSocket = import("node:net").Socket;
type NodeBuffer = import("node:buffer").Buffer;
type Crypto = typeof import("node:crypto");

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/**
 * Upgrades with `node:http`/`node:https`, reading the echo from the `101`.
 * The handshake is bounded by `timeoutMs` (a server that accepts the
 * connection and never answers rejects it then) and ends at once when
 * `signal` aborts (the reader stopped): either way the request is destroyed.
 */
export const nodeConnector: Connector = async (req: UpgradeRequest): Promise<Handshake> => {
  const url = new URL(req.url);
  const secure = url.protocol === "wss:" || url.protocol === "https:";
  // node:http speaks http: URLs; the upgrade is an ordinary GET on them.
  url.protocol = secure ? "https:" : "http:";
  const http = secure ? await import("node:https") : await import("node:http");
  const crypto = await import("node:crypto");
  if (req.signal?.aborted) throw new Error("the WebSocket handshake was aborted");
  const key = crypto.randomBytes(16).toString("base64");
  const protocols = [SUBPROTOCOL];
  const headers: Record<string, string> = {
    ...req.headers,
    Connection: "Upgrade",
    Upgrade: "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": key,
  };
  if (req.prior !== undefined) headers["Last-Event-ID"] = String(req.prior);
  if (req.sessionId !== undefined) headers["Mcp-Session-Id"] = req.sessionId;
  if (req.protocolVersion) headers["MCP-Protocol-Version"] = req.protocolVersion;
  // The token rides in Authorization; node can always send it, so never in a subprotocol.
  if (req.token) headers.Authorization = `Bearer ${req.token}`;
  headers["Sec-WebSocket-Protocol"] = protocols.join(", ");
  const maxMessageBytes = req.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;

  return new Promise<Handshake>((resolve, reject) => {
    let settled = false;
    const r = http.request(url, { method: "GET", headers, agent: false });
    const onAbort = () => {
      r.destroy();
      done(() => reject(new Error("the WebSocket handshake was aborted")));
    };
    const done = (f: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.signal?.removeEventListener("abort", onAbort);
      f();
    };
    const timer = setTimeout(() => {
      r.destroy();
      done(() => reject(new Error(`the WebSocket handshake took longer than ${req.timeoutMs} ms`)));
    }, req.timeoutMs);
    req.signal?.addEventListener("abort", onAbort, { once: true });
    r.on("error", (e) => done(() => reject(e)));
    r.on("response", (res) => {
      const chunks: NodeBuffer[] = [];
      let size = 0;
      res.on("data", (c: NodeBuffer) => {
        // A refusal's body is read for its error code; a huge one is cut, not buffered.
        if (size < REFUSAL_BODY_LIMIT) chunks.push(c);
        size += c.length;
      });
      res.on("error", (e) => done(() => reject(e)));
      res.on("end", () => {
        const body = Buffer.concat(chunks).subarray(0, REFUSAL_BODY_LIMIT).toString("utf8");
        done(() =>
          resolve({ kind: "refused", status: res.statusCode, body, detail: `the upgrade was answered ${res.statusCode}` }),
        );
      });
    });
    r.on("upgrade", (res, socket: NodeSocket, head: NodeBuffer) => {
      if (settled) {
        socket.destroy();
        return;
      }
      const accept = crypto.createHash("sha1").update(key + GUID).digest("base64");
      if (res.headers["sec-websocket-accept"] !== accept) {
        socket.destroy();
        done(() => reject(new Error("the server's Sec-WebSocket-Accept does not match the key")));
        return;
      }
      const selected = res.headers["sec-websocket-protocol"];
      const ws = new NodeFrameSocket(socket, crypto, maxMessageBytes);
      ws.push(head);
      if (selected !== SUBPROTOCOL) {
        ws.close(1002, "no mcp.resume.v1");
        done(() =>
          resolve({ kind: "refused", status: 101, body: "", detail: `the server selected subprotocol ${JSON.stringify(selected ?? null)}` }),
        );
        return;
      }
      const raw = res.headers["x-mcp-resume-cursor"];
      const rawEcho = Array.isArray(raw) ? raw.join(",") : raw;
      const echo = rawEcho !== undefined && /^(0|[1-9][0-9]{0,15})$/.test(rawEcho) ? Number(rawEcho) : undefined;
      done(() => resolve({ kind: "open", socket: ws, echo, rawEcho }));
    });
    r.end();
  });
};

/** The most of a refusal's body that is kept (its JSON error names the code in the first bytes). */
const REFUSAL_BODY_LIMIT = 64 * 1024;

/** The framing of RFC 6455 over a raw socket; what arrives is read by a bounded {@link FrameParser}. */
class NodeFrameSocket implements FrameSocket {
  private readonly parser: FrameParser;
  private queued: Array<string | { code: number; reason: string }> = [];
  private handlers: FrameHandlers | undefined;
  /** The end was reported (or queued for) the handlers. */
  private reported = false;
  /** The reader closed it: nothing more is handed over. */
  private detached = false;
  private sentClose = false;
  private readonly mask: NodeBuffer;

  constructor(
    private readonly socket: NodeSocket,
    private readonly crypto: Crypto,
    maxMessageBytes: number,
  ) {
    this.parser = new FrameParser(maxMessageBytes);
    this.mask = Buffer.alloc(4);
    socket.setNoDelay(true);
    socket.setTimeout(0);
    socket.on("data", (c: NodeBuffer) => this.push(c));
    socket.on("error", () => {});
    socket.on("close", () => this.emitClose(1006, "the connection broke without a close frame"));
  }

  attach(handlers: FrameHandlers): void {
    this.handlers = handlers;
    const q = this.queued;
    this.queued = [];
    for (const item of q) {
      if (this.handlers !== handlers) return;
      if (typeof item === "string") handlers.onText(item);
      else {
        this.handlers = undefined;
        handlers.onClose(item.code, item.reason);
      }
    }
  }

  send(text: string): boolean {
    if (this.sentClose || this.reported || this.socket.destroyed) return false;
    this.socket.write(this.frame(0x1, Buffer.from(text, "utf8")));
    return true;
  }

  close(code: number, reason: string): void {
    this.detached = true;
    this.handlers = undefined;
    this.sendClose(code, reason);
  }

  /** Feeds received bytes (also the bytes that came with the 101). */
  push(c: NodeBuffer): void {
    if (this.sentClose) return;
    for (const item of this.parser.push(c)) {
      switch (item.kind) {
        case "text":
          this.emitText(item.text);
          break;
        case "close":
          this.emitClose(item.code, item.reason);
          this.sendClose(item.code === 1005 ? 1000 : item.code, "");
          return;
        case "ping":
          if (!this.sentClose) this.socket.write(this.frame(0xa, item.payload));
          break;
        case "pong":
          break;
        case "error":
          return this.fail(item.code, item.reason);
      }
      if (this.sentClose) return;
    }
  }

  private sendClose(code: number, reason: string): void {
    if (this.sentClose) return;
    this.sentClose = true;
    const r = cutReason(reason);
    const payload = Buffer.alloc(2 + r.length);
    payload.writeUInt16BE(code, 0);
    r.copy(payload, 2);
    try {
      this.socket.write(this.frame(0x8, payload));
      this.socket.end();
    } catch {
      // Already gone.
    }
    // The server answers the close and hangs up; do not wait for it longer than a moment.
    setTimeout(() => this.socket.destroy(), 1000).unref?.();
  }

  private emitText(text: string): void {
    if (this.detached || this.reported) return;
    if (this.handlers) this.handlers.onText(text);
    else this.queued.push(text);
  }

  private emitClose(code: number, reason: string): void {
    if (this.detached || this.reported) return;
    this.reported = true;
    const h = this.handlers;
    this.handlers = undefined;
    if (h) h.onClose(code, reason);
    else this.queued.push({ code, reason });
  }

  private fail(code: number, reason: string): void {
    this.emitClose(code, reason);
    this.sendClose(code, reason);
  }

  private frame(opcode: number, payload: NodeBuffer): NodeBuffer {
    const len = payload.length;
    const hlen = len < 126 ? 2 : len < 65536 ? 4 : 10;
    const out = Buffer.allocUnsafe(hlen + 4 + len);
    out[0] = 0x80 | opcode;
    if (len < 126) {
      out[1] = 0x80 | len;
    } else if (len < 65536) {
      out[1] = 0x80 | 126;
      out.writeUInt16BE(len, 2);
    } else {
      out[1] = 0x80 | 127;
      out.writeBigUInt64BE(BigInt(len), 2);
    }
    this.crypto.randomFillSync(this.mask);
    this.mask.copy(out, hlen);
    for (let i = 0; i < len; i++) out[hlen + 4 + i] = payload[i] ^ this.mask[i & 3];
    return out;
  }
}

/** A close reason cut to 123 bytes on a UTF-8 character boundary (RFC 6455 5.5: two of a control frame's 125 are the code). */
function cutReason(reason: string): NodeBuffer {
  const b = Buffer.from(reason, "utf8");
  if (b.length <= 123) return b;
  let end = 123;
  // Back off over continuation bytes (10xxxxxx) to the start of a character.
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--;
  return b.subarray(0, end);
}
