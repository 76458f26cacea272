// The main promise, with each pinned SDK client: 5,000 `emit`
// notifications arrive exactly once and in order while a proxy cuts the
// WebSocket every 500 events and the server is killed with SIGKILL and
// restarted on the same data directory and port once, mid-stream.
//
// The kill is placed where it hurts: the first 2,500 events are all committed
// (a sibling reader sees 2,500) while the proxy holds the client's socket, so
// when the client is at 1,250 the rest exists only in the server's log; after
// the restart the client must read 1,251..2,500 from disk. The second 2,500
// are emitted through the same client after the restart.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResumableClientTransport } from '../dist/index.js';
import { Proxy, Serve, committed, sleep, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

const HALF = 2500;
const TOTAL = 2 * HALF;
const DROP_EVERY = 500;
const KILL_AT = 1250;

for (const sdk of SDKS) {
  test(`${sdk.name}: 5,000 notifications exactly once in order through WebSocket drops every 500 events and a kill -9 with restart`, async (t) => {
    const server = await Serve.spawn();
    const proxy = await Proxy.start(server.port);
    t.after(() => {
      proxy.close();
      server.stop();
    });
    const errors = [];
    const transport = new ResumableClientTransport(proxy.url(), {
      websocket: true,
      reconnect: { initialDelayMs: 20, maxDelayMs: 500 },
      log: process.env.MCP_RESUME_TEST_LOG ? (l) => console.error(`[${sdk.name.slice(0, 7)}] ${l}`) : undefined,
    });
    transport.onerror = (e) => errors.push(e);
    t.after(() => transport.close());
    const client = sdk.client();
    const seen = [];
    let killed = false;
    let restarted;
    sdk.onLog(client, (data) => seen.push(data.i));
    await client.connect(transport);
    // The proxy cuts the WebSocket right after it forwards events 500, 1000,
    // ... 4500 (each once). The kill is decided as the transport hands event
    // 1,250 to the SDK, inside the read of the socket that carried it.
    proxy.cutAfter = (seq) => seq % DROP_EVERY === 0 && seq < TOTAL;
    let delivered = 0;
    const toSdk = transport.onmessage;
    transport.onmessage = (message, extra) => {
      if (message.method === 'notifications/message' && ++delivered === KILL_AT) {
        server.kill9();
        killed = true;
        restarted = server.restart();
      }
      toSdk(message, extra);
    };
    const sid = transport.sessionId;
    assert.match(sid, /^[0-9a-f]{64}$/);
    await until(() => transport.stats.transport === 'websocket', 'the first upgrade');

    // First half: committed in full while the proxy holds the socket's data back.
    proxy.hold('ws');
    await client.callTool({ name: 'emit', arguments: { count: HALF } });
    await committed(server.url, sid, HALF);
    proxy.release('ws');
    await until(() => killed, `the client reaching ${KILL_AT}`);
    let refusedPosts = 0;
    await restarted;
    await until(() => seen.length >= HALF, `the first ${HALF} after the restart (at ${seen.length})`, 60_000);

    // Second half: through the same client, on the restarted server. A POST
    // may meet a keep-alive connection of the killed server that the client
    // has not yet seen closed (the transport reports it and does not retry a
    // POST: a tools/call might have run). Here nothing ran, so the test
    // retries; a duplicate emit would fail the exact count below.
    for (let attempt = 0; ; attempt++) {
      try {
        await client.callTool({ name: 'emit', arguments: { count: HALF } });
        break;
      } catch (e) {
        if (attempt >= 3 || !/fetch failed/.test(String(e))) throw e;
        refusedPosts += 1;
      }
    }
    await until(() => seen.length >= TOTAL, `all ${TOTAL} (at ${seen.length})`, 60_000);
    await sleep(300); // anything extra (a duplicate) would show up here

    assert.equal(seen.length, TOTAL, 'nothing twice');
    for (let k = 0; k < TOTAL; k++) {
      if (seen[k] !== (k % HALF) + 1) assert.fail(`event ${k + 1} was i=${seen[k]}, expected ${(k % HALF) + 1}`);
    }
    assert.equal(transport.cursor, TOTAL);
    const s = transport.stats;
    assert.equal(s.fallbacks, 0, `never fell back to SSE: ${JSON.stringify(s)}`);
    assert.equal(s.gaps, 0, `the server never sent a gap: ${JSON.stringify(s)}`);
    assert.equal(proxy.dropped.ws, TOTAL / DROP_EVERY - 1, 'a cut after every 500th event');
    // The kill can break the socket a cut just broke (the proxy forwards ahead of the client).
    assert.ok(s.upgrades >= proxy.dropped.ws + 1, `an upgrade at the start and after every cut and the restart: ${JSON.stringify(s)}`);
    assert.equal(s.transport, 'websocket');
    assert.equal(errors.length, refusedPosts, `nothing reported through onerror but the failed POSTs: ${errors}`);

    // The session outlived the kill: the client still calls tools on it.
    const echoed = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
    assert.equal(echoed.content[0].text, 'after');
    await client.close();
  });
}

test('the WHATWG WebSocket (websocketApi "browser", the cursor frame): 2,000 notifications exactly once in order through a cut every 500 events', async (t) => {
  assert.equal(typeof WebSocket, 'function', 'a global WebSocket (Node 22, or Node 20 with --experimental-websocket: npm test passes it)');
  const server = await Serve.spawn(['--store', 'memory']);
  const proxy = await Proxy.start(server.port);
  t.after(() => {
    proxy.close();
    server.stop();
  });
  const transport = new ResumableClientTransport(proxy.url(), {
    websocketApi: 'browser',
    reconnect: { initialDelayMs: 20, maxDelayMs: 500 },
  });
  t.after(() => transport.close());
  const errors = [];
  transport.onerror = (e) => errors.push(e);
  const sdk = SDKS[1];
  const client = sdk.client();
  const seen = [];
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  proxy.cutAfter = (seq) => seq % 500 === 0 && seq < 2000;
  await client.callTool({ name: 'emit', arguments: { count: 2000 } });
  await until(() => seen.length >= 2000, `2,000 events (at ${seen.length})`);
  await sleep(200);
  assert.deepEqual(seen, Array.from({ length: 2000 }, (_, k) => k + 1));
  assert.equal(proxy.dropped.ws, 3);
  const s = transport.stats;
  assert.equal(s.transport, 'websocket');
  assert.equal(s.fallbacks, 0, JSON.stringify(s));
  assert.ok(s.upgrades >= 4, JSON.stringify(s));
  assert.deepEqual(errors.map(String), []);
});
