/**
 * When the session stream's cursor reaches its {@link CursorStore}: once per
 * batch of delivered events (a chunk of SSE, a run of frames), after they
 * were handed to the application, and again whenever a connection ends. A
 * store that fails is reported, never fatal: the stream goes on and the next
 * save tries again.
 */

import { asError } from "./link.js";
import type { CursorStore } from "./stores.js";

/** Saves one session's cursor, batched to one write per microtask and never the same value twice. */
export class CursorSaver {
  private saved: number | undefined;
  private queued = false;

  constructor(
    private readonly store: CursorStore,
    private readonly sid: string,
    /** The cursor to save now: the seq of the last event handed to the application. */
    private readonly cursor: () => number | undefined,
    /** Where a failed save goes (`onerror`). */
    private readonly report: (e: Error) => void,
    /** The cursor the store already holds (the one the reader started from). */
    saved: number | undefined,
  ) {
    this.saved = saved;
  }

  /** Saves the cursor once per batch (a chunk, a run of frames), after delivery. */
  queue(): void {
    if (this.queued) return;
    this.queued = true;
    queueMicrotask(() => {
      this.queued = false;
      this.flush();
    });
  }

  /** Saves the cursor now, if it moved since the last save. */
  flush(): void {
    const c = this.cursor();
    const sid = this.sid;
    if (c === undefined || c === this.saved) return;
    this.saved = c;
    try {
      const p = this.store.save(sid, c);
      if (p) p.catch((e) => this.report(asError(e)));
    } catch (e) {
      this.report(asError(e));
    }
  }
}
