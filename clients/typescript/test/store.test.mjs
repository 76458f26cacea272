// The cursor store, and the small pure parts the transport relies on: the
// SSE parser, the seq check and the upgrade decision (the same rules as the
// Rust crates/proto).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { FileCursorStore, LocalStorageCursorStore, ResumableClientTransport } from '../dist/index.js';
import { decideStart, parseRequestId, parseSeq, SeqChecker } from '../dist/seq.js';
import { SseParser } from '../dist/sse.js';
import { Serve, sleep, tempDir, until } from './helpers.mjs';
import { SDKS } from './sdks.mjs';

test('FileCursorStore: a second program attaches to the saved session and receives exactly what the first did not', async (t) => {
  const server = await Serve.spawn();
  t.after(() => server.stop());
  const file = path.join(tempDir(), 'cursor.json');
  const sdk = SDKS[0];

  // First program: reads 300, asks for 200 more and quits at once.
  const first = new ResumableClientTransport(server.url, { cursorStore: new FileCursorStore(file) });
  const a = sdk.client();
  const seenA = [];
  sdk.onLog(a, (d) => seenA.push(`${d.count}:${d.i}`));
  await a.connect(first);
  await a.callTool({ name: 'emit', arguments: { count: 300 } });
  await until(() => seenA.length === 300, 'the first 300');
  await a.callTool({ name: 'emit', arguments: { count: 200, interval_ms: 2 } });
  await a.close();
  const saved = await new FileCursorStore(file).lastSession();
  assert.equal(saved.sessionId, first.sessionId);
  assert.equal(saved.cursor, seenA.length, 'the file holds the cursor of the last event handed over');

  // Second program: attaches to the saved session from the file.
  const store = new FileCursorStore(file);
  const again = await store.lastSession();
  const second = new ResumableClientTransport(server.url, { sessionId: again.sessionId, cursorStore: store });
  t.after(() => second.close());
  const b = sdk.client();
  const seenB = [];
  sdk.onLog(b, (d) => seenB.push(`${d.count}:${d.i}`));
  await b.connect(second);
  await until(() => seenA.length + seenB.length >= 500, `500 in all (${seenA.length} + ${seenB.length})`);
  await sleep(200);
  assert.ok(seenB.length > 0, 'the second program had something left to read');
  const want = [...Array.from({ length: 300 }, (_, k) => `300:${k + 1}`), ...Array.from({ length: 200 }, (_, k) => `200:${k + 1}`)];
  assert.deepEqual([...seenA, ...seenB], want, 'each event once, across two programs');
  await second.close();
  assert.equal((await new FileCursorStore(file).lastSession()).cursor, 500);
});

test('FileCursorStore refuses a file that is not a cursor, rather than starting over silently', async () => {
  const file = path.join(tempDir(), 'cursor.json');
  fs.writeFileSync(file, 'garbage');
  await assert.rejects(new FileCursorStore(file).load('x'), /does not hold a cursor/);
  assert.equal(await new FileCursorStore(path.join(tempDir(), 'none.json')).load('x'), undefined);
});

test('FileCursorStore: two stores writing one path at once never corrupt it, never fail, and leave no temporary file', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'cursor.json');
  // Two stores on one path (two programs, or two transports of one): each
  // save of one races saves of the other. Sessions of different lengths, so
  // that interleaved writes into one shared temporary file would show.
  const a = new FileCursorStore(file);
  const b = new FileCursorStore(file);
  const valid = (text) => {
    const v = JSON.parse(text);
    return (v.sessionId === 'a' || v.sessionId === 'b'.repeat(200)) && Number.isSafeInteger(v.cursor);
  };
  for (let round = 0; round < 200; round++) {
    await Promise.all([a.save('a', round), b.save('b'.repeat(200), round * 1000), a.flush(), b.flush()]);
    const text = fs.readFileSync(file, 'utf8');
    assert.ok(valid(text), `round ${round}: ${JSON.stringify(text.slice(0, 80))}`);
  }
  await Promise.all([a.flush(), b.flush()]);
  assert.deepEqual(fs.readdirSync(dir), ['cursor.json'], 'no temporary file left behind');
});

test('FileCursorStore: the new content is fsync\'d before the rename, and the directory after it', async () => {
  const { syncBuiltinESMExports } = await import('node:module');
  const dir = tempDir();
  const file = path.join(dir, 'cursor.json');
  const calls = [];
  const fsp = fs.promises;
  const { open, rename } = fsp;
  fsp.open = async (p, ...rest) => {
    const fh = await open(p, ...rest);
    const sync = fh.sync.bind(fh);
    fh.sync = async () => {
      calls.push(`sync ${p === dir ? 'dir' : path.dirname(p) === dir && p !== file ? 'tmp' : p}`);
      return sync();
    };
    return fh;
  };
  fsp.rename = async (from, to) => {
    calls.push(`rename ${path.basename(to)}`);
    return rename(from, to);
  };
  syncBuiltinESMExports();
  try {
    const store = new FileCursorStore(file);
    await store.save('s', 7);
    await store.flush();
  } finally {
    fsp.open = open;
    fsp.rename = rename;
    syncBuiltinESMExports();
  }
  assert.deepEqual(calls, ['sync tmp', 'rename cursor.json', 'sync dir']);
  assert.deepEqual(await new FileCursorStore(file).lastSession(), { sessionId: 's', cursor: 7 });
});

test('LocalStorageCursorStore keeps one key per session', () => {
  const m = new Map();
  const storage = {
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => m.set(k, String(v)),
    removeItem: (k) => m.delete(k),
    key: (i) => [...m.keys()][i] ?? null,
    get length() {
      return m.size;
    },
  };
  const s = new LocalStorageCursorStore('c:', storage);
  s.save('a', 5);
  s.save('b', 7);
  assert.equal(s.load('a'), 5);
  assert.deepEqual(s.sessions().sort(), ['a', 'b']);
  s.remove('a');
  assert.equal(s.load('a'), undefined);
  m.set('c:b', 'x');
  assert.throws(() => s.load('b'), /does not hold a cursor/);
});

test('SSE parser: priming event, CRLF and split chunks, multi-line data, the closing error comment', () => {
  const p = new SseParser();
  const text = 'id: 4\r\nretry: 1000\r\ndata:\r\n\r\nid: 5\nevent: message\ndata: {"a":\ndata: 1}\n\n: error reader-lagged: resume from 5\n';
  const out = [];
  for (let i = 0; i < text.length; i += 3) out.push(...p.feed(text.slice(i, i + 3)));
  assert.deepEqual(out, [
    { id: '4', event: 'message', data: '', hasData: true, retry: 1000 },
    { id: '5', event: 'message', data: '{"a":\n1}', hasData: true, retry: undefined },
  ]);
  assert.equal(p.ending, 'reader-lagged: resume from 5');
});

test('seq rules: ids, contiguity, the gate, heartbeats, the echo decision', () => {
  assert.equal(parseSeq('47'), 47);
  assert.equal(parseSeq('047'), undefined, 'no leading zero');
  assert.equal(parseSeq('-1'), undefined);
  assert.equal(parseSeq('7/3'), undefined);
  assert.deepEqual(parseRequestId('7/3'), { stream: 7, n: 3 });
  assert.equal(parseRequestId('0/1'), undefined, '0/n is not an id');
  const c = new SeqChecker(3);
  assert.equal(c.onEvent(4), undefined);
  assert.match(c.onEvent(6).why, /gap/);
  assert.match(c.onEvent(4).why, /duplicate/);
  assert.equal(c.cursor, 4);
  c.expectReplayUntil(5);
  assert.equal(c.ackDue(), undefined);
  assert.equal(c.onEvent(5), undefined);
  assert.equal(c.ackDue(), 5);
  assert.match(c.onEvent(6).why, /gate/, 'above C before the ack');
  c.acked();
  assert.equal(c.onEvent(6), undefined);
  assert.equal(c.onHeartbeat(6), undefined);
  assert.match(c.onHeartbeat(7).why, /heartbeat/);
  assert.deepEqual(decideStart(5, undefined), { ok: false, why: 'missing-echo', detail: decideStart(5, undefined).detail });
  assert.equal(decideStart(9, 7).why, 'echo-below-prior');
  assert.deepEqual(decideStart(5, 8), { ok: true, committed: 8 });
});
