// Resumable task event streams (SEP-2694, docs/protocol.md 3.9) against the
// conformance example (rmcp on mcp-resume's transport, durable tasks): its
// `stream_events {count}` task emits seq 0 (working), 1..=count (n = 1..=count)
// and count+1 (completed). Each way of reading (tasks/stream by POST, the GET
// as SSE, its WebSocket upgrade) yields every event exactly once, in order,
// through connections cut mid-stream; a cursor the server cannot honour, and
// an unknown task, are loud.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { CursorDiscontinuityError, ResumableClientTransport, RpcError } from '../dist/index.js';
import { Proxy, conformance, sleep, until } from './helpers.mjs';

const META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
  'io.modelcontextprotocol/clientInfo': { name: 'mcp-resume-client-test', version: '1' },
};

/** Starts `stream_events {count, interval_ms}` as a task (a stateless tools/call); its id. */
async function startTask(url, count, intervalMs) {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'stream_events',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'stream_events', arguments: { count, interval_ms: intervalMs }, _meta: META },
    }),
  });
  const v = await res.json();
  assert.equal(v.result?.resultType, 'task', JSON.stringify(v));
  return v.result.taskId;
}

/** Reads `stream` to its end (bounded in time); calls `onEvent` with each. */
async function collect(stream, onEvent = () => {}, ms = 30_000) {
  const events = [];
  const timer = setTimeout(() => stream.close(), ms);
  try {
    for await (const e of stream) {
      events.push(e);
      onEvent(e);
    }
  } finally {
    clearTimeout(timer);
  }
  return events;
}

/** Checks the whole stream of a `stream_events {count}` task from seq `from`. */
function assertStream(events, count, from = 0) {
  const want = [];
  for (let seq = from; seq <= count + 1; seq++) {
    want.push(seq === 0 ? 'dev.mcp-resume/task/working' : seq === count + 1 ? 'dev.mcp-resume/task/completed' : `com.example.count:${seq}`);
  }
  const got = events.map((e) => (e.type === 'com.example.count' ? `${e.type}:${e.payload.n}` : e.type));
  assert.deepEqual(got, want);
  assert.deepEqual(
    events.map((e) => e.seq),
    want.map((_, k) => from + k),
  );
  assert.equal(events.at(-1).terminal, true);
  assert.equal(events.at(-1).payload.status, 'completed');
}

for (const via of ['post', 'sse', 'websocket']) {
  test(`task stream via ${via}: every event once, in order, live, through two cuts mid-stream`, async (t) => {
    const server = await conformance();
    const proxy = await Proxy.start(server.port);
    t.after(() => {
      proxy.close();
      server.stop();
    });
    const transport = new ResumableClientTransport(proxy.url(), {
      reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
      log: process.env.MCP_RESUME_TEST_LOG ? (l) => console.error(l) : undefined,
    });
    t.after(() => transport.close());
    const id = await startTask(server.url, 40, 20);
    const stream = transport.streamTask(id, { via });
    const kind = { post: 'post', sse: 'get', websocket: 'ws' }[via];
    let cuts = 0;
    if (via === 'websocket') proxy.cutAfter = (seq) => seq === 10 || seq === 25;
    const events = await collect(stream, (e) => {
      if (via !== 'websocket' && (e.seq === 10 || e.seq === 25)) cuts += proxy.drop(kind) > 0 ? 1 : 0;
    });
    if (via === 'websocket') cuts = proxy.dropped.ws;
    assertStream(events, 40);
    assert.equal(cuts, 2, 'both cuts landed');
    const s = stream.stats;
    assert.ok(s.resumes >= 2, JSON.stringify(s));
    assert.equal(s.via, via, JSON.stringify(s));
    assert.equal(s.fallbacks, 0, JSON.stringify(s));
    assert.equal(stream.cursor, 41);
  });
}

test('task stream: after a cursor (every way), at the terminal event (nothing, and no error), and the browser upgrade', async (t) => {
  const server = await conformance();
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url);
  t.after(() => transport.close());
  const browser = new ResumableClientTransport(server.url, { websocketApi: 'browser' });
  t.after(() => browser.close());
  const id = await startTask(server.url, 10, 0);
  // Wait for the end: a full read.
  assertStream(await collect(transport.streamTask(id)), 10);
  for (const via of ['post', 'sse', 'websocket']) {
    assertStream(await collect(transport.streamTask(id, { via, after: 4 })), 10, 5);
    assert.deepEqual(await collect(transport.streamTask(id, { via, after: 11 })), [], `${via}: after the terminal event`);
  }
  assertStream(await collect(browser.streamTask(id, { via: 'websocket', after: 2 })), 10, 3);
  assertStream(await collect(browser.streamTask(id, { via: 'websocket' })), 10);
});

test('task stream refusals are loud: after past the latest (ahead), an unknown task (RpcError), every way', async (t) => {
  const server = await conformance();
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url);
  t.after(() => transport.close());
  const id = await startTask(server.url, 30, 0);
  assertStream(await collect(transport.streamTask(id)), 30);
  for (const via of ['post', 'sse', 'websocket']) {
    const ahead = await collect(transport.streamTask(id, { via, after: 40 })).catch((e) => e);
    assert.ok(ahead instanceof CursorDiscontinuityError, `${via}: ${ahead}`);
    assert.equal(ahead.reason, 'ahead');
    assert.equal(ahead.cursor, 40);
    assert.equal(ahead.head, 31);
    assert.equal(ahead.resumeCursor, 31);
    assert.equal(ahead.stream, `task ${id}`);

    const unknown = await collect(transport.streamTask('f'.repeat(64), { via })).catch((e) => e);
    assert.ok(unknown instanceof RpcError, `${via}: ${unknown}`);
    assert.equal(unknown.code, -32602);
  }
});

/** A tiny task-stream server of the test's own: `answer(req, body)` answers POST and GET. */
async function fakeTaskServer(answer) {
  const server = http.createServer(async (req, res) => {
    let body = '';
    for await (const c of req) body += c;
    answer(req, body ? JSON.parse(body) : undefined, res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}/mcp`, stop: () => server.close() };
}

const ev = (seq, type, payload = {}) =>
  `id: ${seq}\nevent: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/tasks/event', params: { seq, taskId: 'T', type, payload } })}\n\n`;

test('events_gone (-32010) is a CursorDiscontinuityError truncated, from each form of the refusal (a JSON answer to the POST, the GET and the upgrade)', async (t) => {
  // Against the conformance example this needs an expired pin (a task's
  // events are held for its TTL, 30 min there), so the server here is fake.
  const gone = { jsonrpc: '2.0', id: 0, error: { code: -32010, message: 'Task events are no longer available', data: { reason: 'events_gone', taskId: 'T', earliestSeq: 22, latestSeq: 31 } } };
  const seen = [];
  const server = await fakeTaskServer((req, body, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers['last-event-id'] ?? body?.params?.after ?? '-'}${req.headers.upgrade ? ' upgrade' : ''}`);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ...gone, id: body?.id ?? 0 }));
  });
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url);
  t.after(() => transport.close());
  for (const via of ['post', 'sse', 'websocket']) {
    const err = await collect(transport.streamTask('T', { via, after: 3 })).catch((e) => e);
    assert.ok(err instanceof CursorDiscontinuityError, `${via}: ${err}`);
    assert.equal(err.reason, 'truncated');
    assert.equal(err.cursor, 3);
    assert.equal(err.floor, 22);
    assert.equal(err.head, 31);
    assert.equal(err.resumeCursor, 21);
  }
  assert.deepEqual(seen, ['POST /mcp 3', 'GET /mcp/tasks/T/events 3', 'GET /mcp/tasks/T/events 3 upgrade']);
});

test('an in-stream error the server names resumable (server-stopping) resumes with after = the last seq; nothing twice', async (t) => {
  const afters = [];
  const server = await fakeTaskServer((req, body, res) => {
    afters.push(body.params.after ?? null);
    assert.equal(req.headers['mcp-method'], 'tasks/stream');
    assert.equal(req.headers['mcp-name'], 'T');
    assert.equal(req.headers['mcp-session-id'], undefined, 'a task stream carries no session');
    assert.deepEqual(body.params._meta['io.modelcontextprotocol/clientCapabilities'], { extensions: { 'io.modelcontextprotocol/tasks': {} } });
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const end = (m) => `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: body.id, ...m })}\n\n`;
    if (body.params.after === undefined) {
      res.end(ev(0, 'dev.mcp-resume/task/working') + ev(1, 'x.y/z') + end({ error: { code: -32603, message: 'stopping', data: { reason: 'server-stopping', taskId: 'T', after: 1 } } }));
    } else {
      res.end(ev(2, 'dev.mcp-resume/task/completed', { status: 'completed' }) + end({ result: { resultType: 'complete' } }));
    }
  });
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url, { reconnect: { initialDelayMs: 10 } });
  t.after(() => transport.close());
  const stream = transport.streamTask('T');
  const events = await collect(stream);
  assert.deepEqual(events.map((e) => `${e.seq} ${e.type}`), ['0 dev.mcp-resume/task/working', '1 x.y/z', '2 dev.mcp-resume/task/completed']);
  assert.deepEqual(afters, [null, 1]);
  assert.equal(stream.stats.resumes, 1);
});

test('a result after events but without the terminal event is a loud ProtocolViolationError, not a quiet end', async (t) => {
  const server = await fakeTaskServer((req, body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(ev(0, 'dev.mcp-resume/task/working') + `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { resultType: 'complete' } })}\n\n`);
  });
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url);
  t.after(() => transport.close());
  const err = await collect(transport.streamTask('T')).catch((e) => e);
  assert.equal(err?.name, 'ProtocolViolationError', String(err));
  assert.match(err.message, /without its terminal event/);
});

test('close() of the stream, and closing the transport, end a live task stream at once, without an error', async (t) => {
  const server = await conformance();
  t.after(() => server.stop());
  const transport = new ResumableClientTransport(server.url);
  t.after(() => transport.close());
  const id = await startTask(server.url, 1000, 20);

  const first = transport.streamTask(id, { via: 'websocket' });
  const seenFirst = [];
  const firstDone = collect(first, (e) => seenFirst.push(e.seq));
  await until(() => seenFirst.length >= 3, 'three events over the socket');
  let t0 = Date.now();
  first.close();
  assert.ok((await firstDone).length >= 3);
  assert.ok(Date.now() - t0 < 1000, 'at once');

  const second = transport.streamTask(id, { via: 'post', after: first.cursor });
  const seen = [];
  const done = collect(second, (e) => seen.push(e.seq));
  await until(() => seen.length >= 3, 'three events by POST');
  t0 = Date.now();
  await transport.close();
  const events = await done;
  assert.ok(Date.now() - t0 < 1000, 'at once');
  assert.deepEqual(events.map((e) => e.seq), Array.from({ length: events.length }, (_, k) => first.cursor + 1 + k));
  assert.throws(() => transport.streamTask(id), /closed/);
});
