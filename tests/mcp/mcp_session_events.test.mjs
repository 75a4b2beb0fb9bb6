// The session revisions' (2025-11-25) stream outside a request, with the official 1.x
// client (`@modelcontextprotocol/sdk`, unmodified, pinned in package-lock.json) against a
// real `sandboxd serve`: resources/subscribe, whose notifications/resources/updated come
// on the session's GET stream when a command writes the file, resources/unsubscribe, and
// logging/setLevel with the notifications/message of a session's calls at the level set
// and not below. Raw probes check the GET stream's transport rules. Run by CTest with
// SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  EmptyResultSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = 'events-alice-token';
const BOB = 'events-bob-token';
const CAROL = 'events-carol-token';  // only the stream-count test's
let dir;
let server;
const clients = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-mcp-events-'));
  // A small output cap, so that a command's output is cut at it (a notice).
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob }, { token: ${CAROL}, owner: carol } ] }`,
    'codeInterpreter: { outputLimit: 4Ki }',
  ]);
});

after(async () => {
  for (const client of clients) await client.close().catch(() => {});
  if (server) await stopProgram(server.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function sessionClient(token = ALICE) {
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'sandboxd-events-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}

const bash = (client, container, command, extra = {}) =>
  client.callTool({ name: 'bash_code_execution', arguments: { command, container, ...extra } });
const file = (container, path) => `sandboxd://containers/${container}/files/${path}`;

// What a handler receives, as it comes, and a wait for a condition on it.
function collected() {
  const seen = [];
  let waiters = [];
  return {
    seen,
    add(item) {
      seen.push(item);
      for (const wake of waiters) wake();
      waiters = [];
    },
    async until(predicate) {
      while (!predicate(seen)) await new Promise((resolve) => waiters.push(resolve));
    },
  };
}

test('initialize offers resources.subscribe and logging', async () => {
  const client = await sessionClient();
  const capabilities = client.getServerCapabilities();
  assert.equal(capabilities.resources.subscribe, true);
  assert.deepEqual(capabilities.logging, {});
});

test('a subscription fires when a command writes the file, and unsubscribe stops it', async () => {
  const client = await sessionClient();
  const updates = collected();
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.add(n.params.uri));
  await bash(client, 'events-sub', 'true');  // the container, its outputs folder
  const report = file('events-sub', 'mnt/user-data/outputs/report.txt');
  const other = file('events-sub', 'mnt/user-data/outputs/other.txt');
  const marker = file('events-sub', 'mnt/user-data/outputs/marker.txt');
  await client.subscribeResource({ uri: report });
  // A file not yet there is subscribed to; another file of the folder says nothing.
  await bash(client, 'events-sub', 'echo other > /mnt/user-data/outputs/other.txt');
  await bash(client, 'events-sub', 'echo done > /mnt/user-data/outputs/report.txt');
  await updates.until((seen) => seen.includes(report));
  assert.ok(!updates.seen.includes(other), JSON.stringify(updates.seen));
  const read = await client.readResource({ uri: report });
  assert.equal(read.contents[0].text, 'done\n');
  // Unsubscribed: a write of it, then of a subscribed file of the same folder (one
  // watch reads both in order): only the second is told.
  await client.unsubscribeResource({ uri: report });
  await client.subscribeResource({ uri: marker });
  const toldBefore = updates.seen.filter((uri) => uri === report).length;
  await bash(client, 'events-sub', 'echo again >> /mnt/user-data/outputs/report.txt; echo m > /mnt/user-data/outputs/marker.txt');
  await updates.until((seen) => seen.includes(marker));
  assert.equal(updates.seen.filter((uri) => uri === report).length, toldBefore, JSON.stringify(updates.seen));
  // Any URI is accepted (a file of no container of the owner's never fires).
  assert.deepEqual(await client.subscribeResource({ uri: 'test://watched-resource' }), {});
  assert.deepEqual(await client.unsubscribeResource({ uri: 'test://watched-resource' }), {});
  await assert.rejects(client.request({ method: 'resources/subscribe', params: {} }, EmptyResultSchema),
    (error) => error.code === -32602 && /'uri'/.test(error.message));
});

test('a URI names a file of the subscriber\'s own container of that id', async () => {
  const alice = await sessionClient();
  await bash(alice, 'events-own', 'true');
  const bob = await sessionClient(BOB);
  const bobs = collected();
  bob.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => bobs.add(n.params.uri));
  const secret = file('events-own', 'mnt/user-data/outputs/secret.txt');
  await bob.subscribeResource({ uri: secret });
  // Bob's own file, written after Alice's: when it is told, Alice's would have been.
  await bash(bob, 'events-own', 'true');
  const mine = file('events-own', 'mnt/user-data/outputs/mine.txt');
  await bob.subscribeResource({ uri: mine });
  await bash(alice, 'events-own', 'echo s > /mnt/user-data/outputs/secret.txt');
  await bash(bob, 'events-own', 'echo m > /mnt/user-data/outputs/mine.txt');
  await bobs.until((seen) => seen.includes(mine));
  assert.ok(bobs.seen.every((uri) => uri === mine), JSON.stringify(bobs.seen));
});

test('log messages come at the level set and not below', async () => {
  const client = await sessionClient();
  const logs = collected();
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.add(n.params));
  assert.deepEqual(await client.setLoggingLevel('warning'), {});
  // A sandbox started (info), a restart (info), the output cut at its cap (notice),
  // then a command killed by its timeout (warning): only the last is sent.
  await bash(client, 'events-log', 'true');
  await bash(client, 'events-log', 'head -c 10000 /dev/zero | tr "\\0" a', { restart: true });
  const killed = await bash(client, 'events-log', 'sleep 60', { timeout: 1 });
  assert.equal(killed.structuredContent.return_code, 124);
  await logs.until((seen) => seen.some((log) => log.level === 'warning'));
  assert.deepEqual(logs.seen.map((log) => log.level), ['warning']);
  assert.match(logs.seen[0].data, /events-log was killed after its timeout of 1 s/);
  assert.equal(logs.seen[0].logger, 'sandboxd');
  // Down to info: the restart and the cut output are told, in order.
  await client.setLoggingLevel('info');
  await bash(client, 'events-log', 'head -c 10000 /dev/zero | tr "\\0" a', { restart: true });
  await logs.until((seen) => seen.length >= 3);
  assert.deepEqual(logs.seen.slice(1).map((log) => log.level), ['info', 'notice']);
  assert.match(logs.seen[1].data, /events-log was restarted/);
  assert.match(logs.seen[2].data, /passed the cap of 4096 bytes/);
  await assert.rejects(client.setLoggingLevel('loud'), (error) => error.code === -32602);
});

// --- the GET stream's rules, probed raw --------------------------------------------
const auth = (token = ALICE) => ({ Authorization: `Bearer ${token}` });

async function rawSession(token = ALICE) {
  const res = await fetch(`${server.url}/mcp`, {
    method: 'POST',
    headers: { ...auth(token), 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    }),
  });
  assert.equal(res.status, 200);
  await res.text();
  return res.headers.get('mcp-session-id');
}

const openStream = (session, headers = {}, token = ALICE) =>
  fetch(`${server.url}/mcp`, {
    headers: { ...auth(token), Accept: 'text/event-stream', ...(session ? { 'Mcp-Session-Id': session } : {}), ...headers },
  });
const endSession = (session) =>
  fetch(`${server.url}/mcp`, { method: 'DELETE', headers: { ...auth(), 'Mcp-Session-Id': session } });

test('one GET stream a session, of its owner, ended by the session\'s end', async () => {
  assert.equal((await openStream(undefined)).status, 400);
  assert.equal((await openStream('mcps_00000000000000000000000000000000')).status, 404);
  const session = await rawSession();
  assert.equal((await openStream(session, {}, BOB)).status, 404);
  assert.equal((await openStream(session, { Accept: 'application/json' })).status, 406);
  const stream = await openStream(session);
  assert.equal(stream.status, 200);
  assert.match(stream.headers.get('content-type'), /^text\/event-stream/);
  const second = await openStream(session);
  assert.equal(second.status, 409);
  assert.match((await second.json()).error.message, /one GET stream a session/);
  // DELETE ends the session and its stream: the body ends (else this waits forever).
  assert.equal((await endSession(session)).status, 200);
  assert.equal(await stream.text(), '');
  assert.equal((await openStream(session)).status, 404);
});

test('an owner has at most 16 streams open', async () => {
  const sessions = [];
  const streams = [];
  for (let i = 0; i < 16; i++) {
    sessions.push(await rawSession(CAROL));
    streams.push(await openStream(sessions[i], {}, CAROL));
    assert.equal(streams[i].status, 200);
  }
  const extra = await rawSession(CAROL);
  const refused = await openStream(extra, {}, CAROL);
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get('retry-after'), '1');
  assert.match((await refused.json()).error.message, /Too many MCP session streams open for this owner \(16\)/);
  // Another owner's are counted apart.
  const alices = await rawSession();
  const alicesStream = await openStream(alices);
  assert.equal(alicesStream.status, 200);
  for (const session of [...sessions, extra, alices]) {
    const ended = await fetch(`${server.url}/mcp`, { method: 'DELETE', headers: { ...auth(session === alices ? ALICE : CAROL), 'Mcp-Session-Id': session } });
    assert.equal(ended.status, 200);
  }
  for (const stream of [...streams, alicesStream]) assert.equal(await stream.text(), '');
});

test('Last-Event-ID gets a fresh stream that says nothing is replayed', async () => {
  const session = await rawSession();
  const stream = await openStream(session, { 'Last-Event-ID': '42' });
  assert.equal(stream.status, 200);
  const reader = stream.body.getReader();
  const { value } = await reader.read();
  assert.match(new TextDecoder().decode(value), /^: sandboxd keeps no events to replay/);
  assert.equal((await endSession(session)).status, 200);
  while (!(await reader.read()).done);
});

test('2026-07-28 offers no logging and no GET stream', async () => {
  const res = await fetch(`${server.url}/mcp`, {
    method: 'POST',
    headers: {
      ...auth(), 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'server/discover',
    },
    body: JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'server/discover',
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } },
    }),
  });
  const discovered = await res.json();
  assert.equal(discovered.result.capabilities.logging, undefined);
  assert.equal((await openStream(undefined, { 'MCP-Protocol-Version': '2026-07-28' })).status, 405);
});
