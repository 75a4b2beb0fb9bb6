// MCP compatibility: the official MCP TypeScript SDK's client, unmodified, against a real
// `sandboxd serve` (/mcp over Streamable HTTP) and through its stdio bridge (`sandboxd
// mcp --url`, spawned by the SDK's StdioClientTransport). Run by CTest with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = 'mcp-alice-token';
const BOB = 'mcp-bob-token';
let dir;
let server;
const clients = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-mcp-'));
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
  ]);
});

after(async () => {
  for (const client of clients) await client.close().catch(() => {});
  if (server) await stopProgram(server.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function httpClient(token) {
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'sandboxd-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return { client, transport };
}

async function stdioClient(token) {
  const transport = new StdioClientTransport({
    command: process.env.SANDBOXD_PATH,
    args: ['mcp', '--url', server.url],
    env: { SANDBOXD_TOKEN: token },
  });
  const client = new Client({ name: 'sandboxd-stdio-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}

const bash = (client, container, command, options) =>
  client.callTool({ name: 'bash_code_execution', arguments: { command, container } }, undefined, options);
const editor = (client, container, args) =>
  client.callTool({ name: 'text_editor_code_execution', arguments: { ...args, container } });

// POST /api/gpt/v1/containers/{id}/tools/{tool}: what the HTTP API answers for the same call.
async function httpTool(token, container, tool, input) {
  const res = await fetch(`${server.url}/api/gpt/v1/containers/${container}/tools/${tool}`, {
    method: 'POST', headers: { Authorization: `Bearer ${token}` }, body: JSON.stringify(input),
  });
  assert.equal(res.status, 200);
  return res.json();
}

// A raw JSON-RPC POST to /mcp.
async function rpc(body, { token = ALICE, session, version, contentType = 'application/json' } = {}) {
  const headers = { Accept: 'application/json, text/event-stream', 'Content-Type': contentType };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (session) headers['Mcp-Session-Id'] = session;
  if (version) headers['MCP-Protocol-Version'] = version;
  const res = await fetch(`${server.url}/mcp`, {
    method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { res, text, json: text ? JSON.parse(text) : undefined };
}

const initialize = (protocolVersion, token = ALICE) => rpc({
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
}, { token });

// A POST announcing a body over the message limit: refused from its Content-Length,
// before any of it is sent. Resolves with the raw response.
function announceOversized(session) {
  const { hostname, port } = new URL(server.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(`POST /mcp HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${ALICE}\r\n` +
                   `Mcp-Session-Id: ${session}\r\nContent-Type: application/json\r\n` +
                   `Accept: application/json, text/event-stream\r\nContent-Length: ${40 << 20}\r\n\r\n`);
    });
    let seen = '';
    socket.on('data', (chunk) => {
      seen += chunk;
      const end = seen.indexOf('\r\n\r\n');
      const length = seen.match(/content-length: (\d+)/i);
      if (end >= 0 && length && seen.length >= end + 4 + Number(length[1])) {
        socket.destroy();
        resolve(seen);
      }
    });
    socket.on('error', reject);
  });
}

// Polls `check` (an async predicate) until it holds; fails with `what` after `tries`.
async function eventually(what, check, tries = 60) {
  for (let i = 0; i < tries; ++i) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.fail(`never happened: ${what}`);
}

// A running command whose marker is in its command line: none once it has stopped.
const MARKER = 'sandboxd-mcp-marker';
const markerCommand = `echo started; while true; do echo ${MARKER} > /dev/null; sleep 0.05; done`;
const countMarkers = `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[s]andboxd-mcp-marker'`;

test('initialize negotiates the protocol version and opens a session', async () => {
  const { client, transport } = await httpClient(ALICE);
  assert.equal(client.getServerVersion().name, 'sandboxd');
  assert.match(transport.sessionId, /^mcps_[0-9a-f]{32}$/);
  assert.ok(client.getServerCapabilities().tools);
  assert.ok(client.getServerCapabilities().resources);
  assert.ok(client.getInstructions().includes('bash_code_execution'));
  await client.ping();

  const latest = await initialize(LATEST_PROTOCOL_VERSION);
  assert.equal(latest.json.result.protocolVersion, LATEST_PROTOCOL_VERSION);
  const previous = await initialize('2025-06-18');
  assert.equal(previous.res.status, 200);
  assert.equal(previous.json.result.protocolVersion, '2025-06-18');
  assert.match(previous.res.headers.get('mcp-session-id'), /^mcps_/);
  const unknown = await initialize('1999-01-01');
  assert.equal(unknown.json.result.protocolVersion, LATEST_PROTOCOL_VERSION);
});

test('tools are listed with input and output schemas', async () => {
  const { client } = await httpClient(ALICE);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), [
    'bash_code_execution', 'code_execution', 'delete_container', 'delete_file', 'download_file', 'list_containers',
    'list_files',
    'stop_container', 'text_editor_code_execution', 'upload_file',
  ]);
  for (const tool of tools) {
    assert.equal(tool.inputSchema.type, 'object', tool.name);
    assert.equal(tool.outputSchema.type, 'object', tool.name);
    assert.ok(tool.description.length > 20, tool.name);
  }
});

test('a command runs and answers like the HTTP API', async () => {
  const { client } = await httpClient(ALICE);
  const command = 'echo hello; echo oops >&2; exit 3';
  const result = await bash(client, 'mcp-run', command);
  assert.equal(result.isError, undefined);  // a failing command is a normal result
  const expected = { type: 'bash_code_execution_result', stdout: 'hello\n', stderr: 'oops\n', return_code: 3, content: [] };
  assert.deepEqual(result.structuredContent, expected);
  assert.deepEqual(await httpTool(ALICE, 'mcp-run', 'bash_code_execution', { command }), expected);
  assert.equal(result.content[0].type, 'text');
  assert.match(result.content[0].text, /hello\n\[stderr\]\noops\n\[return code 3\]/);

  // No container argument: the owner's default container, as /messages does.
  await bash(client, undefined, 'echo in-default > /home/agent/workspace/where.txt');
  const there = await httpTool(ALICE, 'default', 'bash_code_execution', { command: 'cat where.txt' });
  assert.equal(there.stdout, 'in-default\n');

  // The seed's input errors: an error block, with isError.
  const bad = await client.callTool({ name: 'bash_code_execution', arguments: { command: 'true', timeout: 0 } });
  assert.equal(bad.isError, true);
  assert.equal(bad.structuredContent.type, 'bash_code_execution_tool_result_error');
  assert.equal(bad.structuredContent.error_code, 'invalid_tool_input');
  assert.deepEqual(bad.structuredContent,
                   await httpTool(ALICE, 'mcp-run', 'bash_code_execution', { command: 'true', timeout: 0 }));
});

test('the editor creates, edits and views a file', async () => {
  const { client } = await httpClient(ALICE);
  const created = await editor(client, 'mcp-edit', { command: 'create', path: 'notes.txt', file_text: 'one\ntwo\n' });
  assert.deepEqual(created.structuredContent, { type: 'text_editor_code_execution_create_result', is_file_update: false });
  const replaced = await editor(client, 'mcp-edit', { command: 'str_replace', path: 'notes.txt', old_str: 'two', new_str: 'TWO' });
  assert.equal(replaced.structuredContent.type, 'text_editor_code_execution_str_replace_result');
  await editor(client, 'mcp-edit', { command: 'insert', path: 'notes.txt', insert_line: 0, insert_text: 'zero' });
  const viewed = await editor(client, 'mcp-edit', { command: 'view', path: 'notes.txt' });
  assert.equal(viewed.structuredContent.type, 'text_editor_code_execution_view_result');
  assert.equal(viewed.structuredContent.content, 'zero\none\nTWO');
  assert.deepEqual(viewed.structuredContent,
                   await httpTool(ALICE, 'mcp-edit', 'text_editor_code_execution', { command: 'view', path: 'notes.txt' }));
  const missing = await editor(client, 'mcp-edit', { command: 'view', path: 'absent.txt' });
  assert.equal(missing.isError, true);
  assert.equal(missing.structuredContent.type, 'text_editor_code_execution_tool_result_error');
  assert.match(missing.content[0].text, /absent\.txt/);
});

test('the persistent Python keeps its state between calls, as the HTTP API does', async () => {
  const { client } = await httpClient(ALICE);
  const python = (code) => client.callTool({ name: 'code_execution', arguments: { container: 'mcp-python', code } });
  const first = await python('import math\nx = 41\nprint("set")');
  assert.equal(first.isError, undefined);
  assert.equal(first.structuredContent.type, 'code_execution_result');
  assert.equal(first.structuredContent.stdout, 'set\n');
  const second = await python('x + 1');
  assert.equal(second.structuredContent.stdout, '42\n', 'the variable survived the first call');
  assert.equal(second.structuredContent.return_code, 0);
  // The same kernel through the direct endpoint: one kernel per sandbox, whatever the door.
  const direct = await httpTool(ALICE, 'mcp-python', 'code_execution', { code: 'math.floor(x / 2)' });
  assert.equal(direct.stdout, '20\n');
  const failed = await python('1 / 0');
  assert.equal(failed.isError, undefined);  // an exception is a normal result, as a failing command
  assert.equal(failed.structuredContent.return_code, 1);
  assert.match(failed.structuredContent.stderr, /ZeroDivisionError/);
  assert.match(failed.content[0].text, /\[return code 1\]/);
});

test('outputs come back as resource links and read as resources', async () => {
  const { client } = await httpClient(ALICE);
  const result = await bash(client, 'mcp-res',
                            "printf 'a,b\\n1,2\\n' > /mnt/user-data/outputs/table.csv; printf '\\000\\001\\377' > /mnt/user-data/outputs/bin.dat");
  const links = result.content.filter((c) => c.type === 'resource_link');
  assert.deepEqual(links.map((l) => l.name).sort(), ['bin.dat', 'table.csv']);
  const csv = links.find((l) => l.name === 'table.csv');
  assert.equal(csv.uri, 'sandboxd://containers/mcp-res/files/mnt/user-data/outputs/table.csv');
  assert.equal(csv.mimeType, 'text/csv');
  const read = await client.readResource({ uri: csv.uri });
  assert.deepEqual(read.contents, [{ uri: csv.uri, mimeType: 'text/csv', text: 'a,b\n1,2\n' }]);
  const binary = await client.readResource({ uri: links.find((l) => l.name === 'bin.dat').uri });
  assert.equal(binary.contents[0].blob, Buffer.from([0, 1, 255]).toString('base64'));

  // A second command that writes nothing links nothing.
  const quiet = await bash(client, 'mcp-res', 'true');
  assert.equal(quiet.content.filter((c) => c.type === 'resource_link').length, 0);

  // Listed with the uploads, and the template names the same URIs.
  const uploaded = await client.callTool({ name: 'upload_file', arguments: { container: 'mcp-res', path: 'in/data.txt', text: 'uploaded text' } });
  assert.equal(uploaded.structuredContent.filename, 'data.txt');
  const { resources } = await client.listResources();
  const uris = resources.map((r) => r.uri);
  assert.ok(uris.includes(csv.uri));
  assert.ok(uris.includes('sandboxd://containers/mcp-res/files/mnt/user-data/uploads/in/data.txt'));
  // An upload is listed but, as through the Files API, not downloadable.
  await assert.rejects(client.readResource({ uri: 'sandboxd://containers/mcp-res/files/mnt/user-data/uploads/in/data.txt' }),
                       (e) => /not downloadable/.test(e.message));
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.equal(resourceTemplates[0].uriTemplate, 'sandboxd://containers/{container}/files/{+path}');
  await assert.rejects(client.readResource({ uri: 'sandboxd://containers/mcp-res/files/mnt/user-data/outputs/none' }),
                       (e) => e.code === -32002 && e.message.includes('sandboxd://containers/mcp-res/files/mnt/user-data/outputs/none'));
});

test('file and container tools answer with the HTTP API objects', async () => {
  const { client } = await httpClient(ALICE);
  const bytes = Buffer.from([1, 2, 3, 250]);
  const up = await client.callTool({ name: 'upload_file', arguments: { container: 'mcp-files', path: 'outputs/blob.bin', content_base64: bytes.toString('base64') } });
  assert.equal(up.isError, undefined);
  assert.equal(up.structuredContent.size_bytes, 4);
  for (const name of ['a.txt', 'b.txt', 'c.txt'])
    await client.callTool({ name: 'upload_file', arguments: { container: 'mcp-files', path: `docs/${name}`, text: name } });
  const page = await client.callTool({ name: 'list_files', arguments: { container: 'mcp-files', prefix: 'docs/', limit: 2 } });
  assert.equal(page.structuredContent.data.length, 2);
  assert.equal(page.structuredContent.has_more, true);
  const rest = await client.callTool({ name: 'list_files', arguments: { container: 'mcp-files', prefix: 'docs/', after_id: page.structuredContent.last_id } });
  assert.deepEqual(rest.structuredContent.data.map((f) => f.filename), ['c.txt']);
  const http = await (await fetch(`${server.url}/api/gpt/v1/files?scope_id=mcp-files&prefix=docs/`, { headers: { 'x-api-key': ALICE } })).json();
  assert.deepEqual([...page.structuredContent.data, ...rest.structuredContent.data], http.data);

  const down = await client.callTool({ name: 'download_file', arguments: { container: 'mcp-files', path: '/mnt/user-data/outputs/blob.bin' } });
  assert.equal(down.structuredContent.encoding, 'base64');
  assert.equal(down.structuredContent.content, bytes.toString('base64'));
  // The key form upload_file takes names the same file.
  const byKey = await client.callTool({ name: 'download_file', arguments: { container: 'mcp-files', path: 'outputs/blob.bin' } });
  assert.equal(byKey.isError, undefined);
  assert.equal(byKey.structuredContent.content, bytes.toString('base64'));
  // An upload is not downloadable, and the refusal says how to reach it.
  const upload = await client.callTool({ name: 'download_file', arguments: { container: 'mcp-files', path: 'docs/a.txt' } });
  assert.equal(upload.isError, true);
  assert.equal(upload.structuredContent.error.type, 'permission_error');
  assert.match(upload.structuredContent.error.message, /\/mnt\/user-data\/uploads\/docs\/a\.txt is an uploaded file.*bash_code_execution/);
  assert.equal(down.content[1].type, 'resource_link');  // the content once, in structuredContent
  assert.equal(down.content[1].uri, 'sandboxd://containers/mcp-files/files/mnt/user-data/outputs/blob.bin');
  const id = up.structuredContent.id;
  const deleted = await client.callTool({ name: 'delete_file', arguments: { container: 'mcp-files', file_id: id } });
  assert.deepEqual(deleted.structuredContent, { id, type: 'file_deleted' });
  const again = await client.callTool({ name: 'delete_file', arguments: { container: 'mcp-files', file_id: id } });
  assert.equal(again.isError, true);
  assert.equal(again.structuredContent.error.type, 'not_found_error');

  const listed = await client.callTool({ name: 'list_containers', arguments: {} });
  assert.ok(listed.structuredContent.data.some((c) => c.id === 'mcp-files'));
  const stopped = await client.callTool({ name: 'stop_container', arguments: { container: 'mcp-files' } });
  assert.equal(stopped.structuredContent.state, 'stopped');
  const gone = await client.callTool({ name: 'delete_container', arguments: { container: 'mcp-files' } });
  assert.deepEqual(gone.structuredContent, { id: 'mcp-files', type: 'container_deleted' });
  const after = await client.callTool({ name: 'list_files', arguments: { container: 'mcp-files' } });
  assert.equal(after.isError, true);
  assert.equal(after.structuredContent.error.type, 'not_found_error');
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602);
});

// Progress while the command runs: it waits for a file that the test creates only once
// the first output has arrived as a progress notification.
async function progressWhileRunning(client, container) {
  await bash(client, container, 'rm -f /home/agent/workspace/go');
  const messages = [];
  let firstProgress;
  const progressed = new Promise((resolve) => { firstProgress = resolve; });
  const call = bash(client, container,
                    'echo ready; while [ ! -f /home/agent/workspace/go ]; do sleep 0.05; done; echo finished',
                    { onprogress: (p) => { messages.push(p.message); firstProgress(); }, timeout: 120000 });
  await progressed;
  assert.equal(messages.join(''), 'ready\n');
  await editor(client, container, { command: 'create', path: 'go', file_text: '' });
  const result = await call;
  assert.equal(result.structuredContent.stdout, 'ready\nfinished\n');
  // The last output's notification may be read in the same chunk as the response; the
  // official client handles a notification a microtask after reading it but forgets the
  // request's progress token as soon as it reads the response, so it may drop that one.
  // What was streamed is the output's beginning, in order, either way.
  assert.ok(['ready\n', 'ready\nfinished\n'].includes(messages.join('')), JSON.stringify(messages));
}

// Cancelling the request (notifications/cancelled) stops the command in the sandbox.
async function cancelStopsTheCommand(client, container) {
  const controller = new AbortController();
  const call = bash(client, container, markerCommand,
                    { signal: controller.signal, onprogress: () => controller.abort(), timeout: 120000 });
  await assert.rejects(call);
  await eventually('the cancelled command stops', async () => {
    const check = await bash(client, container, countMarkers);
    return check.structuredContent.stdout === '0\n';
  });
}

test('progress notifications carry the output while the command runs', async () => {
  const { client } = await httpClient(ALICE);
  await progressWhileRunning(client, 'mcp-progress');
});

test('a cancelled call stops its command', async () => {
  const { client } = await httpClient(ALICE);
  await cancelStopsTheCommand(client, 'mcp-cancel');
  // The sandbox still works afterwards.
  assert.equal((await bash(client, 'mcp-cancel', 'echo alive')).structuredContent.stdout, 'alive\n');
});

test('ending the session stops its commands', async () => {
  const { client, transport } = await httpClient(ALICE);
  const call = bash(client, 'mcp-end', markerCommand, { onprogress: () => {}, timeout: 120000 }).catch((e) => e);
  await eventually('the command runs', async () =>
    (await httpTool(ALICE, 'mcp-end', 'bash_code_execution', { command: countMarkers })).stdout === '1\n');
  const session = transport.sessionId;
  await transport.terminateSession();
  await eventually('the command stops', async () =>
    (await httpTool(ALICE, 'mcp-end', 'bash_code_execution', { command: countMarkers })).stdout === '0\n');
  const reused = await rpc({ jsonrpc: '2.0', id: 9, method: 'ping' }, { session });
  assert.equal(reused.res.status, 404);
  assert.equal(reused.json.error.code, -32001);
  // The call that was running is answered (cancelled), not left to its own timeout.
  const ended = await call;
  assert.ok(ended instanceof Error, 'the call ends with an error');
  assert.equal(ended.code, -32800);
});

test('a second owner sees none of the first owner\'s files', async () => {
  const alice = (await httpClient(ALICE)).client;
  await bash(alice, 'alice-private', 'echo secret > /mnt/user-data/outputs/secret.txt');
  const aliceUri = 'sandboxd://containers/alice-private/files/mnt/user-data/outputs/secret.txt';
  assert.equal((await alice.readResource({ uri: aliceUri })).contents[0].text, 'secret\n');

  const { client: bob, transport: bobTransport } = await httpClient(BOB);
  const { resources } = await bob.listResources();
  assert.ok(!resources.some((r) => r.uri.includes('alice-private')));
  await assert.rejects(bob.readResource({ uri: aliceUri }), (e) => e.code === -32002);
  const files = await bob.callTool({ name: 'list_files', arguments: { container: 'alice-private' } });
  assert.equal(files.isError, true);
  assert.equal(files.structuredContent.error.type, 'not_found_error');
  const containers = await bob.callTool({ name: 'list_containers', arguments: {} });
  assert.ok(!containers.structuredContent.data.some((c) => c.id === 'alice-private'));
  // Bob's own container of the same name is a different one.
  const own = await bash(bob, 'alice-private', 'ls /mnt/user-data/outputs | wc -l');
  assert.equal(own.structuredContent.stdout, '0\n');
  // Alice's token cannot use Bob's session.
  const stolen = await rpc({ jsonrpc: '2.0', id: 3, method: 'tools/list' }, { session: bobTransport.sessionId });
  assert.equal(stolen.res.status, 404);
});

test('no token is a 401 with WWW-Authenticate', async () => {
  const res = await initialize(LATEST_PROTOCOL_VERSION, null);
  assert.equal(res.res.status, 401);
  assert.match(res.res.headers.get('www-authenticate'), /^Bearer/);
  assert.equal(res.json.error.type, 'authentication_error');
  const wrong = await initialize(LATEST_PROTOCOL_VERSION, 'not-a-token');
  assert.equal(wrong.res.status, 401);
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`));
  await assert.rejects(new Client({ name: 'anonymous', version: '0' }).connect(transport), /Missing API token/);
});

test('malformed JSON-RPC gets JSON-RPC errors', async () => {
  const init = await initialize('2025-06-18');
  const session = init.res.headers.get('mcp-session-id');
  const opts = { session, version: '2025-06-18' };

  const parse = await rpc('{"jsonrpc": "2.0", "id": 1, "method": ', opts);
  assert.equal(parse.res.status, 400);
  assert.equal(parse.json.error.code, -32700);
  assert.equal('id' in parse.json, false, 'MCP\'s schema has no null id: none when the request has none');
  const noMethod = await rpc({ jsonrpc: '2.0', id: 2 }, opts);
  assert.equal(noMethod.json.error.code, -32600);
  const badVersion = await rpc({ jsonrpc: '1.0', id: 3, method: 'ping' }, opts);
  assert.equal(badVersion.json.error.code, -32600);
  const badId = await rpc({ jsonrpc: '2.0', id: { x: 1 }, method: 'ping' }, opts);
  assert.equal(badId.json.error.code, -32600);
  const notObject = await rpc('[1]', opts);
  assert.equal(notObject.json.error.code, -32600);  // a batch, which 2025-06-18 does not have
  const unknown = await rpc({ jsonrpc: '2.0', id: 4, method: 'no/such/method' }, opts);
  assert.equal(unknown.res.status, 200);
  assert.deepEqual(unknown.json.error.code, -32601);
  assert.equal(unknown.json.id, 4);
  const badParams = await rpc({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: [1] }, opts);
  assert.equal(badParams.json.error.code, -32602);
  const noSession = await rpc({ jsonrpc: '2.0', id: 6, method: 'ping' });
  assert.equal(noSession.res.status, 400);
  const wrongType = await rpc('{}', { ...opts, contentType: 'text/plain' });
  assert.equal(wrongType.res.status, 415);
  const badProtocol = await rpc({ jsonrpc: '2.0', id: 7, method: 'ping' }, { session, version: '1999-01-01' });
  assert.equal(badProtocol.res.status, 400);
  const notification = await rpc({ jsonrpc: '2.0', method: 'notifications/initialized' }, opts);
  assert.equal(notification.res.status, 202);
  const oversized = await announceOversized(session);
  assert.match(oversized, /^HTTP\/1\.1 413 /);
  assert.equal(JSON.parse(oversized.slice(oversized.indexOf('\r\n\r\n') + 4)).error.code, -32600);
  // The server still serves the session.
  const ping = await rpc({ jsonrpc: '2.0', id: 10, method: 'ping' }, opts);
  assert.deepEqual(ping.json, { jsonrpc: '2.0', id: 10, result: {} });

  // 2025-03-26 had batches: each request answered, notifications not.
  const old = await initialize('2025-03-26');
  const oldSession = old.res.headers.get('mcp-session-id');
  const batch = await rpc([
    { jsonrpc: '2.0', id: 'a', method: 'ping' },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 'b', method: 'nope' },
    { bad: true },
  ], { session: oldSession });
  assert.equal(batch.res.status, 200);
  assert.deepEqual(batch.json.map((m) => m.id), ['a', 'b', undefined]);
  assert.deepEqual(batch.json[0].result, {});
  assert.equal(batch.json[1].error.code, -32601);
  assert.equal(batch.json[2].error.code, -32600);
  const empty = await rpc([], { session: oldSession });
  assert.equal(empty.json.error.code, -32600);

  // tools/list has one page: a cursor is invalid, as resources/list's bad ones are.
  const cursor = await rpc({ jsonrpc: '2.0', id: 11, method: 'tools/list', params: { cursor: 'bogus' } }, opts);
  assert.equal(cursor.json.error.code, -32602);
});

test('a cancelled request answered as JSON gets no response', async () => {
  const init = await initialize('2025-11-25');
  const opts = { session: init.res.headers.get('mcp-session-id'), version: '2025-11-25' };
  const call = rpc({ jsonrpc: '2.0', id: 'long', method: 'tools/call',
                     params: { name: 'bash_code_execution', arguments: { container: 'mcp-cancel-json', command: markerCommand } } }, opts);
  await eventually('the command runs', async () =>
    (await httpTool(ALICE, 'mcp-cancel-json', 'bash_code_execution', { command: countMarkers })).stdout === '1\n');
  const cancelled = await rpc({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'long' } }, opts);
  assert.equal(cancelled.res.status, 202);
  const answered = await call;
  assert.equal(answered.res.status, 202);
  assert.equal(answered.text, '', 'no JSON-RPC response for a cancelled request');
  await eventually('the command stops', async () =>
    (await httpTool(ALICE, 'mcp-cancel-json', 'bash_code_execution', { command: countMarkers })).stdout === '0\n');
});

// DNS rebinding: the attacker's page names its own site in Origin and Host alike.
test('Origin and Host must name this server', async () => {
  const request = (headers) => fetch(`${server.url}/mcp`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${ALICE}`, Accept: 'application/json, text/event-stream',
               'Content-Type': 'application/json', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
                           params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'o', version: '0' } } }),
  });
  const { port } = new URL(server.url);
  const rebound = await request({ Origin: `http://attacker.example:${port}` });
  assert.equal(rebound.status, 403);
  assert.match((await rebound.json()).error.message, /origin http:\/\/attacker\.example/);
  // A local page (another port of this machine) is let through, as is no Origin.
  assert.equal((await request({ Origin: 'http://localhost:6274' })).status, 200);
  assert.equal((await request({ Origin: `http://127.0.0.1:${port}` })).status, 200);
  // The Host alone, on a server listening on loopback: only loopback names.
  const { request: raw } = await import('node:http');
  const status = (host) => new Promise((resolve, reject) => {
    const req = raw({ host: '127.0.0.1', port, path: '/mcp', method: 'POST',
                      headers: { Host: host, Authorization: `Bearer ${ALICE}`, 'Content-Type': 'application/json',
                                 Accept: 'application/json, text/event-stream' } }, (res) => { res.resume(); resolve(res.statusCode); });
    req.on('error', reject);
    req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
                             params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'h', version: '0' } } }));
  });
  assert.equal(await status(`attacker.example:${port}`), 403);
  assert.equal(await status(`localhost:${port}`), 200);
});

test('the stdio bridge: tools, progress and cancellation', async () => {
  const client = await stdioClient(ALICE);
  assert.equal(client.getServerVersion().name, 'sandboxd');
  const { tools } = await client.listTools();
  assert.ok(tools.some((t) => t.name === 'bash_code_execution'));
  const result = await bash(client, 'mcp-stdio', 'echo through the bridge');
  assert.equal(result.structuredContent.stdout, 'through the bridge\n');
  await progressWhileRunning(client, 'mcp-stdio');
  await cancelStopsTheCommand(client, 'mcp-stdio');
  await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602);
});

test('the stdio bridge without a valid token answers with errors', async () => {
  const transport = new StdioClientTransport({
    command: process.env.SANDBOXD_PATH, args: ['mcp', '--url', server.url], env: { SANDBOXD_TOKEN: 'wrong' }, stderr: 'pipe',
  });
  await assert.rejects(new Client({ name: 'stdio-anonymous', version: '0' }).connect(transport), /401/);
  await transport.close();
});
