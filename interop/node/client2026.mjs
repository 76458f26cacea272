// Drives the official TypeScript MCP SDK v2 client (`@modelcontextprotocol/client`)
// against an MCP server in its 2026-07-28 mode, for the interop tests: prints what
// it sees one line at a time.
//
//   node client2026.mjs URL MODE
//     MODE: pin = pinned to 2026-07-28, auto = probe server/discover,
//           legacy = the 2025 initialize handshake (the SDK's default)
//   stdout: ERA modern|legacy VERSION | TOOLS n | TEXT text | MRTR text | LISTEN ack |
//           CHANGED tools | ELICITED text | DONE
//
// Modern: the conformance example's `test_input_required_result_elicitation`
// answers `input_required`; the SDK fulfils it through the elicitation handler
// below and retries the call itself (MRTR). Legacy: a 2025 session has no
// `input_required` (the server refuses it), so `test_elicitation` asks the same
// handler with a server-to-client `elicitation/create` (ELICITED).
//
// Modern only: `listen` opens a `subscriptions/listen` stream for tools changes
// (LISTEN once acknowledged), then `test_trigger_tool_change` must make a
// `notifications/tools/list_changed` arrive on it (CHANGED).
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, mode] = process.argv.slice(2);
const negotiation = { pin: { pin: '2026-07-28' }, auto: 'auto', legacy: 'legacy' }[mode];
if (!url || !negotiation) {
  console.error('usage: node client2026.mjs URL pin|auto');
  process.exit(2);
}

const client = new Client(
  { name: 'mcp-resume-interop-node-2026', version: '1.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode: negotiation } },
);
client.setRequestHandler('elicitation/create', async () => ({
  action: 'accept',
  content: { name: 'node-2026' },
}));
client.onerror = (e) => console.error(`ERROR ${e?.message ?? e}`);

const text = (result) => result.content.map((c) => c.text).join(' ');

await client.connect(new StreamableHTTPClientTransport(new URL(url)));
console.log(`ERA ${client.getProtocolEra()} ${client.getNegotiatedProtocolVersion()}`);
const { tools } = await client.listTools();
console.log(`TOOLS ${tools.length}`);
console.log(`TEXT ${text(await client.callTool({ name: 'test_simple_text', arguments: {} }))}`);
if (client.getProtocolEra() === 'modern') {
  const asked = await client.callTool({ name: 'test_input_required_result_elicitation', arguments: {} });
  console.log(`MRTR ${text(asked)}`);

  let onChanged;
  const changed = new Promise((resolve) => {
    onChanged = resolve;
  });
  client.setNotificationHandler('notifications/tools/list_changed', () => onChanged());
  const sub = await client.listen({ toolsListChanged: true });
  console.log(`LISTEN ${sub.honoredFilter.toolsListChanged ? 'ack' : 'refused'}`);
  await client.callTool({ name: 'test_trigger_tool_change', arguments: {} });
  const late = new Promise((_, reject) => setTimeout(() => reject(new Error('no tools change in 10 s')), 10_000).unref());
  await Promise.race([changed, late]);
  console.log('CHANGED tools');
  // close() aborts the listen stream (the 2026-07-28 cancellation) and also POSTs
  // notifications/cancelled without an Mcp-Method header (SDK 2.4.0 stamps the
  // SEP-2243 headers on requests only); 2026-07-28 sets no header rules for
  // notifications, and the server accepts it (202).
  await sub.close();
} else {
  const asked = await client.callTool({ name: 'test_elicitation', arguments: { message: 'who are you?' } });
  console.log(`ELICITED ${text(asked)}`);
}
// close() aborts the standalone GET stream of a legacy session: not an error here.
client.onerror = () => {};
await client.close();
console.log('DONE');
process.exit(0);
