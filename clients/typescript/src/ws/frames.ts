/**
 * The reading half of RFC 6455 for the Node WebSocket client, free of I/O so
 * that it can be fed crafted bytes in tests. A server is not trusted to be
 * well-behaved: a frame header may declare any length, so the reader is
 *
 * - bounded: a message (all its fragments) larger than `maxMessageBytes` is
 *   refused from its header, before its payload is buffered (close 1009);
 * - linear in the bytes received: chunks are kept in a list with their total,
 *   the header is read across them, and a payload is copied out once, when
 *   all of it has arrived (never the whole buffer again on every chunk);
 * - strict: RSV bits without a negotiated extension, a masked frame from the
 *   server, a control frame that is fragmented or over 125 bytes, a
 *   continuation without a started message, a new data frame inside a
 *   fragmented one, an unknown opcode and a 64-bit length with its high bit
 *   set all fail the connection with 1002 (RFC 6455 5.2, 5.4, 5.5, 7.4.1);
 *   text that is not UTF-8 fails it with 1007; a binary frame with 1003 (the
 *   protocol is text only, docs/protocol.md 5.3).
 */

type Buf = import("node:buffer").Buffer;

/** The default limit of one message: the server's own limit for a client's (docs/protocol.md 3.5). */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** What the parser found: a whole message or control frame, or why the connection must fail. */
export type FrameItem =
  | { kind: "text"; text: string }
  | { kind: "close"; code: number; reason: string }
  | { kind: "ping"; payload: Buf }
  | { kind: "pong" }
  /** The connection must be failed with `code` (the parser reads nothing more). */
  | { kind: "error"; code: number; reason: string };

/** The most bytes a frame header can take: 2, 8 for a 64-bit length (no mask from a server). */
const MAX_HEADER = 10;

/** An incremental parser of server-to-client frames. */
export class FrameParser {
  private chunks: Buf[] = [];
  /** Bytes in `chunks` (the first one read from `offset`). */
  private total = 0;
  /** How much of `chunks[0]` was consumed already. */
  private offset = 0;
  /** The fragments of a text message under way, and their size. */
  private fragments: Buf[] | undefined;
  private fragmentBytes = 0;
  /** The header of the frame whose payload is awaited. */
  private pending: { fin: boolean; opcode: number; len: number; headerLen: number } | undefined;
  private failed = false;
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });

  constructor(private readonly maxMessageBytes: number = DEFAULT_MAX_MESSAGE_BYTES) {}

  /** Bytes held, waiting for the rest of a frame (for tests: the bound holds). */
  get buffered(): number {
    return this.total + this.fragmentBytes;
  }

  /** Feeds received bytes; returns what they completed, in order. After an `error` item it returns nothing more. */
  push(chunk: Buf): FrameItem[] {
    const out: FrameItem[] = [];
    if (this.failed || chunk.length === 0) return out;
    this.chunks.push(chunk);
    this.total += chunk.length;
    for (;;) {
      if (!this.pending) {
        const header = this.header();
        if (header === undefined) break;
        if ("code" in header) return this.fail(out, header.code, header.reason);
        this.pending = header;
      }
      const p = this.pending;
      if (this.total < p.headerLen + p.len) break;
      this.pending = undefined;
      this.skip(p.headerLen);
      const payload = this.take(p.len);
      const item = this.frame(p.fin, p.opcode, payload);
      if (item === undefined) continue;
      if (item.kind === "error") return this.fail(out, item.code, item.reason);
      out.push(item);
    }
    return out;
  }

  private fail(out: FrameItem[], code: number, reason: string): FrameItem[] {
    this.failed = true;
    this.chunks = [];
    this.total = 0;
    this.offset = 0;
    this.fragments = undefined;
    this.fragmentBytes = 0;
    out.push({ kind: "error", code, reason });
    return out;
  }

  /** Reads up to `n` bytes from the front without consuming them (n is at most {@link MAX_HEADER}). */
  private peek(n: number): number[] {
    const bytes: number[] = [];
    let off = this.offset;
    for (const c of this.chunks) {
      for (let i = off; i < c.length && bytes.length < n; i++) bytes.push(c[i]);
      if (bytes.length >= n) break;
      off = 0;
    }
    return bytes;
  }

  /** The next frame's header, once all of it has arrived; a refusal as soon as one is certain. */
  private header():
    | { fin: boolean; opcode: number; len: number; headerLen: number }
    | { code: number; reason: string }
    | undefined {
    if (this.total < 2) return undefined;
    const h = this.peek(MAX_HEADER);
    const b0 = h[0];
    const b1 = h[1];
    const fin = (b0 & 0x80) !== 0;
    const opcode = b0 & 0x0f;
    if (b0 & 0x70) return { code: 1002, reason: "RSV bits set without a negotiated extension" };
    if (b1 & 0x80) return { code: 1002, reason: "the server masked a frame" };
    const control = opcode >= 0x8;
    if (control) {
      if (opcode > 0xa) return { code: 1002, reason: `unknown opcode ${opcode}` };
      if (!fin) return { code: 1002, reason: "a fragmented control frame" };
      if ((b1 & 0x7f) > 125) return { code: 1002, reason: "a control frame over 125 bytes" };
    } else if (opcode === 0x0) {
      if (!this.fragments) return { code: 1002, reason: "a continuation frame without a started message" };
    } else if (opcode === 0x1 || opcode === 0x2) {
      if (this.fragments) return { code: 1002, reason: "a new data frame inside a fragmented message" };
    } else {
      return { code: 1002, reason: `unknown opcode ${opcode}` };
    }
    let len = b1 & 0x7f;
    let headerLen = 2;
    if (len === 126) {
      if (h.length < 4) return undefined;
      len = (h[2] << 8) | h[3];
      headerLen = 4;
    } else if (len === 127) {
      if (h.length < 10) return undefined;
      if (h[2] & 0x80) return { code: 1002, reason: "a 64-bit frame length with its most significant bit set" };
      // Exact up to 2^53; anything near it is far over any limit anyway.
      len = 0;
      for (let i = 2; i < 10; i++) len = len * 256 + h[i];
      headerLen = 10;
    }
    if (opcode === 0x2) return { code: 1003, reason: "a binary frame: the protocol is text only" };
    if (!control && this.fragmentBytes + len > this.maxMessageBytes) {
      return { code: 1009, reason: `a message over ${this.maxMessageBytes} bytes` };
    }
    return { fin, opcode, len, headerLen };
  }

  /** Drops `n` bytes from the front. */
  private skip(n: number): void {
    this.total -= n;
    while (n > 0) {
      const c = this.chunks[0];
      const here = c.length - this.offset;
      if (n < here) {
        this.offset += n;
        return;
      }
      n -= here;
      this.chunks.shift();
      this.offset = 0;
    }
  }

  /** Removes `n` bytes from the front as one buffer (a view when they lie in one chunk). */
  private take(n: number): Buf {
    const first = this.chunks[0];
    if (n === 0) return Buffer.alloc(0);
    if (first.length - this.offset >= n) {
      const view = first.subarray(this.offset, this.offset + n);
      this.skip(n);
      return view;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0];
      const here = Math.min(c.length - this.offset, n - filled);
      c.copy(out, filled, this.offset, this.offset + here);
      filled += here;
      this.skip(here);
    }
    return out;
  }

  private frame(fin: boolean, opcode: number, payload: Buf): FrameItem | undefined {
    switch (opcode) {
      case 0x0:
      case 0x1: {
        if (!fin) {
          if (!this.fragments) this.fragments = [];
          // A copy: a view would keep the whole network chunk alive.
          this.fragments.push(Buffer.from(payload));
          this.fragmentBytes += payload.length;
          return undefined;
        }
        let whole = payload;
        if (this.fragments) {
          this.fragments.push(payload);
          whole = Buffer.concat(this.fragments, this.fragmentBytes + payload.length);
          this.fragments = undefined;
          this.fragmentBytes = 0;
        }
        try {
          return { kind: "text", text: this.decoder.decode(whole) };
        } catch {
          return { kind: "error", code: 1007, reason: "a text message that is not UTF-8" };
        }
      }
      case 0x8: {
        if (payload.length === 1) return { kind: "error", code: 1002, reason: "a close frame with a one-byte payload" };
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        let reason = "";
        try {
          reason = payload.length > 2 ? this.decoder.decode(payload.subarray(2)) : "";
        } catch {
          return { kind: "error", code: 1007, reason: "a close reason that is not UTF-8" };
        }
        return { kind: "close", code, reason };
      }
      case 0x9:
        return { kind: "ping", payload: Buffer.from(payload) };
      default:
        return { kind: "pong" };
    }
  }
}
