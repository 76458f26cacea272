// Drives the official TypeScript MCP SDK client over mcp-resume-client
// (clients/typescript, built) against an MCP server, for the tests that put
// it behind a balancer: prints what it sees one line at a time, takes
// commands on stdin, as client.mjs does with the SDK's own transport.
//
//   node resumable.mjs URL ws|sse
//   stdout: SESSION id | ECHO text | EVENT count i | EMITTED | ERROR msg
//   stdin:  emit COUNT INTERVAL_MS | quit
import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { ResumableClientTransport } from '../../clients/typescript/dist/index.js';

const url = new URL(process.argv[2]);
const transport = new ResumableClientTransport(url, { websocket: process.argv[3] === 'ws' });
const client = new Client({ name: 'mcp-resume-interop-resumable', version: '1.0.0' });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  const d = n.params.data;
  console.log(`EVENT ${d.count} ${d.i}`);
});
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);
transport.onerror = (e) => console.log(`ERROR ${e?.message ?? e}`);

await client.connect(transport);
console.log(`SESSION ${transport.sessionId}`);
const echoed = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
console.log(`ECHO ${echoed.content[0].text}`);

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [cmd, a, b] = line.trim().split(/\s+/);
  if (cmd === 'emit') {
    await client.callTool({ name: 'emit', arguments: { count: Number(a), interval_ms: Number(b) } });
    console.log('EMITTED');
  } else if (cmd === 'quit') {
    break;
  }
}
await client.close();
process.exit(0);
