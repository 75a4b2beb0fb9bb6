// What the node tests (sdk/, browser/) share: a real `sandboxd serve` whose upstream is
// the scripted model server (tests/scripted_upstream.h), started from the binaries CTest
// names in SANDBOXD_PATH and SCRIPTED_UPSTREAM_PATH, and helpers to script the model.
// Plain node (no npm packages), so each test folder imports it by relative path.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Until `check` answers true (each try may throw: not yet), for at most a minute, trying
// every `intervalMs`.
export async function eventually(what, check, intervalMs = 100) {
  const deadline = Date.now() + 60_000;
  let last;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`${what} did not happen within a minute (last error: ${last?.stack ?? last})`);
}

// Starts a program and resolves with the first match of `pattern` in its stdout.
export function startProgram(command, args, pattern) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`${command} did not start: ${seen}`)), 30000);
    child.stdout.on('data', (chunk) => {
      seen += chunk;
      const match = seen.match(pattern);
      if (match) {
        clearTimeout(timer);
        resolve({ child, match });
      }
    });
    child.on('exit', (code) => reject(new Error(`${command} exited with ${code}: ${seen}`)));
  });
}

export function stopProgram(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.removeAllListeners('exit');
    child.on('exit', resolve);
    child.kill('SIGTERM');
  });
}

// Starts `sandboxd serve` on a configuration of `lines` (YAML, one per entry) with its
// data in `dataDir`; resolves with { child, url }.
export async function startServer(dir, name, lines) {
  const config = join(dir, `${name}.yaml`);
  writeFileSync(config, [`server: { listen: "127.0.0.1:0", dataDir: "${join(dir, name)}" }`, ...lines, ''].join('\n'));
  const server = await startProgram(process.env.SANDBOXD_PATH, ['serve', '--config', config],
                                    /listening on (http:\/\/127\.0\.0\.1:\d+)/);
  return { child: server.child, url: server.match[1] };
}

// The scripted upstream and one sandboxd with one owner's token, in a temporary folder.
export class Stack {
  constructor(token, owner, prefix) {
    this.token = token;
    this.owner = owner;
    this.prefix = prefix;
  }

  async start(extraLines = []) {
    this.dir = mkdtempSync(join(tmpdir(), this.prefix));
    const upstream = await startProgram(process.env.SCRIPTED_UPSTREAM_PATH, [], /listening on (\d+)/);
    this.upstreamProcess = upstream.child;
    this.upstreamUrl = `http://127.0.0.1:${upstream.match[1]}`;
    const server = await startServer(this.dir, 'data', [...this.configLines(), ...extraLines]);
    this.serverProcess = server.child;
    this.serverUrl = server.url;
  }

  // The auth and model lines of a configuration that uses this stack's upstream.
  configLines() {
    return [
      `auth: { tokens: [ { token: ${this.token}, owner: ${this.owner} } ] }`,
      `model: { baseUrl: "${this.upstreamUrl}", apiKey: up-key, models: { default: upstream-model } }`,
    ];
  }

  async stop() {
    if (this.serverProcess) await stopProgram(this.serverProcess);
    if (this.upstreamProcess) await stopProgram(this.upstreamProcess);
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }

  // The model's next answers, in order.
  async script(steps) {
    const res = await fetch(`${this.upstreamUrl}/_script`, { method: 'POST', body: JSON.stringify(steps) });
    assert.equal(res.status, 200);
  }

  // The requests the model has received.
  async upstreamRequests() {
    return (await fetch(`${this.upstreamUrl}/_requests`)).json();
  }
}

export const toolUse = (id, name, input) => ({ type: 'tool_use', id, name, input });
export const text = (t) => ({ type: 'text', text: t });
export const message = (content, stop_reason, extra = {}) => ({
  message: { content, stop_reason, usage: { input_tokens: 11, output_tokens: 7 } },
  ...extra,
});
