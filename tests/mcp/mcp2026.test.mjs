// MCP 2026-07-28 (the stateless revision): the official v2 client
// (`@modelcontextprotocol/client`, unmodified, pinned in package-lock.json) against a real
// `sandboxd serve`, over Streamable HTTP and through the stdio bridge (`sandboxd mcp`),
// beside a 1.x client's session on the same endpoint; then raw probes of what the
// revision's transport asks (headers, version errors, no sessions). Run by CTest with
// SANDBOXD_PATH.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as LegacyHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { serveTwoOwners } from './two_owners.mjs';

const ALICE = 'mcp26-alice-token';
const BOB = 'mcp26-bob-token';
const MODERN = '2026-07-28';
const server = serveTwoOwners('sandboxd-mcp2026-', ALICE, BOB);
const clients = server.clients;

// The v2 client as an application would make it: version negotiation on (the SDK's
// default is still the 2025 handshake), the token in a header.
async function modernClient(token = ALICE) {
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'sandboxd-v2-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  clients.push(client);
  return client;
}

const bash = (client, container, command, options) =>
  client.callTool({ name: 'bash_code_execution', arguments: { command, container } }, options);

async function httpTool(container, tool, input) {
  const res = await fetch(`${server.url}/api/gpt/v1/containers/${container}/tools/${tool}`, {
    method: 'POST', headers: { Authorization: `Bearer ${ALICE}` }, body: JSON.stringify(input),
  });
  assert.equal(res.status, 200);
  return res.json();
}

async function eventually(what, check, tries = 120) {
  for (let i = 0; i < tries; ++i) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.fail(`never happened: ${what}`);
}

// A raw 2026-07-28 request: the headers mirror the body unless `headers` says otherwise.
function meta(version = MODERN) {
  return {
    'io.modelcontextprotocol/protocolVersion': version,
    'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '0' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
}
async function raw(method, params = {}, { id = 1, headers = {}, version = MODERN, httpMethod = 'POST', body } = {}) {
  const all = {
    Authorization: `Bearer ${ALICE}`, Accept: 'application/json, text/event-stream',
    'Content-Type': 'application/json', 'MCP-Protocol-Version': version, 'Mcp-Method': method,
  };
  const name = params.name ?? params.uri;
  if (name !== undefined) all['Mcp-Name'] = name;
  for (const [key, value] of Object.entries(headers)) {
    if (value === undefined) delete all[key]; else all[key] = value;
  }
  const message = body ?? JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: meta(version) } });
  const res = await fetch(`${server.url}/mcp`, { method: httpMethod, headers: all, body: httpMethod === 'POST' ? message : undefined });
  const text = await res.text();
  return { res, json: text ? JSON.parse(text) : undefined };
}

const MARKER = 'sandboxd-mcp26-marker';
const countMarkers = `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[s]andboxd-mcp26-marker'`;

test('the v2 client negotiates 2026-07-28 through server/discover', async () => {
  const client = await modernClient();
  assert.equal(client.getProtocolEra(), 'modern');
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  assert.equal(client.getServerVersion().name, 'sandboxd');
  assert.ok(client.getInstructions().includes('bash_code_execution'));
  const discovered = await client.discover();
  assert.deepEqual(discovered.supportedVersions, [MODERN, '2025-11-25', '2025-06-18', '2025-03-26']);
  assert.ok(discovered.capabilities.tools);
  assert.ok(discovered.capabilities.resources);
});

test('tools: listed, and a bash call answers as the HTTP API does', async () => {
  const client = await modernClient();
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === 'bash_code_execution'));
  assert.ok(tools.every((t) => t.inputSchema.type === 'object' && t.outputSchema.type === 'object'));
  const command = 'echo hello; echo oops >&2; exit 3';
  const result = await bash(client, 'm26-run', command);
  const expected = { type: 'bash_code_execution_result', stdout: 'hello\n', stderr: 'oops\n', return_code: 3, content: [] };
  assert.deepEqual(result.structuredContent, expected);
  assert.deepEqual(await httpTool('m26-run', 'bash_code_execution', { command }), expected);
  // State is the container's, not a session's: a second client sees the first's files.
  await bash(client, 'm26-run', 'echo kept > /home/agent/workspace/kept.txt');
  const other = await modernClient();
  assert.equal((await bash(other, 'm26-run', 'cat kept.txt')).structuredContent.stdout, 'kept\n');
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602);
});

test('progress streams the output, and aborting the call stops the command', async () => {
  const client = await modernClient();
  const messages = [];
  const controller = new AbortController();
  const call = bash(client, 'm26-cancel', `echo started; while true; do echo ${MARKER} > /dev/null; sleep 0.05; done`,
                    { onprogress: (p) => { messages.push(p.message); controller.abort(); }, signal: controller.signal,
                      timeout: 120000 });
  await assert.rejects(call);
  assert.equal(messages[0], 'started\n');
  await eventually('the cancelled command stops', async () =>
    (await httpTool('m26-cancel', 'bash_code_execution', { command: countMarkers })).stdout === '0\n');
});

test('resources: outputs listed and read, a missing one named by its URI', async () => {
  const client = await modernClient();
  await bash(client, 'm26-res', "printf 'a,b\\n1,2\\n' > /mnt/user-data/outputs/table.csv");
  const uri = 'sandboxd://containers/m26-res/files/mnt/user-data/outputs/table.csv';
  const { resources } = await client.listResources();
  assert.ok(resources.some((r) => r.uri === uri));
  const read = await client.readResource({ uri });
  assert.deepEqual(read.contents, [{ uri, mimeType: 'text/csv', text: 'a,b\n1,2\n' }]);
  const { resourceTemplates } = await client.listResourceTemplates();
  const template = 'sandboxd://containers/{container}/files/{+path}';
  assert.equal(resourceTemplates[0].uriTemplate, template);
  // Completions of the template's arguments: container ids, then that container's paths.
  const ids = await client.complete({ ref: { type: 'ref/resource', uri: template }, argument: { name: 'container', value: 'm26-re' } });
  assert.deepEqual(ids.completion.values, ['m26-res']);
  const paths = await client.complete({ ref: { type: 'ref/resource', uri: template }, argument: { name: 'path', value: 'mnt/user-data/outputs/ta' },
                                        context: { arguments: { container: 'm26-res' } } });
  assert.deepEqual(paths.completion.values, ['mnt/user-data/outputs/table.csv']);
  const missing = 'sandboxd://containers/m26-res/files/mnt/user-data/outputs/none.txt';
  // 2026-07-28 replaced -32002 with -32602 for a resource that is not there.
  await assert.rejects(client.readResource({ uri: missing }),
                       (e) => e.code === -32602 && e.message.includes(missing));
  // Another owner's resources are not there for Bob.
  const bob = await modernClient(BOB);
  await assert.rejects(bob.readResource({ uri }), (e) => e.code === -32602);
});

test('a 1.x client\'s session and v2 requests share the endpoint', async () => {
  const transport = new LegacyHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${ALICE}` } },
  });
  const legacy = new LegacyClient({ name: 'legacy', version: '1' });
  await legacy.connect(transport);
  clients.push(legacy);
  assert.match(transport.sessionId, /^mcps_/);
  const modern = await modernClient();
  await bash(modern, 'm26-both', 'echo from-v2 > /home/agent/workspace/f');
  const read = await legacy.callTool({ name: 'bash_code_execution', arguments: { container: 'm26-both', command: 'cat f' } });
  assert.equal(read.structuredContent.stdout, 'from-v2\n');
});

test('the stdio bridge speaks 2026-07-28 to the v2 client', async () => {
  const transport = new StdioClientTransport({
    command: process.env.SANDBOXD_PATH, args: ['mcp', '--url', server.url], env: { SANDBOXD_TOKEN: ALICE },
  });
  const client = new Client({ name: 'sandboxd-v2-stdio', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  clients.push(client);
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const result = await bash(client, 'm26-stdio', 'echo through the bridge');
  assert.equal(result.structuredContent.stdout, 'through the bridge\n');
  await bash(client, 'm26-stdio', 'echo out > /mnt/user-data/outputs/o.txt');
  const read = await client.readResource({ uri: 'sandboxd://containers/m26-stdio/files/mnt/user-data/outputs/o.txt' });
  assert.equal(read.contents[0].text, 'out\n');
  // Cancelled over stdio (notifications/cancelled): the bridge closes the request's
  // stream, which stops the command.
  const controller = new AbortController();
  const call = bash(client, 'm26-stdio', `echo started; while true; do echo ${MARKER} > /dev/null; sleep 0.05; done`,
                    { onprogress: () => controller.abort(), signal: controller.signal, timeout: 120000 });
  await assert.rejects(call);
  await eventually('the cancelled command stops', async () =>
    (await httpTool('m26-stdio', 'bash_code_execution', { command: countMarkers })).stdout === '0\n');
});

test('the transport of 2026-07-28: results, headers, versions, no sessions', async () => {
  const listed = await raw('tools/list');
  assert.equal(listed.res.status, 200);
  assert.equal(listed.res.headers.get('mcp-session-id'), null, 'no session is minted');
  assert.equal(listed.json.result.resultType, 'complete');
  assert.equal(listed.json.result.cacheScope, 'public');
  assert.ok(listed.json.result.ttlMs > 0);
  assert.equal(listed.json.result._meta['io.modelcontextprotocol/serverInfo'].name, 'sandboxd');
  const resources = await raw('resources/list');
  assert.equal(resources.json.result.ttlMs, 0);
  assert.equal(resources.json.result.cacheScope, 'private');

  // A stray session header is ignored.
  const stray = await raw('tools/list', {}, { headers: { 'Mcp-Session-Id': 'mcps_00000000000000000000000000000000' } });
  assert.equal(stray.res.status, 200);
  assert.equal(stray.json.result.tools.length > 0, true);

  // A version the server does not speak: 400 and -32022 with the versions to retry with.
  const future = await raw('tools/list', {}, { version: '2099-01-01', id: 7 });
  assert.equal(future.res.status, 400);
  assert.equal(future.json.id, 7);
  assert.equal(future.json.error.code, -32022);
  assert.deepEqual(future.json.error.data, { supported: [MODERN, '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2099-01-01' });

  // Headers that do not match the body (or are missing): 400 and -32020.
  for (const [what, headers] of [['method', { 'Mcp-Method': 'tools/call' }], ['no method', { 'Mcp-Method': undefined }]]) {
    const mismatch = await raw('tools/list', {}, { headers });
    assert.equal(mismatch.res.status, 400, what);
    assert.equal(mismatch.json.error.code, -32020, what);
  }
  const name = await raw('tools/call', { name: 'bash_code_execution', arguments: { command: 'true', container: 'm26-raw' } },
                         { headers: { 'Mcp-Name': 'download_file' } });
  assert.equal(name.json.error.code, -32020);
  const noName = await raw('tools/call', { name: 'bash_code_execution', arguments: { command: 'true', container: 'm26-raw' } },
                           { headers: { 'Mcp-Name': undefined } });
  assert.equal(noName.json.error.code, -32020);
  // Mcp-Name in its base64 form.
  const encoded = await raw('tools/call', { name: 'bash_code_execution', arguments: { command: 'echo b64', container: 'm26-raw' } },
                            { headers: { 'Mcp-Name': `=?base64?${Buffer.from('bash_code_execution').toString('base64')}?=` } });
  assert.equal(encoded.json.result.structuredContent.stdout, 'b64\n');
  const headerless = await raw('tools/list', {}, { headers: { 'MCP-Protocol-Version': undefined } });
  assert.equal(headerless.res.status, 400);
  assert.equal(headerless.json.error.code, -32020);
  const bodyVersion = await raw('tools/list', {}, {
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: meta('2025-11-25') } }),
  });
  assert.equal(bodyVersion.json.error.code, -32020);
  const noCapabilities = await raw('tools/list', {}, {
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list',
                           params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } }),
  });
  assert.equal(noCapabilities.res.status, 400);
  assert.equal(noCapabilities.json.error.code, -32602);

  // Methods the revision does not have: 404 with -32601.
  for (const method of ['ping', 'initialize', 'no/such']) {
    const gone = await raw(method);
    assert.equal(gone.res.status, 404, method);
    assert.equal(gone.json.error.code, -32601, method);
  }
  // GET and DELETE: 405; batches: 400.
  assert.equal((await raw('tools/list', {}, { httpMethod: 'GET' })).res.status, 405);
  assert.equal((await raw('tools/list', {}, { httpMethod: 'DELETE' })).res.status, 405);
  const batch = await raw('tools/list', {}, { body: JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'tools/list' }]) });
  assert.equal(batch.res.status, 400);
  assert.equal(batch.json.error.code, -32600);
  assert.equal('id' in batch.json, false, 'an error for no request carries no id');
  const cursor = await raw('tools/list', { cursor: 'bogus' });
  assert.equal(cursor.json.error.code, -32602);
});
