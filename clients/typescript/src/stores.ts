/**
 * Where the session stream's cursor is kept between connections and, with a
 * durable store, between runs of the program: a reader that starts again
 * from a saved cursor receives exactly what it has not processed yet.
 *
 * The transport saves after it has handed a batch of events to `onmessage`
 * (one network chunk or one run of WebSocket frames), never before: a crash
 * between the two replays that batch at the next start (at least once across
 * a crash of the client process; exactly once within one).
 */

/** A place for one cursor per session. */
export interface CursorStore {
  /** The cursor saved for `sessionId`, if any. */
  load(sessionId: string): number | undefined | Promise<number | undefined>;
  /** Saves `cursor` for `sessionId`. May finish later; the transport does not wait for it in its read loop. */
  save(sessionId: string, cursor: number): void | Promise<void>;
  /** Forgets `sessionId` (the session ended). */
  remove?(sessionId: string): void | Promise<void>;
  /** Waits until every save so far is written. */
  flush?(): Promise<void>;
}

/** The default: cursors live as long as the process. */
export class MemoryCursorStore implements CursorStore {
  private readonly cursors = new Map<string, number>();
  load(sessionId: string): number | undefined {
    return this.cursors.get(sessionId);
  }
  save(sessionId: string, cursor: number): void {
    this.cursors.set(sessionId, cursor);
  }
  remove(sessionId: string): void {
    this.cursors.delete(sessionId);
  }
}

/** The part of the Web Storage API the store uses (declared here so Node-only projects need no DOM types). */
export interface StorageLike {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
  key(index: number): string | null;
  readonly length: number;
}

/** Browsers: one `localStorage` key per session, so a reloaded page resumes where it was. */
export class LocalStorageCursorStore implements CursorStore {
  private readonly storage: StorageLike;
  constructor(
    private readonly prefix = "mcp-resume-cursor:",
    storage?: StorageLike,
  ) {
    const s = storage ?? (globalThis as { localStorage?: StorageLike }).localStorage;
    if (!s) throw new Error("LocalStorageCursorStore needs localStorage (a browser), or a Storage passed in");
    this.storage = s;
  }
  load(sessionId: string): number | undefined {
    const v = this.storage.getItem(this.prefix + sessionId);
    if (v === null) return undefined;
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${this.prefix}${sessionId} does not hold a cursor: ${JSON.stringify(v)}`);
    return n;
  }
  save(sessionId: string, cursor: number): void {
    this.storage.setItem(this.prefix + sessionId, String(cursor));
  }
  remove(sessionId: string): void {
    this.storage.removeItem(this.prefix + sessionId);
  }
  /** The sessions this store has cursors for (to re-attach after a reload). */
  sessions(): string[] {
    const out: string[] = [];
    for (let i = 0; i < this.storage.length; i++) {
      const k = this.storage.key(i);
      if (k?.startsWith(this.prefix)) out.push(k.slice(this.prefix.length));
    }
    return out;
  }
}

/** What a {@link FileCursorStore} file holds. */
export interface SavedCursor {
  sessionId: string;
  cursor: number;
}

/**
 * Node: one JSON file `{"sessionId": ..., "cursor": N}`, replaced atomically,
 * so a crash (of the program or of the machine) leaves the old cursor or the
 * new one, never half a file or an empty one: the new content is written to
 * a temporary file beside it and fsync'd, renamed over the file, and the
 * directory is fsync'd so the rename itself is durable. The temporary name is
 * unique to the write (pid and random), so two stores on one path (two
 * programs, or two transports in one) never write into each other's
 * temporary file; the last rename wins whole. Saves are coalesced: while one
 * write is under way only the newest cursor waits, so a fast stream costs at
 * most one write at a time. It keeps the latest session only;
 * {@link lastSession} tells a restarted program which session to re-attach to.
 */
export class FileCursorStore implements CursorStore {
  private pending: SavedCursor | undefined;
  private writing: Promise<void> | undefined;
  private failure: unknown;

  constructor(readonly path: string) {}

  /** The session and cursor saved last, if the file exists. */
  async lastSession(): Promise<SavedCursor | undefined> {
    const fs = await import("node:fs/promises");
    let text: string;
    try {
      text = await fs.readFile(this.path, "utf8");
    } catch (e) {
      if ((e as { code?: string }).code === "ENOENT") return undefined;
      throw e;
    }
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      throw new Error(`${this.path} does not hold a cursor: ${JSON.stringify(text.slice(0, 80))}`);
    }
    const s = v as Partial<SavedCursor>;
    if (typeof s.sessionId !== "string" || !Number.isSafeInteger(s.cursor) || (s.cursor as number) < 0) {
      throw new Error(`${this.path} does not hold a cursor: ${JSON.stringify(text.slice(0, 80))}`);
    }
    return { sessionId: s.sessionId, cursor: s.cursor as number };
  }

  async load(sessionId: string): Promise<number | undefined> {
    if (this.pending?.sessionId === sessionId) return this.pending.cursor;
    const saved = await this.lastSession();
    return saved?.sessionId === sessionId ? saved.cursor : undefined;
  }

  save(sessionId: string, cursor: number): Promise<void> {
    this.pending = { sessionId, cursor };
    if (!this.writing) this.writing = this.drain();
    return this.writing;
  }

  async remove(sessionId: string): Promise<void> {
    await this.flush();
    const saved = await this.lastSession().catch(() => undefined);
    if (saved?.sessionId === sessionId) {
      const fs = await import("node:fs/promises");
      await fs.rm(this.path, { force: true });
    }
  }

  async flush(): Promise<void> {
    while (this.writing) await this.writing;
    if (this.failure) {
      const f = this.failure;
      this.failure = undefined;
      throw f;
    }
  }

  private async drain(): Promise<void> {
    const fs = await import("node:fs/promises");
    const { dirname } = await import("node:path");
    const { randomBytes } = await import("node:crypto");
    try {
      while (this.pending) {
        const next = this.pending;
        this.pending = undefined;
        const tmp = `${this.path}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
        try {
          const fh = await fs.open(tmp, "wx", 0o600);
          try {
            await fh.writeFile(JSON.stringify(next) + "\n");
            // The data is on disk before the name points at it: a crash after
            // the rename must not find an empty file (ext4, xfs delay data).
            await fh.sync();
          } finally {
            await fh.close();
          }
          await fs.rename(tmp, this.path);
        } catch (e) {
          await fs.rm(tmp, { force: true }).catch(() => {});
          throw e;
        }
        await syncDir(fs, dirname(this.path));
      }
    } catch (e) {
      this.failure = e;
      throw e;
    } finally {
      this.writing = undefined;
    }
  }
}

/**
 * fsyncs a directory, so that a rename in it survives a crash of the machine.
 * Platforms that cannot open a directory for it (Windows) refuse with
 * EISDIR, EPERM or EACCES; there a rename is as durable as the platform makes it.
 */
async function syncDir(fs: typeof import("node:fs/promises"), dir: string): Promise<void> {
  let fh: import("node:fs/promises").FileHandle;
  try {
    fh = await fs.open(dir, "r");
  } catch (e) {
    if (["EISDIR", "EPERM", "EACCES"].includes((e as { code?: string }).code ?? "")) return;
    throw e;
  }
  try {
    await fh.sync();
  } catch (e) {
    if (!["EISDIR", "EPERM", "EACCES", "EINVAL", "EBADF"].includes((e as { code?: string }).code ?? "")) throw e;
  } finally {
    await fh.close();
  }
}
