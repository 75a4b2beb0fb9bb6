// MCP's Tasks extension (io.modelcontextprotocol/tasks, 2026-07-28) with the official v2
// client (`@modelcontextprotocol/client`, unmodified, pinned in package-lock.json) against
// a real `sandboxd serve`: a bash call made a task, its state and output polled, one
// cancelled, one finished, and the owner checked on every request. Run by CTest with
// SANDBOXD_PATH.
//
// How the client is used is how its 2.4.0 API allows: `tasks/get` and `tasks/cancel` are
// the methods it lets a caller send on a 2026-07-28 connection with a result schema of
// the caller's (Protocol.request, `isExtensionReusedRequestMethod`); a result with
// `resultType: "task"` it does not decode yet (UNSUPPORTED_RESULT_TYPE), so the call that
// starts a task is sent through its Streamable HTTP transport, which sets the
// revision's headers from the message as for any request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { serveTwoOwners } from './two_owners.mjs';

const ALICE = 'tasks-alice-token';
const BOB = 'tasks-bob-token';
const MODERN = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
const server = serveTwoOwners('sandboxd-mcp-tasks-', ALICE, BOB);
const clients = server.clients;

const transportFor = (token) =>
  new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });

// A v2 client that negotiates 2026-07-28; `tasks`: it declares the extension.
async function modernClient(token = ALICE, tasks = true) {
  const client = new Client(
    { name: 'sandboxd-tasks-test', version: '1.0.0' },
    { versionNegotiation: { mode: 'auto' }, capabilities: tasks ? { extensions: { [TASKS]: {} } } : {} },
  );
  await client.connect(transportFor(token));
  clients.push(client);
  return client;
}

// The extension's results are the caller's to check: a Standard Schema that takes any.
const anyResult = { '~standard': { version: 1, vendor: 'sandboxd-tests', validate: (value) => ({ value }) } };
const getTask = (client, taskId) => client.request({ method: 'tasks/get', params: { taskId } }, anyResult);
const cancelTask = (client, taskId) => client.request({ method: 'tasks/cancel', params: { taskId } }, anyResult);

// tools/call of a client that takes tasks, through the SDK's transport: the raw answer.
async function callWithTasks(token, name, args) {
  const transport = transportFor(token);
  const answered = new Promise((resolve, reject) => {
    transport.onmessage = resolve;
    transport.onerror = reject;
  });
  await transport.start();
  await transport.send({
    jsonrpc: '2.0', id: 1, method: 'tools/call',
    params: {
      name, arguments: args,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': MODERN,
        'io.modelcontextprotocol/clientInfo': { name: 'sandboxd-tasks-test', version: '1.0.0' },
        'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } },
      },
    },
  });
  const message = await answered;
  await transport.close();  // the task outlives the request (and its connection)
  return message;
}

async function startTask(container, command) {
  const message = await callWithTasks(ALICE, 'bash_code_execution', { command, container });
  assert.ok(message.result, JSON.stringify(message));
  const task = message.result;
  assert.equal(task.resultType, 'task');
  assert.equal(task.status, 'working');
  assert.match(task.taskId, new RegExp(`^mcpt_[0-9a-f]{32}\\.${container}$`));
  assert.ok(Number.isInteger(task.ttlMs) && task.ttlMs >= 3600000, JSON.stringify(task));
  assert.ok(task.pollIntervalMs > 0);
  assert.ok(!Number.isNaN(Date.parse(task.createdAt)) && !Number.isNaN(Date.parse(task.lastUpdatedAt)));
  return task.taskId;
}

async function eventually(what, check, tries = 240) {
  for (let i = 0; i < tries; ++i) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.fail(`never happened: ${what}`);
}

const MARKER = 'sandboxd-tasks-marker';
const countMarkers = `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[s]andboxd-tasks-marker'`;

test('server/discover names the Tasks extension', async () => {
  const client = await modernClient();
  const discovered = await client.discover();
  assert.deepEqual(discovered.capabilities.extensions, { [TASKS]: {} });
});

test('a task: started at once, its output polled, then its result', async () => {
  const client = await modernClient();
  const taskId = await startTask('tasks-run',
    'echo begun; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo ended; echo made > /mnt/user-data/outputs/task.txt');
  let polled;
  await eventually('the output shows while the task works', async () => {
    polled = await getTask(client, taskId);
    return polled.status === 'working' && (polled.statusMessage ?? '').includes('begun');
  });
  assert.equal(polled.taskId, taskId);
  assert.equal(polled.result, undefined);
  // An ordinary call (this client's callTool, no task) lets it go on.
  const plain = await modernClient(ALICE, false);
  const go = await plain.callTool({ name: 'bash_code_execution', arguments: { command: 'touch /tmp/go', container: 'tasks-run' } });
  assert.equal(go.structuredContent.return_code, 0);
  await eventually('the task completes', async () => (polled = await getTask(client, taskId)).status === 'completed');
  assert.equal(polled.result.structuredContent.stdout, 'begun\nended\n');
  assert.equal(polled.result.structuredContent.return_code, 0);
  assert.ok(polled.result.content.some((block) => block.type === 'resource_link' &&
    block.uri === 'sandboxd://containers/tasks-run/files/mnt/user-data/outputs/task.txt'), JSON.stringify(polled.result));
  // Kept: asked again, the same result; cancelling an ended task changes nothing.
  assert.deepEqual((await getTask(client, taskId)).result, polled.result);
  await cancelTask(client, taskId);
  assert.equal((await getTask(client, taskId)).status, 'completed');
});

test('a task cancelled: its command is killed and it stays cancelled', async () => {
  const client = await modernClient();
  const taskId = await startTask('tasks-cancel', `echo started; while true; do echo ${MARKER} > /dev/null; sleep 0.05; done`);
  const plain = await modernClient(ALICE, false);
  const count = async () => (await plain.callTool({ name: 'bash_code_execution', arguments: { command: countMarkers, container: 'tasks-cancel' } })).structuredContent.stdout;
  await eventually('the command runs', async () => (await count()) !== '0\n');
  const acknowledged = await cancelTask(client, taskId);
  assert.deepEqual(Object.keys(acknowledged).filter((key) => key !== '_meta'), []);
  assert.equal((await getTask(client, taskId)).status, 'cancelled');
  await eventually('the command is gone', async () => (await count()) === '0\n');
  const after = await getTask(client, taskId);
  assert.equal(after.status, 'cancelled');
  assert.equal(after.result, undefined);
});

test('tasks are the owner\'s, asked for by a client that takes them', async () => {
  const taskId = await startTask('tasks-owner', 'echo mine');
  const alice = await modernClient();
  await eventually('it ends', async () => (await getTask(alice, taskId)).status === 'completed');
  // Another owner's client: as unknown as a made-up id (the id is no credential).
  const bob = await modernClient(BOB);
  for (const id of [taskId, `mcpt_${'0'.repeat(32)}.tasks-owner`, 'nonsense']) {
    await assert.rejects(getTask(bob, id), (error) => error.code === -32602 && /Task not found|taskId/.test(error.message));
    await assert.rejects(cancelTask(bob, id), (error) => error.code === -32602);
  }
  // A client that does not declare the extension may not ask (-32021), nor gets tasks.
  const plain = await modernClient(ALICE, false);
  await assert.rejects(getTask(plain, taskId), (error) => error.code === -32021 &&
    JSON.stringify(error.data) === JSON.stringify({ requiredCapabilities: { extensions: { [TASKS]: {} } } }));
  const direct = await plain.callTool({ name: 'bash_code_execution', arguments: { command: 'echo direct', container: 'tasks-owner' } });
  assert.equal(direct.structuredContent.stdout, 'direct\n');
  // Tools that do not run long are answered directly even to a client that takes tasks.
  const listed = await callWithTasks(ALICE, 'list_containers', {});
  assert.equal(listed.result.resultType, 'complete');
});
