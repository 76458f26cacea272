// Notifications per second received by the SDK client, over this transport
// (WebSocket and SSE) and over the SDK's own StreamableHTTPClientTransport,
// against one `mcp-resume serve --release` in the same run, rounds
// alternating so that a slow moment of the machine hits every transport.
//
//   cargo build --release -p mcp-resume
//   node bench/notifications.mjs [--count 100000] [--rounds 3] [--sdk 1|2] [--raw]
//
// --raw adds this transport without an SDK client (messages counted at
// `onmessage`): where the ceiling is when the SDK's own work is left out.
//
// Each round: a new session, `emit {count}` (committed in batches to the
// default disk log), the time from the call until the SDK's notification
// handler has run for the last one; every run also checks that the `i`
// values arrive exactly once in order. MCP_RESUME_BIN overrides the binary.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ResumableClientTransport } from '../dist/index.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const COUNT = Number(opt('count', 100_000));
const ROUNDS = Number(opt('rounds', 3));
const SDK = opt('sdk', '1');
const RAW = args.includes('--raw');

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const bin = process.env.MCP_RESUME_BIN ?? path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, 'target'), 'release', 'mcp-resume');
if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: cargo build --release -p mcp-resume`);

const sdk =
  SDK === '2'
    ? await (async () => {
        const m = await import('@modelcontextprotocol/client');
        return {
          name: '@modelcontextprotocol/client 2.4.0',
          Client: m.Client,
          Streamable: m.StreamableHTTPClientTransport,
          onLog: (c, f) => c.setNotificationHandler('notifications/message', (n) => f(n.params.data)),
        };
      })()
    : await (async () => {
        const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
        const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
        const { LoggingMessageNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
        return {
          name: '@modelcontextprotocol/sdk 1.32.2',
          Client,
          Streamable: StreamableHTTPClientTransport,
          onLog: (c, f) => c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => f(n.params.data)),
        };
      })();

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcp-resume-bench-'));
const server = spawn(bin, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--retention-events', String(COUNT * 2)], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, RUST_LOG: 'warn' },
});
const url = await new Promise((resolve, reject) => {
  readline.createInterface({ input: server.stdout }).once('line', (l) => {
    const m = /^listening on (\S+)/.exec(l);
    m ? resolve(m[1]) : reject(new Error(l));
  });
});

const transports = {
  'mcp-resume-client, WebSocket': () => new ResumableClientTransport(url, { websocket: true }),
  'mcp-resume-client, SSE': () => new ResumableClientTransport(url, { websocket: false }),
  'SDK StreamableHTTPClientTransport': () => new sdk.Streamable(new URL(url)),
};

/** This transport alone: initialize, emit, count notifications at onmessage. */
async function raw(websocket) {
  const t = new ResumableClientTransport(url, { websocket });
  const pending = new Map();
  let n = 0;
  let inOrder = true;
  let done;
  const all = new Promise((r) => (done = r));
  t.onmessage = (m) => {
    if (m.method === 'notifications/message') {
      n += 1;
      if (m.params.data.i !== n) inOrder = false;
      if (n === COUNT) done(performance.now());
    } else if (pending.has(m.id)) pending.get(m.id)(m);
  };
  const call = (id, method, params) =>
    new Promise((r) => {
      pending.set(id, r);
      t.send({ jsonrpc: '2.0', id, method, params });
    });
  await t.start();
  const init = await call(1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench', version: '1' } });
  t.setProtocolVersion(init.result.protocolVersion);
  await t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await new Promise((r) => setTimeout(r, 200));
  const t0 = performance.now();
  await call(2, 'tools/call', { name: 'emit', arguments: { count: COUNT } });
  const t1 = await all;
  await t.close();
  if (!inOrder) throw new Error('out of order');
  return COUNT / ((t1 - t0) / 1000);
}

async function once(make) {
  const transport = make();
  const client = new sdk.Client({ name: 'bench', version: '1' });
  let n = 0;
  let inOrder = true;
  let done;
  const all = new Promise((r) => (done = r));
  sdk.onLog(client, (d) => {
    n += 1;
    if (d.i !== n) inOrder = false;
    if (n === COUNT) done(performance.now());
  });
  await client.connect(transport);
  // The SDK's transport opens its GET stream after `initialized`; give every transport the same head start.
  await new Promise((r) => setTimeout(r, 200));
  const t0 = performance.now();
  await client.callTool({ name: 'emit', arguments: { count: COUNT } });
  const t1 = await Promise.race([all, new Promise((_, rej) => setTimeout(() => rej(new Error(`stuck at ${n}`)), 120_000))]);
  await new Promise((r) => setTimeout(r, 100));
  await client.close();
  if (!inOrder || n !== COUNT) throw new Error(`received ${n}, in order: ${inOrder}`);
  return COUNT / ((t1 - t0) / 1000);
}

const runs = Object.fromEntries(Object.entries(transports).map(([k, make]) => [k, () => once(make)]));
if (RAW) {
  runs['mcp-resume-client alone (no SDK client), WebSocket'] = () => raw(true);
  runs['mcp-resume-client alone (no SDK client), SSE'] = () => raw(false);
}
const results = Object.fromEntries(Object.keys(runs).map((k) => [k, []]));
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, run] of Object.entries(runs)) {
      const rate = await run();
      results[name].push(rate);
      console.error(`round ${r + 1} ${name}: ${Math.round(rate).toLocaleString('en')} notifications/s`);
    }
  }
} finally {
  server.kill('SIGTERM');
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const base = median(results['SDK StreamableHTTPClientTransport']);
console.log(`\n${sdk.name} client, ${COUNT.toLocaleString('en')} notifications per run, ${ROUNDS} rounds, median; node ${process.version}, ${os.cpus().length} cores`);
console.log('| transport | notifications/s | vs the SDK transport |');
console.log('| --- | ---: | ---: |');
for (const [name, xs] of Object.entries(results)) {
  const m = median(xs);
  console.log(`| ${name} | ${Math.round(m).toLocaleString('en')} | ${(m / base).toFixed(2)}x |`);
}
