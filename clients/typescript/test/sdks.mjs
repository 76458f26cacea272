// The two pinned SDK clients behind one face, so every scenario runs with
// both: `@modelcontextprotocol/sdk` 1.x and `@modelcontextprotocol/client` 2.x.
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2 } from '@modelcontextprotocol/client';

export const SDKS = [
  {
    name: 'SDK 1.x (@modelcontextprotocol/sdk 1.32.2)',
    client: () => new ClientV1({ name: 'mcp-resume-client-test', version: '1.0.0' }),
    onLog: (client, f) => client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => f(n.params.data)),
    callTool: (client, params, options) => client.callTool(params, undefined, options),
  },
  {
    name: 'SDK 2.x (@modelcontextprotocol/client 2.4.0)',
    client: () => new ClientV2({ name: 'mcp-resume-client-test', version: '1.0.0' }),
    onLog: (client, f) => client.setNotificationHandler('notifications/message', (n) => f(n.params.data)),
    callTool: (client, params, options) => client.callTool(params, options),
  },
];
