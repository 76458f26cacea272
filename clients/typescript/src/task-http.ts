/**
 * A task stream read over plain HTTP: `tasks/stream {taskId, after}` POSTed
 * in the stateless era (SEP-2694's own surface) or `GET P/tasks/{taskId}/events`
 * with `Last-Event-ID`, both answered with SSE. Each connection yields the
 * stream's events and its closing response as {@link TaskItem}s, and throws
 * a {@link TransientError} when it breaks, goes silent or ends short.
 */

import { ProtocolViolationError, TransientError } from "./errors.js";
import type { JSONRPCMessage } from "./link.js";
import { asError, fetchHeaders, mediaType, watchdog } from "./link.js";
import { SseParser } from "./sse.js";
import { eventsUrl, type TaskConnection, type TaskItem } from "./task-connection.js";
import { responseRefusal } from "./task-refusal.js";

/** The stateless revision `tasks/stream` is sent as. */
const STATELESS_VERSION = "2026-07-28";
/** The extension a `tasks/stream` request declares (3.8: a client without it gets -32021). */
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";

let nextRequestId = 1;

/**
 * One connection by `mode` (`post`: `tasks/stream`; `sse`: the GET of the
 * events) from `c.after`; `onRetry` gets every SSE `retry:` field, for the
 * reader's backoff.
 */
export async function* httpItems(c: TaskConnection, mode: "post" | "sse", onRetry: (ms: number) => void): AsyncGenerator<TaskItem> {
  const { link, taskId, ac } = c;
  let res: Response;
  if (mode === "post") {
    const params: Record<string, unknown> = {
      taskId,
      _meta: {
        "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXTENSION]: {} } },
        "io.modelcontextprotocol/clientInfo": { name: "mcp-resume-client", version: "0.1.0" },
      },
    };
    if (c.after !== undefined) params.after = c.after;
    const headers = await link.headers({
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": STATELESS_VERSION,
      "mcp-method": "tasks/stream",
      "mcp-name": taskId,
    });
    const body = JSON.stringify({ jsonrpc: "2.0", id: nextRequestId++, method: "tasks/stream", params });
    res = await fetchHeaders((i, init) => link.fetch(i, init), link.url, { method: "POST", headers, body }, link.opts.headersTimeoutMs, ac);
  } else {
    const extra: Record<string, string> = { accept: "text/event-stream" };
    if (c.after !== undefined) extra["last-event-id"] = String(c.after);
    const headers = await link.headers(extra);
    res = await fetchHeaders((i, init) => link.fetch(i, init), eventsUrl(link.url, taskId), { method: "GET", headers }, link.opts.headersTimeoutMs, ac);
  }
  const what = mode === "post" ? "tasks/stream" : `GET of task ${taskId}'s events`;
  if (!res.ok || mediaType(res) !== "text/event-stream" || !res.body) {
    throw responseRefusal(res.status, await readText(res), what, taskId, c.after);
  }
  yield* sseItems(c, res.body, onRetry);
}

/** The SSE body of a connection as items, dropped when silent for the idle timeout. */
async function* sseItems(c: TaskConnection, body: ReadableStream<Uint8Array>, onRetry: (ms: number) => void): AsyncGenerator<TaskItem> {
  const { link, ac } = c;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  const dog = watchdog(link.opts.idleTimeoutMs, () => ac.abort());
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (e) {
        throw new TransientError(ac.signal.aborted ? `no byte for ${link.opts.idleTimeoutMs} ms` : `the task stream broke: ${asError(e).message}`);
      }
      if (chunk.done) break;
      dog.touch();
      for (const ev of parser.feed(decoder.decode(chunk.value, { stream: true }))) {
        if (ev.retry !== undefined) onRetry(ev.retry);
        if (!ev.data) continue;
        const item = classify(parseJson(ev.data), ev.id);
        if (item) yield item;
      }
    }
    throw new TransientError(`the task stream ended before its result${parser.ending ? `: ${parser.ending}` : ""}`);
  } finally {
    dog.stop();
    reader.cancel().catch(() => {});
  }
}

/** A message of a task's SSE stream as an item; undefined for anything else. */
function classify(m: JSONRPCMessage, id: string | undefined): TaskItem | undefined {
  if (m.method === "notifications/tasks/event") return { kind: "event", message: m, id };
  if (m.method === undefined && m.id !== undefined && (m.result !== undefined || m.error !== undefined)) return { kind: "end", response: m };
  return undefined;
}

/** An SSE event's data as a JSON object, or a protocol violation. */
function parseJson(data: string): JSONRPCMessage {
  try {
    const v: unknown = JSON.parse(data);
    if (v && typeof v === "object") return v as JSONRPCMessage;
  } catch {
    // Below.
  }
  throw new ProtocolViolationError(`a task stream event that is not a JSON object: ${data.slice(0, 100)}`);
}

/** A response's body as text, at most 64 KiB of it. */
async function readText(res: Response): Promise<string> {
  const text = await res.text().catch(() => "");
  return text.slice(0, 64 * 1024);
}
