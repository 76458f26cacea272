/**
 * Server-sent events without `EventSource`: `EventSource` can neither set
 * `Mcp-Session-Id` nor tell a priming event from a message, and it resumes on
 * its own with an id this transport has not checked. This parser follows the
 * WHATWG field rules but hands over every block, including the priming event
 * (`id` and an empty `data:`), and the server's closing comment
 * (`: error CODE: why`, docs/protocol.md 4 item 8) so a drop can say why.
 */

/** One event block as sent. */
export interface SseEvent {
  /** The `id` field of this block, if it had one (not carried over from earlier blocks). */
  id?: string;
  /** The `event` field; `message` when absent. */
  event: string;
  /** The `data` lines joined with `\n`; empty for a priming event. */
  data: string;
  /** Whether the block had at least one `data` field. */
  hasData: boolean;
  /** The `retry` field in milliseconds, if valid. */
  retry?: number;
}

/** An incremental parser: feed it text, it returns the complete blocks. */
export class SseParser {
  private buf = "";
  private id: string | undefined;
  private event = "";
  private data: string[] = [];
  private retry: number | undefined;
  private any = false;
  /** The last `: error ...` comment seen: why the server ended the stream. */
  ending: string | undefined;

  feed(text: string): SseEvent[] {
    const out: SseEvent[] = [];
    let buf = this.buf + text;
    let start = 0;
    for (;;) {
      let nl = -1;
      let next = 0;
      for (let i = start; i < buf.length; i++) {
        const c = buf.charCodeAt(i);
        if (c === 10) {
          nl = i;
          next = i + 1;
          break;
        }
        if (c === 13) {
          // A CR at the very end may be the first half of CRLF: wait for more.
          if (i + 1 === buf.length) break;
          nl = i;
          next = buf.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
          break;
        }
      }
      if (nl < 0) break;
      this.line(buf.slice(start, nl), out);
      start = next;
    }
    this.buf = buf.slice(start);
    buf = "";
    return out;
  }

  private line(line: string, out: SseEvent[]): void {
    if (line === "") {
      if (this.any) {
        out.push({
          id: this.id,
          event: this.event || "message",
          data: this.data.join("\n"),
          hasData: this.data.length > 0,
          retry: this.retry,
        });
      }
      this.id = undefined;
      this.event = "";
      this.data = [];
      this.retry = undefined;
      this.any = false;
      return;
    }
    if (line.charCodeAt(0) === 58 /* : */) {
      const comment = line.slice(1).trimStart();
      if (comment.startsWith("error ")) this.ending = comment.slice(6);
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    switch (field) {
      case "data":
        this.data.push(value);
        this.any = true;
        break;
      case "id":
        if (!value.includes("\0")) {
          this.id = value;
          this.any = true;
        }
        break;
      case "event":
        this.event = value;
        this.any = true;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break;
    }
  }
}

/**
 * Reads an SSE body, calling `onEvents` with the blocks of each network chunk
 * (so a caller can save its cursor once per chunk, not once per event).
 * Resolves when the body ends or `signal` aborts; rejects when the
 * connection breaks or `onEvents` throws (the body is then cancelled).
 */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  parser: SseParser,
  onEvents: (events: SseEvent[]) => void,
  onActivity?: () => void,
  signal?: AbortSignal,
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const onAbort = () => {
    reader.cancel().catch(() => {});
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      onActivity?.();
      const events = parser.feed(decoder.decode(value, { stream: true }));
      if (events.length) onEvents(events);
    }
  } catch (e) {
    reader.cancel().catch(() => {});
    throw e;
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.releaseLock?.();
  }
}
