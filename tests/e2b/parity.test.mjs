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
import http from 'node:http';
import * as current from 'e2b';
import * as old from 'e2b-old';
import { startProgram, stopProgram } from '../harness.mjs';

// E2B's key format (e2b_ and hex): SDK 2.45 refuses any other key before it sends it.
const ALICE = `e2b_${'a1ce'.repeat(10)}`;
// Small, so that a compressed body past it is cheap to make.
const MAX_UPLOAD = 2 * 1024 * 1024;
// The server's e2b.sandboxDomain: PORT-SANDBOXID.<it> names a sandbox's port.
const SANDBOX_DOMAIN = 'sbx.test';
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
    `e2b: { sandboxDomain: "${SANDBOX_DOMAIN}" }`,
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

// An HTTP request to `url` as a browser would send it (its Host the URL's), the name
// resolved to the server's loopback address (no wildcard DNS in a test).
function request(url, { method = 'GET', headers = {}, body } = {}) {
  const lookup = (host, opts, done) =>
    opts && opts.all ? done(null, [{ address: '127.0.0.1', family: 4 }]) : done(null, '127.0.0.1', 4);
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, lookup }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

// Waits for `done()` to hold, polling (up to 20 s).
async function eventually(done) {
  for (let i = 0; i < 200; i++) {
    if (await done()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return done();
}

// quotas.storedBytesPerOwner holds for E2B's uploads as for every other: on a server of
// its own with a small quota (its SIGTERM on every way out, as the main server's).
test('uploads count against the owner\'s stored bytes', async () => {
  const quotaDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-quota-'));
  const config = join(quotaDir, 'server.yaml');
  const QUOTA = 1024 * 1024;
  writeFileSync(config, [
    `server: { listen: "127.0.0.1:0", dataDir: "${join(quotaDir, 'data')}" }`,
    `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
    `quotas: { storedBytesPerOwner: ${QUOTA} }`,
    '',
  ].join('\n'));
  const started = await startProgram(process.env.SANDBOXD_PATH, ['serve', '--config', config],
                                     /listening on (http:\/\/127\.0\.0\.1:\d+)/);
  const stop = () => { if (started.child.exitCode === null) started.child.kill('SIGTERM'); };
  process.on('exit', stop);
  try {
    const url = started.match[1];
    const opts = { apiUrl: `${url}/e2b`, sandboxUrl: `${url}/e2b/sandbox`, apiKey: ALICE };
    const sandbox = await current.Sandbox.create({ timeoutMs: 120_000, ...opts });
    const chunk = 'x'.repeat(600 * 1024);
    // Under outputs/ a file is recorded as it lands: it counts from then on.
    await sandbox.files.write('/mnt/user-data/outputs/one.bin', chunk);
    await assert.rejects(sandbox.files.write('/mnt/user-data/outputs/two.bin', chunk), /Storage quota reached/);
    assert.equal(await sandbox.files.exists('/mnt/user-data/outputs/two.bin'), false);
    // A workspace upload counts while it arrives: past the quota with what is stored, refused.
    await assert.rejects(sandbox.files.write('/home/user/three.bin', chunk, { useOctetStream: true }), /Storage quota reached/);
    await assert.rejects(sandbox.files.write([{ path: '/home/user/four.bin', data: chunk }]), /Storage quota reached/);
    // The refusal in each surface's own shape, from the one file service: E2B's
    // {code, message} on envd's /files, the Files API's {type: error, error} on the same
    // container through sandboxd's own API; neither keeps a byte.
    const envd = await fetch(`${url}/e2b/sandbox/files?path=/mnt/user-data/outputs/raw.bin`, {
      method: 'POST',
      headers: { 'X-Access-Token': ALICE, 'E2b-Sandbox-Id': sandbox.sandboxId, 'E2b-Sandbox-Port': '49983',
                 'Content-Type': 'application/octet-stream' },
      body: chunk,
    });
    assert.equal(envd.status, 403);
    const envdBody = await envd.json();
    assert.equal(envdBody.code, 403);
    assert.match(envdBody.message, /quotas\.storedBytesPerOwner/);
    assert.equal(envdBody.type, undefined);
    const filesApi = await fetch(`${url}/api/gpt/v1/files/outputs/api.bin?scope_id=${sandbox.sandboxId}`, {
      method: 'PUT', headers: { Authorization: `Bearer ${ALICE}` }, body: chunk,
    });
    assert.equal(filesApi.status, 403);
    const filesBody = await filesApi.json();
    assert.equal(filesBody.type, 'error');
    assert.equal(filesBody.error.type, 'permission_error');
    assert.match(filesBody.error.message, /quotas\.storedBytesPerOwner/);
    assert.equal(await sandbox.files.exists('/mnt/user-data/outputs/raw.bin'), false);
    assert.equal(await sandbox.files.exists('/mnt/user-data/outputs/api.bin'), false);
    // Replacing the stored file with one of its size fits (the old version is not counted twice).
    await sandbox.files.write('/mnt/user-data/outputs/one.bin', chunk.replaceAll('x', 'y'));
    await sandbox.files.write('/home/user/small.txt', 'small');
    await current.Sandbox.kill(sandbox.sandboxId, opts);
  } finally {
    await stopProgram(started.child);
    process.off('exit', stop);
    rmSync(quotaDir, { recursive: true, force: true });
  }
});

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
      // The SDK reads E2B's {code, message} (a snapshot of a sandbox that does not exist).
      await assert.rejects(Sandbox.createSnapshot('nosuchsandbox0000000'), (e) =>
        e instanceof SandboxNotFoundError && !e.message.includes('[object Object]'));
      // And paths with no route (volumes are not served) answer in the same shape.
      for (const [method, path] of [['GET', '/e2b/nothing/here'], ['POST', '/e2b/volumes'],
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

    test('signed file URLs: downloadUrl and uploadUrl on the sandbox domain, expiring, refused when forged', async () => {
      const sandbox = await create({ secure: true });
      await sandbox.files.write('hello.txt', 'hello world');
      // With E2B_SANDBOX_URL the SDK builds the URL on that URL's origin, its path and
      // the sandbox's id (a header of the SDK's calls) lost: only a name can carry it.
      assert.equal(new URL(await sandbox.downloadUrl('hello.txt')).pathname, '/files');
      // On the sandbox domain (the SDK's own addressing, PORT-SANDBOXID.<domain>) it works.
      const port = new URL(server.url).port;
      const direct = await Sandbox.connect(sandbox.sandboxId,
                                           { sandboxUrl: `http://49983-${sandbox.sandboxId}.${SANDBOX_DOMAIN}:${port}` });
      const url = await direct.downloadUrl('hello.txt', { useSignatureExpiration: 10_000 });
      assert.equal(new URL(url).host, `49983-${sandbox.sandboxId}.${SANDBOX_DOMAIN}:${port}`);
      assert.deepEqual(await request(url), { status: 200, body: 'hello world' });
      assert.deepEqual(await request(await direct.downloadUrl('hello.txt')), { status: 200, body: 'hello world' });
      // Expired, forged (another path under this signature), or for another operation: E2B's 401.
      const expired = await request(await direct.downloadUrl('hello.txt', { useSignatureExpiration: -10_000 }));
      assert.equal(expired.status, 401);
      assert.deepEqual(JSON.parse(expired.body), { code: 401, message: 'signature is already expired' });
      const forged = new URL(url);
      forged.searchParams.set('path', '/home/user/other.txt');
      assert.deepEqual(JSON.parse((await request(forged.toString())).body), { code: 401, message: 'invalid signature' });
      const later = new URL(url);
      later.searchParams.set('signature_expiration', String(Number(later.searchParams.get('signature_expiration')) + 3600));
      assert.equal((await request(later.toString())).status, 401);
      const unsigned = new URL(url);
      unsigned.searchParams.delete('signature');
      assert.equal((await request(unsigned.toString())).status, 401);
      // An upload URL takes a multipart body, as a browser's form sends it.
      const form = new Response((() => { const f = new FormData(); f.append('file', 'file content'); return f; })());
      const upload = { method: 'POST', headers: { 'Content-Type': form.headers.get('content-type') },
                       body: Buffer.from(await form.arrayBuffer()) };
      const uploaded = await request(await direct.uploadUrl('up.txt', { useSignatureExpiration: 10_000 }), upload);
      assert.equal(uploaded.status, 200, uploaded.body);
      assert.deepEqual(JSON.parse(uploaded.body), [{ name: 'up.txt', path: '/home/user/up.txt', type: 'file' }]);
      assert.equal(await sandbox.files.read('up.txt'), 'file content');
      // A download URL does not upload.
      const misused = await request(url, upload);
      assert.deepEqual(JSON.parse(misused.body), { code: 401, message: 'invalid signature' });
      // A call by name with the token, as the SDK's calls go there (any path of envd's).
      const listed = await request(`http://49983-${sandbox.sandboxId}.${SANDBOX_DOMAIN}:${port}/filesystem.Filesystem/Stat`,
                                   { method: 'POST', headers: { 'X-Access-Token': ALICE, 'Content-Type': 'application/json' },
                                     body: JSON.stringify({ path: '/home/user/up.txt' }) });
      assert.equal(listed.status, 200, listed.body);
      assert.equal(JSON.parse(listed.body).entry.size, '12');
    });

    test('file metadata: kept with the file as envd keeps it, replaced by each upload', async () => {
      const sandbox = await create();
      const written = await sandbox.files.write('/home/user/m.txt', 'x', { metadata: { Owner: 'alice', stage: 'raw' } });
      // Keys are lower-cased (they travel as header names), as envd answers them.
      const expected = { owner: 'alice', stage: 'raw' };
      assert.deepEqual(written.metadata, expected);
      assert.deepEqual((await sandbox.files.getInfo('/home/user/m.txt')).metadata, expected);
      assert.deepEqual((await sandbox.files.list('/home/user')).find((e) => e.name === 'm.txt').metadata, expected);
      // Code in the sandbox sees extended attributes user.e2b.<key>.
      const seen = await sandbox.commands.run(
        'python3 -c "import os; p=\'/home/user/m.txt\'; print(sorted((n, os.getxattr(p, n).decode()) for n in os.listxattr(p)))"');
      assert.equal(seen.stdout.trim(), "[('user.e2b.owner', 'alice'), ('user.e2b.stage', 'raw')]");
      // Each upload sets them whole: another replaces them, one without any clears them.
      await sandbox.files.write('/home/user/m.txt', 'y', { metadata: { stage: 'clean' } });
      assert.deepEqual((await sandbox.files.getInfo('/home/user/m.txt')).metadata, { stage: 'clean' });
      await sandbox.files.write('/home/user/m.txt', 'z');
      assert.equal((await sandbox.files.getInfo('/home/user/m.txt')).metadata, undefined);
      // Every file of a multi-file upload gets them; a file with none has none.
      await sandbox.files.write([{ path: '/home/user/b1.txt', data: '1' }, { path: '/home/user/b2.txt', data: '2' }],
                                { metadata: { batch: '7' } });
      for (const name of ['b1.txt', 'b2.txt'])
        assert.deepEqual((await sandbox.files.getInfo(`/home/user/${name}`)).metadata, { batch: '7' });
      await sandbox.commands.run('echo plain > /home/user/plain.txt');
      assert.equal((await sandbox.files.getInfo('/home/user/plain.txt')).metadata, undefined);
      // Bounded as envd bounds them: 4096 bytes a file, a key at most 246 bytes; nothing written.
      await assert.rejects(sandbox.files.write('/home/user/big.txt', 'x', { metadata: { big: 'v'.repeat(4100) } }),
                           /metadata is at most 4096 bytes/);
      await assert.rejects(sandbox.files.write('/home/user/big.txt', 'x', { metadata: { ['k'.repeat(247)]: 'v' } }),
                           /longer than 246 bytes/);
      assert.equal(await sandbox.files.exists('/home/user/big.txt'), false);
    });

    test('watchDir with includeEntry: each event with its entry while it is there', async () => {
      const sandbox = await create();
      await sandbox.files.makeDir('/home/user/w');
      const events = [];
      const handle = await sandbox.files.watchDir('/home/user/w', (e) => events.push(e),
                                                  { includeEntry: true, allowNetworkMounts: true });
      const plain = [];
      const plainHandle = await sandbox.files.watchDir('/home/user/w', (e) => plain.push(e));
      await sandbox.files.write('/home/user/w/e.txt', 'hello', { metadata: { k: 'v' } });
      const written = () => events.find((e) => e.type === 'write' && e.name === 'e.txt');
      assert.ok(await eventually(() => written()), JSON.stringify(events));
      const { entry } = written();
      assert.equal(entry.path, '/home/user/w/e.txt');
      assert.equal(entry.type, 'file');
      assert.equal(entry.size, 5);
      assert.deepEqual(entry.metadata, { k: 'v' });
      await sandbox.files.remove('/home/user/w/e.txt');
      assert.ok(await eventually(() => events.some((e) => e.type === 'remove' && e.name === 'e.txt')), JSON.stringify(events));
      assert.equal(events.find((e) => e.type === 'remove').entry, undefined);
      // A watch that did not ask has no entries.
      assert.ok(await eventually(() => plain.some((e) => e.type === 'remove')), JSON.stringify(plain));
      assert.ok(plain.every((e) => e.entry === undefined), JSON.stringify(plain));
      await handle.stop();
      await plainHandle.stop();
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
