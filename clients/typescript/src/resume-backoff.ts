/**
 * How long a reader waits before resuming from its cursor, and when it gives
 * up: the session stream and task streams share the rule, so a drop is
 * retried the same way whichever stream it hit. The wait is exponential with
 * jitter ({@link backoffDelay}) from the configured first delay, else the
 * server's SSE `retry:`, else the reader's own default; the count of tries
 * restarts whenever a connection brought an event.
 */

import type { Resolved } from "./link.js";
import { backoffDelay } from "./link.js";

/** The limit of failures in a row a reader obeys: the session stream's or the task streams'. */
type RetryLimit = "maxRetries" | "requestRetries";

/** One reader's reconnects: the failures in a row and the server's `retry:` hint. */
export class ResumeBackoff {
  private failures = 0;
  /** The server's SSE `retry:`, clamped to 10 ms .. 60 s. */
  private retryMs: number | undefined;

  constructor(
    private readonly opts: Resolved,
    /** Which option limits the failures in a row (read at each failure). */
    private readonly limit: RetryLimit,
    /** The first wait when neither the options nor the server name one. */
    private readonly defaultMs: number,
  ) {}

  /** Keeps an SSE `retry:` field (clamped), the first wait when the options set none. */
  serverRetry(ms: number): void {
    this.retryMs = Math.min(Math.max(ms, 10), 60_000);
  }

  /**
   * Counts a connection that ended; `progressed` when it brought an event,
   * which restarts the count. False once the limit of failures in a row
   * without an event is passed: the reader gives up.
   */
  failed(progressed: boolean): boolean {
    if (progressed) this.failures = 0;
    this.failures += 1;
    return !(this.failures > this.opts[this.limit]);
  }

  /** The wait before the next connection, growing with the failures in a row. */
  delay(): number {
    return backoffDelay(this.opts.initialDelayMs ?? this.retryMs ?? this.defaultMs, this.opts.maxDelayMs, this.failures);
  }
}
