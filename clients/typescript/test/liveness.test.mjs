// A socket that goes silent without closing (a dead peer, a cut cable) is
// noticed: the server sends a heartbeat (WebSocket) or a keepalive comment
// (SSE) at least every --keepalive-secs, so the transport drops a connection
// silent for longer than idleTimeoutMs and resumes from its cursor. A live,
// idle connection is kept.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResumableClientTransport } from '../dist/index.js';
import { Proxy, Serve, sleep, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

for (const websocket of [true, false]) {
  const over = websocket ? 'WebSocket (heartbeats)' : 'SSE (keepalive comments)';
  test(`${over}: an idle connection with heartbeats is kept; a silent one is dropped and resumed`, async (t) => {
    const server = await Serve.spawn(['--store', 'memory', '--keepalive-secs', '1']);
    const proxy = await Proxy.start(server.port);
    t.after(() => {
      proxy.close();
      server.stop();
    });
    const transport = new ResumableClientTransport(proxy.url(), {
      websocket,
      idleTimeoutMs: 2500,
      reconnect: { initialDelayMs: 20 },
    });
    t.after(() => transport.close());
    const sdk = SDKS[0];
    const client = sdk.client();
    const seen = [];
    sdk.onLog(client, (d) => seen.push(d.i));
    await client.connect(transport);
    await client.callTool({ name: 'emit', arguments: { count: 10 } });
    await until(() => seen.length === 10, 'ten events');
    await sleep(4000);
    assert.equal(transport.stats.reconnects, 0, `heartbeats kept the idle connection: ${JSON.stringify(transport.stats)}`);

    // Now the network swallows everything the server sends on it (an SSE GET
    // may ride a keep-alive connection that began with a POST: hold both).
    const kinds = websocket ? ['ws'] : ['get', 'post'];
    for (const k of kinds) proxy.hold(k);
    await until(() => transport.stats.reconnects >= 1, 'the silent connection dropped', 10_000);
    for (const k of kinds) proxy.release(k);
    await client.callTool({ name: 'emit', arguments: { count: 10 } });
    await until(() => seen.length >= 20, 'ten more after the resume');
    await sleep(100);
    assert.deepEqual(seen, [...Array.from({ length: 10 }, (_, k) => k + 1), ...Array.from({ length: 10 }, (_, k) => k + 1)]);
    assert.equal(transport.stats.transport, websocket ? 'websocket' : 'sse');
  });
}
