// The official TypeScript SDK client over mcp-resume-client: the session
// stream arrives exactly once and in order, over the cursor-safe WebSocket
// upgrade, across drops and restarts (docs/client-author.md).
//
//   node client.mjs [URL]     (MCP_TOKEN=... for a server that asks for one)
//
// In a project with both packages installed beside each other:
//   npm install /path/to/mcp-resume/clients/typescript @modelcontextprotocol/sdk
import { Client } from "@modelcontextprotocol/sdk/client/index.js"; // or "@modelcontextprotocol/client" (2.x)
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { CursorDiscontinuityError, FileCursorStore, ResumableClientTransport } from "mcp-resume-client";

const url = new URL(process.argv[2] ?? "http://127.0.0.1:8080/mcp");
const token = process.env.MCP_TOKEN;

const transport = new ResumableClientTransport(url, {
  websocket: true, // upgrade the session stream; false: SSE only
  cursorStore: new FileCursorStore(".mcp-cursor"), // default: memory; LocalStorageCursorStore in browsers
  ...(token ? { authorization: () => token } : {}), // a bearer token, if the server asks for one
});
transport.onerror = (e) => {
  // A cursor the server cannot honour is loud: re-synchronise and start a new transport.
  if (e instanceof CursorDiscontinuityError) console.error("re-synchronise:", e.reason);
  else console.error(e);
};

const client = new Client({ name: "example", version: "1" });
const events = [];
const three = new Promise((resolve) =>
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    events.push(n.params.data);
    if (events.length === 3) resolve();
  }),
);
await client.connect(transport);
console.log("session", transport.sessionId);
const result = await client.callTool({ name: "emit", arguments: { count: 3 } });
console.log(result.content[0].text);
await three; // the demo server's emit: 3 notifications on the session stream
console.log("events", JSON.stringify(events), "cursor", transport.cursor, "stats", JSON.stringify(transport.stats));
await client.close();
