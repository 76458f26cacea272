// Drives the official TypeScript MCP SDK client against a server whose tools
// ask the client back (the conformance example's `test_sampling` and
// `test_elicitation`), answering from the SDK's own request handlers.
//
//   node ask.mjs URL
//   stdout: SESSION id | SAMPLED text | ELICITED text | ERROR msg
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
const client = new Client(
  { name: 'mcp-resume-interop-node-ask', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {} } },
);
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: 'assistant',
  content: { type: 'text', text: 'node-sampler-says-42' },
  model: 'interop-model',
  stopReason: 'endTurn',
}));
client.setRequestHandler(ElicitRequestSchema, async () => ({
  action: 'accept',
  content: { username: 'node-user', email: 'node@example.com' },
}));
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);

await client.connect(transport);
console.log(`SESSION ${transport.sessionId}`);
const sampled = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'what is 6 x 7?' } });
console.log(`SAMPLED ${sampled.content.map((c) => c.text).join(' ')}`);
const elicited = await client.callTool({ name: 'test_elicitation', arguments: { message: 'who are you?' } });
console.log(`ELICITED ${elicited.content.map((c) => c.text).join(' ')}`);
await transport.close();
process.exit(0);
