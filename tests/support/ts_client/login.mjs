// The MCP TypeScript SDK client logging in at the gateway's issuer by itself (issue 23):
//   node login.mjs <gateway /mcp URL> <tool name>
// Its first request gets the gateway's 401; the SDK reads the resource metadata the challenge
// names, discovers the issuer, registers itself (RFC 7591), and calls redirectToAuthorization:
// this client prints `AUTHORIZE <url>` and reads the redirect's {"code", "state"} as one JSON line
// on stdin (the person at the browser is the Python test). Then it finishes the code + PKCE
// exchange, connects again, lists the tools, calls the tool and prints one JSON line:
// {"tools": [...], "isError": bool, "access_token": "...", "client_id": "..."}.
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const [gatewayUrl, toolName] = process.argv.slice(2);
if (!gatewayUrl || !toolName) {
  console.error('usage: node login.mjs <gateway /mcp URL> <tool name>');
  process.exit(2);
}
const REDIRECT = 'http://127.0.0.1:53683/callback';  // never listened on: the test reads the code

class TestProvider {
  constructor() {
    this.stateValue = randomBytes(16).toString('base64url');
    this.saved = {};
  }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return { client_name: 'dex ts test client', redirect_uris: [REDIRECT], grant_types: ['authorization_code', 'refresh_token'],
             response_types: ['code'], token_endpoint_auth_method: 'client_secret_post', scope: 'mcp' };
  }
  state() { return this.stateValue; }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) { this.saved.tokens = tokens; }
  saveCodeVerifier(verifier) { this.saved.verifier = verifier; }
  codeVerifier() { return this.saved.verifier; }
  redirectToAuthorization(url) { process.stdout.write(`AUTHORIZE ${url.toString()}\n`); }
}

async function readLine() {
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) { lines.close(); return line; }
  throw new Error('stdin closed before the authorization code came');
}

const provider = new TestProvider();
const connect = async () => {
  const client = new Client({ name: 'dex-ts-test-client', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(gatewayUrl), { authProvider: provider });
  await client.connect(transport);
  return { client, transport };
};

let connected;
try {
  connected = await connect();
  throw new Error('the gateway let the client in without a login');
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
}
const answer = JSON.parse(await readLine());
if (answer.state !== provider.stateValue) throw new Error(`state mismatch: ${answer.state}`);
const transport = new StreamableHTTPClientTransport(new URL(gatewayUrl), { authProvider: provider });
await transport.finishAuth(answer.code);
connected = await connect();
const { tools } = await connected.client.listTools();
const result = await connected.client.callTool({ name: toolName, arguments: { name: 'ts-client', text: 'from the TypeScript SDK client' } });
await connected.client.close();
process.stdout.write(JSON.stringify({ tools: tools.map((t) => t.name), isError: Boolean(result.isError),
  access_token: provider.saved.tokens.access_token, client_id: provider.saved.client.client_id }) + '\n');
