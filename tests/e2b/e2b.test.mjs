// E2B compatibility: E2B's own SDK (npm `e2b`, unmodified) against a real `sandboxd
// serve`, configured only by the three environment variables docs/e2b.md gives
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Run by CTest with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, NotFoundError, SandboxNotFoundError, CommandExitError, FileNotFoundError } from 'e2b';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = 'e2b-alice-token';
const BOB = 'e2b-bob-token';
let dir;
let server;
// The same server on the gvisor tier (runtime.isolation: gvisor), for the tests that run
// on both tiers; only where runsc is installed.
const RUNSC = ['/usr/sbin/runsc', '/usr/bin/runsc', '/usr/local/sbin/runsc', '/usr/local/bin/runsc'].find(existsSync);
let gvisorServer;
const made = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-'));
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
  ]);
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = ALICE;
  if (RUNSC) {
    gvisorServer = await startServer(dir, 'gvisor', [
      `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
      'runtime: { isolation: gvisor, gvisorPlatform: ptrace }',
    ]);
  }
});

after(async () => {
  for (const sandbox of made) await sandbox.kill().catch(() => {});
  if (server) await stopProgram(server.child);
  if (gvisorServer) await stopProgram(gvisorServer.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function create(opts = {}) {
  const sandbox = await Sandbox.create({ timeoutMs: 300_000, ...opts });
  made.push(sandbox);
  return sandbox;
}

// A test that holds on both isolation tiers runs on each: `body` gets the options that
// create a sandbox on that tier's server.
const TIERS = ['native', 'gvisor'];
function onEachTier(name, body) {
  for (const tier of TIERS) {
    const skip = tier === 'gvisor' && !RUNSC ? 'runsc is not installed (Debian: apt-get install runsc)' : false;
    test(`${name} (${tier})`, { skip }, () =>
      body(tier === 'native' ? {} : { apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox` }));
  }
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

test('a sandbox runs once it is made, before its first command', async () => {
  const sandbox = await create();
  // Seen through sandboxd's own API: its container's sandbox starts without a command
  // (E2B's create answers with a running sandbox; the start overlaps the client's work).
  const url = `${server.url}/api/gpt/v1/containers/${sandbox.sandboxId}`;
  const headers = { Authorization: `Bearer ${ALICE}` };
  let state;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    state = (await (await fetch(url, { headers })).json()).state;
    if (state === 'running') break;
  }
  assert.equal(state, 'running');
  assert.equal((await sandbox.commands.run('echo up')).stdout, 'up\n');
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

test('a sandbox made to pause at its timeout is paused then, its files kept', async () => {
  const sandbox = await create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } });
  await sandbox.commands.run('echo kept > /home/user/kept.txt');
  const deadline = Date.now() + 30_000;
  let state = 'running';
  while (state !== 'paused' && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    state = (await sandbox.getInfo()).state;
  }
  assert.equal(state, 'paused');
  await assert.rejects(sandbox.commands.run('true'), SandboxNotFoundError);  // (502: not running)
  const resumed = await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 300_000 });
  assert.equal((await resumed.commands.run('cat /home/user/kept.txt')).stdout, 'kept\n');
});

test('kill: a killed sandbox is gone', async () => {
  const sandbox = await create();
  assert.equal(await sandbox.isRunning(), true);
  await sandbox.commands.run('true');
  await sandbox.kill();
  // Its record, held in memory for the calls to it, went with it.
  await assert.rejects(sandbox.commands.run('true'), SandboxNotFoundError);
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

test('commands: run, a failing command, streamed output, environment and cwd', async () => {
  const sandbox = await create({ envs: { SANDBOX_LEVEL: 'from-create' } });
  const result = await sandbox.commands.run('echo hello; echo oops >&2; pwd; echo $SANDBOX_LEVEL $CALL_LEVEL',
                                            { envs: { CALL_LEVEL: 'from-call' } });
  assert.equal(result.exitCode, 0);
  assert.equal(result.stdout, 'hello\n/home/user\nfrom-create from-call\n');
  assert.equal(result.stderr, 'oops\n');

  const failing = await sandbox.commands.run('echo out; echo err >&2; exit 3').then(
    () => assert.fail('a failing command resolved'), (e) => e);
  assert.ok(failing instanceof CommandExitError, String(failing));
  assert.equal(failing.exitCode, 3);
  assert.equal(failing.stdout, 'out\n');
  assert.equal(failing.stderr, 'err\n');

  const inTmp = await sandbox.commands.run('pwd', { cwd: '/tmp' });
  assert.equal(inTmp.stdout, '/tmp\n');

  // Output arrives while the command still runs: the command waits for a file that the
  // test writes only after it has seen the first line.
  const seen = [];
  let marker;
  const handle = await sandbox.commands.run(
    'echo first; while [ ! -e /home/user/go ]; do sleep 0.05; done; echo second',
    { background: true, onStdout: (data) => {
      seen.push(data);
      if (data.includes('first') && !marker) marker = sandbox.files.write('/home/user/go', 'now');
    } });
  const done = await handle.wait();
  assert.equal(done.stdout, 'first\nsecond\n');
  assert.ok(seen.length >= 2, JSON.stringify(seen));
  assert.ok(seen[0].includes('first') && !seen[0].includes('second'), JSON.stringify(seen));

  // All of a command's output: more than its pipe holds (the command waits for it to be
  // read), and what a process it started writes after it has exited (the end comes
  // once that one closes the pipe too).
  const big = await sandbox.commands.run('head -c 300000 /dev/zero | tr "\\0" a; echo end >&2');
  assert.equal(big.stdout, 'a'.repeat(300000));
  assert.equal(big.stderr, 'end\n');
  const late = await sandbox.commands.run('(sleep 0.3; echo late) & echo early');
  assert.equal(late.stdout, 'early\nlate\n');
});

onEachTier('a background process is listed, gets stdin, and is killed', async (tier) => {
  const sandbox = await create(tier);
  const handle = await sandbox.commands.run('read line; echo "got $line"; sleep 600', { background: true, stdin: true });
  const listed = await sandbox.commands.list();
  const entry = listed.find((p) => p.pid === handle.pid);
  assert.ok(entry, JSON.stringify(listed));
  assert.equal(entry.cmd, '/bin/bash');
  assert.deepEqual(entry.args.slice(0, 2), ['-l', '-c']);
  await sandbox.commands.sendStdin(handle.pid, 'ping\n');
  // Reconnecting to it sees its output from then on.
  const output = [];
  const again = await sandbox.commands.connect(handle.pid, { onStdout: (d) => output.push(d) });
  const deadline = Date.now() + 20_000;
  while (!handle.stdout.includes('got ping') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(handle.stdout, 'got ping\n');
  assert.equal(await sandbox.commands.kill(handle.pid), true);
  const ended = await handle.wait().then(() => assert.fail('a killed command resolved'), (e) => e);
  assert.ok(ended instanceof CommandExitError, String(ended));
  assert.equal(ended.exitCode, -1);
  await again.wait().catch(() => {});
  assert.ok(!(await sandbox.commands.list()).some((p) => p.pid === handle.pid));
  assert.equal(await sandbox.commands.kill(handle.pid), false);
});

test('files: written, read, listed, checked and removed, and seen by commands', async () => {
  const sandbox = await create();
  const info = await sandbox.files.write('/home/user/notes/a.txt', 'alpha\n');
  assert.equal(info.path, '/home/user/notes/a.txt');
  assert.equal(info.name, 'a.txt');
  assert.equal((await sandbox.commands.run('cat /home/user/notes/a.txt')).stdout, 'alpha\n');
  // Relative paths are taken from /home/user.
  await sandbox.files.write([{ path: 'notes/b.txt', data: 'beta' }, { path: '/home/user/c.bin', data: new Uint8Array([0, 1, 2, 255]) }]);
  assert.equal(await sandbox.files.read('/home/user/notes/b.txt'), 'beta');
  assert.deepEqual([...await sandbox.files.read('/home/user/c.bin', { format: 'bytes' })], [0, 1, 2, 255]);

  await sandbox.commands.run('mkdir -p /home/user/made && echo from-code > /home/user/made/x.txt');
  assert.equal(await sandbox.files.read('/home/user/made/x.txt'), 'from-code\n');

  const listed = await sandbox.files.list('/home/user/notes');
  assert.deepEqual(listed.map((e) => [e.name, e.type, e.path]).sort(),
                   [['a.txt', 'file', '/home/user/notes/a.txt'], ['b.txt', 'file', '/home/user/notes/b.txt']]);
  assert.equal(listed.find((e) => e.name === 'a.txt').size, 6);
  const deep = await sandbox.files.list('/home/user', { depth: 2 });
  assert.ok(deep.some((e) => e.path === '/home/user/made/x.txt'), JSON.stringify(deep.map((e) => e.path)));

  assert.equal(await sandbox.files.exists('/home/user/notes/a.txt'), true);
  assert.equal(await sandbox.files.exists('/home/user/notes/none.txt'), false);
  const stat = await sandbox.files.getInfo('/home/user/notes');
  assert.equal(stat.type, 'dir');
  assert.equal(await sandbox.files.makeDir('/home/user/new/dir'), true);
  assert.equal(await sandbox.files.makeDir('/home/user/new/dir'), false);
  const moved = await sandbox.files.rename('/home/user/notes/b.txt', '/home/user/new/b.txt');
  assert.equal(moved.path, '/home/user/new/b.txt');

  await sandbox.files.remove('/home/user/notes/a.txt');
  assert.equal(await sandbox.files.exists('/home/user/notes/a.txt'), false);
  await sandbox.files.remove('/home/user/new');
  assert.equal((await sandbox.commands.run('ls /home/user/notes /home/user/new 2>&1; true')).stdout.includes('b.txt'), false);
  await assert.rejects(sandbox.files.read('/home/user/notes/a.txt'), FileNotFoundError);
  // Outside the sandbox's persistent folders, and escapes, are refused.
  await assert.rejects(sandbox.files.read('/etc/passwd'), (e) => e.name === 'InvalidArgumentError');
  await assert.rejects(sandbox.files.write('/home/user/../../../etc/x', 'no'), (e) => e.name === 'InvalidArgumentError');
  // A symlink code made to outside its folders is never followed.
  await sandbox.commands.run('ln -s /etc/passwd /home/user/link');
  await assert.rejects(sandbox.files.read('/home/user/link'), (e) => e.name === 'InvalidArgumentError' || e instanceof NotFoundError);
  const link = await sandbox.files.getInfo('/home/user/link');
  assert.equal(link.type, 'symlink');
});

// Waits for `done()` to hold, polling (up to 20 s).
async function eventually(done) {
  for (let i = 0; i < 200; i++) {
    if (done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return done();
}

test('watchDir reports what commands do in the folder, below it when recursive', async () => {
  const sandbox = await create();
  await sandbox.files.makeDir('/home/user/watched/sub');
  const events = [];
  const seen = (type, name) => events.some((e) => e.type === type && e.name === name);
  const handle = await sandbox.files.watchDir('/home/user/watched', (e) => events.push(e), { recursive: true });
  await sandbox.commands.run(
    'cd /home/user/watched && echo one > a.txt && chmod 600 a.txt && mv a.txt c.txt && echo two > sub/b.txt && rm c.txt');
  const wanted = [['create', 'a.txt'], ['write', 'a.txt'], ['chmod', 'a.txt'], ['rename', 'a.txt'],
    ['create', 'c.txt'], ['create', 'sub/b.txt'], ['write', 'sub/b.txt'], ['remove', 'c.txt']];
  assert.ok(await eventually(() => wanted.every(([type, name]) => seen(type, name))), JSON.stringify(events));
  // A folder made after the start is watched too.
  await sandbox.commands.run('mkdir /home/user/watched/later');
  assert.ok(await eventually(() => seen('create', 'later')), JSON.stringify(events));
  await sandbox.commands.run('touch /home/user/watched/later/deep.txt');
  assert.ok(await eventually(() => seen('create', 'later/deep.txt')), JSON.stringify(events));
  // Through the Files API too (the same folders): envd's write of the file's name.
  await sandbox.files.write('/home/user/watched/api.txt', 'from the api');
  assert.ok(await eventually(() => seen('write', 'api.txt')), JSON.stringify(events));
  await handle.stop();

  // Not recursive: only the folder's own entries.
  const flat = [];
  const flatHandle = await sandbox.files.watchDir('/home/user/watched', (e) => flat.push(e));
  await sandbox.commands.run('echo x > /home/user/watched/sub/ignored.txt; echo y > /home/user/watched/top.txt');
  assert.ok(await eventually(() => flat.some((e) => e.name === 'top.txt')), JSON.stringify(flat));
  assert.ok(!flat.some((e) => e.name.includes('ignored')), JSON.stringify(flat));
  await flatHandle.stop();

  // Errors: a missing folder, a file, a folder outside the sandbox's persistent ones.
  await assert.rejects(sandbox.files.watchDir('/home/user/none', () => {}), /not found/i);
  await assert.rejects(sandbox.files.watchDir('/home/user/watched/top.txt', () => {}), /not found|not a directory/i);
  await assert.rejects(sandbox.files.watchDir('/etc', () => {}), /outside the sandbox's persistent folders/);
  // A symlink that code made out of the mount is no way out.
  await sandbox.commands.run('ln -s /etc /home/user/etc-link');
  await assert.rejects(sandbox.files.watchDir('/home/user/etc-link', () => {}), /not found/i);
});

test('an owner has a share of folder watches; stopping one gives it back', async () => {
  const sandbox = await create();
  const handles = [];
  for (let i = 0; i < 8; i++) handles.push(await sandbox.files.watchDir('/home/user', () => {}));
  await assert.rejects(sandbox.files.watchDir('/home/user', () => {}), /At most 8 folder watches at once per owner/);
  // Another owner is not held back by alice's.
  const bobs = await Sandbox.create({ apiKey: BOB, timeoutMs: 300_000 });
  const bobHandle = await bobs.files.watchDir('/home/user', () => {});
  await bobHandle.stop();
  await Sandbox.kill(bobs.sandboxId, { apiKey: BOB });
  // A stopped watch's share comes back (once the server sees the stream closed: at
  // once, not at the next keep-alive).
  await handles.pop().stop();
  let again;
  for (let i = 0; i < 50 && !again; i++) {
    again = await sandbox.files.watchDir('/home/user', () => {}).catch(() => undefined);
    if (!again) await new Promise((resolve) => setTimeout(resolve, 200));
  }
  assert.ok(again, 'a watch opens again after one was stopped');
  handles.push(again);
  for (const handle of handles) await handle.stop();
});

test('pause keeps the files; connect resumes over them', async () => {
  const sandbox = await create();
  await sandbox.commands.run('echo kept > /home/user/kept.txt');
  assert.equal(await sandbox.pause(), true);
  assert.equal((await sandbox.getInfo()).state, 'paused');
  await assert.rejects(sandbox.commands.run('true'), SandboxNotFoundError);  // (502: not running)
  assert.equal(await sandbox.pause(), false);
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  assert.ok(paused.some((s) => s.sandboxId === sandbox.sandboxId));
  const resumed = await Sandbox.connect(sandbox.sandboxId);
  assert.equal((await resumed.getInfo()).state, 'running');
  assert.equal((await resumed.commands.run('cat /home/user/kept.txt')).stdout, 'kept\n');
});

// Hostile input straight at the wire: what no SDK sends, answered with a clear error in
// the protocol's shape while the server keeps serving.
test('bad Connect requests and foreign sandboxes get clear errors', async () => {
  const sandbox = await create();
  const base = `${server.url}/e2b/sandbox`;
  const headers = (extra = {}) => ({
    'X-Access-Token': ALICE, 'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49983',
    'Connect-Protocol-Version': '1', ...extra });
  const frame = (flags, length, payload) => {
    const head = Buffer.alloc(5);
    head[0] = flags;
    head.writeUInt32BE(length, 1);
    return Buffer.concat([head, Buffer.from(payload)]);
  };
  const start = (body, contentType = 'application/connect+json', extra) =>
    fetch(`${base}/process.Process/Start`, { method: 'POST', headers: headers({ 'Content-Type': contentType, ...extra }), body });
  // An end-of-stream message only, carrying the error.
  const streamError = async (res) => {
    assert.equal(res.status, 200);
    const bytes = Buffer.from(await res.arrayBuffer());
    assert.equal(bytes[0], 2, 'end-of-stream flag');
    assert.equal(bytes.readUInt32BE(1), bytes.length - 5);
    return JSON.parse(bytes.subarray(5).toString()).error;
  };
  const ok = JSON.stringify({ process: { cmd: '/bin/true' } });
  assert.equal((await streamError(await start(frame(0, ok.length + 7, ok)))).code, 'invalid_argument');  // length lies
  assert.equal((await streamError(await start(frame(0, 3, ok)))).code, 'invalid_argument');             // trailing bytes
  assert.equal((await streamError(await start(frame(1, ok.length, ok)))).code, 'invalid_argument');     // compressed
  assert.equal((await streamError(await start(frame(0, 9, '{"process"')))).code, 'invalid_argument');    // not JSON
  assert.equal((await streamError(await start(Buffer.from([0, 0])))).code, 'invalid_argument');          // too short
  assert.equal((await streamError(await start(frame(0, 2, '{}')))).code, 'invalid_argument');            // no process
  assert.equal((await streamError(await start(frame(0, ok.length, ok), 'application/connect+proto'))).code,
               'invalid_argument');
  // A frame that claims 4 GiB: refused from its header, nothing allocated for it.
  assert.equal((await streamError(await start(frame(0, 0xffffffff, ok)))).code, 'invalid_argument');
  // A unary call with the wrong codec.
  const list = await fetch(`${base}/process.Process/List`, {
    method: 'POST', headers: headers({ 'Content-Type': 'application/proto' }), body: '' });
  assert.equal(list.status, 415);
  assert.equal((await list.json()).code, 'invalid_argument');
  // Bob's token on alice's sandbox, or a sandbox that does not exist: not running (502).
  for (const [token, id] of [[BOB, sandbox.sandboxId], [ALICE, 'nosuchsandbox0000000']]) {
    const res = await fetch(`${base}/files?path=/home/user/x`, {
      headers: { 'X-Access-Token': token, 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' } });
    assert.equal(res.status, 502);
    assert.equal((await res.json()).code, 502);
  }
  // The wrong port: nothing answers there.
  const wrongPort = await fetch(`${base}/health`, { headers: { ...headers(), 'E2b-Sandbox-Port': '8080' } });
  assert.equal(wrongPort.status, 404);
  // Path escapes in /files: refused, never written outside.
  for (const path of ['/home/user/../../../etc/passwd', '../../etc/passwd', '/proc/self/environ', '/home/agent/.bashrc']) {
    const res = await fetch(`${base}/files?path=${encodeURIComponent(path)}`, {
      method: 'POST', headers: headers({ 'Content-Type': 'application/octet-stream' }), body: 'x' });
    assert.equal(res.status, 400, path);
    assert.match((await res.json()).message, /outside/);
  }
  const uploads = await fetch(`${base}/files?path=/mnt/user-data/uploads/x`, {
    method: 'POST', headers: headers({ 'Content-Type': 'application/octet-stream' }), body: 'x' });
  assert.equal(uploads.status, 403);
  // A multipart part whose filename escapes.
  const form = new FormData();
  form.append('file', new Blob(['x']), '/home/user/../../../tmp/evil');
  const escaped = await fetch(`${base}/files`, { method: 'POST', headers: headers(), body: form });
  assert.equal(escaped.status, 400);
  // The server still serves the sandbox.
  assert.equal((await sandbox.commands.run('echo still here')).stdout, 'still here\n');
});

test('metrics of a running sandbox', async () => {
  const sandbox = await create();
  await sandbox.commands.run('head -c 100000 /dev/zero > /home/user/zeros');
  const metrics = await sandbox.getMetrics();
  assert.equal(metrics.length, 1);
  assert.ok(metrics[0].memUsed > 0, JSON.stringify(metrics));
  assert.ok(metrics[0].diskUsed >= 100000, JSON.stringify(metrics));
});

test('records an older version kept as JSON files are moved into the database at start', async () => {
  // As an older sandboxd left them: one JSON file a sandbox under <dataDir>/e2b/sandboxes/.
  const id = 'legacyrecord0000000a';
  const folder = join(dir, 'legacy', 'e2b', 'sandboxes');
  mkdirSync(folder, { recursive: true });
  const endAt = Date.now() + 600_000;
  writeFileSync(join(folder, `${id}.json`), JSON.stringify({
    id, owner: 'alice', template: 'base', metadata: { origin: 'json' }, env_vars: {},
    started_at_ms: Date.now(), end_at_ms: endAt, auto_pause: false, paused: true }));
  const legacy = await startServer(dir, 'legacy', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
  ]);
  try {
    const opts = { apiUrl: `${legacy.url}/e2b`, apiKey: ALICE };
    const info = await Sandbox.getInfo(id, opts);
    assert.deepEqual(info.metadata, { origin: 'json' });
    assert.equal(info.state, 'paused');
    assert.equal(info.endAt.getTime(), endAt);
    const listed = await Sandbox.list({ ...opts, query: { metadata: { origin: 'json' } } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [id]);
    await assert.rejects(Sandbox.getInfo(id, { ...opts, apiKey: BOB }), SandboxNotFoundError);
    assert.equal(existsSync(folder), false, 'the JSON records are gone once moved');
    assert.equal(await Sandbox.kill(id, opts), true);
    await assert.rejects(Sandbox.getInfo(id, opts), SandboxNotFoundError);
  } finally {
    await stopProgram(legacy.child);
  }
});
