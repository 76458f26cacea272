// Bundles dist/index.js into one ES module for pages that load it directly
// (dist/browser/mcp-resume-client.js; the browser test serves it). Node's
// built-ins stay external: they are imported only when running in Node.
import { build } from 'esbuild';

await build({
  entryPoints: ['dist/index.js'],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  external: ['node:*'],
  outfile: 'dist/browser/mcp-resume-client.js',
  logLevel: 'warning',
});
