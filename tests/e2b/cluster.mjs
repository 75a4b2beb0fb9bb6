// E2B's own SDK (npm `e2b`, unmodified) against a cluster of sandboxd replicas on one
// PostgreSQL and one bucket, run by tests/cluster_e2b_test.cc in two phases around the
// kill of replica A:
//   node cluster.mjs before STATE   (A and B up)
//   node cluster.mjs after STATE    (A killed; B only)
// and in a second test, snapshots and forks, around a SIGTERM of A:
//   node cluster.mjs snapshots-before STATE, then snapshots-after STATE
// Each phase exits non-zero on the first failed assertion. The replicas' URLs and keys
// come from the environment: REPLICA_A, REPLICA_B, ALICE_KEY, BOB_KEY. STATE is a JSON
// file the first phase writes and the second reads (the sandbox ids).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { Sandbox, NotFoundError, SandboxNotFoundError, CommandExitError } from 'e2b';
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';
import { eventually } from '../harness.mjs';

const [phase, statePath] = process.argv.slice(2);
const alice = process.env.ALICE_KEY;
const bob = process.env.BOB_KEY;
const on = (url, apiKey = alice) => ({ apiUrl: `${url}/e2b`, sandboxUrl: `${url}/e2b/sandbox`, apiKey });
const A = on(process.env.REPLICA_A);
const B = on(process.env.REPLICA_B);

const gone = (id, opts) => Sandbox.getInfo(id, opts).then(() => false, (e) => {
  if (e instanceof SandboxNotFoundError) return true;
  throw e;
});

async function before() {
  // Made through A; used through B (every call to it relayed to A, its holder).
  const made = await Sandbox.create({ ...A, timeoutMs: 600_000, metadata: { suite: 'cluster', role: 'main' } });
  const other = await Sandbox.create({ ...A, timeoutMs: 600_000, metadata: { suite: 'cluster', role: 'other' } });
  const viaB = await Sandbox.connect(made.sandboxId, B);
  assert.equal(viaB.sandboxId, made.sandboxId);

  const ran = await viaB.commands.run('echo hello from $(pwd); echo oops >&2');
  assert.equal(ran.exitCode, 0);
  assert.equal(ran.stdout, 'hello from /home/user\n');
  assert.equal(ran.stderr, 'oops\n');
  await assert.rejects(viaB.commands.run('echo out; echo err >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, String(e));
    assert.equal(e.exitCode, 3);
    assert.equal(e.stdout, 'out\n');
    assert.equal(e.stderr, 'err\n');
    return true;
  });
  // Output streamed through the relay as it comes (each line a piece of its own).
  const pieces = [];
  await viaB.commands.run('for i in 1 2 3; do echo line $i; sleep 0.2; done', { onStdout: (d) => pieces.push(d) });
  assert.equal(pieces.join(''), 'line 1\nline 2\nline 3\n');
  assert.ok(pieces.length >= 2, `streamed in ${pieces.length} piece(s)`);
  // A background process, listed and killed through B.
  const handle = await viaB.commands.run('sleep 600', { background: true });
  assert.ok((await viaB.commands.list()).some((p) => p.pid === handle.pid));
  assert.equal(await viaB.commands.kill(handle.pid), true);
  await eventually('the killed process leaves the list',
                   async () => !(await viaB.commands.list()).some((p) => p.pid === handle.pid));

  // Files through B, seen through A and by commands.
  await viaB.files.write('/home/user/notes.txt', 'written through B\n');
  assert.equal(await made.files.read('/home/user/notes.txt'), 'written through B\n');
  assert.ok((await viaB.files.list('/home/user')).some((f) => f.name === 'notes.txt'));
  assert.equal((await made.commands.run('cat /home/user/notes.txt')).stdout, 'written through B\n');
  assert.equal(await viaB.files.exists('/home/user/notes.txt'), true);
  // An upload under outputs/ through B: stored by its holder (A) as any upload, its body
  // in the bucket and its manifest row written before the answer.
  await viaB.files.write('/mnt/user-data/outputs/report.txt', 'report through B\n');

  // The code interpreter through B: its kernel runs on A, and keeps its state.
  const interpreter = await CodeInterpreter.connect(made.sandboxId, B);
  assert.equal((await interpreter.runCode('x = 41\nx + 1')).text, '42');
  const printed = [];
  const second = await interpreter.runCode('print("streamed"); x * 2', { onStdout: (m) => printed.push(m.line) });
  assert.equal(second.text, '82');
  assert.match(printed.join(''), /^streamed\n?$/);

  // List and get through B, from the shared records.
  const listed = await Sandbox.list({ ...B, query: { metadata: { suite: 'cluster' } } }).nextItems();
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), [made.sandboxId, other.sandboxId].sort());
  const mains = await Sandbox.list({ ...B, query: { metadata: { suite: 'cluster', role: 'main' } } }).nextItems();
  assert.deepEqual(mains.map((s) => s.sandboxId), [made.sandboxId]);
  const pages = [];
  const paginator = Sandbox.list({ ...B, limit: 1, query: { metadata: { suite: 'cluster' } } });
  while (paginator.hasNext) pages.push((await paginator.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(pages.flat().sort(), [made.sandboxId, other.sandboxId].sort());
  assert.ok(pages.every((page) => page.length <= 1), JSON.stringify(pages));
  const info = await Sandbox.getInfo(made.sandboxId, B);
  assert.equal(info.state, 'running');
  assert.deepEqual(info.metadata, { suite: 'cluster', role: 'main' });

  // Another key finds it on neither replica.
  for (const replica of [process.env.REPLICA_A, process.env.REPLICA_B]) {
    await assert.rejects(Sandbox.connect(made.sandboxId, on(replica, bob)), NotFoundError);
    await assert.rejects(Sandbox.getInfo(made.sandboxId, on(replica, bob)), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(made.sandboxId, on(replica, bob)), false);
    assert.deepEqual(await Sandbox.list(on(replica, bob)).nextItems(), []);
  }

  // A timeout set through B ends the sandbox on its holder, A.
  const timed = await Sandbox.create({ ...A, timeoutMs: 600_000 });
  await Sandbox.setTimeout(timed.sandboxId, 1_000, B);
  await eventually('the sandbox ends at its timeout', () => gone(timed.sandboxId, B));

  // Kill through B.
  const killed = await Sandbox.create({ ...A, timeoutMs: 600_000 });
  await killed.commands.run('true');  // (its record held on A, its holder)
  assert.equal(await Sandbox.kill(killed.sandboxId, B), true);
  await assert.rejects(killed.commands.run('true'), SandboxNotFoundError);
  assert.equal(await gone(killed.sandboxId, A), true);
  assert.equal(await Sandbox.kill(killed.sandboxId, A), false);

  // Pause through B (A, its holder, stops it and flushes it to the bucket); connect through
  // B, which then serves it over the same files.
  const paused = await Sandbox.create({ ...A, timeoutMs: 600_000 });
  await paused.files.write('/home/user/kept.txt', 'kept across the pause\n');
  assert.equal(await Sandbox.pause(paused.sandboxId, B), true);
  assert.equal((await Sandbox.getInfo(paused.sandboxId, A)).state, 'paused');
  // Not running through A either, which held its record in memory while it held it.
  await assert.rejects(paused.commands.run('true'), SandboxNotFoundError);
  const resumed = await Sandbox.connect(paused.sandboxId, B);
  assert.equal((await resumed.commands.run('cat /home/user/kept.txt')).stdout, 'kept across the pause\n');
  assert.equal((await Sandbox.getInfo(paused.sandboxId, A)).state, 'running');

  // One more on A, to be given a short timeout once A is gone.
  const orphan = await Sandbox.create({ ...A, timeoutMs: 600_000 });
  await orphan.commands.run('true');
  writeFileSync(statePath, JSON.stringify({ main: made.sandboxId, orphan: orphan.sandboxId,
                                            timed: timed.sandboxId, resumed: paused.sandboxId }));
}

async function after() {
  const state = JSON.parse(readFileSync(statePath, 'utf8'));
  // A was killed: B answers 503 (Retry-After) until A's heartbeat runs out, then takes
  // the sandbox over, its files from the bucket.
  let viaB;
  await eventually('B takes the sandbox over', async () => {
    viaB = await Sandbox.connect(state.main, B);
    return (await viaB.commands.run('true')).exitCode === 0;
  });
  assert.equal(await viaB.files.read('/home/user/notes.txt'), 'written through B\n');
  assert.equal(await viaB.files.read('/mnt/user-data/outputs/report.txt'), 'report through B\n');
  assert.equal((await viaB.commands.run('cat /home/user/notes.txt; echo more >> /home/user/notes.txt')).stdout,
               'written through B\n');
  assert.equal(await viaB.files.read('/home/user/notes.txt'), 'written through B\nmore\n');
  assert.ok((await viaB.files.list('/home/user')).some((f) => f.name === 'notes.txt'));
  const handle = await viaB.commands.run('sleep 600', { background: true });
  assert.ok((await viaB.commands.list()).some((p) => p.pid === handle.pid));
  assert.equal(await viaB.commands.kill(handle.pid), true);
  assert.equal((await Sandbox.getInfo(state.main, B)).state, 'running');
  const listed = (await Sandbox.list(B).nextItems()).map((s) => s.sandboxId);
  assert.ok(listed.includes(state.main) && listed.includes(state.orphan), JSON.stringify(listed));
  await assert.rejects(Sandbox.connect(state.main, on(process.env.REPLICA_B, bob)), NotFoundError);

  // The end time is the cluster's: one set now, with A gone, ends the sandbox A held.
  await Sandbox.setTimeout(state.orphan, 1_000, B);
  await eventually('the dead replica\'s sandbox ends at its timeout', () => gone(state.orphan, B));

  assert.equal(await Sandbox.kill(state.main, B), true);
  assert.equal(await gone(state.main, B), true);
  assert.equal(await Sandbox.kill(state.resumed, B), true);
}

// Snapshots and forks (cluster_e2b_test.cc's second test, its own replicas): a snapshot
// taken through A is made into sandboxes, listed and forked through B, and outlives A.
async function snapshotsBefore() {
  const source = await Sandbox.create({ ...A, timeoutMs: 600_000 });
  await source.files.write('/home/user/kept.txt', 'kept by the snapshot');
  // An upload through sandboxd's Files API: part of the snapshot, through the bucket too.
  const uploaded = await fetch(`${process.env.REPLICA_A}/api/gpt/v1/files/notes.txt?scope_id=${source.sandboxId}`, {
    method: 'PUT', headers: { Authorization: `Bearer ${alice}` }, body: 'uploaded notes',
  });
  assert.equal(uploaded.status, 200, await uploaded.text());
  const snapshot = await source.createSnapshot();
  assert.match(snapshot.snapshotId, /^[a-z0-9]{20}:default$/);
  await source.files.write('/home/user/later.txt', 'after the snapshot');

  // Made through B (B holds it): its files are the snapshot's, fetched from the bucket.
  const copy = await Sandbox.create(snapshot.snapshotId, { ...B, timeoutMs: 600_000 });
  assert.equal(await copy.files.read('/home/user/kept.txt'), 'kept by the snapshot');
  assert.equal(await copy.files.exists('/home/user/later.txt'), false, 'written after the snapshot');
  assert.equal((await copy.commands.run('cat /mnt/user-data/uploads/notes.txt')).stdout, 'uploaded notes');
  assert.equal((await copy.getInfo()).templateId, snapshot.snapshotId);
  const listed = await Sandbox.listSnapshots({ ...B, sandboxId: source.sandboxId }).nextItems();
  assert.deepEqual(listed.map((s) => s.snapshotId), [snapshot.snapshotId]);
  // Another key sees none of it.
  const bobOnB = on(process.env.REPLICA_B, bob);
  assert.deepEqual(await Sandbox.listSnapshots(bobOnB).nextItems(), []);
  await assert.rejects(Sandbox.create(snapshot.snapshotId, { ...bobOnB, timeoutMs: 60_000 }),
                       (e) => e.statusCode === 404);
  await assert.rejects(Sandbox.fork(source.sandboxId, { ...bobOnB, count: 1 }), SandboxNotFoundError);

  // A fork through B of the sandbox A holds (taken there: the request is relayed).
  const forks = await Sandbox.fork(source.sandboxId, { ...B, count: 2, timeoutMs: 600_000 });
  assert.equal(forks.length, 2);
  for (const fork of forks) {
    assert.ok(fork instanceof Sandbox, String(fork));
    assert.equal(await fork.files.read('/home/user/kept.txt'), 'kept by the snapshot');
    assert.equal(await fork.files.read('/home/user/later.txt'), 'after the snapshot');
  }
  await forks[0].files.write('/home/user/kept.txt', 'one');
  assert.equal(await forks[1].files.read('/home/user/kept.txt'), 'kept by the snapshot');
  writeFileSync(statePath, JSON.stringify({ source: source.sandboxId, snapshot: snapshot.snapshotId,
                                            copy: copy.sandboxId, forks: forks.map((f) => f.sandboxId) }));
}

async function snapshotsAfter() {
  const state = JSON.parse(readFileSync(statePath, 'utf8'));
  // A fork A made, taken over by B: its files (the snapshot's, never written through the
  // API) reached the bucket.
  await eventually('B takes a fork over', async () => {
    const fork = await Sandbox.connect(state.forks[1], B);
    return (await fork.commands.run('true')).exitCode === 0;
  });
  const fork = await Sandbox.connect(state.forks[1], B);
  assert.equal(await fork.files.read('/home/user/later.txt'), 'after the snapshot');
  assert.equal(await fork.files.read('/home/user/kept.txt'), 'kept by the snapshot');
  // A is gone: the snapshot it took is still the cluster's.
  const again = await Sandbox.create(state.snapshot, { ...B, timeoutMs: 600_000 });
  assert.equal(await again.files.read('/home/user/kept.txt'), 'kept by the snapshot');
  assert.equal(await again.files.read('/mnt/user-data/uploads/notes.txt'), 'uploaded notes');
  const listed = await Sandbox.listSnapshots(B).nextItems();
  assert.deepEqual(listed.map((s) => s.snapshotId), [state.snapshot]);
  assert.equal(await Sandbox.deleteSnapshot(state.snapshot, B), true);
  assert.equal(await Sandbox.deleteSnapshot(state.snapshot, B), false);
  assert.deepEqual(await Sandbox.listSnapshots(B).nextItems(), []);
  await assert.rejects(Sandbox.create(state.snapshot, { ...B, timeoutMs: 60_000 }), (e) => e.statusCode === 404);
  // A sandbox made from it lives on without it.
  assert.equal(await again.files.read('/home/user/kept.txt'), 'kept by the snapshot');
  assert.equal(await again.kill(), true);
  assert.equal(await Sandbox.kill(state.copy, B), true);
}

// On the gvisor tier (cluster_e2b_test's ClusterE2bGvisor): the snapshot carries the
// sandbox's memory through the bucket, a variable with it.
async function snapshotsMemory() {
  const source = await CodeInterpreter.create({ ...A, timeoutMs: 600_000 });
  assert.equal((await source.runCode('kept = 41\nkept')).text, '41');
  await source.files.write('/home/user/kept.txt', 'kept by the snapshot');
  const snapshot = await source.createSnapshot();
  assert.equal((await source.runCode('kept + 1')).text, '42', 'the source goes on where it was');
  const copy = await CodeInterpreter.create(snapshot.snapshotId, { ...B, timeoutMs: 600_000 });
  assert.equal((await copy.runCode('kept + 1')).text, '42', "the snapshot's variable, through the bucket");
  assert.equal(await copy.files.read('/home/user/kept.txt'), 'kept by the snapshot');
  writeFileSync(statePath, JSON.stringify({ source: source.sandboxId, snapshot: snapshot.snapshotId,
                                            copy: copy.sandboxId }));
}

if (phase === 'before') await before();
else if (phase === 'after') await after();
else if (phase === 'snapshots-before') await snapshotsBefore();
else if (phase === 'snapshots-after') await snapshotsAfter();
else if (phase === 'snapshots-memory') await snapshotsMemory();
else throw new Error(`unknown phase ${phase}`);
console.log(`phase ${phase}: passed`);
