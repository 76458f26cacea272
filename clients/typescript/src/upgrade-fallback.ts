/**
 * When a reader tries the cursor-safe WebSocket upgrade and when it reads SSE
 * from the same cursor instead (docs/protocol.md 5.6). The session stream and
 * task streams follow one rule: a refusal whose reason is known (426, a server
 * without the upgrade, no echo) keeps the reader on SSE; one whose reason
 * cannot be seen (a browser's failed handshake, 503) reads SSE this once and
 * tries again, until {@link MAX_STRIKES} of them in a row.
 */

/** Fallbacks in a row where the reason is uncertain (a browser's failed handshake, 503) before the upgrade is no longer tried. */
const MAX_STRIKES = 3;

/**
 * One reader's choice between the upgrade and SSE, kept across its
 * reconnects, so a passing refusal costs one SSE connection and a lasting one
 * stops the reader from asking again.
 */
export class UpgradeFallback {
  private off: boolean;
  private sseNext = false;
  private strikes = 0;

  /** `enabled`: whether the upgrade is wanted at all (false: SSE only). */
  constructor(enabled: boolean) {
    this.off = !enabled;
  }

  /** Whether the upgrade is off for good, so a reader that learned something mid-connection does not try it. */
  get disabled(): boolean {
    return this.off;
  }

  /**
   * Whether the next connection tries the upgrade; called once per
   * connection, since it uses up a fallback meant for one connection only.
   */
  take(): boolean {
    const want = !this.off && !this.sseNext;
    this.sseNext = false;
    return want;
  }

  /** Reads SSE from now on: the server cannot give a resumable upgrade (426, no echo, ids that are not seqs). */
  disable(): void {
    this.off = true;
  }

  /** Reads SSE for the next connection only: this upgrade could not be used, the next one may. */
  sseOnce(): void {
    this.sseNext = true;
  }

  /** A fallback whose reason cannot be seen: SSE this once, or for good after {@link MAX_STRIKES} in a row. */
  strike(): void {
    this.strikes += 1;
    if (this.strikes >= MAX_STRIKES) this.off = true;
    else this.sseNext = true;
  }

  /** The upgrade got past its refusals: the uncertain fallbacks count from zero again. */
  clearStrikes(): void {
    this.strikes = 0;
  }
}
