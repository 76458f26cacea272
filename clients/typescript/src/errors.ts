/**
 * The errors the transport reports through `onerror`. They are typed so an
 * application can branch on them: a discontinuity means "re-synchronise"
 * (list tools, resources and prompts again), a lost session means
 * "initialise a new one", anything else is a bug or a policy on one side.
 */

/** Why a cursor cannot be honoured (docs/protocol.md 4, items 2, 3 and 3a). */
export type DiscontinuityReason = "ahead" | "truncated" | "data-lost";

/** The fields of a 409 `cursor-discontinuity` body. */
export interface DiscontinuityDetails {
  reason: DiscontinuityReason;
  /** The cursor the reader asked to resume after (its last processed seq). */
  cursor: number;
  /** The committed head at the time of the refusal. */
  head: number;
  /** The lowest retained seq (head + 1 when nothing is retained). */
  floor: number;
  /** Where the server says a reader may resume, having been told what it missed. */
  resumeCursor?: number;
  /** For `data-lost`: the first seq damaged storage no longer holds. */
  lostFrom?: number;
  /** For `data-lost`: the last seq damaged storage no longer holds. */
  lostTo?: number;
  /** `session` for the session stream, `request R` for request stream R. */
  stream: string;
}

/**
 * The server cannot prove continuity from the reader's cursor (a 409): the
 * events after the cursor are gone (`truncated`, `data-lost`) or the cursor
 * is ahead of what the server committed (`ahead`, e.g. a cursor kept from a
 * server whose log was wiped). Nothing was skipped silently: the transport
 * stops and the application re-synchronises.
 */
export class CursorDiscontinuityError extends Error implements DiscontinuityDetails {
  readonly reason: DiscontinuityReason;
  readonly cursor: number;
  readonly head: number;
  readonly floor: number;
  readonly resumeCursor?: number;
  readonly lostFrom?: number;
  readonly lostTo?: number;
  readonly stream: string;

  constructor(d: DiscontinuityDetails, message?: string) {
    super(
      message ??
        `cursor discontinuity (${d.reason}) on the ${d.stream} stream: cursor ${d.cursor}, head ${d.head}, floor ${d.floor}`,
    );
    this.name = "CursorDiscontinuityError";
    this.reason = d.reason;
    this.cursor = d.cursor;
    this.head = d.head;
    this.floor = d.floor;
    this.resumeCursor = d.resumeCursor;
    this.lostFrom = d.lostFrom;
    this.lostTo = d.lostTo;
    this.stream = d.stream;
  }

  /** Reads a 409 body (`{"error":"cursor-discontinuity",...}`); `cursor` fills in a missing one. */
  static fromBody(body: string, cursor: number, stream: string): CursorDiscontinuityError {
    let v: Record<string, unknown> = {};
    try {
      const parsed: unknown = JSON.parse(body);
      if (parsed && typeof parsed === "object") v = parsed as Record<string, unknown>;
    } catch {
      // A 409 without the documented body still refuses the cursor.
    }
    const n = (k: string): number | undefined => (typeof v[k] === "number" ? (v[k] as number) : undefined);
    const reason = v.reason === "truncated" || v.reason === "data-lost" ? v.reason : "ahead";
    const msg = typeof v.message === "string" ? v.message : undefined;
    return new CursorDiscontinuityError(
      {
        reason,
        cursor: n("cursor") ?? cursor,
        head: n("head") ?? 0,
        floor: n("floor") ?? 0,
        resumeCursor: n("resume-cursor"),
        lostFrom: n("lost-from"),
        lostTo: n("lost-to"),
        stream,
      },
      msg ? `cursor discontinuity (${reason}) on the ${stream} stream: ${msg}` : undefined,
    );
  }
}

/** The session is gone (404, or close 4404): unknown, expired or deleted. Initialise a new one. */
export class SessionNotFoundError extends Error {
  readonly sessionId: string;
  constructor(sessionId: string, detail?: string) {
    super(`the session ${sessionId.slice(0, 12)}... is gone (unknown, expired or deleted)${detail ? `: ${detail}` : ""}`);
    this.name = "SessionNotFoundError";
    this.sessionId = sessionId;
  }
}

/** The server answered with a status the transport does not retry. */
export class HttpStatusError extends Error {
  readonly status: number;
  readonly body: string;
  /** The `error` code of the body (docs/protocol.md 3), when it has one. */
  readonly code?: string;
  constructor(what: string, status: number, body: string) {
    let code: string | undefined;
    try {
      const v: unknown = JSON.parse(body);
      if (v && typeof v === "object" && typeof (v as { error?: unknown }).error === "string") {
        code = (v as { error: string }).error;
      }
    } catch {
      // Not JSON: keep the text.
    }
    super(`${what} answered ${status}${body ? `: ${body.slice(0, 300)}` : ""}`);
    this.name = "HttpStatusError";
    this.status = status;
    this.body = body;
    this.code = code;
  }
}

/** The server broke the wire contract (a malformed frame, a priming event at the wrong place). */
export class ProtocolViolationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolViolationError";
  }
}

/**
 * A connection failed or dropped, or the reader saw a gap: resuming from the
 * cursor heals it. Internal: these are retried, never reported as fatal.
 */
export class TransientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TransientError";
  }
}

/**
 * A JSON-RPC error the server answered one of this package's own requests
 * with (`tasks/stream`: an unknown or expired task, a missing capability),
 * typed so the application can branch on `code` and `data.reason` rather than
 * parse a message. Resuming cannot help; the application must act.
 */
export class RpcError extends Error {
  /** The JSON-RPC error code (-32602 invalid params, -32021 missing capability, ...). */
  readonly code: number;
  /** The error's `data`, as sent (mcp-resume names a `reason` there). */
  readonly data: unknown;
  constructor(what: string, error: { code?: unknown; message?: unknown; data?: unknown }) {
    const code = typeof error.code === "number" ? error.code : 0;
    const msg = typeof error.message === "string" ? error.message : JSON.stringify(error).slice(0, 300);
    super(`${what} answered JSON-RPC error ${code}: ${msg}`);
    this.name = "RpcError";
    this.code = code;
    this.data = error.data;
  }

  /** `data.reason`, when the server gave one. */
  get reason(): string | undefined {
    const d = this.data as { reason?: unknown } | undefined;
    return typeof d?.reason === "string" ? d.reason : undefined;
  }
}
