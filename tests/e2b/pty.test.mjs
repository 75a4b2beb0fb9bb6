// E2B terminals (`sandbox.pty`): E2B's own SDK, unmodified, at both releases the other
// E2B tests use (npm `e2b` at the lockfile's version and `e2b-old`), against a real
// `sandboxd serve`: a real pseudo-terminal inside the sandbox (bash -i -l on it, as the
// SDK starts it), its output streamed, its input typed, its window resized, bash's job
// control, connect and kill. With SANDBOXD_E2B_ISOLATION=gvisor every sandbox is a runsc
// sandbox, the terminal gVisor's own and relayed by the sandbox's PID 1 (the test is
// skipped where runsc is not installed). Run by CTest with SANDBOXD_PATH.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as current from 'e2b';
import * as old from 'e2b-old';
import { startServer, stopProgram } from '../harness.mjs';

const ALICE = `e2b_${'a1ce'.repeat(10)}`;
const ISOLATION = process.env.SANDBOXD_E2B_ISOLATION || 'native';
const RUNSC = ['/usr/sbin/runsc', '/usr/bin/runsc', '/usr/local/sbin/runsc', '/usr/local/bin/runsc'].some(existsSync);
const SKIP = ISOLATION === 'gvisor' && !RUNSC ? 'runsc is not installed (Debian: apt-get install runsc)' : false;
// Ctrl-C typed on the terminal: the line discipline signals the foreground job. gVisor's
// line discipline in the runsc this is tested with (Debian's 0.0~20221219) does not act on
// the terminal's signal characters (docs/e2b.md), so on that tier the job ends itself.
const CTRL_C = ISOLATION !== 'gvisor';
let dir;
let server;

// SIGTERM on every way out: a server killed otherwise leaves its sandboxes' mounts.
function stopServersNow() {
  if (server && server.child.exitCode === null) server.child.kill('SIGTERM');
}
process.on('exit', stopServersNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    stopServersNow();
    process.exit(1);
  });

before(async () => {
  if (SKIP) return;
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-pty-'));
  server = await startServer(dir, ISOLATION, [
    `auth: { tokens: [ { token: ${ALICE}, owner: alice } ] }`,
    ...(ISOLATION === 'gvisor' ? ['runtime: { isolation: gvisor, gvisorPlatform: ptrace }'] : []),
  ]);
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = ALICE;
});

after(async () => {
  if (server) await stopProgram(server.child);
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

// What a terminal wrote, as text, and a way to wait for a pattern in what it writes
// from a point on (the terminal echoes what is typed, so every pattern below is one
// only the shell's work prints: `$((6*7))` typed, 42 seen).
class Screen {
  constructor() {
    this.text = '';
    this.decoder = new TextDecoder();
    this.onData = (bytes) => { this.text += this.decoder.decode(bytes, { stream: true }); };
  }
  mark() { return this.text.length; }
  async waitFor(pattern, from = 0) {
    const seen = await eventually(() => pattern.test(this.text.slice(from)));
    assert.ok(seen, `${pattern} never appeared on the terminal; it shows:\n${this.text.slice(from)}`);
  }
}

const encoder = new TextEncoder();

for (const [release, sdk] of [['e2b (lockfile)', current], ['e2b 2.45 (E2B\'s own repo)', old]]) {
  const { Sandbox } = sdk;
  describe(`${release} on the ${ISOLATION} tier`, { skip: SKIP }, () => {
    test('a terminal: a tty, streamed output, resize, job control, connect and kill', async () => {
      const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
      try {
        const screen = new Screen();
        const terminal = await sandbox.pty.create({ cols: 80, rows: 24, onData: screen.onData });
        assert.ok(terminal.pid > 0);
        const type = (line) => sandbox.pty.sendInput(terminal.pid, encoder.encode(line));

        // A real terminal: stdin is one (isatty), its name is the sandbox's /dev/pts.
        let from = screen.mark();
        await type('tty; test -t 0 && test -t 1 && echo "tty-$((6*7))"\n');
        await screen.waitFor(/\/dev\/pts\/\d+\r?\n[\s\S]*tty-42/, from);
        // Only the sandbox's own terminals are there (a devpts instance of its own).
        from = screen.mark();
        await type('ls /dev/pts | tr "\\n" " "; echo "pts-$((1+1))"\n');
        await screen.waitFor(/^\d+ ptmx pts-2/m, from);

        // The size it was made with, then a resize the process sees: its window size
        // changes (stty size) and the foreground process gets SIGWINCH.
        from = screen.mark();
        await type('stty size; echo "size-$((2+3))"\n');
        await screen.waitFor(/24 80\r?\n[\s\S]*size-5/, from);
        from = screen.mark();
        // (On gVisor the trap ends the job itself: see CTRL_C.)
        const trapEnd = CTRL_C ? '' : '; exit';
        await type(`sh -c 'trap "echo winch-\\$((4+4))${trapEnd}" WINCH; echo "trapped-$((3+3))"; while sleep 0.05; do :; done'\n`);
        await screen.waitFor(/trapped-6/, from);
        from = screen.mark();
        await sandbox.pty.resize(terminal.pid, { cols: 123, rows: 45 });
        await screen.waitFor(/winch-8/, from);
        // Ctrl-C on the terminal interrupts the foreground job (the line discipline's
        // signal, a controlling terminal's), and bash takes the terminal back.
        from = screen.mark();
        if (CTRL_C) await type('\x03');
        await type('stty size; echo "resized-$((5+5))"\n');
        await screen.waitFor(/45 123\r?\n[\s\S]*resized-10/, from);

        // Job control: a background job, listed by `jobs`.
        from = screen.mark();
        await type('sleep 100 &\n');
        await type('jobs; echo "jobs-$((7+7))"\n');
        await screen.waitFor(/\[1\]\+\s+Running\s+sleep 100 &[\s\S]*jobs-14/, from);

        // Another client connects to the running terminal and sees what it writes next.
        const second = new Screen();
        const connected = await sandbox.pty.connect(terminal.pid, { onData: second.onData });
        assert.equal(connected.pid, terminal.pid);
        await type('echo "connected-$((8+8))"\n');
        await second.waitFor(/connected-16/);
        await connected.disconnect();

        // It is a process of the sandbox: listed, and killed with its whole tree (the
        // background sleep too).
        const listed = await sandbox.commands.list();
        assert.ok(listed.some((p) => p.pid === terminal.pid));
        assert.equal(await sandbox.pty.kill(terminal.pid), true);
        await terminal.wait().catch(() => {});
        assert.ok(await eventually(async () => !(await sandbox.commands.list()).some((p) => p.pid === terminal.pid)));
        const left = await sandbox.commands.run('grep -lx sleep /proc/[0-9]*/comm 2>/dev/null | wc -l');
        assert.equal(left.stdout.trim(), '0');
        assert.equal(await sandbox.pty.kill(terminal.pid), false);
      } finally {
        await sandbox.kill();
      }
    });

    test('terminal input and resize are checked', async () => {
      const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
      try {
        // A command on pipes has no terminal: terminal input and a resize are refused.
        const handle = await sandbox.commands.run('sleep 30', { background: true, stdin: true });
        await assert.rejects(sandbox.pty.sendInput(handle.pid, encoder.encode('x')), /does not run on a terminal/);
        await assert.rejects(sandbox.pty.resize(handle.pid, { cols: 10, rows: 10 }), /does not run on a terminal/);
        await handle.kill();
        // A size past a terminal's 16 bits.
        await assert.rejects(sandbox.pty.create({ cols: 70000, rows: 24, onData: () => {} }), /pty\.size\.cols/);
        // No such process.
        await assert.rejects(sandbox.pty.resize(99999, { cols: 10, rows: 10 }), /not found/);
      } finally {
        await sandbox.kill();
      }
    });
  });
}

// A terminal across a pause: on the gvisor tier the pause keeps the sandbox's memory, and
// the terminal (its shell and its jobs) comes back with the resume, as a plain background
// process does: pty.connect(pid) reads it again and sendInput types into it. On the native
// tier a pause keeps files only: everything ends. Either way the resumed sandbox gives
// new terminals.
test(`a pause keeps a terminal and its jobs with the memory (gvisor) or ends them (native); the resumed sandbox gives a new one (${ISOLATION})`, { skip: SKIP }, async () => {
  const { Sandbox } = current;
  const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
  try {
    await sandbox.commands.run('sleep 301 >/dev/null 2>&1 &');  // a command's background process
    const screen = new Screen();
    const terminal = await sandbox.pty.create({ cols: 80, rows: 24, onData: screen.onData });
    await sandbox.pty.sendInput(terminal.pid, encoder.encode('sleep 300 & echo "bg-$((2+2))"\n'));
    await screen.waitFor(/bg-4/);
    const before = await sandbox.commands.run(
      'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < $f 2>/dev/null; echo; done | grep -c "^sleep 30[01] $" || true');
    assert.equal(before.stdout.trim(), '2');
    assert.equal(await sandbox.pause(), true);
    const resumed = await Sandbox.connect(sandbox.sandboxId);
    // The processes running `sleep SECONDS`, by their command lines.
    const count = async (seconds) =>
      (await resumed.commands.run(
        `for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < $f 2>/dev/null; echo; done | grep -c "^sleep ${seconds} $" || true`)).stdout.trim();
    if (ISOLATION === 'gvisor') {
      assert.equal(await count(300), '1', 'the terminal\'s job came back with the resume');
      assert.equal(await count(301), '1');
      const back = new Screen();
      await resumed.pty.connect(terminal.pid, { onData: back.onData });
      await resumed.pty.sendInput(terminal.pid, encoder.encode('echo "back-$((5+6))"\n'));
      await back.waitFor(/back-11/);
      assert.equal(await resumed.pty.kill(terminal.pid), true);
      assert.ok(await eventually(async () => (await count(300)) === '0'), 'a kill ends the terminal\'s jobs');
    } else {
      assert.ok(await eventually(async () => (await count(300)) === '0'), 'the terminal\'s job ended with the pause');
      assert.equal(await count(301), '0');
    }
    const again = new Screen();
    const next = await resumed.pty.create({ cols: 80, rows: 24, onData: again.onData });
    await resumed.pty.sendInput(next.pid, encoder.encode('echo "new-$((3+4))"\n'));
    await again.waitFor(/new-7/);
    assert.equal(await resumed.pty.kill(next.pid), true);
  } finally {
    await sandbox.kill();
  }
});
