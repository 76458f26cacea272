// Where continuity cannot be proven the transport is loud: a cursor below
// the floor (retention trimmed what it needs) or ahead of the head is a 409
// that surfaces as CursorDiscontinuityError through onerror, and the
// transport closes. Where the upgrade is not available (426, a plain MCP
// server) it falls back to SSE from the same cursor and loses nothing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CursorDiscontinuityError, MemoryCursorStore, ResumableClientTransport } from '../dist/index.js';
import { Serve, sdkServer, sleep, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

/** A session with `count` events committed, read by a first client; returns its id. */
async function sessionWith(sdk, url, count) {
  const transport = new ResumableClientTransport(url, { websocket: false });
  const client = sdk.client();
  await client.connect(transport);
  await client.callTool({ name: 'emit', arguments: { count } });
  await until(() => transport.cursor === count, `the first reader at ${count}`);
  const sid = transport.sessionId;
  await client.close();
  return sid;
}

/** Attaches a new client to `sid` with `cursor` in its store; resolves with what onerror got and whether it closed. */
async function attach(sdk, url, sid, cursor, mode) {
  const store = new MemoryCursorStore();
  store.save(sid, cursor);
  const transport = new ResumableClientTransport(url, {
    sessionId: sid,
    cursorStore: store,
    websocket: mode !== 'sse',
    websocketApi: mode === 'browser' ? 'browser' : 'node',
    // Node 20's experimental WebSocket at times neither opens nor fails on a
    // refused handshake; the handshake timeout then gives it up for SSE.
    handshakeTimeoutMs: 2000,
    log: process.env.MCP_RESUME_TEST_LOG ? (l) => console.error(l) : undefined,
  });
  const errors = [];
  let closed = false;
  transport.onerror = (e) => errors.push(e);
  transport.onclose = () => (closed = true);
  const seen = [];
  const client = sdk.client();
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await until(() => closed, 'the transport to close on the refusal', 10_000);
  return { errors, seen, transport };
}

for (const sdk of SDKS) {
  for (const mode of ['node', 'browser', 'sse']) {
    const over = { node: 'the upgrade', browser: 'the WHATWG upgrade (then SSE, where the 409 is readable)', sse: 'SSE' }[mode];
    test(`${sdk.name}: a cursor below the floor is a 409 truncated over ${over}: CursorDiscontinuityError, closed, nothing delivered`, async (t) => {
      const server = await Serve.spawn(['--retention-events', '100']);
      t.after(() => server.stop());
      const sid = await sessionWith(sdk, server.url, 1000);
      const { errors, seen } = await attach(sdk, server.url, sid, 10, mode);
      const err = errors.find((e) => e instanceof CursorDiscontinuityError);
      assert.ok(err, `a CursorDiscontinuityError among ${errors}`);
      assert.equal(err.name, 'CursorDiscontinuityError');
      assert.equal(err.reason, 'truncated');
      assert.equal(err.cursor, 10);
      assert.equal(err.head, 1000);
      assert.ok(err.floor > 11 && err.floor <= 901, `floor ${err.floor}`);
      assert.equal(err.stream, 'session');
      assert.deepEqual(seen, [], 'nothing after the hole was delivered');
    });
  }

  test(`${sdk.name}: a cursor ahead of the head is a 409 ahead`, async (t) => {
    const server = await Serve.spawn(['--store', 'memory']);
    t.after(() => server.stop());
    const sid = await sessionWith(sdk, server.url, 20);
    const { errors } = await attach(sdk, server.url, sid, 500, 'node');
    const err = errors.find((e) => e instanceof CursorDiscontinuityError);
    assert.ok(err, `a CursorDiscontinuityError among ${errors}`);
    assert.equal(err.reason, 'ahead');
    assert.equal(err.cursor, 500);
    assert.equal(err.head, 20);
    assert.equal(err.resumeCursor, 20);
  });
}

test('an attached transport resumes exactly after its stored cursor (upgrade, replay of prior+1..=C, ack)', async (t) => {
  const server = await Serve.spawn(['--store', 'memory']);
  t.after(() => server.stop());
  const sdk = SDKS[0];
  const sid = await sessionWith(sdk, server.url, 300);
  const store = new MemoryCursorStore();
  store.save(sid, 120);
  const transport = new ResumableClientTransport(server.url, { sessionId: sid, cursorStore: store });
  t.after(() => transport.close());
  const seen = [];
  const client = sdk.client();
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await until(() => seen.length >= 180, `the replay 121..300 (at ${seen.length})`);
  assert.deepEqual(seen, Array.from({ length: 180 }, (_, k) => 121 + k));
  assert.equal(transport.stats.lastCommitted, 300, 'the echo named the head');
  assert.equal(transport.stats.transport, 'websocket');
  // Live after the ack: the gate opened.
  await client.callTool({ name: 'emit', arguments: { count: 5 } });
  await until(() => seen.length === 185, 'five live events');
  assert.equal(store.load(sid), 305, 'the store holds the cursor');
});

test('--no-websocket: the upgrade is refused 426 and the transport reads SSE from the same cursor', async (t) => {
  const server = await Serve.spawn(['--store', 'memory', '--no-websocket']);
  t.after(() => server.stop());
  const sdk = SDKS[1];
  const transport = new ResumableClientTransport(server.url, { websocket: true });
  t.after(() => transport.close());
  const errors = [];
  transport.onerror = (e) => errors.push(e);
  const seen = [];
  const client = sdk.client();
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await until(() => transport.stats.fallbacks === 1, 'the fallback');
  await client.callTool({ name: 'emit', arguments: { count: 300 } });
  await until(() => seen.length >= 300, `300 events (at ${seen.length})`);
  await sleep(100);
  assert.deepEqual(seen, Array.from({ length: 300 }, (_, k) => k + 1));
  assert.equal(transport.stats.transport, 'sse');
  assert.equal(transport.stats.upgrades, 0);
  assert.deepEqual(errors, []);
});

test('--unsafe-legacy-upgrade: a 101 without the cursor echo is closed unread and the transport reads SSE from the same cursor', async (t) => {
  const server = await Serve.spawn(['--store', 'memory', '--unsafe-legacy-upgrade']);
  t.after(() => server.stop());
  const sdk = SDKS[0];
  const transport = new ResumableClientTransport(server.url, { websocket: true });
  t.after(() => transport.close());
  const seen = [];
  const client = sdk.client();
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await client.callTool({ name: 'emit', arguments: { count: 300 } });
  await until(() => seen.length >= 300, `300 events (at ${seen.length})`);
  await sleep(100);
  assert.deepEqual(seen, Array.from({ length: 300 }, (_, k) => k + 1));
  assert.equal(transport.stats.fallbacks, 1, JSON.stringify(transport.stats));
  assert.equal(transport.stats.upgrades, 0, 'a 101 without the echo is not an upgrade');
  assert.equal(transport.stats.transport, 'sse');
});

for (const sdk of SDKS) {
  test(`${sdk.name}: against the TypeScript SDK's own server the transport stays on SSE and works`, async (t) => {
    const peer = await sdkServer();
    t.after(() => peer.stop());
    const transport = new ResumableClientTransport(peer.url, { websocket: true });
    t.after(() => transport.close());
    const errors = [];
    transport.onerror = (e) => errors.push(e);
    const seen = [];
    const client = sdk.client();
    sdk.onLog(client, (d) => seen.push(d.i));
    await client.connect(transport);
    const echoed = await client.callTool({ name: 'echo', arguments: { text: 'plain' } });
    assert.equal(echoed.content[0].text, 'plain');
    // The SDK server drops notifications while no GET stream is open: wait for ours.
    await until(() => transport.stats.transport === 'sse', 'the SSE session stream');
    await client.callTool({ name: 'emit', arguments: { count: 200 } });
    await until(() => seen.length >= 200, `200 events (at ${seen.length})`);
    await sleep(100);
    assert.deepEqual(seen, Array.from({ length: 200 }, (_, k) => k + 1));
    assert.equal(transport.stats.upgrades, 0);
    assert.equal(transport.cursor, undefined, 'no seqs from a plain server');
    if (process.env.MCP_RESUME_TEST_LOG) console.error(JSON.stringify(transport.stats));
    assert.deepEqual(errors.map(String), []);
  });
}
