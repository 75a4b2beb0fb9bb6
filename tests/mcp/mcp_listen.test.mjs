// MCP 2026-07-28's resource subscriptions (subscriptions/listen) with the official v2
// client (`@modelcontextprotocol/client`, unmodified, pinned in package-lock.json) against
// a real `sandboxd serve`: a client listens for an output file and is told when a
// command writes it. Run by CTest with SANDBOXD_PATH.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { serveTwoOwners } from './two_owners.mjs';

const ALICE = 'listen-alice-token';
const BOB = 'listen-bob-token';
const server = serveTwoOwners('sandboxd-mcp-listen-', ALICE, BOB);
const clients = server.clients;

async function modernClient(token = ALICE) {
  const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'sandboxd-listen-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  clients.push(client);
  return client;
}

const bash = (client, container, command) =>
  client.callTool({ name: 'bash_code_execution', arguments: { command, container } });

// The URIs of notifications/resources/updated as they come, and a wait for one.
function updatesOf(client) {
  const seen = [];
  let waiters = [];
  client.setNotificationHandler('notifications/resources/updated', (notification) => {
    seen.push(notification.params.uri);
    for (const wake of waiters) wake();
    waiters = [];
  });
  return {
    seen,
    count: (uri) => seen.filter((seenUri) => seenUri === uri).length,
    // Until `uri` has been told more than `times` times.
    async until(uri, times = 0) {
      while (seen.filter((seenUri) => seenUri === uri).length <= times)
        await new Promise((resolve) => waiters.push(resolve));
    },
  };
}

const file = (container, path) => `sandboxd://containers/${container}/files/${path}`;

test('a subscription fires when a command writes an output', async () => {
  const client = await modernClient();
  await bash(client, 'listen-run', 'true');  // the container, its outputs folder
  const report = file('listen-run', 'mnt/user-data/outputs/report.txt');
  const other = file('listen-run', 'mnt/user-data/outputs/other.txt');
  const missing = file('listen-run', 'no/such/folder/x.txt');
  const updates = updatesOf(client);
  const subscription = await client.listen({ resourceSubscriptions: [report, missing] });
  // Honoured: the output's URI; a file whose folder is not there is left out.
  assert.deepEqual(subscription.honoredFilter, { resourceSubscriptions: [report] });
  // Another file of the folder says nothing; the subscribed one is told.
  await bash(client, 'listen-run', 'echo other > /mnt/user-data/outputs/other.txt');
  await bash(client, 'listen-run', 'echo done > /mnt/user-data/outputs/report.txt');
  await updates.until(report);
  assert.ok(!updates.seen.includes(other), JSON.stringify(updates.seen));
  // Written again (a second command): told again.
  const told = updates.count(report);
  await bash(client, 'listen-run', 'echo again >> /mnt/user-data/outputs/report.txt');
  await updates.until(report, told);
  const read = await client.readResource({ uri: report });
  assert.equal(read.contents[0].text, 'done\nagain\n');
  await subscription.close();
  assert.equal(await subscription.closed, 'local');
});

test('subscriptions are the owner\'s and one container\'s', async () => {
  const alice = await modernClient();
  await bash(alice, 'listen-own', 'true');
  const uri = file('listen-own', 'mnt/user-data/outputs/secret.txt');
  // Bob names Alice's file: nothing of hers is watched for him.
  const bob = await modernClient(BOB);
  const bobs = await bob.listen({ resourceSubscriptions: [uri] });
  assert.deepEqual(bobs.honoredFilter, {});
  await bobs.close();
  // Files of two containers in one listen: refused (one listen per container).
  await assert.rejects(
    alice.listen({ resourceSubscriptions: [uri, file('listen-run', 'mnt/user-data/outputs/report.txt')] }),
    (error) => error.code === -32602 && /one container/.test(error.message));
});
