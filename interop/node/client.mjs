// Drives the official TypeScript MCP SDK client against an MCP server, for the
// interop tests: prints what it sees one line at a time, takes commands on stdin.
//
//   node client.mjs URL
//   stdout: SESSION id | TOOLS a,b | ECHO text | EVENT count i | EMITTED | ERROR msg
//   stdin:  emit COUNT INTERVAL_MS | quit
import readline from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.argv[2]);
const transport = new StreamableHTTPClientTransport(url, {
  reconnectionOptions: {
    initialReconnectionDelay: 100,
    maxReconnectionDelay: 1000,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 100,
  },
});
const client = new Client({ name: 'mcp-resume-interop-node', version: '1.0.0' });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  const d = n.params.data;
  console.log(`EVENT ${d.count} ${d.i}`);
});
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);

await client.connect(transport);
console.log(`SESSION ${transport.sessionId}`);
const tools = await client.listTools();
console.log(`TOOLS ${tools.tools.map((t) => t.name).join(',')}`);
const echoed = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
console.log(`ECHO ${echoed.content[0].text}`);

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [cmd, a, b] = line.trim().split(/\s+/);
  if (cmd === 'emit') {
    for (let attempt = 0; ; attempt++) {
      try {
        await client.callTool({ name: 'emit', arguments: { count: Number(a), interval_ms: Number(b) } });
        break;
      } catch (e) {
        if (attempt >= 50) throw e;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    console.log('EMITTED');
  } else if (cmd === 'quit') {
    break;
  }
}
await transport.close();
process.exit(0);
