// Request streams (a POST answered as SSE, ids R/n): a drop is resumed from
// the last id, every progress notification and the result arrive exactly
// once; after a kill -9 the call ends with the server's -32603
// `server-restarted` instead of hanging.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResumableClientTransport } from '../dist/index.js';
import { Proxy, Serve, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

for (const sdk of SDKS) {
  test(`${sdk.name}: a request stream cut mid-call is resumed from R/n: every progress once, in order, then the result`, async (t) => {
    const server = await Serve.spawn(['--store', 'memory']);
    const proxy = await Proxy.start(server.port);
    t.after(() => {
      proxy.close();
      server.stop();
    });
    const transport = new ResumableClientTransport(proxy.url(), { websocket: false, reconnect: { initialDelayMs: 20 } });
    t.after(() => transport.close());
    const errors = [];
    transport.onerror = (e) => errors.push(e);
    const client = sdk.client();
    await client.connect(transport);
    const progress = [];
    let cuts = 0;
    const call = sdk.callTool(client, { name: 'progress', arguments: { steps: 40, interval_ms: 20 } }, {
      onprogress: (p) => {
        progress.push(p.progress);
        // Cut the POST's connection (and later its resumes) twice mid-stream.
        if ((p.progress === 10 || p.progress === 25) && proxy.drop('post') + proxy.drop('get') > 0) cuts += 1;
      },
    });
    const result = await call;
    assert.equal(result.content[0].text, 'done after 40 steps');
    assert.deepEqual(progress, Array.from({ length: 40 }, (_, k) => k + 1), 'every progress once, in order');
    assert.equal(cuts, 2);
    assert.ok(transport.stats.requestResumes >= 2, JSON.stringify(transport.stats));
    assert.deepEqual(errors.map(String), []);
  });

  test(`${sdk.name}: a call whose server is killed mid-stream ends with -32603 server-restarted after the restart`, async (t) => {
    const server = await Serve.spawn();
    t.after(() => server.stop());
    // Resumes every 0.25-0.5 s for up to ~15 s: the restart must come back within that.
    const transport = new ResumableClientTransport(server.url, {
      websocket: true,
      reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
      requestStreamRetries: 40,
    });
    t.after(() => transport.close());
    const client = sdk.client();
    await client.connect(transport);
    const progress = [];
    let restarted;
    const call = sdk.callTool(client, { name: 'progress', arguments: { steps: 100, interval_ms: 30 } }, {
      onprogress: (p) => {
        progress.push(p.progress);
        if (p.progress === 10) {
          server.kill9();
          restarted = server.restart();
        }
      },
    });
    const outcome = await call.then(
      (r) => ({ ok: r }),
      (e) => ({ err: e }),
    );
    await restarted;
    assert.ok(outcome.err, `the call failed, not ${JSON.stringify(outcome.ok)}`);
    assert.equal(outcome.err.code, -32603, String(outcome.err));
    assert.match(String(outcome.err.message), /restart/);
    assert.equal(outcome.err.data?.reason, 'server-restarted');
    assert.ok(progress.length >= 10 && progress.length < 100, `progress stopped at the kill: ${progress.length}`);
    assert.deepEqual(progress, Array.from({ length: progress.length }, (_, k) => k + 1));
    // The session itself goes on.
    await until(async () => {
      try {
        return (await client.callTool({ name: 'echo', arguments: { text: 'still here' } })).content[0].text === 'still here';
      } catch {
        return false; // a keep-alive connection of the killed server
      }
    }, 'a call on the same session after the restart');
  });
}
