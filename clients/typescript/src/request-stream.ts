/**
 * Following a request stream: the SSE answer to one POSTed request, with ids
 * `R/n` (docs/protocol.md 2, 3.4). A drop is resumed with `GET` and
 * `Last-Event-ID: R/n` until the response arrives; each `n` must be the last
 * plus one. A request stream always ends with a response, so after a server
 * crash the resume receives the server's -32603 `server-restarted` and the
 * call ends. Where the stream cannot be resumed at all (a 409, a lost
 * session, retries exhausted) the call ends with a JSON-RPC error made here,
 * so the SDK's pending request never waits for its timeout.
 */

import { ProtocolViolationError, TransientError } from "./errors.js";
import type { JSONRPCMessage, Link } from "./link.js";
import { asError, backoffDelay, childController, fetchHeaders, isFatal, mediaType, refusal, sleep, watchdog } from "./link.js";
import { parseRequestId } from "./seq.js";
import { readSse, SseParser } from "./sse.js";

/** The error code of a call whose request stream was lost (the SDK's ConnectionClosed). */
export const REQUEST_STREAM_LOST = -32000;

const ANSWERED = Symbol("answered");

export interface FollowOptions {
  /** The JSON-RPC id the response carries. */
  requestId: string | number;
  /** The SDK's hook: every event id, to resume after a restart of the client. */
  onresumptiontoken?: (token: string) => void;
  /** Where to start when resuming a stream by token (the SDK's `resumptionToken`). */
  lastEventId?: string;
  /** Counts resumes. */
  onResume(): void;
}

/** Reads `first` (a request stream's response) and its resumes until the call's response. Never rejects. */
export async function followRequestStream(link: Link, first: Response | undefined, o: FollowOptions): Promise<void> {
  let res = first;
  /** Releases the controller of a resumed GET (its body is read in the next round). */
  let unlinkGet: (() => void) | undefined;
  let lastId = o.lastEventId;
  let stream: number | undefined;
  let n: number | undefined;
  let failures = 0;
  let retryMs: number | undefined;
  if (lastId !== undefined) {
    const r = parseRequestId(lastId);
    if (r) ({ stream, n } = r);
  }
  for (;;) {
    if (link.closed) return;
    let err: Error = new TransientError("the request stream ended before its response");
    let progressed = false;
    let response: JSONRPCMessage | undefined;
    if (res) {
      const ac = new AbortController();
      const onAbort = () => ac.abort();
      link.signal.addEventListener("abort", onAbort, { once: true });
      const dog = watchdog(link.opts.idleTimeoutMs, () => ac.abort());
      const body = res.body;
      try {
        if (!body || mediaType(res) !== "text/event-stream") throw new ProtocolViolationError("a request stream that is not text/event-stream");
        const parser = new SseParser();
        await readSse(
          body,
          parser,
          (events) => {
            for (const ev of events) {
              if (ev.retry !== undefined) retryMs = Math.min(Math.max(ev.retry, 10), 60_000);
              if (ev.id !== undefined) {
                const r = parseRequestId(ev.id);
                if (r) {
                  if (stream === undefined) stream = r.stream;
                  if (r.stream !== stream) throw new ProtocolViolationError(`request stream ${stream} sent id ${ev.id}`);
                  if (!ev.data) {
                    if (n !== undefined && r.n !== n) throw new ProtocolViolationError(`asked to resume after ${stream}/${n}, the server primed ${ev.id}`);
                    n = r.n;
                  } else {
                    if (n === undefined) n = r.n - 1;
                    if (r.n !== n + 1) throw new TransientError(`request stream ${stream}: expected ${stream}/${n + 1}, got ${ev.id}`);
                    n = r.n;
                  }
                }
                lastId = ev.id;
                o.onresumptiontoken?.(ev.id);
              }
              if (!ev.data) continue;
              let message: JSONRPCMessage;
              try {
                message = JSON.parse(ev.data) as JSONRPCMessage;
              } catch (e) {
                link.report(new ProtocolViolationError(`an event that is not JSON: ${asError(e).message}`));
                continue;
              }
              progressed = true;
              if (message.id === o.requestId && message.method === undefined && (message.result !== undefined || message.error !== undefined)) {
                response = message;
                throw ANSWERED;
              }
              link.deliver(message);
            }
          },
          () => dog.touch(),
          ac.signal,
        );
        if (parser.ending) err = new TransientError(`the request stream ended: ${parser.ending}`);
      } catch (e) {
        if (e === ANSWERED && response) {
          // The SDKs dispatch notifications a task later but settle a call at
          // once: let the call's progress notifications run before its result.
          await new Promise((r) => setTimeout(r, 0));
          if (!link.closed) link.deliver(response);
          return;
        }
        err = asError(e);
      } finally {
        dog.stop();
        link.signal.removeEventListener("abort", onAbort);
        unlinkGet?.();
        unlinkGet = undefined;
      }
    }
    if (link.closed) return;
    if (isFatal(err)) return end(link, o, err, lastId);
    if (lastId === undefined) return end(link, o, new Error(`${err.message}, before any event: it cannot be resumed`), lastId);
    if (progressed) failures = 0;
    failures += 1;
    if (failures > link.opts.requestRetries) {
      return end(link, o, new Error(`gave up resuming ${lastId} after ${link.opts.requestRetries} tries: ${err.message}`), lastId);
    }
    const wait = backoffDelay(link.opts.initialDelayMs ?? retryMs ?? 1000, link.opts.maxDelayMs, failures);
    link.log(`request stream: ${err.message}; resuming after ${lastId} in ${Math.round(wait)} ms`);
    await sleep(wait, link.signal);
    if (link.closed) return;
    o.onResume();
    res = undefined;
    const get = childController(link.signal);
    try {
      // Bounded until the headers (a server that accepts and never answers); the body is watched by the watchdog.
      const got = await fetchHeaders(
        (input, init) => link.fetch(input, init),
        link.url,
        { method: "GET", headers: await link.headers({ accept: "text/event-stream", "last-event-id": lastId }) },
        link.opts.headersTimeoutMs,
        get.ac,
      );
      if (got.ok) {
        res = got;
        unlinkGet = get.unlink;
      } else {
        get.unlink();
        const e = await refusal(got, `GET (request stream ${lastId})`, n ?? 0, `request ${stream ?? "?"}`, link.sessionId ?? "");
        if (isFatal(e)) return end(link, o, e, lastId);
      }
    } catch {
      get.unlink();
      // Not reachable yet (a restart), or no headers in time: the next round waits longer.
    }
  }
}

/** Ends the call with a JSON-RPC error made here, and reports why. */
function end(link: Link, o: FollowOptions, e: Error, lastId: string | undefined): void {
  if (link.closed) return;
  link.report(e);
  link.deliver({
    jsonrpc: "2.0",
    id: o.requestId,
    error: {
      code: REQUEST_STREAM_LOST,
      message: `the request stream was lost and could not be resumed: ${e.message}`,
      data: { reason: "request-stream-lost", lastEventId: lastId ?? null, cause: e.name },
    },
  });
}
