/**
 * A task stream read over the cursor-safe WebSocket upgrade of its events'
 * GET (docs/protocol.md 5, 3.9): the echo of the latest seq `C`, the replay
 * up to `C`, then the ack, with the gate checked. Where the upgrade is
 * refused for a reason that says nothing about the task, or is not
 * resumable, it throws {@link Fallback} so the reader reads SSE from the
 * same cursor instead.
 */

import { ProtocolViolationError, RpcError, TransientError } from "./errors.js";
import type { JSONRPCMessage } from "./link.js";
import { watchdog } from "./link.js";
import { decideStart } from "./seq.js";
import { eventsUrl, type TaskConnection, type TaskItem } from "./task-connection.js";
import { responseRefusal } from "./task-refusal.js";
import type { FrameSocket } from "./ws/types.js";

/** Read SSE from the same cursor instead (this once, or from now on). */
export class Fallback extends Error {
  constructor(
    message: string,
    /** Whether to stay on SSE (the server cannot upgrade), or read it this once. */
    readonly always: boolean,
  ) {
    super(message);
  }
}

/** One upgraded connection from `c.after`; `onGap` counts a gate breach healed by resuming. */
export async function* socketItems(c: TaskConnection, onGap: () => void): AsyncGenerator<TaskItem> {
  const { link, taskId, ac } = c;
  const url = eventsUrl(link.url, taskId);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const prior = c.after;
  const hs = await link.opts.connector({
    url: url.toString(),
    prior,
    token: await link.token(),
    headers: link.extraHeaders,
    timeoutMs: link.opts.handshakeTimeoutMs,
    signal: ac.signal,
    maxMessageBytes: link.opts.maxMessageBytes,
  });
  if (hs.kind === "refused") {
    // A refusal with a readable body is that of tasks/stream (3.9); one without (426, a browser, 503) reads SSE.
    if (hs.status === 426) throw new Fallback(`the upgrade was refused (${hs.detail})`, true);
    if (hs.status === undefined || hs.status === 101 || hs.status >= 500) throw new Fallback(`the upgrade was refused (${hs.detail})`, false);
    throw responseRefusal(hs.status, hs.body, `the upgrade of task ${taskId}'s events`, taskId, c.after);
  }
  const socket = hs.socket;
  if (ac.signal.aborted) {
    socket.close(1000, "closing");
    return;
  }
  if (hs.echo === undefined || (prior !== undefined && !decideStart(prior, hs.echo).ok)) {
    // Not resumable (5.6): close at once, read nothing from it.
    socket.close(1000, "no committed cursor");
    throw new Fallback(
      hs.echo === undefined ? `the upgrade carried no committed cursor${hs.rawEcho ? ` (${hs.rawEcho})` : ""}` : `the committed cursor ${hs.echo} is below ${prior}`,
      hs.echo === undefined,
    );
  }
  yield* frames(c, socket, hs.echo, prior, onGap);
}

/**
 * The frames of an accepted socket as items. The gate (5.4): the replay is
 * `prior+1 ..= C`, then `C` is acked at once (the deadline runs from the
 * `101`, so the ack does not wait for the application to pull), and only
 * then may events above `C` come. Without a cursor the reader cannot know
 * where the replay starts (the earliest retained event), so it acks at once:
 * what it then checks is that every event is the next one.
 */
async function* frames(
  c: TaskConnection,
  socket: FrameSocket,
  committed: number,
  prior: number | undefined,
  onGap: () => void,
): AsyncGenerator<TaskItem> {
  const { link, taskId, ac } = c;
  const queue: Array<TaskItem | Error> = [];
  let wake: (() => void) | undefined;
  let received = prior;
  let acked = false;
  let finished = false;
  const push = (x: TaskItem | Error) => {
    if (finished) return;
    if (x instanceof Error || x.kind === "end") finished = true;
    queue.push(x);
    wake?.();
  };
  const fail = (e: Error, code: number) => {
    socket.close(code, e.message);
    push(e);
  };
  const ack = () => {
    acked = true;
    socket.send(JSON.stringify({ type: "cursor-ack", cursor: committed }));
  };
  const dog = watchdog(link.opts.idleTimeoutMs, () => fail(new TransientError(`no frame for ${link.opts.idleTimeoutMs} ms`), 1000));
  const onAbort = () => {
    socket.close(1000, "closing");
    push(new TransientError("closed"));
  };
  ac.signal.addEventListener("abort", onAbort, { once: true });
  socket.attach({
    onText: (text) => {
      dog.touch();
      let f: { type?: unknown; seq?: unknown; message?: unknown };
      try {
        f = JSON.parse(text);
      } catch {
        return fail(new ProtocolViolationError(`a frame that is not JSON: ${text.slice(0, 100)}`), 4400);
      }
      if (f.type !== "event") return; // a cursor frame this reader did not ask for carries nothing
      const m = f.message as JSONRPCMessage | undefined;
      const seq = f.seq;
      if (!Number.isSafeInteger(seq) || typeof m !== "object" || m === null || (m.params as { seq?: unknown } | undefined)?.seq !== seq) {
        return fail(new ProtocolViolationError(`a malformed event frame: ${text.slice(0, 100)}`), 4400);
      }
      if (!acked && (seq as number) > committed) {
        onGap();
        return fail(new TransientError(`event ${seq} above the committed cursor ${committed} before the ack (a gate breach)`), 4409);
      }
      received = seq as number;
      push({ kind: "event", message: m });
      if (!acked && received === committed) ack();
    },
    onClose: (code, reason) => push(taskCloseItem(code, reason, taskId)),
  });
  if (!acked && (prior === undefined || prior === committed)) ack();
  try {
    for (;;) {
      while (queue.length === 0) await new Promise<void>((r) => (wake = r));
      wake = undefined;
      const x = queue.shift() as TaskItem | Error;
      if (x instanceof Error) throw x;
      yield x;
      if (x.kind === "end") return;
    }
  } finally {
    finished = true;
    dog.stop();
    ac.signal.removeEventListener("abort", onAbort);
    socket.close(1000, "");
  }
}

/** What a task socket's close means (3.9): 1000 the end, 4404 the task expired, 4400/1003/1009 a fault, the rest resumable. */
function taskCloseItem(code: number, reason: string, taskId: string): TaskItem | Error {
  if (code === 1000) return { kind: "end" };
  if (code === 4404) return new RpcError(`the stream of task ${taskId}`, { code: -32602, message: reason || "the task expired", data: { reason: "task-expired" } });
  if (code === 1002 || code === 1003 || code === 1007 || code === 1009 || code === 4400) {
    return new ProtocolViolationError(`the task's WebSocket closed ${code}: ${reason}`);
  }
  return new TransientError(`the task's WebSocket closed ${code}${reason ? ` ${reason}` : ""}`);
}
