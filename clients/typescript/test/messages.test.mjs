// Client messages over the open WebSocket (`websocketMessages: true`,
// docs/protocol.md 5.3): requests go out as `message` frames and their
// responses (and progress) come back as session-stream events; POST is the
// path when no socket is open, when the socket closed, and after the server
// refused a frame. A request whose socket closed before its response ends
// loudly (it may have run) and its late response, if it comes, is reported;
// a request the server refused is POSTed again and runs once.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResumableClientTransport } from '../dist/index.js';
import { Proxy, Serve, sleep, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

/** A transport through `proxy` with message frames on; `posts` lists the method (or "response") of every POST. */
function transportVia(proxy, extra = {}) {
  const posts = [];
  const transport = new ResumableClientTransport(proxy.url(), {
    websocketMessages: true,
    reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
    log: process.env.MCP_RESUME_TEST_LOG ? (l) => console.error(l) : undefined,
    fetch: (url, init) => {
      if (init.method === 'POST') {
        const m = JSON.parse(init.body);
        posts.push(m.method ?? 'response');
      }
      return fetch(url, init);
    },
    ...extra,
  });
  return { transport, posts };
}

async function start(t, serveArgs = ['--store', 'memory']) {
  const server = await Serve.spawn(serveArgs);
  const proxy = await Proxy.start(server.port);
  t.after(() => {
    proxy.close();
    server.stop();
  });
  return { server, proxy };
}

for (const sdk of SDKS) {
  test(`${sdk.name}: with a socket open, calls go as message frames; results, progress and notifications come back on the stream`, async (t) => {
    const { proxy } = await start(t);
    const { transport, posts } = transportVia(proxy);
    t.after(() => transport.close());
    const errors = [];
    transport.onerror = (e) => errors.push(e);
    const client = sdk.client();
    const seen = [];
    sdk.onLog(client, (d) => seen.push(d.i));
    await client.connect(transport);
    await until(() => transport.stats.transport === 'websocket', 'the upgrade');
    const before = [...posts];
    assert.deepEqual(before, ['initialize', 'notifications/initialized']);

    const echoed = await client.callTool({ name: 'echo', arguments: { text: 'over the socket' } });
    assert.equal(echoed.content[0].text, 'over the socket');
    const progress = [];
    const done = await sdk.callTool(client, { name: 'progress', arguments: { steps: 20, interval_ms: 5 } }, {
      onprogress: (p) => progress.push(p.progress),
    });
    assert.equal(done.content[0].text, 'done after 20 steps');
    assert.deepEqual(progress, Array.from({ length: 20 }, (_, k) => k + 1), 'progress once each, in order, before the result');
    await client.callTool({ name: 'emit', arguments: { count: 50 } });
    await until(() => seen.length >= 50, `50 notifications (at ${seen.length})`);
    const tools = await client.listTools();
    assert.ok(tools.tools.some((x) => x.name === 'echo'));

    assert.deepEqual(posts, before, 'nothing was POSTed once the socket was open');
    assert.deepEqual(seen, Array.from({ length: 50 }, (_, k) => k + 1));
    assert.deepEqual(errors.map(String), []);
    await client.close();
  });
}

test('no socket open (it closed, and the next has not opened yet): the message is POSTed; then frames again', async (t) => {
  const { proxy } = await start(t);
  const { transport, posts } = transportVia(proxy, { reconnect: { initialDelayMs: 1500, maxDelayMs: 1500 } });
  t.after(() => transport.close());
  const errors = [];
  transport.onerror = (e) => errors.push(e);
  const sdk = SDKS[1];
  const client = sdk.client();
  await client.connect(transport);
  await until(() => transport.stats.transport === 'websocket', 'the upgrade');
  assert.equal((await client.callTool({ name: 'echo', arguments: { text: 'a' } })).content[0].text, 'a');
  assert.equal(posts.filter((m) => m === 'tools/call').length, 0);

  proxy.drop('ws');
  await until(() => transport.stats.reconnects >= 1, 'the drop noticed');
  // The reader waits 0.75-1.5 s before it reconnects: no socket now.
  assert.equal((await client.callTool({ name: 'echo', arguments: { text: 'b' } })).content[0].text, 'b');
  assert.equal(posts.filter((m) => m === 'tools/call').length, 1, 'POSTed while no socket was open');

  await until(() => transport.stats.upgrades >= 2, 'the socket again');
  assert.equal((await client.callTool({ name: 'echo', arguments: { text: 'c' } })).content[0].text, 'c');
  assert.equal(posts.filter((m) => m === 'tools/call').length, 1, 'a frame again on the new socket');
  assert.deepEqual(errors.map(String), []);
});

test('a request whose socket closes before its response ends loudly at once (-32000 websocket-closed); its late response is reported as proof it ran', async (t) => {
  const { proxy } = await start(t);
  const { transport } = transportVia(proxy);
  t.after(() => transport.close());
  const errors = [];
  transport.onerror = (e) => errors.push(String(e));
  const sdk = SDKS[0];
  const client = sdk.client();
  const seen = [];
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await until(() => transport.stats.transport === 'websocket', 'the upgrade');

  // The server receives the call and answers it on the session stream, but
  // nothing it sends on the socket reaches the client before the cut.
  proxy.hold('ws');
  const call = client.callTool({ name: 'emit', arguments: { count: 3 } }).then(
    (r) => ({ ok: r }),
    (e) => ({ err: e }),
  );
  await sleep(300);
  proxy.drop('ws');
  proxy.release('ws');
  const outcome = await call;
  assert.ok(outcome.err, `the call failed, not ${JSON.stringify(outcome.ok)}`);
  assert.equal(outcome.err.code, -32000);
  assert.match(String(outcome.err.message), /may or may not have run/);
  assert.ok(errors.some((e) => /may or may not have run/.test(e)), errors.join('\n'));

  // The resumed stream holds the call's response (it ran) and its three notifications.
  await until(() => seen.length >= 3, `the emitted notifications after the resume (at ${seen.length})`);
  await until(() => errors.some((e) => /arrived after its call was failed/.test(e)), 'the late response reported');
  assert.deepEqual(seen, [1, 2, 3], 'the work ran once');
  // The session goes on, over a new socket.
  assert.equal((await client.callTool({ name: 'echo', arguments: { text: 'on' } })).content[0].text, 'on');
});

test('a server that refuses message frames (close 4400): the refused request is POSTed and runs once, and POST is used from then on', async (t) => {
  const { proxy } = await start(t);
  const { transport, posts } = transportVia(proxy);
  t.after(() => transport.close());
  const errors = [];
  transport.onerror = (e) => errors.push(String(e));
  const sdk = SDKS[1];
  const client = sdk.client();
  const seen = [];
  sdk.onLog(client, (d) => seen.push(d.i));
  await client.connect(transport);
  await until(() => transport.stats.transport === 'websocket', 'the upgrade');
  proxy.refuseMessages = true;

  await client.callTool({ name: 'emit', arguments: { count: 5 } });
  assert.equal(proxy.refused, 1, 'the frame was refused');
  assert.deepEqual(posts.filter((m) => m === 'tools/call').length, 1, 'then POSTed');
  await until(() => seen.length >= 5, `five notifications (at ${seen.length})`);
  await sleep(200);
  assert.deepEqual(seen, [1, 2, 3, 4, 5], 'emitted once: the refused frame never ran');

  await until(() => transport.stats.upgrades >= 2, 'the session stream back on a socket');
  assert.equal((await client.callTool({ name: 'echo', arguments: { text: 'x' } })).content[0].text, 'x');
  assert.equal(proxy.refused, 1, 'no frame was tried again');
  assert.equal(posts.filter((m) => m === 'tools/call').length, 2);
  assert.equal(transport.stats.transport, 'websocket', 'the session stream stays on the socket');
  assert.deepEqual(errors, [], 'a refusal of frames is not fatal');
});
