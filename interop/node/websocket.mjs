// Drives the official TypeScript MCP SDK 1.x client over its own
// WebSocketClientTransport (subprotocol `mcp`, one JSON-RPC message per text
// frame) at an mcp-resume endpoint: `serve`, a hosted rmcp handler
// (`rmcp_durable --transport mcp-resume`) or `gateway -- server-everything`.
// Lists tools, calls one, receives notifications and progress, answers an
// elicitation from its own handler, closes. One line per thing it saw.
//
//   node --experimental-websocket websocket.mjs URL serve|hosted|everything
//   stdout: TOOLS n | ECHO text | NOTIFIED n | PROGRESS n | ELICITED text | DONE
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.argv[2]);
url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
const mode = process.argv[3];
const transport = new WebSocketClientTransport(url);
const client = new Client(
  { name: 'mcp-resume-interop-websocket', version: '1.0.0' },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  const content = {};
  for (const [k, s] of Object.entries(req.params.requestedSchema?.properties ?? {})) {
    content[k] = s.type === 'boolean' ? true : s.type === 'number' || s.type === 'integer' ? 7 : s.enum ? s.enum[0] : 'ws-user';
  }
  return { action: 'accept', content };
});
let notified = 0;
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  if (n.params?.logger === 'emit') notified += 1;
});
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);
let closed = false;
transport.onclose = () => { closed = true; };

await client.connect(transport);
let tools = [];
for (let i = 0; i < 50; i++) {
  tools = (await client.listTools()).tools.map((t) => t.name);
  if (mode !== 'everything' || tools.includes('trigger-elicitation-request')) break;
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`TOOLS ${tools.length} ${tools.join(',')}`);

const text = (r) => r.content?.[0]?.text ?? JSON.stringify(r);
if (mode === 'everything') {
  console.log(`ECHO ${text(await client.callTool({ name: 'echo', arguments: { message: 'hello' } }))}`);
  let progress = 0;
  await client.callTool(
    { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
    undefined,
    { onprogress: () => { progress += 1; } },
  );
  console.log(`PROGRESS ${progress}`);
  const elicited = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
  console.log(`ELICITED ${JSON.stringify(elicited.content).includes('ws-user')}`);
} else {
  console.log(`ECHO ${text(await client.callTool({ name: 'echo', arguments: { text: 'hello' } }))}`);
  await client.callTool({ name: 'emit', arguments: { count: 3 } });
  for (let i = 0; i < 100 && notified < 3; i++) await new Promise((r) => setTimeout(r, 50));
  console.log(`NOTIFIED ${notified}`);
  let progress = 0;
  // Steps apart: the SDK 1.x client runs a notification's handler in a
  // microtask and a response's at once, so progress that arrives in the same
  // read as the call's answer is reported as for an unknown token.
  const args = mode === 'serve' ? { steps: 3, interval_ms: 50 } : { n: 3, interval_ms: 50 };
  await client.callTool({ name: 'progress', arguments: args }, undefined, { onprogress: () => { progress += 1; } });
  console.log(`PROGRESS ${progress}`);
  if (mode === 'hosted') {
    const said = await client.callTool({ name: 'confirm', arguments: { token: 'ws' } });
    console.log(`ELICITED ${text(said)}`);
  }
}
await client.close();
for (let i = 0; i < 50 && !closed; i++) await new Promise((r) => setTimeout(r, 20));
console.log(`DONE ${closed}`);
process.exit(0);
