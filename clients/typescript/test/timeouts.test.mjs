// A server that accepts a connection and never answers must not hang the
// client: every GET (an SSE resume) is bounded until its response headers
// and every WebSocket handshake until its 101, then the usual reconnect with
// backoff follows. And a reader that was stopped (the transport closed, or
// its session was replaced by a new initialize) aborts what it has in flight
// and never delivers again. The servers here are tiny Node servers of the
// test's own on 127.0.0.1, holding their answers on purpose.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { MemoryCursorStore, ResumableClientTransport } from '../dist/index.js';
import { domConnector } from '../dist/ws/dom.js';
import { nodeConnector } from '../dist/ws/node.js';
import { sleep, until } from './helpers.mjs';

const SID_A = 'a'.repeat(64);
const SID_B = 'b'.repeat(64);

/** An HTTP server on 127.0.0.1:0 with `handler`; resolves with its URL and a stop. */
async function httpServer(handler) {
  const sockets = new Set();
  const server = http.createServer(handler);
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    stop: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/** A TCP server that reads what comes and never answers; counts connections and their closes. */
async function silentServer() {
  const seen = { connections: 0, closed: 0, requests: [] };
  const sockets = new Set();
  const server = net.createServer((s) => {
    seen.connections += 1;
    sockets.add(s);
    s.on('data', (d) => seen.requests.push(d.toString('latin1')));
    s.on('error', () => {});
    s.on('close', () => {
      seen.closed += 1;
      sockets.delete(s);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    seen,
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    stop: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

test('a session-stream GET whose headers never come is given up after headersTimeoutMs and resumed', async (t) => {
  let gets = 0;
  const server = await httpServer((req, res) => {
    if (req.method === 'GET') gets += 1; // ...and never answered
    else res.writeHead(405).end();
  });
  t.after(() => server.stop());
  const store = new MemoryCursorStore();
  store.save(SID_A, 3);
  const transport = new ResumableClientTransport(server.url, {
    sessionId: SID_A,
    cursorStore: store,
    websocket: false,
    headersTimeoutMs: 300,
    reconnect: { initialDelayMs: 20, maxDelayMs: 50 },
  });
  t.after(() => transport.close());
  const lines = [];
  transport.onerror = (e) => lines.push(String(e));
  await transport.start();
  await until(() => gets >= 3, 'three GETs: the first one must time out, not hang', 5000);
  assert.ok(transport.stats.reconnects >= 2, JSON.stringify(transport.stats));
  assert.deepEqual(lines, [], 'a timeout is transient: retried, not reported as fatal');
});

test('a WebSocket handshake that is never answered is given up after handshakeTimeoutMs and tried again', async (t) => {
  const server = await silentServer();
  t.after(() => server.stop());
  const store = new MemoryCursorStore();
  store.save(SID_A, 3);
  const transport = new ResumableClientTransport(server.url, {
    sessionId: SID_A,
    cursorStore: store,
    websocketApi: 'node',
    handshakeTimeoutMs: 300,
    reconnect: { initialDelayMs: 20, maxDelayMs: 50 },
  });
  t.after(() => transport.close());
  await transport.start();
  await until(() => server.seen.connections >= 2, `a second attempt (at ${server.seen.connections})`, 5000);
  assert.match(server.seen.requests[0], /^GET \/mcp\/session\/a{64}\/events HTTP\/1\.1\r\n/);
  assert.match(server.seen.requests[0], /\r\nlast-event-id: 3\r\n/i);
  await until(() => server.seen.closed >= 1, 'the timed-out attempt closed by the client', 2000);
});

test('close() aborts a WebSocket handshake in flight at once (not after handshakeTimeoutMs)', async (t) => {
  const server = await silentServer();
  t.after(() => server.stop());
  const store = new MemoryCursorStore();
  store.save(SID_A, 3);
  const transport = new ResumableClientTransport(server.url, {
    sessionId: SID_A,
    cursorStore: store,
    websocketApi: 'node',
    handshakeTimeoutMs: 20_000,
  });
  await transport.start();
  await until(() => server.seen.requests.length >= 1, 'the upgrade request', 5000);
  const t0 = Date.now();
  await transport.close();
  await until(() => server.seen.closed >= 1, 'the handshake connection closed by the client', 2000);
  assert.ok(Date.now() - t0 < 2000);
});

test('nodeConnector: a handshake ends when its signal aborts, and rejects after timeoutMs', async (t) => {
  const server = await silentServer();
  t.after(() => server.stop());
  const url = server.url.replace('http:', 'ws:') + `/session/${SID_A}/events`;
  const ac = new AbortController();
  const p = nodeConnector({ url, prior: 0, sessionId: SID_A, headers: {}, timeoutMs: 20_000, signal: ac.signal });
  await until(() => server.seen.requests.length >= 1, 'the upgrade request', 5000);
  const t0 = Date.now();
  ac.abort();
  await assert.rejects(p, /aborted/);
  assert.ok(Date.now() - t0 < 500, 'at once');
  await until(() => server.seen.closed >= 1, 'the connection closed', 2000);
  const t1 = Date.now();
  await assert.rejects(nodeConnector({ url, prior: 0, sessionId: SID_A, headers: {}, timeoutMs: 200 }), /longer than 200 ms/);
  assert.ok(Date.now() - t1 < 1500);
});

test('a session replaced by a new initialize: its reader, whose GET is still waiting, is aborted and never delivers', async (t) => {
  const held = { answered: false, abortedEarly: false };
  const sids = [SID_A, SID_B];
  const event = (sid, text) =>
    `id: 1\nevent: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: `${text} ${sid.slice(0, 4)}` } })}\n\n`;
  const server = await httpServer(async (req, res) => {
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'POST') {
      let body = '';
      for await (const c of req) body += c;
      const m = JSON.parse(body);
      if (m.method === 'initialize') {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': sids.shift() });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: '2025-11-25', capabilities: {}, serverInfo: { name: 'slow', version: '1' } } }));
      } else res.writeHead(202).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (sid === SID_A) {
      // Session A's GET: the headers wait 800 ms (a slow server), then an event.
      req.on('close', () => {
        if (!held.answered) held.abortedEarly = true;
      });
      await sleep(800);
      held.answered = true;
      if (!res.destroyed) res.write(`id: 0\ndata:\n\n${event(sid, 'from')}`);
      return;
    }
    res.write(`id: 0\ndata:\n\n${event(sid, 'from')}`);
  });
  t.after(() => server.stop());
  // Node's http server sends the headers with the first write: nothing reaches the client for 800 ms.
  const transport = new ResumableClientTransport(server.url, { websocket: false, headersTimeoutMs: 5000 });
  t.after(() => transport.close());
  const got = [];
  transport.onmessage = (m) => got.push(m);
  await transport.start();
  const init = (id) => ({ jsonrpc: '2.0', id, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  await transport.send(init(1));
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  assert.equal(transport.sessionId, SID_A);
  await sleep(100); // session A's GET is waiting for its headers now
  await transport.send(init(2));
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  assert.equal(transport.sessionId, SID_B);
  await until(() => got.some((m) => m.params?.data === 'from bbbb'), "session B's event");
  await sleep(1200); // past the moment A's server answers
  const notes = got.filter((m) => m.method === 'notifications/message').map((m) => m.params.data);
  assert.deepEqual(notes, ['from bbbb'], 'nothing of the replaced session A');
  assert.ok(held.abortedEarly, "A's GET was aborted by the client while it waited, not left to complete");
});

test('the WHATWG connector settles a failed handshake even when closing a connecting socket fires its error again (as undici does)', async () => {
  // Node's WebSocket (undici) fires `error` synchronously when a socket that
  // is still connecting is closed. The connector's error handler closes it:
  // unguarded, that recursed until the stack overflowed before the handshake
  // was settled, and the reader hung for good (the timeout's own close recursed too).
  let constructed = 0;
  class UndiciLike {
    constructor() {
      constructed += 1;
      this.protocol = '';
      this.readyState = 0;
      this.onopen = this.onmessage = this.onerror = this.onclose = null;
      setTimeout(() => this.fire('onerror', { message: 'non-101 status' }), 10);
    }
    fire(name, ev) {
      try {
        this[name]?.(ev);
      } catch {
        // An event listener's exception is reported, not thrown to the dispatcher.
      }
    }
    send() {}
    close() {
      if (this.readyState === 0) this.fire('onerror', { message: 'closed before it was established' });
      this.readyState = 3;
    }
  }
  const connect = domConnector(UndiciLike);
  const t0 = Date.now();
  const hs = await Promise.race([
    connect({ url: `ws://127.0.0.1:1/mcp/session/${SID_A}/events`, prior: 0, sessionId: SID_A, headers: {}, timeoutMs: 300 }),
    sleep(3000).then(() => 'hung'),
  ]);
  assert.notEqual(hs, 'hung', 'the handshake was settled');
  assert.equal(hs.kind, 'refused');
  assert.equal(hs.status, undefined);
  assert.ok(Date.now() - t0 < 300, `at the error, not the timeout: ${Date.now() - t0} ms`);
  assert.equal(constructed, 1);
});
