// E2B compatibility: E2B's own SDK (npm `e2b`, unmodified) against a real `sandboxd
// serve`, configured only by the three environment variables docs/e2b.md gives
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Run by CTest with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, NotFoundError, SandboxNotFoundError, CommandExitError, FileNotFoundError } from 'e2b';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = 'e2b-alice-token';
const BOB = 'e2b-bob-token';
let dir;
let server;
const made = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-'));
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
  ]);
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = ALICE;
});

after(async () => {
  for (const sandbox of made) await Sandbox.kill(sandbox.sandboxId).catch(() => {});
  if (server) await stopProgram(server.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function create(opts = {}) {
  const sandbox = await Sandbox.create({ timeoutMs: 300_000, ...opts });
  made.push(sandbox);
  return sandbox;
}

test('create, get and list a sandbox with its metadata', async () => {
  const sandbox = await create({ metadata: { purpose: 'listing', run: 'one' }, timeoutMs: undefined });
  assert.match(sandbox.sandboxId, /^[a-z0-9]{20}$/);
  const info = await sandbox.getInfo();
  assert.equal(info.sandboxId, sandbox.sandboxId);
  assert.equal(info.templateId, 'base');
  assert.deepEqual(info.metadata, { purpose: 'listing', run: 'one' });
  assert.equal(info.state, 'running');
  // With no timeout given, the API's default: 15 s from the start.
  assert.equal(info.endAt.getTime() - info.startedAt.getTime(), 15_000);
  await sandbox.setTimeout(300_000);

  const other = await create({ metadata: { purpose: 'other' } });
  const paginator = Sandbox.list({ query: { metadata: { purpose: 'listing' } } });
  const listed = await paginator.nextItems();
  assert.deepEqual(listed.map((s) => s.sandboxId), [sandbox.sandboxId]);
  assert.equal(listed[0].state, 'running');
  assert.equal(paginator.hasNext, false);

  // Paging: one at a time reaches both of alice's sandboxes.
  const seen = [];
  const pages = Sandbox.list({ limit: 1 });
  while (pages.hasNext) seen.push(...(await pages.nextItems()).map((s) => s.sandboxId));
  assert.ok(seen.includes(sandbox.sandboxId) && seen.includes(other.sandboxId), JSON.stringify(seen));

  // Bob's key sees none of them.
  const bobs = await Sandbox.list({ apiKey: BOB }).nextItems();
  assert.deepEqual(bobs, []);
});

test('another key cannot reach a sandbox: not found', async () => {
  const sandbox = await create();
  await assert.rejects(Sandbox.connect(sandbox.sandboxId, { apiKey: BOB }), NotFoundError);
  await assert.rejects(Sandbox.getInfo(sandbox.sandboxId, { apiKey: BOB }), SandboxNotFoundError);
  assert.equal(await Sandbox.kill(sandbox.sandboxId, { apiKey: BOB }), false);
  // Still there for its owner.
  assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).sandboxId, sandbox.sandboxId);
});

test('setTimeout moves the end time; connect keeps it', async () => {
  const sandbox = await create();
  await sandbox.setTimeout(60_000);
  const info = await sandbox.getInfo();
  const left = info.endAt.getTime() - Date.now();
  assert.ok(left > 50_000 && left <= 61_000, `left ${left} ms`);
  const again = await Sandbox.connect(sandbox.sandboxId);
  assert.equal(again.sandboxId, sandbox.sandboxId);
  assert.equal((await again.getInfo()).endAt.getTime(), info.endAt.getTime());
});

test('a sandbox ends at its timeout', async () => {
  const sandbox = await create({ timeoutMs: 1000 });
  const deadline = Date.now() + 30_000;
  let gone = false;
  while (!gone && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    gone = await Sandbox.getInfo(sandbox.sandboxId).then(() => false, (e) => e instanceof SandboxNotFoundError);
  }
  assert.ok(gone, 'the sandbox outlived its timeout');
});

test('kill: a killed sandbox is gone', async () => {
  const sandbox = await create();
  assert.equal(await sandbox.isRunning(), true);
  await sandbox.kill();
  await assert.rejects(Sandbox.getInfo(sandbox.sandboxId), SandboxNotFoundError);
  assert.equal(await Sandbox.kill(sandbox.sandboxId), false);
  assert.equal(await sandbox.isRunning(), false);
  await assert.rejects(Sandbox.connect(sandbox.sandboxId), NotFoundError);
  const listed = await Sandbox.list().nextItems();
  assert.ok(!listed.some((s) => s.sandboxId === sandbox.sandboxId));
});

test('an unknown template is refused; a bad key is an authentication error', async () => {
  await assert.rejects(Sandbox.create('no-such-template'), (e) => /not found/i.test(e.message));
  await assert.rejects(Sandbox.create({ apiKey: 'not-a-token' }), (e) => e.name === 'AuthenticationError');
});
