// Drives the official TypeScript MCP SDK v2 client (`@modelcontextprotocol/client`)
// against a server behind `mcp-resume gateway` (the tests run
// @modelcontextprotocol/server-everything over stdio behind it, a server that
// speaks only the 2025 session era) in the era MODE asks for. One line per
// thing it saw.
//
//   node gateway2026.mjs URL MODE
//     MODE: modern = pinned to 2026-07-28 (stateless requests, no session),
//           auto = probe server/discover, legacy = the 2025 initialize handshake
//   stdout: ERA modern|legacy VERSION | TOOLS n | ECHO text | RESOURCE uri |
//           PROMPT n bool | PROGRESS n | DONE
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const negotiation = { modern: { pin: '2026-07-28' }, auto: 'auto', legacy: 'legacy' }[mode];
if (!url || !negotiation) {
  console.error('usage: node gateway2026.mjs URL modern|auto|legacy');
  process.exit(2);
}

const client = new Client(
  { name: `mcp-resume-interop-gateway-${mode}`, version: '1.0.0' },
  { capabilities: {}, versionNegotiation: { mode: negotiation } },
);
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);

await client.connect(new StreamableHTTPClientTransport(new URL(url)));
console.log(`ERA ${client.getProtocolEra()} ${client.getNegotiatedProtocolVersion()}`);
const tools = (await client.listTools()).tools.map((t) => t.name);
console.log(`TOOLS ${tools.length} ${tools.join(',')}`);
const echoed = await client.callTool({ name: 'echo', arguments: { message: `hello ${mode}` } });
console.log(`ECHO ${echoed.content[0].text}`);
const resources = (await client.listResources()).resources;
const read = await client.readResource({ uri: resources[0].uri });
console.log(`RESOURCE ${read.contents[0].uri}`);
const prompt = await client.getPrompt({ name: 'args-prompt', arguments: { city: 'Paris', state: 'IDF' } });
console.log(`PROMPT ${prompt.messages.length} ${JSON.stringify(prompt.messages[0].content).includes('Paris')}`);
let progress = 0;
await client.callTool(
  { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
  { onprogress: () => { progress += 1; } },
);
console.log(`PROGRESS ${progress}`);
client.onerror = () => {};
await client.close();
console.log('DONE');
process.exit(0);
