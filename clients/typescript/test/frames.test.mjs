// The Node WebSocket client's reader (src/ws/frames.ts) on crafted frames,
// fed to the parser directly: bounded per message (a header that declares
// more than the limit is refused before its payload is buffered), linear in
// the bytes received, and strict about RFC 6455 (RSV bits, masks, control
// frames, continuations, 64-bit lengths). No server is needed.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DEFAULT_MAX_MESSAGE_BYTES, FrameParser } from '../dist/ws/frames.js';

/** A server frame: unmasked, `len` as declared (defaults to the payload's). */
function frame({ fin = true, rsv = 0, opcode = 0x1, payload = Buffer.alloc(0), mask = false, len, size } = {}) {
  const p = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  const n = len ?? p.length;
  const form = size ?? (n < 126 ? 7 : n < 65536 ? 16 : 64);
  const head = [((fin ? 0x80 : 0) | (rsv << 4) | opcode) & 0xff];
  const m = mask ? 0x80 : 0;
  if (form === 7) head.push(m | n);
  else if (form === 16) head.push(m | 126, (n >> 8) & 0xff, n & 0xff);
  else {
    head.push(m | 127);
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(n));
    head.push(...b);
  }
  if (mask) head.push(0, 0, 0, 0); // a zero mask leaves the payload as it is
  return Buffer.concat([Buffer.from(head), p]);
}

function feedAll(parser, bytes, step = bytes.length) {
  const out = [];
  for (let i = 0; i < bytes.length; i += step) out.push(...parser.push(bytes.subarray(i, i + step)));
  return out;
}

test('frames: a text frame, split anywhere, and three in one chunk', () => {
  const bytes = Buffer.concat([frame({ payload: '{"a":1}' }), frame({ payload: 'é✓' }), frame({ payload: '' })]);
  for (const step of [1, 2, 3, 7, bytes.length]) {
    const items = feedAll(new FrameParser(), bytes, step);
    assert.deepEqual(items, [
      { kind: 'text', text: '{"a":1}' },
      { kind: 'text', text: 'é✓' },
      { kind: 'text', text: '' },
    ], `step ${step}`);
  }
});

test('frames: the 16-bit and 64-bit (127) length forms, byte by byte', () => {
  const mid = 'x'.repeat(300);
  const big = 'y'.repeat(70_000);
  const p = new FrameParser();
  const items = feedAll(p, Buffer.concat([frame({ payload: mid }), frame({ payload: big }), frame({ payload: 'z', size: 64 })]), 1);
  assert.deepEqual(items.map((i) => i.text.length), [300, 70_000, 1]);
  assert.equal(items[1].text, big);
  assert.equal(p.buffered, 0);
});

test('frames: a fragmented message (text + continuations) with a ping between, joined in order', () => {
  const bytes = Buffer.concat([
    frame({ fin: false, opcode: 0x1, payload: '{"part":' }),
    frame({ opcode: 0x9, payload: 'hi' }),
    frame({ fin: false, opcode: 0x0, payload: '"one' }),
    frame({ opcode: 0x0, payload: '"}' }),
  ]);
  const items = feedAll(new FrameParser(), bytes, 5);
  assert.equal(items.length, 2);
  assert.equal(items[0].kind, 'ping');
  assert.equal(items[0].payload.toString(), 'hi');
  assert.deepEqual(items[1], { kind: 'text', text: '{"part":"one"}' });
});

test('frames: a close frame with its code and reason; a pong', () => {
  const payload = Buffer.concat([Buffer.from([0x11, 0x39]), Buffer.from('resume')]); // 4409
  assert.deepEqual(new FrameParser().push(Buffer.concat([frame({ opcode: 0xa }), frame({ opcode: 0x8, payload })])), [
    { kind: 'pong' },
    { kind: 'close', code: 4409, reason: 'resume' },
  ]);
  assert.deepEqual(new FrameParser().push(frame({ opcode: 0x8 })), [{ kind: 'close', code: 1005, reason: '' }]);
});

/** Feeds `bytes` and expects the parser to fail with `code`, then to read nothing more. */
function refuses(bytes, code, why, max) {
  const p = new FrameParser(max);
  const items = feedAll(p, bytes, 1);
  const last = items.at(-1);
  assert.equal(last?.kind, 'error', `${why}: ${JSON.stringify(items)}`);
  assert.equal(last.code, code, `${why}: ${last.reason}`);
  assert.equal(items.filter((i) => i.kind === 'error').length, 1);
  assert.deepEqual(p.push(frame({ payload: 'after' })), [], `${why}: nothing after the failure`);
  return last;
}

test('frames: an oversize message is refused with 1009 from its header, before its payload is buffered', () => {
  // A lying server: a 64-bit length of 1 TiB, and not one payload byte.
  const p = new FrameParser();
  const items = p.push(frame({ len: 2 ** 40, payload: '' }));
  assert.deepEqual(items.map((i) => [i.kind, i.code]), [['error', 1009]]);
  assert.equal(p.buffered, 0);
  // One byte over the default limit (4 MiB), declared with the 127 form.
  refuses(frame({ len: DEFAULT_MAX_MESSAGE_BYTES + 1, payload: 'x' }), 1009, 'one byte over 4 MiB');
  // The limit is per message: fragments add up.
  refuses(
    Buffer.concat([frame({ fin: false, payload: 'x'.repeat(60) }), frame({ opcode: 0x0, payload: 'y'.repeat(60) })]),
    1009,
    'fragments over a 100-byte limit',
    100,
  );
  // At the limit exactly is fine.
  assert.deepEqual(new FrameParser(100).push(frame({ payload: 'x'.repeat(100) })), [{ kind: 'text', text: 'x'.repeat(100) }]);
});

test('frames: a message of the limit, arriving in 1 KiB chunks, costs its own bytes and linear work', () => {
  const size = DEFAULT_MAX_MESSAGE_BYTES - 16;
  const bytes = frame({ payload: Buffer.alloc(size, 0x61) });
  const p = new FrameParser();
  let peak = 0;
  const t0 = process.hrtime.bigint();
  let items = [];
  // 4,096 pushes. Concatenating everything buffered on every chunk (the old
  // reader) copies ~8 GiB here (4.3 s on the 2-core test machine); a linear
  // reader copies the 4 MiB once (about 10 ms there).
  for (let i = 0; i < bytes.length; i += 1024) {
    items = items.concat(p.push(bytes.subarray(i, i + 1024)));
    peak = Math.max(peak, p.buffered);
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  assert.equal(items.length, 1);
  assert.equal(items[0].text.length, size);
  assert.ok(peak <= bytes.length, `buffered at most the frame: ${peak}`);
  assert.ok(ms < 1000, `4 MiB in 1 KiB chunks took ${ms.toFixed(0)} ms: not linear`);
});

test('frames: RSV bits set without an extension fail the connection (1002)', () => {
  for (const rsv of [1, 2, 4]) refuses(frame({ rsv, payload: 'x' }), 1002, `rsv ${rsv}`);
});

test('frames: a masked frame from the server fails the connection (1002)', () => {
  const e = refuses(frame({ mask: true, payload: 'x' }), 1002, 'masked');
  assert.match(e.reason, /masked/);
});

test('frames: control frames must be final and at most 125 bytes (1002)', () => {
  refuses(frame({ opcode: 0x9, fin: false, payload: 'x' }), 1002, 'a fragmented ping');
  refuses(frame({ opcode: 0x8, fin: false, payload: Buffer.from([0x03, 0xe8]) }), 1002, 'a fragmented close');
  refuses(frame({ opcode: 0x9, payload: 'x'.repeat(126) }), 1002, 'a 126-byte ping');
  refuses(frame({ opcode: 0xa, payload: 'x'.repeat(200), size: 16 }), 1002, 'a long pong');
  // 125 is allowed.
  assert.equal(new FrameParser().push(frame({ opcode: 0x9, payload: 'x'.repeat(125) }))[0].kind, 'ping');
  refuses(frame({ opcode: 0x8, payload: Buffer.from([0x03]) }), 1002, 'a close with a one-byte payload');
});

test('frames: a continuation without a started message, and a data frame inside a fragmented one (1002)', () => {
  refuses(frame({ opcode: 0x0, payload: 'x' }), 1002, 'a lone continuation');
  refuses(Buffer.concat([frame({ fin: false, payload: 'a' }), frame({ payload: 'b' })]), 1002, 'a text frame inside a message');
  // After a complete fragmented message, a new one may start.
  const ok = new FrameParser().push(
    Buffer.concat([frame({ fin: false, payload: 'a' }), frame({ opcode: 0x0, payload: 'b' }), frame({ payload: 'c' })]),
  );
  assert.deepEqual(ok, [{ kind: 'text', text: 'ab' }, { kind: 'text', text: 'c' }]);
});

test('frames: a 64-bit length with its most significant bit set (1002); unknown opcodes (1002); binary (1003); bad UTF-8 (1007)', () => {
  const head = Buffer.from([0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 1]);
  refuses(head, 1002, 'MSB of the 64-bit length');
  for (const opcode of [0x3, 0x7, 0xb, 0xf]) refuses(frame({ opcode, payload: 'x' }), 1002, `opcode ${opcode}`);
  refuses(frame({ opcode: 0x2, payload: 'x' }), 1003, 'binary');
  refuses(frame({ payload: Buffer.from([0xc3, 0x28]) }), 1007, 'invalid UTF-8');
});
