/**
 * The seam between the reader and a WebSocket implementation. Two exist:
 * `node` (a small RFC 6455 client on `node:http`, which reads the `101`'s
 * `X-MCP-Resume-Cursor` and the status and body of a refusal) and `browser`
 * (the WHATWG `WebSocket`, which can read neither, so it asks for the
 * `mcp.resume.cursor-frame` subprotocol and learns `C` from the first frame,
 * docs/protocol.md 5.1 and 5.3). Both hand the reader the same thing: the
 * committed cursor the server echoed (or that none came), then text frames.
 */

/** The subprotocol of the cursor-safe upgrade. */
export const SUBPROTOCOL = "mcp.resume.v1";
/** The subprotocol that asks for `{"type":"cursor"}` as the first frame. */
export const CURSOR_FRAME_SUBPROTOCOL = "mcp.resume.cursor-frame";
/** The prefix of the subprotocol that carries a bearer token (only over `wss://`). */
export const AUTH_SUBPROTOCOL_PREFIX = "mcp.auth.";

/** What the reader asks for. */
export interface UpgradeRequest {
  /** `ws://` or `wss://` URL: `P/session/{id}/events`, or a task's `P/tasks/{taskId}/events`. */
  url: string;
  /** The reader's cursor: `Last-Event-ID` (or `last_event_id`); none lets the server start at the earliest it retains. */
  prior?: number;
  /** `Mcp-Session-Id` (the session stream; a task stream has none). */
  sessionId?: string;
  protocolVersion?: string;
  /** A bearer token: `Authorization`, or `mcp.auth.TOKEN` over `wss://` where headers cannot be set. */
  token?: string;
  /** Extra request headers (where the implementation can send headers). */
  headers: Record<string, string>;
  /** Give up on the handshake after this long (a server that accepts the connection and never answers). */
  timeoutMs: number;
  /** Ends the handshake at once (the reader stopped); an open socket is the caller's to close. */
  signal?: AbortSignal;
  /** The largest message accepted from the server; larger ones close the socket with 1009. Default 4 MiB. */
  maxMessageBytes?: number;
}

/** Handlers the reader attaches once the handshake is done. */
export interface FrameHandlers {
  /** A text frame. */
  onText(text: string): void;
  /** The connection ended: the server's close code, or 1006 when it broke without one. */
  onClose(code: number, reason: string): void;
}

/** An open, upgraded connection. */
export interface FrameSocket {
  /** Starts delivering frames (those that arrived during the handshake first). */
  attach(handlers: FrameHandlers): void;
  /** Sends a text frame; false when the connection is closing or gone (nothing was sent). */
  send(text: string): boolean;
  /** Closes (sending a close frame); no handler is called after this. */
  close(code: number, reason: string): void;
}

/** The outcome of one upgrade attempt. */
export type Handshake =
  | {
      kind: "open";
      socket: FrameSocket;
      /**
       * The committed cursor `C`: the `101`'s `X-MCP-Resume-Cursor`, or the
       * cursor frame; `undefined` when none came (not resumable).
       */
      echo: number | undefined;
      /** The raw echo, for messages, when it was not a seq. */
      rawEcho?: string;
    }
  | {
      kind: "refused";
      /** The HTTP status; `undefined` where the implementation cannot see it (browsers). */
      status: number | undefined;
      body: string;
      detail: string;
    };

/** Opens an upgrade; rejects only when the connection itself failed (retry later). */
export type Connector = (req: UpgradeRequest) => Promise<Handshake>;
