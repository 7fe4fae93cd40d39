#!/usr/bin/env node
// A conformance "everything" server for the MCP conformance suite's server scenarios,
// written for the Dex gateway's conformance run on the official TypeScript SDK (low-level
// Server). Streamable HTTP on 127.0.0.1 only, stateful sessions (elicitation and sampling need
// a live session), an in-memory event store (SSE resumability / polling, SEP-1699) and
// Host-header validation (DNS-rebinding protection).
//
//   node everything-server.mjs --port 0     -> prints "listening on http://127.0.0.1:N/mcp"
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import {
  CallToolRequestSchema, CompleteRequestSchema, ElicitResultSchema, CreateMessageResultSchema,
  GetPromptRequestSchema, ListPromptsRequestSchema, ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema, ListToolsRequestSchema, ReadResourceRequestSchema,
  SetLevelRequestSchema, SubscribeRequestSchema, UnsubscribeRequestSchema, McpError, ErrorCode,
} from '@modelcontextprotocol/sdk/types.js';

const HOST = '127.0.0.1';
const portArg = process.argv.indexOf('--port');
const PORT = portArg > 0 ? Number(process.argv[portArg + 1]) : 0;

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const EMPTY = { type: 'object', properties: {} };
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns simple text content', inputSchema: EMPTY },
  { name: 'test_image_content', description: 'Returns image content', inputSchema: EMPTY },
  { name: 'test_audio_content', description: 'Returns audio content', inputSchema: EMPTY },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: EMPTY },
  { name: 'test_multiple_content_types', description: 'Returns text, image and resource', inputSchema: EMPTY },
  { name: 'test_tool_with_logging', description: 'Sends log messages while running', inputSchema: EMPTY },
  { name: 'test_tool_with_progress', description: 'Sends progress notifications', inputSchema: EMPTY },
  { name: 'test_error_handling', description: 'Always fails with isError', inputSchema: EMPTY },
  { name: 'test_reconnection', description: 'Closes its SSE stream mid-call (SEP-1699)', inputSchema: EMPTY },
  {
    name: 'test_sampling', description: 'Asks the client for an LLM completion',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation', description: 'Asks the user for input',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicitation with defaults (SEP-1034)', inputSchema: EMPTY },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicitation with enum forms (SEP-1330)', inputSchema: EMPTY },
  {
    name: 'json_schema_2020_12_tool', description: 'Input schema with JSON Schema 2020-12 keywords (SEP-1613)',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
];

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', title: 'Static Text Resource', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', title: 'Static Binary Resource', mimeType: 'image/png' },
  { uri: 'test://watched-resource', name: 'watched-resource', title: 'Watched Resource', mimeType: 'text/plain' },
];
const TEMPLATES = [
  { uriTemplate: 'test://template/{id}/data', name: 'template', title: 'Resource Template', mimeType: 'application/json' },
];
const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments', description: 'A prompt with two required arguments',
    arguments: [{ name: 'arg1', description: 'First argument', required: true }, { name: 'arg2', description: 'Second argument', required: true }],
  },
  {
    name: 'test_prompt_with_embedded_resource', description: 'A prompt embedding a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' },
];

const SEP1034_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
  required: [],
};
const SEP1330_SCHEMA = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string', description: 'Select one option with titles',
      oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }],
    },
    legacyEnum: {
      type: 'string', description: 'Select one option (legacy)',
      enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: {
      type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3,
      items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    },
    titledMulti: {
      type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3,
      items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] },
    },
  },
  required: [],
};

// -- event store (SSE resumability) ------------------------------------------------------
const events = new Map();
let eventSeq = 0;
const eventStore = {
  async storeEvent(streamId, message) {
    const id = `${streamId}::${String(++eventSeq).padStart(12, '0')}`;
    events.set(id, { streamId, message });
    return id;
  },
  async replayEventsAfter(lastEventId, { send }) {
    const streamId = lastEventId.split('::')[0];
    for (const [id, e] of [...events.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      if (e.streamId === streamId && id > lastEventId && Object.keys(e.message).length > 0) await send(id, e.message);
    }
    return streamId;
  },
};

// -- one MCP server per session ----------------------------------------------------------
const transports = {};

function createServer() {
  const server = new Server(
    { name: 'dex-conformance-everything', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  const subscriptions = new Set();
  const log = (data) => server.sendLoggingMessage({ level: 'info', logger: 'conformance', data }).catch(() => {});

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const args = request.params.arguments ?? {};
    switch (request.params.name) {
      case 'test_simple_text':
        return text('This is a simple text response for testing.');
      case 'test_image_content':
        return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return { content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }] };
      case 'test_multiple_content_types':
        return {
          content: [
            { type: 'text', text: 'Multiple content types test:' },
            { type: 'image', data: PNG, mimeType: 'image/png' },
            { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } },
          ],
        };
      case 'test_tool_with_logging':
        for (const [i, msg] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
          if (i) await sleep(50);
          await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data: msg } });
        }
        return text('Tool with logging executed successfully');
      case 'test_tool_with_progress': {
        const progressToken = request.params._meta?.progressToken ?? 0;
        for (const [i, p] of [0, 50, 100].entries()) {
          if (i) await sleep(50);
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: p, total: 100, message: `Completed step ${p} of 100` },
          });
        }
        return text(String(progressToken));
      }
      case 'test_error_handling':
        return { isError: true, content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }] };
      case 'test_reconnection': {
        const transport = extra.sessionId ? transports[extra.sessionId] : undefined;
        if (transport && extra.requestId !== undefined) transport.closeSSEStream(extra.requestId);
        await sleep(100);
        return text('Reconnection test completed successfully.');
      }
      case 'test_sampling': {
        const result = await extra.sendRequest(
          { method: 'sampling/createMessage', params: { messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt ?? '') } }], maxTokens: 100 } },
          CreateMessageResultSchema,
        );
        return text(`LLM response: ${result.content?.text ?? 'No response'}`);
      }
      case 'test_elicitation': {
        const result = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              mode: 'form', message: String(args.message ?? ''),
              requestedSchema: { type: 'object', properties: { response: { type: 'string', description: "User's response" } }, required: ['response'] },
            },
          },
          ElicitResultSchema,
        );
        return text(`User response: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
      }
      case 'test_elicitation_sep1034_defaults':
      case 'test_elicitation_sep1330_enums': {
        const sep1034 = request.params.name === 'test_elicitation_sep1034_defaults';
        const result = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              mode: 'form',
              message: sep1034 ? 'Please review and update the form fields with defaults' : 'Please select options from the enum fields',
              requestedSchema: sep1034 ? SEP1034_SCHEMA : SEP1330_SCHEMA,
            },
          },
          ElicitResultSchema,
        );
        return text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
      }
      case 'json_schema_2020_12_tool':
        return text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`);
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: TEMPLATES }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const uri = request.params.uri;
    if (uri === 'test://static-text') return { contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] };
    if (uri === 'test://static-binary') return { contents: [{ uri, mimeType: 'image/png', blob: PNG }] };
    if (uri === 'test://watched-resource') return { contents: [{ uri, mimeType: 'text/plain', text: 'Watched resource content' }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id: m[1], templateTest: true, data: `Data for ID: ${m[1]}` }) }] };
    throw new McpError(-32002, `Resource not found: ${uri}`);
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    log(`Subscribed to resource: ${request.params.uri}`);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    log(`Unsubscribed from resource: ${request.params.uri}`);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const a = request.params.arguments ?? {};
    const user = (content) => ({ role: 'user', content });
    switch (request.params.name) {
      case 'test_simple_prompt':
        return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
      case 'test_prompt_with_arguments':
        return { messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` })] };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            user({ type: 'resource', resource: { uri: a.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }),
            user({ type: 'text', text: 'Please process the embedded resource above.' }),
          ],
        };
      case 'test_prompt_with_image':
        return { messages: [user({ type: 'image', data: PNG, mimeType: 'image/png' }), user({ type: 'text', text: 'Please analyze the image above.' })] };
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${request.params.name}`);
    }
  });

  server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    log(`Log level set to: ${request.params.level}`);
    return {};
  });
  server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

// -- HTTP ---------------------------------------------------------------------------------
const app = createMcpExpressApp({ host: HOST }); // localhost Host-header validation

app.post('/mcp', async (req, res) => {
  const sessionId = req.headers['mcp-session-id'];
  try {
    if (sessionId && transports[sessionId]) {
      await transports[sessionId].handleRequest(req, res, req.body);
      return;
    }
    if (sessionId || req.body?.method !== 'initialize') {
      res.status(sessionId ? 404 : 400).json({ jsonrpc: '2.0', error: { code: -32000, message: sessionId ? 'Session not found' : 'Missing session ID' }, id: null });
      return;
    }
    const server = createServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore,
      retryInterval: 5000,
      onsessioninitialized: (id) => { transports[id] = transport; },
    });
    transport.onclose = () => {
      if (transport.sessionId) delete transports[transport.sessionId];
      server.close().catch(() => {});
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  } catch (err) {
    console.error('request failed:', err);
    if (!res.headersSent) res.status(500).json({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal server error' }, id: null });
  }
});

const bySession = (action) => async (req, res) => {
  const transport = transports[req.headers['mcp-session-id']];
  if (!transport) {
    res.status(400).send('Invalid or missing session ID');
    return;
  }
  await transport.handleRequest(req, res);
  void action;
};
app.get('/mcp', bySession('get'));
app.delete('/mcp', bySession('delete'));

const httpServer = app.listen(PORT, HOST, () => {
  console.error(`listening on http://${HOST}:${httpServer.address().port}/mcp`);
});
const stop = () => httpServer.close(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
