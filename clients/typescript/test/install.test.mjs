// The package as a user gets it: `npm install ./clients/typescript` into a
// fresh project, imported by name through `exports`, and its declarations
// type-checked by a Node-only TypeScript project (no DOM lib, no skipLibCheck).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDir } from './helpers.mjs';

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

test('npm install ./clients/typescript: imported by name, declarations check without DOM types', () => {
  const dir = tempDir('mcp-resume-consumer-');
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', type: 'module' }));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', pkg], { cwd: dir, stdio: 'pipe' });
  const names = execFileSync(process.execPath, ['-e', "import('mcp-resume-client').then((m) => console.log(Object.keys(m).sort().join(',')))"], {
    cwd: dir,
    encoding: 'utf8',
  }).trim();
  for (const name of ['ResumableClientTransport', 'FileCursorStore', 'LocalStorageCursorStore', 'MemoryCursorStore', 'CursorDiscontinuityError']) {
    assert.ok(names.split(',').includes(name), `${name} in ${names}`);
  }
  fs.writeFileSync(
    path.join(dir, 'use.ts'),
    `import { ResumableClientTransport, FileCursorStore, CursorDiscontinuityError } from "mcp-resume-client";
const t = new ResumableClientTransport(new URL("http://127.0.0.1:1/mcp"), { cursorStore: new FileCursorStore("c") });
t.onerror = (e) => { if (e instanceof CursorDiscontinuityError) console.log(e.reason, e.cursor, e.head, e.floor); };
`,
  );
  execFileSync(
    path.join(pkg, 'node_modules/.bin/tsc'),
    ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--lib', 'es2022', '--types', 'node', '--typeRoots', path.join(pkg, 'node_modules/@types'), 'use.ts'],
    { cwd: dir, stdio: 'pipe' },
  );
});
