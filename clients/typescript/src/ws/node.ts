/**
 * A minimal RFC 6455 client on `node:http`, for one reason: the cursor-safe
 * upgrade is decided by headers and statuses that the WHATWG `WebSocket`
 * hides. The `101` carries the committed cursor in `X-MCP-Resume-Cursor`,
 * and a refusal says what to do by its status (426 or 503: stay on SSE; 409:
 * the cursor cannot be honoured; 404: the session is gone). It also sends
 * `Authorization` over `ws://`, which a browser cannot.
 *
 * Text frames only (the protocol has no binary frames); ping is answered,
 * fragments are joined, client frames are masked. Node's built-ins are
 * imported when first used so that the module costs a browser bundle nothing.
 */

import type { Connector, FrameHandlers, FrameSocket, Handshake, UpgradeRequest } from "./types.js";
import { SUBPROTOCOL } from "./types.js";

type NodeSocket = import("node:net").Socket;
type NodeBuffer = import("node:buffer").Buffer;
type Crypto = typeof import("node:crypto");

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** Upgrades with `node:http`/`node:https`, reading the echo from the `101`. */
export const nodeConnector: Connector = async (req: UpgradeRequest): Promise<Handshake> => {
  const url = new URL(req.url);
  const secure = url.protocol === "wss:" || url.protocol === "https:";
  // node:http speaks http: URLs; the upgrade is an ordinary GET on them.
  url.protocol = secure ? "https:" : "http:";
  const http = secure ? await import("node:https") : await import("node:http");
  const crypto = await import("node:crypto");
  const key = crypto.randomBytes(16).toString("base64");
  const protocols = [SUBPROTOCOL];
  const headers: Record<string, string> = {
    ...req.headers,
    Connection: "Upgrade",
    Upgrade: "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": key,
    "Last-Event-ID": String(req.prior),
    "Mcp-Session-Id": req.sessionId,
  };
  if (req.protocolVersion) headers["MCP-Protocol-Version"] = req.protocolVersion;
  // The token rides in Authorization; node can always send it, so never in a subprotocol.
  if (req.token) headers.Authorization = `Bearer ${req.token}`;
  headers["Sec-WebSocket-Protocol"] = protocols.join(", ");

  return new Promise<Handshake>((resolve, reject) => {
    let settled = false;
    const done = (f: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      f();
    };
    const r = http.request(url, { method: "GET", headers, agent: false });
    const timer = setTimeout(() => {
      r.destroy();
      done(() => reject(new Error(`the WebSocket handshake took longer than ${req.timeoutMs} ms`)));
    }, req.timeoutMs);
    r.on("error", (e) => done(() => reject(e)));
    r.on("response", (res) => {
      const chunks: NodeBuffer[] = [];
      res.on("data", (c: NodeBuffer) => chunks.push(c));
      res.on("error", (e) => done(() => reject(e)));
      res.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        done(() =>
          resolve({ kind: "refused", status: res.statusCode, body, detail: `the upgrade was answered ${res.statusCode}` }),
        );
      });
    });
    r.on("upgrade", (res, socket: NodeSocket, head: NodeBuffer) => {
      const accept = crypto.createHash("sha1").update(key + GUID).digest("base64");
      if (res.headers["sec-websocket-accept"] !== accept) {
        socket.destroy();
        done(() => reject(new Error("the server's Sec-WebSocket-Accept does not match the key")));
        return;
      }
      const selected = res.headers["sec-websocket-protocol"];
      const ws = new NodeFrameSocket(socket, crypto);
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

/** The framing of RFC 6455 over a raw socket. */
class NodeFrameSocket implements FrameSocket {
  private chunks: NodeBuffer[] = [];
  private total = 0;
  private fragments: NodeBuffer[] | undefined;
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
  ) {
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

  send(text: string): void {
    if (!this.sentClose) this.socket.write(this.frame(0x1, Buffer.from(text, "utf8")));
  }

  close(code: number, reason: string): void {
    this.detached = true;
    this.handlers = undefined;
    this.sendClose(code, reason);
  }

  /** Feeds received bytes (also the bytes that came with the 101). */
  push(c: NodeBuffer): void {
    if (c.length === 0) return;
    this.chunks.push(c);
    this.total += c.length;
    this.parse();
  }

  private sendClose(code: number, reason: string): void {
    if (this.sentClose) return;
    this.sentClose = true;
    const r = Buffer.from(reason, "utf8").subarray(0, 123);
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

  private parse(): void {
    while (!this.sentClose && this.total >= 2) {
      const buf = this.chunks.length === 1 ? this.chunks[0] : this.concat();
      const b0 = buf[0];
      const b1 = buf[1];
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) return;
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) return;
        len = Number(buf.readBigUInt64BE(2));
        off = 10;
      }
      if (b1 & 0x80) return this.fail(1002, "the server masked a frame");
      if (buf.length < off + len) return;
      const payload = buf.subarray(off, off + len);
      const rest = buf.subarray(off + len);
      this.chunks = rest.length ? [rest] : [];
      this.total = rest.length;
      this.onFrame((b0 & 0x80) !== 0, b0 & 0x0f, payload);
    }
  }

  private concat(): NodeBuffer {
    const b = Buffer.concat(this.chunks, this.total);
    this.chunks = [b];
    return b;
  }

  private onFrame(fin: boolean, opcode: number, payload: NodeBuffer): void {
    switch (opcode) {
      case 0x0:
        if (!this.fragments) return this.fail(1002, "a continuation frame without a start");
        this.fragments.push(Buffer.from(payload));
        if (fin) {
          const whole = Buffer.concat(this.fragments);
          this.fragments = undefined;
          this.emitText(whole.toString("utf8"));
        }
        return;
      case 0x1:
        if (fin) this.emitText(payload.toString("utf8"));
        else this.fragments = [Buffer.from(payload)];
        return;
      case 0x2:
        return this.fail(1003, "a binary frame: the protocol is text only");
      case 0x8: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        const reason = payload.length > 2 ? payload.subarray(2).toString("utf8") : "";
        this.emitClose(code, reason);
        this.sendClose(code === 1005 ? 1000 : code, "");
        return;
      }
      case 0x9:
        if (!this.sentClose) this.socket.write(this.frame(0xa, payload));
        return;
      case 0xa:
        return;
      default:
        return this.fail(1002, `unknown opcode ${opcode}`);
    }
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
