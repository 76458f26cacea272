/**
 * What the session-stream reader and the request-stream followers need from
 * the transport, and the small rules they share: which failures are retried,
 * how long to wait, when a silent connection counts as dead.
 */

import {
  CursorDiscontinuityError,
  HttpStatusError,
  ProtocolViolationError,
  SessionNotFoundError,
  TransientError,
} from "./errors.js";
import type { Connector } from "./ws/types.js";

/** A JSON-RPC 2.0 message, loosely typed so that both SDKs' message types fit. */
export interface JSONRPCMessage {
  jsonrpc: "2.0";
  id?: string | number;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: unknown;
}

/** Reconnection: exponential from the first delay, capped, with jitter on the upper half. */
export interface ReconnectOptions {
  /** The first wait after a drop; default: the server's SSE `retry:` (1000 ms from mcp-resume), else 1000. */
  initialDelayMs?: number;
  /** The longest wait; default 5000. */
  maxDelayMs?: number;
  /** Reconnects in a row without receiving anything before the transport gives up (onerror, close); default: never. */
  maxRetries?: number;
}

/** The options every part reads, with defaults filled in. */
export interface Resolved {
  websocket: boolean;
  connector: Connector;
  maxDelayMs: number;
  initialDelayMs: number | undefined;
  maxRetries: number;
  requestRetries: number;
  idleTimeoutMs: number;
  handshakeTimeoutMs: number;
  headersTimeoutMs: number;
  maxMessageBytes: number;
  websocketMessages: boolean;
}

/**
 * A GET (or POST) whose response headers must arrive within `timeoutMs`: a
 * server that accepts the connection and never answers would otherwise hold
 * the reader until the platform's own limit (undici's is 300 s), or forever.
 * The timeout aborts `ac` (the caller's controller of this request, which
 * also aborts it when the reader stops) and is thrown as a
 * {@link TransientError}, so the caller's usual reconnect with backoff
 * follows. The body stays readable after the headers.
 */
export async function fetchHeaders(
  fetchImpl: (input: URL, init: RequestInit) => Promise<Response>,
  input: URL,
  init: RequestInit,
  timeoutMs: number,
  ac: AbortController,
): Promise<Response> {
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ac.abort();
  }, timeoutMs);
  try {
    return await fetchImpl(input, { ...init, signal: ac.signal });
  } catch (e) {
    if (timedOut) throw new TransientError(`no response headers within ${timeoutMs} ms`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/** A controller aborted with `parent` (and on its own); `unlink` when done, so the parent holds no listener. */
export function childController(parent: AbortSignal): { ac: AbortController; unlink(): void } {
  const ac = new AbortController();
  if (parent.aborted) {
    ac.abort();
    return { ac, unlink: () => {} };
  }
  const onAbort = () => ac.abort();
  parent.addEventListener("abort", onAbort, { once: true });
  return { ac, unlink: () => parent.removeEventListener("abort", onAbort) };
}

/** The transport, as its readers see it. */
export interface Link {
  readonly url: URL;
  readonly opts: Resolved;
  readonly sessionId: string | undefined;
  readonly protocolVersion: string | undefined;
  readonly closed: boolean;
  /** Aborted when the transport closes. */
  readonly signal: AbortSignal;
  fetch(input: URL, init: RequestInit): Promise<Response>;
  /** The caller's extra headers (for the WebSocket upgrade, which adds the rest itself). */
  readonly extraHeaders: Record<string, string>;
  /** Common headers: session, protocol version, credentials, the caller's extras. */
  headers(extra: Record<string, string>): Promise<Record<string, string>>;
  token(): Promise<string | undefined>;
  /** Hands a message to the application. */
  deliver(message: JSONRPCMessage): void;
  /** Reports without closing. */
  report(e: Error): void;
  /** Reports and closes the transport. */
  fail(e: Error): void;
  /**
   * POSTs a client message again (one sent as a WebSocket frame whose
   * reading the server never confirmed); a request whose POST fails ends
   * with a JSON-RPC error, anything else is reported.
   */
  resend(message: JSONRPCMessage): void;
  /** A line for the `log` option: reconnects, fallbacks, healed gaps. */
  log(line: string): void;
}

/** Whether resuming from the same cursor cannot help: the application must act. */
export function isFatal(e: unknown): boolean {
  if (e instanceof CursorDiscontinuityError || e instanceof SessionNotFoundError || e instanceof ProtocolViolationError) return true;
  if (e instanceof HttpStatusError) return !(e.status >= 500 || e.status === 429 || e.status === 408);
  return false;
}

/** An Error from anything thrown. */
export function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

/** The wait before reconnect number `failures` (1, 2, ...): `exp/2 + random * exp/2`, `exp` doubling up to the cap. */
export function backoffDelay(baseMs: number, maxMs: number, failures: number): number {
  const exp = Math.min(baseMs * 2 ** Math.min(Math.max(failures - 1, 0), 16), maxMs);
  return exp / 2 + Math.random() * (exp / 2);
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Calls `onIdle` when `touch` was not called for `ms`: a connection that
 * went silent without closing (a dead peer, a cut cable) is dropped and
 * resumed, since the server sends a keepalive or heartbeat every 15 s.
 */
export function watchdog(ms: number, onIdle: () => void): { touch(): void; stop(): void } {
  let last = Date.now();
  const timer = setInterval(
    () => {
      if (Date.now() - last > ms) {
        clearInterval(timer);
        onIdle();
      }
    },
    Math.max(50, Math.min(ms / 3, 5000)),
  );
  (timer as { unref?: () => void }).unref?.();
  return {
    touch: () => {
      last = Date.now();
    },
    stop: () => clearInterval(timer),
  };
}

/**
 * The typed error for a refused GET or upgrade: 409 is the discontinuity of
 * the cursor asked for, 404 the end of the session, 5xx and 429 transient.
 */
export async function refusal(res: Response, what: string, cursor: number, stream: string, sessionId: string): Promise<Error> {
  const body = await res.text().catch(() => "");
  return refusalOf(res.status, body, what, cursor, stream, sessionId);
}

/** As {@link refusal}, from a status and body already read. */
export function refusalOf(status: number, body: string, what: string, cursor: number, stream: string, sessionId: string): Error {
  if (status === 409) return CursorDiscontinuityError.fromBody(body, cursor, stream);
  if (status === 404) return new SessionNotFoundError(sessionId, `${what} answered 404`);
  if (status >= 500 || status === 429) return new TransientError(`${what} answered ${status}: ${body.slice(0, 200)}`);
  return new HttpStatusError(what, status, body);
}

/** The `Content-Type` without parameters, lower case. */
export function mediaType(res: Response): string {
  return (res.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
}

/** The UTF-8 length of `s` without encoding it (a limit in bytes checked on a string). */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}
