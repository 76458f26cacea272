/**
 * The reader's side of continuity, as in the Rust crates: `SeqChecker`
 * (crates/proto/src/seqcheck.rs) refuses any event that is not `last + 1`,
 * and `decideStart` (crates/proto/src/upgrade.rs, the client's view of
 * docs/protocol.md 5.2 and 5.6) refuses an upgrade whose echo does not prove
 * the replay covers everything after the reader's cursor.
 */

/** Parses a session-stream event id: decimal, no sign, no leading zero, a safe integer. */
export function parseSeq(id: string): number | undefined {
  if (!/^(0|[1-9][0-9]{0,15})$/.test(id)) return undefined;
  const n = Number(id);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** Parses a request-stream event id `R/n` (docs/protocol.md 2). */
export function parseRequestId(id: string): { stream: number; n: number } | undefined {
  const slash = id.indexOf("/");
  if (slash < 0) return undefined;
  const stream = parseSeq(id.slice(0, slash));
  const n = parseSeq(id.slice(slash + 1));
  if (stream === undefined || stream === 0 || n === undefined) return undefined;
  return { stream, n };
}

/** A seq that is not the next one: the reader resumes from `expected - 1`. */
export interface Gap {
  expected: number;
  got: number;
  why: string;
}

/** Tracks one reader's cursor; after an upgrade also the committed cursor `C` of the gate. */
export class SeqChecker {
  private last: number;
  private replayUntil: number | undefined;

  constructor(cursor: number) {
    this.last = cursor;
  }

  /** The last seq accepted. */
  get cursor(): number {
    return this.last;
  }

  /** After a `101` (or cursor frame) naming `committed`: expect exactly `last+1 ..= committed` before the ack. */
  expectReplayUntil(committed: number): void {
    this.replayUntil = committed;
  }

  /** The cursor to ack once the replay is complete; undefined while it is not (or after the ack). */
  ackDue(): number | undefined {
    return this.replayUntil !== undefined && this.last === this.replayUntil ? this.replayUntil : undefined;
  }

  /** The ack was sent; later events are live. */
  acked(): void {
    this.replayUntil = undefined;
  }

  /** Accepts `seq`, or names the gap; a refused event leaves the cursor where it was. */
  onEvent(seq: number): Gap | undefined {
    const expected = this.last + 1;
    if (seq !== expected) {
      return { expected, got: seq, why: seq <= this.last ? `duplicate seq ${seq} after ${this.last}` : `gap: expected ${expected}, got ${seq}` };
    }
    if (this.replayUntil !== undefined && seq > this.replayUntil) {
      return { expected, got: seq, why: `event ${seq} above the committed cursor ${this.replayUntil} before the ack (a gate breach)` };
    }
    this.last = seq;
    return undefined;
  }

  /** A heartbeat whose head is above the cursor means something was lost at the tail (5.3). */
  onHeartbeat(head: number): Gap | undefined {
    return head > this.last ? { expected: this.last + 1, got: head, why: `heartbeat head ${head} above the cursor ${this.last}` } : undefined;
  }
}

/** What an upgrade's echo says, as `decide_start(prior, echo, None)` of the Rust client. */
export type StartDecision =
  | { ok: true; committed: number }
  | { ok: false; why: "missing-echo" | "echo-below-prior"; detail: string };

/**
 * The client's decision on a `101`: without an echo (or a cursor frame) the
 * socket may have started at "now", past events the reader never saw, so it
 * is not resumable; an echo below `prior` means the server's head went back
 * (the SSE resume from `prior` then gets the server's 409 `ahead`).
 */
export function decideStart(prior: number, echo: number | undefined): StartDecision {
  if (echo === undefined) {
    return { ok: false, why: "missing-echo", detail: `the upgrade after ${prior} carried no committed cursor` };
  }
  if (echo < prior) {
    return { ok: false, why: "echo-below-prior", detail: `the committed cursor ${echo} is below the reader's cursor ${prior}` };
  }
  return { ok: true, committed: echo };
}
