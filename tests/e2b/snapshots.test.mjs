// E2B's snapshots and forks: the official SDKs (e2b 2.51 through @e2b/code-interpreter,
// which extends its Sandbox), unmodified, against a real `sandboxd serve`.
// createSnapshot, Sandbox.create(snapshotId), sandbox.fork({ count }), listSnapshots
// and deleteSnapshot, and what another owner or a bad request gets. With
// SANDBOXD_E2B_ISOLATION=gvisor every sandbox is a runsc sandbox and a snapshot carries
// its memory too: a runCode variable and a background process are in the sandboxes made
// from it (skipped where runsc is not installed). Run by CTest with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox } from '@e2b/code-interpreter';
import { SandboxNotFoundError } from 'e2b';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = 'e2b-snapshots-alice-token';
const BOB = 'e2b-snapshots-bob-token';
const ISOLATION = process.env.SANDBOXD_E2B_ISOLATION || 'native';
const GVISOR = ISOLATION === 'gvisor';
const RUNSC = ['/usr/sbin/runsc', '/usr/bin/runsc', '/usr/local/sbin/runsc', '/usr/local/bin/runsc'].some(existsSync);
const SKIP = GVISOR && !RUNSC ? 'runsc is not installed (Debian: apt-get install runsc)' : false;
let dir;
let server;
let alice;
let bob;
let source;
const made = []; // killed at the end (those of the server before a restart go with its folder)

function stopServerNow() {
  if (server && server.child.exitCode === null) server.child.kill('SIGTERM');
}
process.on('exit', stopServerNow);

before(async () => {
  if (SKIP) return;
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-snapshots-'));
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
    GVISOR ? 'runtime: { prestartedSandboxes: 0, isolation: gvisor, gvisorPlatform: ptrace }'
      : 'runtime: { prestartedSandboxes: 0 }',
  ]);
  alice = { apiKey: ALICE, apiUrl: `${server.url}/e2b`, sandboxUrl: `${server.url}/e2b/sandbox` };
  bob = { ...alice, apiKey: BOB };
  source = await Sandbox.create({ ...alice, timeoutMs: 600_000 });
  made.push(source);
  await source.files.write('/home/user/kept.txt', 'from the source');
});

after(async () => {
  for (const sandbox of made) await sandbox.kill().catch(() => {});
  if (server) await stopProgram(server.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// The audit log's events (each request's are on disk when it ends).
const audited = (event) => readFileSync(join(dir, 'data', 'audit.log'), 'utf8').split('\n').filter(Boolean)
  .map((line) => JSON.parse(line)).filter((entry) => entry.event === event);

const pidOf = async (sandbox) => (await sandbox.commands.run('pgrep -f "sleep 700[1]" || true')).stdout.trim();

test(`a snapshot makes new sandboxes with its files${GVISOR ? ', variables and processes' : ''}; the source runs on (${ISOLATION})`, { skip: SKIP }, async () => {
  let pid = '';
  assert.equal((await source.runCode('kept = 41\nkept')).text, '41');
  if (GVISOR) {
    await source.commands.run('sleep 7001', { background: true });
    pid = await pidOf(source);
    assert.match(pid, /^[0-9]+$/);
  }
  const endBefore = (await source.getInfo()).endAt.getTime();
  const snapshot = await source.createSnapshot();
  assert.match(snapshot.snapshotId, /^[a-z0-9]{20}:default$/);
  assert.equal((await source.getInfo()).endAt.getTime(), endBefore, 'the source keeps its end time');
  assert.deepEqual(snapshot.names, [snapshot.snapshotId]);

  // The source keeps its id and its state, and goes on.
  assert.equal(await source.files.read('/home/user/kept.txt'), 'from the source');
  assert.equal(await source.isRunning(), true);
  if (GVISOR) {
    assert.equal((await source.runCode('kept + 1')).text, '42');
    assert.equal(await pidOf(source), pid, 'the source keeps its process');
  }
  await source.files.write('/home/user/later.txt', 'after the snapshot');

  const copy = await Sandbox.create(snapshot.snapshotId, { ...alice, timeoutMs: 600_000 });
  made.push(copy);
  assert.notEqual(copy.sandboxId, source.sandboxId);
  assert.equal(await copy.files.read('/home/user/kept.txt'), 'from the source');
  assert.equal(await copy.files.exists('/home/user/later.txt'), false, 'written after the snapshot');
  const info = await copy.getInfo();
  assert.equal(info.templateId, snapshot.snapshotId);
  if (GVISOR) {
    assert.equal((await copy.runCode('kept + 1')).text, '42', "the snapshot's variable");
    assert.equal(await pidOf(copy), pid, "the snapshot's background process, with its pid");
  } else {
    // The native tier keeps files only (docs/e2b.md): a fresh Python.
    assert.equal((await copy.runCode("'kept' in globals()")).text, 'False');
  }
  // Each copy is its own: a write in it is not in the source.
  await copy.files.write('/home/user/kept.txt', 'changed in the copy');
  assert.equal(await source.files.read('/home/user/kept.txt'), 'from the source');

  // The snapshot outlives the sandbox it was taken from... (a second source, killed)
  const shortLived = await Sandbox.create({ ...alice, timeoutMs: 600_000 });
  await shortLived.files.write('/home/user/gone.txt', 'kept by the snapshot');
  const survivor = await shortLived.createSnapshot();
  await shortLived.kill();
  const revived = await Sandbox.create(survivor.snapshotId, { ...alice, timeoutMs: 600_000 });
  made.push(revived);
  assert.equal(await revived.files.read('/home/user/gone.txt'), 'kept by the snapshot');
  assert.equal(await Sandbox.deleteSnapshot(survivor.snapshotId, alice), true);
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, alice), true);
});

test(`fork({ count: 2 }) gives two sandboxes that start equal and diverge (${ISOLATION})`, { skip: SKIP }, async () => {
  await source.files.write('/home/user/fork.txt', 'before the fork');
  if (GVISOR) await source.runCode('forked = 7');
  const forks = await source.fork({ count: 2, timeoutMs: 600_000 });
  assert.equal(forks.length, 2);
  for (const fork of forks) {
    assert.ok(fork instanceof Sandbox, String(fork));
    made.push(fork);
  }
  const [one, two] = forks;
  assert.notEqual(one.sandboxId, two.sandboxId);
  for (const fork of forks) {
    assert.notEqual(fork.sandboxId, source.sandboxId);
    assert.equal(await fork.files.read('/home/user/fork.txt'), 'before the fork');
    if (GVISOR) assert.equal((await fork.runCode('forked')).text, '7');
  }
  await one.files.write('/home/user/fork.txt', 'one');
  await two.files.write('/home/user/fork.txt', 'two');
  assert.equal(await one.files.read('/home/user/fork.txt'), 'one');
  assert.equal(await two.files.read('/home/user/fork.txt'), 'two');
  assert.equal(await source.files.read('/home/user/fork.txt'), 'before the fork');
  if (GVISOR) {
    await one.runCode('forked = 1');
    assert.equal((await two.runCode('forked')).text, '7');
    assert.equal((await source.runCode('forked')).text, '7');
  }
  // The fork's own snapshot is not kept: it is not listed.
  const listed = await Sandbox.listSnapshots({ ...alice, sandboxId: source.sandboxId }).nextItems();
  assert.deepEqual(listed, []);
  // Static form, and the source still runs after it.
  const [three] = await Sandbox.fork(source.sandboxId, { ...alice, timeoutMs: 600_000 });
  assert.ok(three instanceof Sandbox, String(three));
  made.push(three);
  assert.equal(await three.files.read('/home/user/fork.txt'), 'before the fork');
  assert.equal((await source.commands.run('echo on')).stdout, 'on\n');
  const forked = audited('e2b_sandbox_forked').filter((e) => e.sandbox === source.sandboxId);
  assert.deepEqual(forked.map((e) => [e.owner, String(e.count), String(e.forked)]),
    [['alice', '2', '2'], ['alice', '1', '1']]);
});

test(`listSnapshots pages newest first and filters; deleteSnapshot (${ISOLATION})`, { skip: SKIP }, async () => {
  const first = await source.createSnapshot();
  const named = await source.createSnapshot({ name: 'my-snapshot' });
  assert.equal(named.snapshotId, 'my-snapshot:default');
  assert.deepEqual(named.names, ['my-snapshot:default']);

  const paginator = Sandbox.listSnapshots({ ...alice, limit: 1 });
  const pageOne = await paginator.nextItems();
  assert.deepEqual(pageOne.map((s) => s.snapshotId), [named.snapshotId]);
  assert.equal(paginator.hasNext, true);
  const pageTwo = await paginator.nextItems();
  assert.deepEqual(pageTwo.map((s) => s.snapshotId), [first.snapshotId]);
  assert.equal(paginator.hasNext, false);

  const bySandbox = await source.listSnapshots().nextItems();
  assert.deepEqual(bySandbox.map((s) => s.snapshotId), [named.snapshotId, first.snapshotId]);
  const byName = await Sandbox.listSnapshots({ ...alice, name: 'my-snapshot' }).nextItems();
  assert.deepEqual(byName.map((s) => s.snapshotId), [named.snapshotId]);

  // A name names the newest snapshot taken under it.
  await source.files.write('/home/user/named.txt', 'second take');
  const again = await source.createSnapshot({ name: 'my-snapshot' });
  assert.equal(again.snapshotId, 'my-snapshot:default');
  const all = await Sandbox.listSnapshots(alice).nextItems();
  assert.deepEqual(all.map((s) => s.snapshotId), [named.snapshotId, first.snapshotId]);
  const fromName = await Sandbox.create('my-snapshot', { ...alice, timeoutMs: 600_000 });
  made.push(fromName);
  assert.equal(await fromName.files.read('/home/user/named.txt'), 'second take');

  assert.equal(await Sandbox.deleteSnapshot(named.snapshotId, alice), true);
  assert.equal(await Sandbox.deleteSnapshot(named.snapshotId, alice), false);
  assert.equal(await Sandbox.deleteSnapshot(first.snapshotId, alice), true);
  assert.deepEqual(await Sandbox.listSnapshots(alice).nextItems(), []);
  const created = audited('e2b_snapshot_created').map((e) => e.snapshot);
  assert.ok(created.includes(first.snapshotId) && created.includes(named.snapshotId), created.join());
  const deleted = audited('e2b_snapshot_deleted').map((e) => [e.owner, e.snapshot]);
  assert.ok(deleted.some(([owner, id]) => owner === 'alice' && id === first.snapshotId), JSON.stringify(deleted));
  // Their folders went with them.
  assert.deepEqual(readdirSync(join(dir, 'data', 'snapshots')), []);
});

test(`unknown snapshots are E2B's 404; another owner's are not found either (${ISOLATION})`, { skip: SKIP }, async () => {
  await assert.rejects(Sandbox.create('nosuchsnapshot:default', { ...alice, timeoutMs: 60_000 }),
    (e) => e.statusCode === 404 && /not found/.test(e.message));
  await assert.rejects(Sandbox.create('abcdefghij0123456789:default', { ...alice, timeoutMs: 60_000 }),
    (e) => e.statusCode === 404);
  assert.equal(await Sandbox.deleteSnapshot('nosuchsnapshot:default', alice), false);

  const snapshot = await source.createSnapshot();
  try {
    await assert.rejects(Sandbox.create(snapshot.snapshotId, { ...bob, timeoutMs: 60_000 }), (e) => e.statusCode === 404);
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, bob), false);
    assert.deepEqual(await Sandbox.listSnapshots(bob).nextItems(), []);
    await assert.rejects(Sandbox.createSnapshot(source.sandboxId, bob), SandboxNotFoundError);
    await assert.rejects(Sandbox.fork(source.sandboxId, { ...bob, count: 1 }), SandboxNotFoundError);
    await assert.rejects(Sandbox.createSnapshot('nosuchsandbox0000000', alice), SandboxNotFoundError);
    await assert.rejects(Sandbox.fork('nosuchsandbox0000000', { ...alice, count: 1 }), SandboxNotFoundError);
  } finally {
    assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, alice), true);
  }
});

test(`bad counts and names are 400s in E2B's shape (${ISOLATION})`, { skip: SKIP }, async () => {
  for (const count of [0, -1, 101, 1e12, 1.5]) {
    await assert.rejects(source.fork({ count }), (e) => e.statusCode === 400 && /count/.test(e.message),
      `count ${count}`);
  }
  for (const name of ['Capital', 'base', 'a/b', 'x'.repeat(65), 'abcdefghij0123456789']) {
    await assert.rejects(source.createSnapshot({ name }), (e) => e.statusCode === 400 && /name/.test(e.message),
      `name ${name}`);
  }
  assert.deepEqual(await Sandbox.listSnapshots(alice).nextItems(), []);
});

// A paused sandbox is snapshotted as it is (on gvisor with the memory its pause kept);
// forking it is E2B's 409 (a fork is of a running sandbox).
test(`a paused sandbox's snapshot has what its pause kept; a fork of it is a 409 (${ISOLATION})`, { skip: SKIP }, async () => {
  const paused = await Sandbox.create({ ...alice, timeoutMs: 600_000 });
  made.push(paused);
  await paused.files.write('/home/user/paused.txt', 'kept by the pause');
  assert.equal((await paused.runCode('held = 9\nheld')).text, '9');
  assert.equal(await paused.pause(), true);
  await assert.rejects(Sandbox.fork(paused.sandboxId, { ...alice, count: 1 }),
    (e) => e.statusCode === 409 && /paused/.test(e.message));
  const snapshot = await Sandbox.createSnapshot(paused.sandboxId, alice);
  const copy = await Sandbox.create(snapshot.snapshotId, { ...alice, timeoutMs: 600_000 });
  made.push(copy);
  assert.equal(await copy.files.read('/home/user/paused.txt'), 'kept by the pause');
  assert.equal((await copy.runCode("globals().get('held')")).text, GVISOR ? '9' : undefined);
  // The paused sandbox stays paused, and comes back with its own state.
  assert.equal((await Sandbox.getInfo(paused.sandboxId, alice)).state, 'paused');
  const back = await Sandbox.connect(paused.sandboxId, { ...alice, timeoutMs: 600_000 });
  assert.equal(await back.files.read('/home/user/paused.txt'), 'kept by the pause');
  if (GVISOR) assert.equal((await back.runCode('held')).text, '9');
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, alice), true);
});

// The Files API's uploads are part of a snapshot (E2B: a snapshot is the whole file
// system): a sandbox made from it and a fork have them, as uploads of their own.
test(`uploads are in a snapshot, the sandboxes made from it and forks (${ISOLATION})`, { skip: SKIP }, async () => {
  const upload = async (sandboxId, key, body) => {
    const res = await fetch(`${server.url}/api/gpt/v1/files/${key}?scope_id=${sandboxId}`, {
      method: 'PUT', headers: { Authorization: `Bearer ${ALICE}` }, body,
    });
    assert.equal(res.status, 200, await res.text());
  };
  // The uploads the Files API lists (a file's id is its sandbox path, base64url).
  const listed = async (sandboxId) => {
    const res = await fetch(`${server.url}/api/gpt/v1/files?scope_id=${sandboxId}`, {
      headers: { Authorization: `Bearer ${ALICE}` },
    });
    assert.equal(res.status, 200);
    return (await res.json()).data.map((f) => Buffer.from(f.id, 'base64url').toString())
      .map((path) => path.replace('/mnt/user-data/uploads/', '')).sort();
  };
  const sandbox = await Sandbox.create({ ...alice, timeoutMs: 600_000 });
  made.push(sandbox);
  await upload(sandbox.sandboxId, 'notes.txt', 'uploaded notes');
  await upload(sandbox.sandboxId, 'data/2026/q3.csv', 'a,b\n1,2\n');
  const snapshot = await sandbox.createSnapshot();
  await upload(sandbox.sandboxId, 'later.txt', 'after the snapshot');

  const copy = await Sandbox.create(snapshot.snapshotId, { ...alice, timeoutMs: 600_000 });
  made.push(copy);
  assert.equal(await copy.files.read('/mnt/user-data/uploads/notes.txt'), 'uploaded notes');
  assert.equal(await copy.files.read('/mnt/user-data/uploads/data/2026/q3.csv'), 'a,b\n1,2\n');
  assert.equal(await copy.files.exists('/mnt/user-data/uploads/later.txt'), false);
  assert.equal((await copy.commands.run('cat /mnt/user-data/uploads/notes.txt')).stdout, 'uploaded notes');
  assert.deepEqual(await listed(copy.sandboxId), ['data/2026/q3.csv', 'notes.txt'].sort());

  const [fork] = await sandbox.fork({ count: 1, timeoutMs: 600_000 });
  assert.ok(fork instanceof Sandbox, String(fork));
  made.push(fork);
  assert.equal(await fork.files.read('/mnt/user-data/uploads/later.txt'), 'after the snapshot');
  assert.deepEqual(await listed(fork.sandboxId), ['data/2026/q3.csv', 'later.txt', 'notes.txt']);
  // Each its own: the source keeps its uploads, the copy's are not the source's.
  assert.deepEqual(await listed(sandbox.sandboxId), ['data/2026/q3.csv', 'later.txt', 'notes.txt']);
  await upload(copy.sandboxId, 'only-in-copy.txt', 'mine');
  assert.equal((await listed(sandbox.sandboxId)).includes('only-in-copy.txt'), false);
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, alice), true);
});

// A snapshot is the owner's stored bytes: one that would take the owner past
// quotas.storedBytesPerOwner is refused before anything is copied, and so is a fork
// (its snapshot, kept only while the forks are made, is checked as one). Each fork
// succeeds or fails on its own: past quotas.containersPerOwner a fork is an Error in
// its place.
test(`a snapshot or a fork past the owner's stored bytes is a 403; forks past the container quota fail alone (${ISOLATION})`, { skip: SKIP }, async () => {
  const serverWith = (name, quotas) => startServer(dir, name, [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
    `quotas: { ${quotas} }`,
    GVISOR ? 'runtime: { prestartedSandboxes: 0, isolation: gvisor, gvisorPlatform: ptrace }'
      : 'runtime: { prestartedSandboxes: 0 }',
  ]);
  const small = await serverWith('small', 'storedBytesPerOwner: 4096');
  try {
    const opts = { apiKey: ALICE, apiUrl: `${small.url}/e2b`, sandboxUrl: `${small.url}/e2b/sandbox` };
    const sandbox = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    try {
      const pastQuota = (e) => e.statusCode === 403 &&
        /Storage quota reached: this owner's files may take at most 4096 bytes \(quotas\.storedBytesPerOwner\), snapshots included/.test(e.message);
      await assert.rejects(sandbox.createSnapshot(), pastQuota);
      assert.deepEqual(await Sandbox.listSnapshots(opts).nextItems(), []);
      assert.deepEqual(readdirSync(join(dir, 'small', 'snapshots')), []);
      await assert.rejects(sandbox.fork({ count: 2, timeoutMs: 600_000 }), pastQuota);
      assert.deepEqual(readdirSync(join(dir, 'small', 'snapshots')), [], 'no fork folder is left');
      assert.deepEqual((await Sandbox.list(opts).nextItems()).map((s) => s.sandboxId), [sandbox.sandboxId]);
      assert.equal((await sandbox.commands.run('echo still')).stdout, 'still\n');
    } finally {
      await sandbox.kill().catch(() => {});
    }
  } finally {
    await stopProgram(small.child);
  }
  const few = await serverWith('few', 'containersPerOwner: 2');
  try {
    const opts = { apiKey: ALICE, apiUrl: `${few.url}/e2b`, sandboxUrl: `${few.url}/e2b/sandbox` };
    const sandbox = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
    try {
      await sandbox.files.write('/home/user/forked.txt', 'in every fork');
      const forks = await sandbox.fork({ count: 3, timeoutMs: 600_000 });
      assert.equal(forks.length, 3);
      assert.ok(forks[0] instanceof Sandbox, String(forks[0]));
      assert.equal(await forks[0].files.read('/home/user/forked.txt'), 'in every fork');
      await forks[0].kill();
      for (const refused of forks.slice(1)) {
        assert.ok(refused instanceof Error && !(refused instanceof Sandbox), String(refused));
        assert.equal(refused.statusCode, 403);
        assert.match(refused.message, /containersPerOwner/);
      }
    } finally {
      await sandbox.kill().catch(() => {});
    }
  } finally {
    await stopProgram(few.child);
  }
});

// A snapshot is in the metadata database and on disk: a restarted server still has it
// (last: it restarts the suite's server).
test(`a snapshot survives a restart of the server (${ISOLATION})`, { skip: SKIP }, async () => {
  await source.files.write('/home/user/restart.txt', 'before the restart');
  await source.runCode('survived = 5');
  const snapshot = await source.createSnapshot({ name: 'across-restart' });
  await stopProgram(server.child);
  // What a server killed between copying a snapshot and recording it leaves: a folder
  // with no record, which the next start removes.
  const strayFolder = join(dir, 'data', 'snapshots', 'strayfolder000000000');
  mkdirSync(strayFolder);
  writeFileSync(join(strayFolder, 'volume.img'), 'left over');
  const kept = readdirSync(join(dir, 'data', 'snapshots')).filter((name) => name !== 'strayfolder000000000');
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
    GVISOR ? 'runtime: { prestartedSandboxes: 0, isolation: gvisor, gvisorPlatform: ptrace }'
      : 'runtime: { prestartedSandboxes: 0 }',
  ]);
  const restarted = { ...alice, apiUrl: `${server.url}/e2b`, sandboxUrl: `${server.url}/e2b/sandbox` };
  assert.equal(existsSync(strayFolder), false, 'a folder with no record is removed at start');
  assert.deepEqual(readdirSync(join(dir, 'data', 'snapshots')).sort(), kept.sort(), 'the recorded ones stay');
  const listed = await Sandbox.listSnapshots(restarted).nextItems();
  assert.deepEqual(listed.map((s) => s.snapshotId), [snapshot.snapshotId]);
  const copy = await Sandbox.create(snapshot.snapshotId, { ...restarted, timeoutMs: 600_000 });
  made.push(copy);
  assert.equal(await copy.files.read('/home/user/restart.txt'), 'before the restart');
  if (GVISOR) assert.equal((await copy.runCode('survived')).text, '5');
  assert.equal(await Sandbox.deleteSnapshot(snapshot.snapshotId, restarted), true);
});
