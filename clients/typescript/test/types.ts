// Compile-time proof (npm run typecheck) that the transport is an SDK
// Transport for both pinned SDKs: `Client.connect` accepts it unchanged.
import type { Transport as TransportV1 } from "@modelcontextprotocol/sdk/shared/transport.js";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { Client as ClientV2, type Transport as TransportV2 } from "@modelcontextprotocol/client";
import { ResumableClientTransport } from "../src/index.js";

const transport = new ResumableClientTransport(new URL("http://127.0.0.1:8080/mcp"));
export const v1: TransportV1 = transport;
export const v2: TransportV2 = transport;
export const connects = [
  () => new ClientV1({ name: "t", version: "1" }).connect(transport),
  () => new ClientV2({ name: "t", version: "1" }).connect(transport),
];
