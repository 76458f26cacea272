// `npm test`: Node's test runner over test/*.test.mjs, one file at a time
// (each spawns servers; two cores are enough when they do not overlap).
// Node 20 has the WHATWG WebSocket only behind --experimental-websocket; the
// tests of the browser path need it, so it is passed there.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

const major = Number(process.versions.node.split('.')[0]);
const flags = major < 22 ? ['--experimental-websocket'] : [];
const files = fs.readdirSync('test').filter((f) => f.endsWith('.test.mjs')).map((f) => `test/${f}`);
const r = spawnSync(process.execPath, [...flags, '--test', '--test-concurrency=1', ...process.argv.slice(2), ...files], {
  stdio: 'inherit',
});
process.exit(r.status ?? 1);
