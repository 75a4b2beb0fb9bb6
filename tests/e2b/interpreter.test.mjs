// E2B's code interpreter: the official @e2b/code-interpreter SDK, unmodified, against a
// real `sandboxd serve` (E2B_API_URL=<server>/e2b, E2B_SANDBOX_URL=<server>/e2b/sandbox):
// runCode's streamed results on sandboxd's persistent Python, and its contexts. Run by
// CTest with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox, NotFoundError } from '@e2b/code-interpreter';
import { eventually, startServer, stopProgram } from '../harness.mjs';

const ALICE = 'e2b-interpreter-alice-token';
const BOB = 'e2b-interpreter-bob-token';
let dir;
let server;
let sandbox;
let opts;
// The same server on the gvisor tier (runtime.isolation: gvisor) and a sandbox of it, for
// the tests that run on both tiers; only where runsc is installed.
const RUNSC = ['/usr/sbin/runsc', '/usr/bin/runsc', '/usr/local/sbin/runsc', '/usr/local/bin/runsc'].find(existsSync);
let gvisorServer;
let gvisorSandbox;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-interpreter-'));
  server = await startServer(dir, 'data', [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
    'runtime: { prestartedSandboxes: 0 }',
  ]);
  // The SDK's connection options, as the three environment variables would set them.
  opts = { apiKey: ALICE, apiUrl: `${server.url}/e2b`, sandboxUrl: `${server.url}/e2b/sandbox` };
  // E2B's API ends a sandbox 15 s after its creation unless it asks for longer.
  sandbox = await Sandbox.create({ ...opts, timeoutMs: 600_000 });
  if (RUNSC) {
    gvisorServer = await startServer(dir, 'gvisor', [
      `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
      'runtime: { isolation: gvisor, gvisorPlatform: ptrace }',
    ]);
    gvisorSandbox = await Sandbox.create({
      apiKey: ALICE, apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox`, timeoutMs: 600_000,
    });
  }
});

after(async () => {
  if (sandbox) await sandbox.kill().catch(() => {});
  if (gvisorSandbox) await gvisorSandbox.kill().catch(() => {});
  if (server) await stopProgram(server.child);
  if (gvisorServer) await stopProgram(gvisorServer.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// A test that holds on both isolation tiers runs on each, with that tier's sandbox.
function onEachTier(name, body) {
  for (const tier of ['native', 'gvisor']) {
    const skip = tier === 'gvisor' && !RUNSC ? 'runsc is not installed (Debian: apt-get install runsc)' : false;
    test(`${name} (${tier})`, { skip }, () => body(tier === 'native' ? sandbox : gvisorSandbox));
  }
}

onEachTier('the last expression is the main result, as text, and state is kept between calls', async (sandbox) => {
  const first = await sandbox.runCode('x = 41\nx + 1');
  assert.equal(first.text, '42');
  assert.equal(first.error, undefined);
  assert.equal(first.results.length, 1);
  assert.equal(first.results[0].isMainResult, true);
  const second = await sandbox.runCode('x * 2');
  assert.equal(second.text, '82');
  assert.ok(second.executionCount > first.executionCount, `${first.executionCount} then ${second.executionCount}`);
  // A string's value comes without its quotes, as E2B's server gives it.
  assert.equal((await sandbox.runCode("'hello'")).text, 'hello');
});

test('stdout is streamed while the cell runs, before its end', async () => {
  const seen = [];
  let resolveFirst;
  const firstLine = new Promise((resolve) => { resolveFirst = resolve; });
  const running = sandbox.runCode(
    "import sys, time\nprint('early', flush=True)\nopen('/tmp/e2b-go', 'w').close()\n" +
      "while not __import__('os').path.exists('/tmp/e2b-release'): time.sleep(0.05)\nprint('late')\n" +
      "sys.stderr.write('to stderr\\n')",
    {
      onStdout: (message) => {
        seen.push(message.line);
        resolveFirst();
      },
    });
  // The cell waits for a file only a second call makes, so 'early' must arrive while it
  // still runs (this context is busy: another one makes the file, after 'early' or after
  // a bound, so that a stream that does not stream fails here instead of hanging).
  let bound;
  const arrived = await Promise.race([
    firstLine.then(() => true),
    new Promise((resolve) => { bound = setTimeout(() => resolve(false), 30000); }),
  ]);
  clearTimeout(bound);
  const seenBeforeRelease = [...seen];
  const other = await sandbox.createCodeContext();
  await sandbox.runCode("open('/tmp/e2b-release', 'w').close()", { context: other });
  const execution = await running;
  assert.ok(arrived, 'no stdout before the end of the cell');
  assert.deepEqual(seenBeforeRelease, ['early\n']);
  assert.deepEqual(execution.logs.stdout, ['early\n', 'late\n']);
  assert.deepEqual(execution.logs.stderr, ['to stderr\n']);
  await sandbox.removeCodeContext(other);
});

test("an exception is the execution's error with its name, value and traceback", async () => {
  const errors = [];
  const execution = await sandbox.runCode("def f():\n    raise ValueError('bad input')\nf()", {
    onError: (error) => errors.push(error),
  });
  assert.equal(execution.error.name, 'ValueError');
  assert.equal(execution.error.value, 'bad input');
  assert.match(execution.error.traceback, /raise ValueError/);
  assert.equal(errors.length, 1);
  assert.equal(execution.results.length, 0);
  // The kernel is still there, with its state.
  assert.equal((await sandbox.runCode('x')).text, '41');
});

test('a matplotlib figure is a PNG result, and display() gives HTML and JSON bundles', async () => {
  const figure = await sandbox.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()');
  assert.equal(figure.error, undefined, JSON.stringify(figure.error));
  const pngs = figure.results.filter((result) => result.png);
  assert.equal(pngs.length, 1, JSON.stringify(figure.results.map((result) => result.formats())));
  const bytes = Buffer.from(pngs[0].png, 'base64');
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.equal(pngs[0].isMainResult, false);

  const rich = await sandbox.runCode(
    "from IPython.display import display, HTML, JSON\ndisplay(HTML('<b>bold</b>'))\ndisplay(JSON({'a': 1}))\n7");
  assert.equal(rich.results.length, 3);
  assert.equal(rich.results[0].html, '<b>bold</b>');
  assert.deepEqual(rich.results[1].json, { a: 1 });
  assert.equal(rich.results[2].isMainResult, true);
  assert.equal(rich.text, '7');
});

test('environment variables of a call are set for that call only', async () => {
  const execution = await sandbox.runCode("import os\nos.environ.get('GREETING')", { envs: { GREETING: 'hi' } });
  assert.equal(execution.text, 'hi');
  assert.equal((await sandbox.runCode("repr(os.environ.get('GREETING'))")).text, 'None');
});

// The gvisor tier keeps a paused sandbox's memory (runtime.keepMemory, E2B's default
// keepMemory): after connect a runCode variable and a background process (the same pid
// inside) are there; pause({ keepMemory: false }) keeps the files only.
test('pause keeps memory on the gvisor tier; keepMemory: false keeps files only', {
  skip: RUNSC ? false : 'runsc is not installed (Debian: apt-get install runsc)',
}, async () => {
  const gopts = { apiKey: ALICE, apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox` };
  const paused = await Sandbox.create({ ...gopts, timeoutMs: 600_000 });
  try {
    assert.equal((await paused.runCode('kept = 41\nkept')).text, '41');
    await paused.commands.run('sleep 6001', { background: true });
    const pidOf = async (sbx) => (await sbx.commands.run('pgrep -f "sleep 600[1]" || true')).stdout.trim();
    const pid = await pidOf(paused);
    assert.match(pid, /^[0-9]+$/);
    assert.equal(await paused.pause(), true);
    const back = await Sandbox.connect(paused.sandboxId, { ...gopts, timeoutMs: 600_000 });
    assert.equal((await back.runCode('kept + 1')).text, '42');
    assert.equal(await pidOf(back), pid, 'the same process, the same pid');

    await back.files.write('/home/user/paused.txt', 'a file');
    assert.equal(await back.pause({ keepMemory: false }), true);
    const fresh = await Sandbox.connect(paused.sandboxId, { ...gopts, timeoutMs: 600_000 });
    assert.equal((await fresh.runCode("'kept' in globals()")).text, 'False');
    assert.equal(await pidOf(fresh), '');
    assert.equal(await fresh.files.read('/home/user/paused.txt'), 'a file');
  } finally {
    await paused.kill().catch(() => {});
  }
});

// E2B's processes come back with the memory (gvisor): after pause and connect a
// background process is listed under its pid with its command, a handle connected after
// the restore reads what it writes from then on (its count going on from where it was;
// the handle from before lost its stream at the pause, as with E2B), and kill(pid) ends
// it and takes it from the list.
test('pause keeps E2B processes: listed, connected to and killed by pid after the restore (gvisor)', {
  skip: RUNSC ? false : 'runsc is not installed (Debian: apt-get install runsc)',
}, async () => {
  const gopts = { apiKey: ALICE, apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox` };
  const paused = await Sandbox.create({ ...gopts, timeoutMs: 600_000 });
  const ticks = (text) => [...text.matchAll(/tick-(\d+)/g)].map((m) => Number(m[1]));
  try {
    const sleeper = await paused.commands.run('sleep 300', { background: true, timeoutMs: 0 });
    const ticker = await paused.commands.run('i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done',
      { background: true, timeoutMs: 0 });
    await eventually('the ticker writes', () => ticks(ticker.stdout).length >= 2);
    assert.equal(await paused.pause(), true);
    const lastBefore = Math.max(...ticks(ticker.stdout));

    const back = await Sandbox.connect(paused.sandboxId, { ...gopts, timeoutMs: 600_000 });
    const listed = await back.commands.list();
    const sleeping = listed.find((p) => p.pid === sleeper.pid);
    assert.ok(sleeping, `pid ${sleeper.pid} is listed: ${JSON.stringify(listed)}`);
    assert.deepEqual(sleeping.args, ['-l', '-c', 'sleep 300']);
    assert.ok(listed.some((p) => p.pid === ticker.pid), JSON.stringify(listed));

    // The handle from before the pause lost its stream with the sandbox (as E2B's envd
    // connections end at a pause); one connected now reads what it writes from here on.
    await assert.rejects(ticker.wait());
    let seen = '';
    const connected = await back.commands.connect(ticker.pid, { onStdout: (data) => { seen += data; }, timeoutMs: 0 });
    await eventually('a handle connected after the restore reads the ticker', () => ticks(seen).length >= 2);
    assert.ok(Math.min(...ticks(seen)) > lastBefore, `the count goes on past ${lastBefore}: ${seen.slice(0, 200)}`);

    assert.equal(await back.commands.kill(sleeper.pid), true);
    await eventually('the killed process leaves the list',
      async () => !(await back.commands.list()).some((p) => p.pid === sleeper.pid));
    assert.equal(await back.commands.kill(ticker.pid), true);
    await assert.rejects(connected.wait());  // killed: not a clean exit
    assert.deepEqual((await back.commands.list()).filter((p) => p.pid === ticker.pid), []);
  } finally {
    await paused.kill().catch(() => {});
  }
});

// A pause that keeps files only ends the processes: none is listed after connect.
test('pause({ keepMemory: false }) ends E2B processes (gvisor)', {
  skip: RUNSC ? false : 'runsc is not installed (Debian: apt-get install runsc)',
}, async () => {
  const gopts = { apiKey: ALICE, apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox` };
  const paused = await Sandbox.create({ ...gopts, timeoutMs: 600_000 });
  try {
    const sleeper = await paused.commands.run('sleep 300', { background: true, timeoutMs: 0 });
    assert.ok((await paused.commands.list()).some((p) => p.pid === sleeper.pid));
    assert.equal(await paused.pause({ keepMemory: false }), true);
    const back = await Sandbox.connect(paused.sandboxId, { ...gopts, timeoutMs: 600_000 });
    assert.deepEqual(await back.commands.list(), []);
    await assert.rejects(sleeper.wait());
  } finally {
    await paused.kill().catch(() => {});
  }
});

// The same at the end time: lifecycle.onTimeout 'pause' keeps memory (E2B's default
// autoPauseMemory), and { action: 'pause', keepMemory: false } keeps the files only.
test('an auto-pause at the end time keeps memory unless onTimeout says keepMemory: false (gvisor)', {
  skip: RUNSC ? false : 'runsc is not installed (Debian: apt-get install runsc)',
}, async () => {
  const gopts = { apiKey: ALICE, apiUrl: `${gvisorServer.url}/e2b`, sandboxUrl: `${gvisorServer.url}/e2b/sandbox` };
  const pidOf = async (sbx) => (await sbx.commands.run('pgrep -f "sleep 600[2]" || true')).stdout.trim();
  const pausedAtItsEnd = async (sbx) => {
    const deadline = Date.now() + 60_000;
    let state = 'running';
    while (state !== 'paused' && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      state = (await sbx.getInfo()).state;
    }
    assert.equal(state, 'paused');
  };
  for (const keepMemory of [true, false]) {
    const onTimeout = keepMemory ? 'pause' : { action: 'pause', keepMemory: false };
    const sbx = await Sandbox.create({ ...gopts, timeoutMs: 600_000, lifecycle: { onTimeout } });
    try {
      assert.equal((await sbx.runCode('kept = 41\nkept')).text, '41');
      await sbx.commands.run('sleep 6002', { background: true });
      await sbx.files.write('/home/user/auto-paused.txt', 'a file');
      const pid = await pidOf(sbx);
      assert.match(pid, /^[0-9]+$/);
      await sbx.setTimeout(2_000);  // its end time comes now that it holds all that
      // Seen paused as its checkpoint begins: the calls below wait for it to end.
      await pausedAtItsEnd(sbx);
      const back = await Sandbox.connect(sbx.sandboxId, { ...gopts, timeoutMs: 600_000 });
      if (keepMemory) {
        assert.equal((await back.runCode('kept + 1')).text, '42');
        assert.equal(await pidOf(back), pid, 'the same process, the same pid');
      } else {
        assert.equal((await back.runCode("'kept' in globals()")).text, 'False');
        assert.equal(await pidOf(back), '');
      }
      assert.equal(await back.files.read('/home/user/auto-paused.txt'), 'a file');
    } finally {
      await sbx.kill().catch(() => {});
    }
  }
});

test('contexts: created, listed, each with its own state, restarted and removed', async () => {
  const context = await sandbox.createCodeContext({ cwd: '/tmp' });
  assert.equal(context.language, 'python');
  assert.equal(context.cwd, '/tmp');
  assert.ok(context.id);
  const listed = await sandbox.listCodeContexts();
  assert.ok(listed.some((c) => c.id === context.id), JSON.stringify(listed));
  assert.ok(listed.length >= 2, JSON.stringify(listed));

  await sandbox.runCode('y = 5', { context });
  assert.equal((await sandbox.runCode('y + 1', { context })).text, '6');
  assert.equal((await sandbox.runCode('import os\nos.getcwd()', { context })).text, '/tmp');
  // The default context does not see the other's variables.
  assert.equal((await sandbox.runCode('y')).error.name, 'NameError');

  await sandbox.restartCodeContext(context);
  assert.equal((await sandbox.runCode('y', { context })).error.name, 'NameError');
  assert.equal((await sandbox.runCode('x')).text, '41');  // the default one kept its state

  await sandbox.removeCodeContext(context.id);
  assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id));
  await assert.rejects(sandbox.runCode('1', { context }), (error) => error instanceof NotFoundError);
  await assert.rejects(sandbox.restartCodeContext(context), (error) => error instanceof NotFoundError);
});

test('another language is refused clearly', async () => {
  await assert.rejects(sandbox.runCode('console.log(1)', { language: 'javascript' }),
                       (error) => error.name === 'SandboxError' && /400/.test(error.message));
  await assert.rejects(sandbox.createCodeContext({ language: 'r' }), (error) => /400/.test(error.message));
});

test("another key cannot run code in the sandbox", async () => {
  const foreign = await Sandbox.connect(sandbox.sandboxId, { ...opts, apiKey: BOB }).catch((error) => error);
  assert.ok(foreign instanceof NotFoundError, String(foreign));
});

test('bad requests get a clear 400 in E2B\'s error shape, and the interpreter keeps serving', async () => {
  const post = (body) => fetch(`${server.url}/e2b/sandbox/execute`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sandbox.sandboxId,
               'E2b-Sandbox-Port': '49999', 'X-Access-Token': ALICE },
    body,
  });
  for (const [body, pattern] of [
    ['{not json', /JSON|parse/i],
    [JSON.stringify({ code: 5 }), /'code'/],
    [JSON.stringify({ code: '1', env_vars: { 'A=B': 'x' } }), /env_vars/],
    [JSON.stringify({ code: '1', context_id: 'ctx_x', language: 'python' }), /Only one of/],
  ]) {
    const response = await post(body);
    assert.equal(response.status, 400, body);
    const error = await response.json();
    assert.equal(error.code, 400);
    assert.match(error.message, pattern);
  }
  const missing = await post(JSON.stringify({ code: '1', context_id: 'ctx_missing' }));
  assert.equal(missing.status, 404);
  assert.equal((await sandbox.runCode('x')).text, '41');
});
