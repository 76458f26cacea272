// What the tests share: the real `mcp-resume serve` (spawned on port 0,
// killed with SIGKILL, restarted on the same data directory and port), a TCP
// proxy in front of it that can cut the WebSocket or a POST the way a network
// does (no close frame, no FIN from the server's side), and waits that fail
// with a message instead of hanging.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** The binary scripts/test builds; MCP_RESUME_BIN overrides. Missing is an error, never a skip. */
export function binary() {
  const bin = process.env.MCP_RESUME_BIN ?? path.join(path.resolve(ROOT, process.env.CARGO_TARGET_DIR ?? 'target'), 'debug', 'mcp-resume');
  if (!fs.existsSync(bin)) {
    throw new Error(`${bin} does not exist: run \`cargo build -p mcp-resume\` (scripts/test does), or set MCP_RESUME_BIN`);
  }
  return bin;
}

/**
 * The conformance example server (crates/rmcp/examples/conformance: rmcp on
 * mcp-resume's transport with durable tasks), for task streams.
 * MCP_RESUME_CONFORMANCE_BIN overrides where scripts/test's cargo build puts
 * it. Missing is an error, never a skip.
 */
export function conformanceBinary() {
  const target = path.resolve(ROOT, process.env.CARGO_TARGET_DIR ?? 'target');
  const bin = process.env.MCP_RESUME_CONFORMANCE_BIN ?? path.join(target, 'debug', 'examples', 'conformance');
  if (!fs.existsSync(bin)) {
    throw new Error(`${bin} does not exist: run \`cargo build --workspace --all-targets\` (scripts/test does), or set MCP_RESUME_CONFORMANCE_BIN`);
  }
  return bin;
}

/** `conformance --listen 127.0.0.1:0 ...extra`, killed with `stop()`. */
export async function conformance(extra = []) {
  const child = spawn(conformanceBinary(), ['--listen', '127.0.0.1:0', ...extra], {
    env: { ...process.env, RUST_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await listening(child, 'the conformance example');
  const u = new URL(url);
  return { url, port: Number(u.port), stop: () => child.kill('SIGKILL') };
}

export function tempDir(prefix = 'mcp-resume-ts-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Reads the first stdout line of `child`: `listening on URL`. */
function listening(child, what) {
  return new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: child.stdout });
    const timer = setTimeout(() => reject(new Error(`${what}: no 'listening on' line in 30 s`)), 30_000);
    rl.once('line', (line) => {
      clearTimeout(timer);
      rl.close();
      const m = /^listening on (\S+)/.exec(line);
      if (m) resolve(m[1]);
      else reject(new Error(`${what}: unexpected first line ${JSON.stringify(line)}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code}) before listening`));
    });
  });
}

/** `mcp-resume serve --listen ADDR --data-dir DIR ...extra`. */
export class Serve {
  static async spawn(extra = [], dataDir = tempDir()) {
    const s = new Serve(dataDir, extra);
    await s.start('127.0.0.1:0');
    return s;
  }

  constructor(dataDir, extra) {
    this.dataDir = dataDir;
    this.extra = extra;
  }

  async start(listen) {
    const child = spawn(binary(), ['serve', '--listen', listen, '--data-dir', this.dataDir, ...this.extra], {
      env: { ...process.env, RUST_LOG: 'warn' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.child = child;
    this.url = await listening(child, 'mcp-resume serve');
    const u = new URL(this.url);
    this.port = Number(u.port);
    this.addr = `${u.hostname}:${u.port}`;
  }

  /** kill -9: no shutdown, no flush beyond what was committed. */
  kill9() {
    this.child.kill('SIGKILL');
  }

  /** Starts again on the same address and data directory, retrying while the port frees. */
  async restart() {
    for (let i = 0; i < 100; i++) {
      try {
        await this.start(this.addr);
        return;
      } catch {
        await sleep(100);
      }
    }
    throw new Error(`could not restart mcp-resume serve on ${this.addr}`);
  }

  stop() {
    this.child?.kill('SIGKILL');
  }
}

/** The TypeScript SDK's own server (benches/peers/node/server.mjs), a plain Streamable HTTP server. */
export async function sdkServer() {
  const dir = path.join(ROOT, 'benches/peers/node');
  if (!fs.existsSync(path.join(dir, 'node_modules/@modelcontextprotocol/sdk'))) {
    throw new Error(`${dir}/node_modules is missing: run \`npm ci\` there (scripts/test does)`);
  }
  const port = await freePort();
  const child = spawn(process.execPath, [path.join(dir, 'server.mjs'), String(port)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await listening(child, 'the SDK server');
  return { url, stop: () => child.kill('SIGKILL') };
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * A TCP proxy to 127.0.0.1:`targetPort`. Each connection is classed by its
 * first request as `post` or `get`, and as `ws` once it carries an upgrade.
 * `drop(kind)` destroys those connections on both sides, as a broken network
 * would; `cutAfter` cuts an upgraded one right after a chosen event.
 */
export class Proxy {
  static async start(targetPort) {
    const p = new Proxy(targetPort);
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = p.server.address().port;
    return p;
  }

  constructor(targetPort) {
    this.targetPort = targetPort;
    this.conns = new Set();
    this.seen = { ws: 0, post: 0, get: 0 };
    this.dropped = { ws: 0, post: 0, get: 0 };
    this.held = new Set();
    /** Set by a test: cut an upgraded connection right after forwarding event `seq` when it returns true. */
    this.cutAfter = undefined;
    this.cutSeqs = new Set();
    /** The id of the newest connection (ids count up from 1). */
    this.lastId = 0;
    /**
     * Set by a test: a client `message` frame on an upgraded connection is not
     * forwarded; the client gets close 4400 instead, as from a server that
     * refuses such frames. Counts them in `refused`.
     */
    this.refuseMessages = false;
    this.refused = 0;
    this.server = net.createServer((client) => this.accept(client));
  }

  url(path = '/mcp') {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  accept(client) {
    const conn = { client, upstream: null, kind: null, id: ++this.lastId };
    this.conns.add(conn);
    const upstream = net.connect(this.targetPort, '127.0.0.1');
    conn.upstream = upstream;
    const end = () => {
      client.destroy();
      upstream.destroy();
      this.conns.delete(conn);
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
    // A request may arrive on a keep-alive connection that carried others
    // before (the WHATWG WebSocket shares fetch's pool): every request head is
    // looked at, and an upgrade makes the connection `ws` from then on.
    client.on('data', (chunk) => {
      if (conn.clientFraming) return this.forwardClientFrames(conn, chunk);
      const head = chunk.toString('latin1', 0, Math.min(chunk.length, 2048)).toLowerCase();
      if (conn.kind === null || /^(get|post|delete|options) /.test(head)) {
        const kind = /\r\nupgrade:\s*websocket/.test(head) ? 'ws' : head.startsWith('post ') ? 'post' : 'get';
        if (kind === 'ws' || conn.kind === null) {
          conn.kind = kind;
          this.seen[kind] += 1;
          if (this.held.has(kind)) upstream.pause();
        }
      }
      upstream.write(chunk);
      // After an upgrade request, what the client sends is frames (it waits for the 101 first).
      if (conn.kind === 'ws') conn.clientFraming = true;
    });
    upstream.on('data', (chunk) => (conn.kind === 'ws' ? this.forwardFrames(conn, chunk) : client.write(chunk)));
  }

  /**
   * Forwards what the server sends on an upgraded connection frame by frame,
   * so a cut can land right after a chosen event: `cutAfter(seq)` true cuts
   * the connection once that event frame is forwarded (each seq at most once,
   * so a replay of it after the cut passes).
   */
  forwardFrames(conn, chunk) {
    const buf = conn.buf?.length ? Buffer.concat([conn.buf, chunk]) : chunk;
    let off = 0;
    if (!conn.framing) {
      // Skip the 101's header (and, on a reused connection, earlier responses).
      const start = buf.indexOf('HTTP/1.1 101');
      const end = start < 0 ? -1 : buf.indexOf('\r\n\r\n', start);
      if (end < 0) {
        conn.buf = buf;
        return;
      }
      conn.framing = true;
      off = end + 4;
    }
    let cut = false;
    while (buf.length - off >= 2) {
      let len = buf[off + 1] & 0x7f;
      let h = 2;
      if (len === 126) {
        if (buf.length - off < 4) break;
        len = buf.readUInt16BE(off + 2);
        h = 4;
      } else if (len === 127) {
        if (buf.length - off < 10) break;
        len = Number(buf.readBigUInt64BE(off + 2));
        h = 10;
      }
      if (buf.length - off < h + len) break;
      const m = /^\{"type":"event","seq":(\d+)/.exec(buf.toString('latin1', off + h, off + h + 40));
      off += h + len;
      if (m && this.cutAfter && !this.cutSeqs.has(m[1]) && this.cutAfter(Number(m[1]))) {
        this.cutSeqs.add(m[1]);
        cut = true;
        break;
      }
    }
    conn.client.write(buf.subarray(0, off));
    conn.buf = buf.subarray(off);
    if (cut) {
      conn.client.destroy();
      conn.upstream.destroy();
      this.conns.delete(conn);
      this.dropped.ws += 1;
    }
  }

  /** Forwards the client's (masked) frames, or answers a `message` frame with close 4400 when `refuseMessages` is set. */
  forwardClientFrames(conn, chunk) {
    if (conn.refusing) return;
    const buf = conn.cbuf?.length ? Buffer.concat([conn.cbuf, chunk]) : chunk;
    let off = 0;
    let refuse = false;
    while (buf.length - off >= 6) {
      let len = buf[off + 1] & 0x7f;
      let h = 2;
      if (len === 126) {
        if (buf.length - off < 8) break;
        len = buf.readUInt16BE(off + 2);
        h = 4;
      } else if (len === 127) {
        if (buf.length - off < 14) break;
        len = Number(buf.readBigUInt64BE(off + 2));
        h = 10;
      }
      if (buf.length - off < h + 4 + len) break;
      const mask = buf.subarray(off + h, off + h + 4);
      const start = Buffer.alloc(Math.min(len, 20));
      for (let i = 0; i < start.length; i++) start[i] = buf[off + h + 4 + i] ^ mask[i & 3];
      if (this.refuseMessages && start.toString('latin1').startsWith('{"type":"message"')) {
        refuse = true;
        break;
      }
      off += h + 4 + len;
    }
    conn.upstream.write(buf.subarray(0, off));
    conn.cbuf = buf.subarray(off);
    if (refuse) {
      conn.refusing = true;
      this.refused += 1;
      const reason = Buffer.from('message frames are refused here');
      conn.client.write(Buffer.concat([Buffer.from([0x88, 2 + reason.length, 0x11, 0x30]), reason]));
      setTimeout(() => {
        conn.client.destroy();
        conn.upstream.destroy();
        this.conns.delete(conn);
      }, 20);
    }
  }

  /** Stops forwarding what the server sends on connections of `kind` (it waits in the sockets). */
  hold(kind) {
    this.held.add(kind);
    for (const c of this.conns) if (c.kind === kind) c.upstream.pause();
  }

  /** Forwards again what {@link hold} kept back. */
  release(kind) {
    this.held.delete(kind);
    for (const c of this.conns) if (c.kind === kind) c.upstream.resume();
  }

  /** Cuts every open connection of `kind` newer than connection `after`; returns how many. */
  drop(kind, after = 0) {
    let n = 0;
    for (const c of [...this.conns]) {
      if (c.kind === kind && c.id > after) {
        c.client.destroy();
        c.upstream.destroy();
        this.conns.delete(c);
        n += 1;
      }
    }
    this.dropped[kind] += n;
    return n;
  }

  close() {
    for (const c of this.conns) {
      c.client.destroy();
      c.upstream.destroy();
    }
    this.server.close();
  }
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `cond` until true; throws naming `what` after `ms`. */
export async function until(cond, what, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(10);
  }
}

/** A sibling SSE reader straight to the server: resolves once event `seq` is committed. */
export async function committed(serverUrl, sessionId, seq, ms = 30_000) {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), ms);
  try {
    const res = await fetch(serverUrl, {
      headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream', 'last-event-id': String(seq - 1) },
      signal: ac.signal,
    });
    if (!res.ok) throw new Error(`sibling reader: ${res.status} ${await res.text()}`);
    const dec = new TextDecoder();
    let text = '';
    for await (const chunk of res.body) {
      text += dec.decode(chunk, { stream: true });
      if (text.includes(`\nid: ${seq}\n`) || text.startsWith(`id: ${seq}\n`)) return;
    }
    throw new Error(`sibling reader: the stream ended before ${seq}`);
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
}
