// The official TypeScript MCP SDK server, stateful, with the SDK examples'
// in-memory event store, serving the same `echo` and `emit` tools as
// `mcp-resume serve`. For benchmarks side by side, and for testing the Rust
// client against a server that is not mcp-resume.
//
//   node server.mjs PORT     prints `listening on http://127.0.0.1:PORT/mcp`
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const transports = new Map();

function newServer() {
  const server = new McpServer({ name: 'peer-node', version: '1.0.0' }, { capabilities: { logging: {} } });
  server.registerTool('echo', { description: 'Returns the text', inputSchema: { text: z.string() } }, async ({ text }) => ({
    content: [{ type: 'text', text }],
  }));
  server.registerTool(
    'emit',
    { description: 'Emits notifications', inputSchema: { count: z.number().int(), interval_ms: z.number().int().optional() } },
    async ({ count, interval_ms }) => {
      (async () => {
        for (let i = 1; i <= count; i++) {
          await server.server.notification({
            method: 'notifications/message',
            params: { level: 'info', logger: 'emit', data: { i, count } },
          });
          if (interval_ms) await new Promise((r) => setTimeout(r, interval_ms));
        }
      })().catch(() => {});
      return { content: [{ type: 'text', text: `emitting ${count} notifications` }] };
    },
  );
  return server;
}

async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'POST') {
      const body = await readBody(req);
      let transport = sid ? transports.get(sid) : undefined;
      if (!transport && !sid && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          eventStore: new InMemoryEventStore(),
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await newServer().connect(transport);
      }
      if (!transport) {
        res.writeHead(sid ? 404 : 400).end();
        return;
      }
      await transport.handleRequest(req, res, body);
    } else if (req.method === 'GET' || req.method === 'DELETE') {
      const transport = sid && transports.get(sid);
      if (!transport) {
        res.writeHead(sid ? 404 : 400).end();
        return;
      }
      await transport.handleRequest(req, res);
    } else {
      res.writeHead(405).end();
    }
  } catch (e) {
    if (!res.headersSent) res.writeHead(500).end(String(e));
  }
});

const port = Number(process.argv[2] ?? 0);
httpServer.listen(port, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});
