// E2B parity: what E2B's own SDK expects of E2B's API and envd, with the SDK unmodified
// at two releases side by side (npm `e2b` at the lockfile's version, and `e2b-old`, an
// npm alias of the release E2B's own repository tests with, which calls the unversioned
// connect route). Each scenario runs once per release against one real `sandboxd serve`.
// Run by CTest with SANDBOXD_PATH.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import * as current from 'e2b';
import * as old from 'e2b-old';
import { startProgram, stopProgram } from '../harness.mjs';

// E2B's key format (e2b_ and hex): SDK 2.45 refuses any other key before it sends it.
const ALICE = `e2b_${'a1ce'.repeat(10)}`;
// Small, so that a compressed body past it is cheap to make.
const MAX_UPLOAD = 2 * 1024 * 1024;
let dir;
let server;

// The server gets SIGTERM on every way out (a test's failure, an exception, a signal to
// node): a server killed otherwise leaves its sandboxes' mounts behind.
function stopServerNow() {
  if (server && server.child.exitCode === null) server.child.kill('SIGTERM');
}
process.on('exit', stopServerNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    stopServerNow();
    process.exit(1);
  });

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-parity-'));
  const config = join(dir, 'server.yaml');
  writeFileSync(config, [
    `server: { listen: "127.0.0.1:0", dataDir: "${join(dir, 'data')}", maxUploadSize: ${MAX_UPLOAD} }`,
    `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
    '',
  ].join('\n'));
  const started = await startProgram(process.env.SANDBOXD_PATH, ['serve', '--config', config],
                                     /listening on (http:\/\/127\.0\.0\.1:\d+)/);
  server = { child: started.child, url: started.match[1] };
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = ALICE;
});

after(async () => {
  if (server) {
    for (const sandbox of await current.Sandbox.list({ limit: 100 }).nextItems().catch(() => []))
      await current.Sandbox.kill(sandbox.sandboxId).catch(() => {});
    await stopProgram(server.child);
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Waits for `done()` to hold, polling (up to 20 s).
async function eventually(done) {
  for (let i = 0; i < 200; i++) {
    if (await done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return done();
}

for (const [release, sdk] of [['e2b (lockfile)', current], ['e2b 2.45 (E2B\'s own repo)', old]]) {
  const { Sandbox, SandboxNotFoundError, TimeoutError, CommandExitError } = sdk;
  const made = [];
  const create = async (opts = {}) => {
    const sandbox = await Sandbox.create({ timeoutMs: 300_000, ...opts });
    made.push(sandbox.sandboxId);
    return sandbox;
  };

  describe(release, () => {
    after(async () => {
      for (const id of made) await Sandbox.kill(id).catch(() => {});
    });

    test('connect: to a running sandbox, and resuming a paused one, through the route the SDK calls', async () => {
      const sandbox = await create();
      await sandbox.files.write('/home/user/kept.txt', 'kept');
      const again = await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 600_000 });
      assert.equal(again.sandboxId, sandbox.sandboxId);
      assert.equal((await again.commands.run('cat /home/user/kept.txt')).stdout, 'kept');
      const before = (await again.getInfo()).endAt.getTime();
      // A shorter timeout never shortens the end time.
      await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 10_000 });
      assert.equal((await again.getInfo()).endAt.getTime(), before);

      await Sandbox.pause(sandbox.sandboxId);
      assert.equal((await sandbox.getInfo()).state, 'paused');
      const resumed = await Sandbox.connect(sandbox.sandboxId);
      assert.equal((await resumed.getInfo()).state, 'running');
      assert.equal((await resumed.commands.run('cat /home/user/kept.txt')).stdout, 'kept');
      await assert.rejects(Sandbox.connect('nosuchsandbox0000000'), SandboxNotFoundError);
    });

    test('errors under /e2b are in E2B\'s shape, a path with no route included', async () => {
      const sandbox = await create();
      // A call this server has no route for: the SDK reads E2B's {code, message}.
      await assert.rejects(Sandbox.createSnapshot(sandbox.sandboxId), (e) =>
        e instanceof SandboxNotFoundError && !e.message.includes('[object Object]'));
      for (const [method, path] of [['GET', '/e2b/nothing/here'], ['POST', '/e2b/sandboxes/x/fork'],
                                    ['PATCH', '/e2b/sandboxes'], ['GET', '/e2b/sandbox/nothing']]) {
        const res = await fetch(`${server.url}${path}`, { method, headers: { 'X-API-Key': ALICE } });
        const body = await res.json();
        assert.deepEqual(Object.keys(body).sort(), ['code', 'message'], `${method} ${path}`);
        assert.equal(body.code, res.status);
      }
      const unauthenticated = await fetch(`${server.url}/e2b/v2/sandboxes`, { headers: { 'X-API-Key': 'wrong' } });
      assert.equal(unauthenticated.status, 401);
      assert.equal((await unauthenticated.json()).code, 401);
    });

    test('listing: newest first by default, order, template and startedAfter honoured', async () => {
      const group = `list-${Math.random().toString(36).slice(2)}`;
      const first = await create({ metadata: { group } });
      const second = await create({ metadata: { group } });
      const third = await Sandbox.create('code-interpreter-v1', { timeoutMs: 300_000, metadata: { group } });
      made.push(third.sandboxId);
      const ids = async (opts) => {
        const out = [];
        const pages = Sandbox.list({ ...opts, query: { metadata: { group }, ...(opts?.query ?? {}) } });
        while (pages.hasNext) out.push(...(await pages.nextItems()).map((s) => s.sandboxId));
        return out;
      };
      const infos = await Promise.all([first, second, third].map((s) => s.getInfo()));
      const byStart = infos.slice().sort((a, b) => a.startedAt - b.startedAt || a.sandboxId.localeCompare(b.sandboxId));
      const oldestFirst = byStart.map((i) => i.sandboxId);
      assert.deepEqual(await ids(), oldestFirst.slice().reverse());
      assert.deepEqual(await ids({ order: 'desc', limit: 1 }), oldestFirst.slice().reverse());
      assert.deepEqual(await ids({ order: 'asc' }), oldestFirst);
      assert.deepEqual(await ids({ order: 'asc', limit: 2 }), oldestFirst);
      assert.deepEqual(await ids({ query: { template: 'code-interpreter-v1' } }), [third.sandboxId]);
      // (Start times are milliseconds: sandboxes made in one may tie, ordered by id.)
      const from = byStart[1].startedAt;
      assert.deepEqual(await ids({ query: { startedAfter: from } }),
                       byStart.filter((i) => i.startedAt >= from).map((i) => i.sandboxId).reverse());
      assert.deepEqual(await ids({ query: { startedAfter: new Date(Date.now() + 3600_000) } }), []);
    });

    test('watchDir sees an upload as envd\'s write of its name, nothing of temporary files', async () => {
      const sandbox = await create();
      await sandbox.files.makeDir('/home/user/d');
      const events = [];
      const handle = await sandbox.files.watchDir('d', (e) => events.push(e));
      await sandbox.files.write('d/f.txt', 'one');
      assert.ok(await eventually(() => events.some((e) => e.type === 'write' && e.name === 'f.txt')),
                JSON.stringify(events));
      // Again over the file that is there now, and a multi-file upload.
      await sandbox.files.write([{ path: 'd/f.txt', data: 'two' }, { path: 'd/g.txt', data: 'three' }]);
      assert.ok(await eventually(() => events.filter((e) => e.type === 'write' && e.name === 'f.txt').length >= 2 &&
                                       events.some((e) => e.type === 'write' && e.name === 'g.txt')),
                JSON.stringify(events));
      await handle.stop();
      const strange = events.filter((e) => e.name.startsWith('.sandboxd-tmp-') || /^#\d+$/.test(e.name) ||
                                           e.type === 'rename');
      assert.deepEqual(strange, []);
      assert.equal(await sandbox.files.read('/home/user/d/f.txt'), 'two');
    });

    test('filesystem details as envd answers them', async () => {
      const sandbox = await create();
      // Removing what is not there succeeds.
      await sandbox.files.remove('/home/user/never-was.txt');
      await sandbox.files.remove('/home/user/no/such/folder');
      // A symlink's target: the absolute path it resolves to.
      await sandbox.commands.run('mkdir -p /home/user/links/in && echo t > /home/user/target.txt && ' +
                                 'ln -s ../target.txt /home/user/links/rel && ln -s /home/user/target.txt /home/user/links/abs && ' +
                                 'ln -s ./in/../../target.txt /home/user/links/dots');
      for (const name of ['rel', 'abs', 'dots']) {
        const info = await sandbox.files.getInfo(`/home/user/links/${name}`);
        assert.equal(info.type, 'symlink');
        assert.equal(info.symlinkTarget, '/home/user/target.txt', name);
      }
      // A listing in name order, a folder's own entries after it.
      await sandbox.commands.run('mkdir -p /home/user/sorted/b && cd /home/user/sorted && ' +
                                 'for n in c.txt a.txt b.txt B b/z b/a A10 A9; do [ -e $n ] || touch $n; done');
      assert.deepEqual((await sandbox.files.list('/home/user/sorted')).map((e) => e.name),
                       ['A10', 'A9', 'B', 'a.txt', 'b', 'b.txt', 'c.txt']);
      assert.deepEqual((await sandbox.files.list('/home/user/sorted', { depth: 2 })).map((e) => e.path),
                       ['A10', 'A9', 'B', 'a.txt', 'b', 'b/a', 'b/z', 'b.txt', 'c.txt'].map((n) => `/home/user/sorted/${n}`));
    });

    test('metrics: CPU sampled from the cgroup, memory against the limit, the range honoured', async () => {
      const sandbox = await create();
      await sandbox.commands.run('i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done');
      const [metric] = await sandbox.getMetrics();
      assert.ok(metric, 'a running sandbox has a sample');
      assert.ok(metric.cpuCount >= 1, JSON.stringify(metric));
      assert.equal(typeof metric.cpuUsedPct, 'number', JSON.stringify(metric));
      assert.ok(metric.cpuUsedPct > 0 && metric.cpuUsedPct <= 100, JSON.stringify(metric));
      assert.ok(metric.memTotal > 0 && metric.memUsed > 0 && metric.memUsed <= metric.memTotal, JSON.stringify(metric));
      assert.ok(metric.diskTotal > 0, JSON.stringify(metric));
      // A range before the sandbox existed, and one after now, have nothing.
      const started = (await sandbox.getInfo()).startedAt.getTime();
      assert.deepEqual(await sandbox.getMetrics({ start: new Date(started - 7200_000), end: new Date(started - 3600_000) }), []);
      assert.deepEqual(await sandbox.getMetrics({ start: new Date(Date.now() + 3600_000), end: new Date(Date.now() + 7200_000) }), []);
      assert.equal((await sandbox.getMetrics({ start: new Date(started), end: new Date() })).length, 1);
    });

    test('a command\'s wait() after its sandbox is killed raises the SDK\'s TimeoutError', async () => {
      const sandbox = await create();
      const handle = await sandbox.commands.run('sleep 120', { background: true });
      await Sandbox.kill(sandbox.sandboxId);
      await assert.rejects(handle.wait(), (e) => e instanceof TimeoutError && !(e instanceof CommandExitError) &&
                                                 /killed or reached its end of life/.test(e.message));
    });

    test('gzip uploads: inflated into the file, bounded by the upload limit once inflated', async () => {
      const sandbox = await create();
      const text = 'compressible line\n'.repeat(10_000);
      await sandbox.files.write('/home/user/z.txt', text, { gzip: true });
      assert.equal(await sandbox.files.read('/home/user/z.txt'), text);
      // A body far smaller than the limit that inflates past it: refused in E2B's shape.
      const bomb = gzipSync(Buffer.alloc(MAX_UPLOAD * 8));
      assert.ok(bomb.length < MAX_UPLOAD / 100);
      const res = await fetch(`${server.url}/e2b/sandbox/files?path=/home/user/bomb.bin`, {
        method: 'POST',
        headers: { 'X-Access-Token': ALICE, 'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49983',
                   'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
        body: bomb,
      });
      assert.equal(res.status, 413);
      const body = await res.json();
      assert.equal(body.code, 413);
      assert.match(body.message, /inflates to more than/);
      assert.equal(await sandbox.files.exists('/home/user/bomb.bin'), false);
      // Not gzip at all, and a cut-off stream: 400.
      for (const bad of [Buffer.from('plain text'), bomb.subarray(0, 64)]) {
        const refused = await fetch(`${server.url}/e2b/sandbox/files?path=/home/user/bad.bin`, {
          method: 'POST',
          headers: { 'X-Access-Token': ALICE, 'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49983',
                     'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' },
          body: bad,
        });
        assert.equal(refused.status, 400);
        assert.equal((await refused.json()).code, 400);
      }
      assert.equal(await sandbox.files.exists('/home/user/bad.bin'), false);
    });
  });
}
