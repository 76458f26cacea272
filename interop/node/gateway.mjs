// Drives the official TypeScript MCP SDK client against a server behind
// `mcp-resume gateway` (the tests run @modelcontextprotocol/server-everything
// over stdio behind it): lists and calls tools, reads a resource, gets a
// prompt, receives progress, answers sampling and elicitation from its own
// handlers. One line per thing it saw.
//
//   node gateway.mjs URL
//   stdout: SESSION id | TOOLS n | ECHO text | RESOURCE uri | PROMPT n | PROGRESS n | SAMPLED text | ELICITED text | DONE
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]));
const client = new Client(
  { name: 'mcp-resume-interop-gateway', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: {} } },
);
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: 'assistant',
  content: { type: 'text', text: 'gateway-sampler-says-42' },
  model: 'interop-model',
  stopReason: 'endTurn',
}));
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  // Fill every required field of whatever form was asked for.
  const content = {};
  for (const [k, s] of Object.entries(req.params.requestedSchema?.properties ?? {})) {
    content[k] = s.type === 'boolean' ? true : s.type === 'number' || s.type === 'integer' ? 7 : s.enum ? s.enum[0] : 'gateway-user';
  }
  return { action: 'accept', content };
});
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);

await client.connect(transport);
console.log(`SESSION ${transport.sessionId}`);
// The server registers its sampling and elicitation tools once it knows our capabilities.
let tools = [];
for (let i = 0; i < 50; i++) {
  tools = (await client.listTools()).tools.map((t) => t.name);
  if (tools.includes('trigger-sampling-request')) break;
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`TOOLS ${tools.length} ${tools.join(',')}`);
const echoed = await client.callTool({ name: 'echo', arguments: { message: 'hello' } });
console.log(`ECHO ${echoed.content[0].text}`);
const resources = (await client.listResources()).resources;
const read = await client.readResource({ uri: resources[0].uri });
console.log(`RESOURCE ${read.contents[0].uri}`);
const prompt = await client.getPrompt({ name: 'args-prompt', arguments: { city: 'Paris', state: 'IDF' } });
console.log(`PROMPT ${prompt.messages.length} ${JSON.stringify(prompt.messages[0].content).includes('Paris')}`);
let progress = 0;
await client.callTool(
  { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
  undefined,
  { onprogress: () => { progress += 1; } },
);
console.log(`PROGRESS ${progress}`);
const sampled = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'what is 6 x 7?', maxTokens: 10 } });
console.log(`SAMPLED ${JSON.stringify(sampled.content)}`);
const elicited = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
console.log(`ELICITED ${JSON.stringify(elicited.content)}`);
console.log('DONE');
await transport.close();
process.exit(0);
