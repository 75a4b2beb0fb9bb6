// E2B's SDKs against sandboxd's own HTTP API, on one `sandboxd serve`, in one run:
//   - cold: Sandbox.create() + commands.run('true')  vs  POST /containers + bash `true`
//   - warm: commands.run('true')                      vs  bash_code_execution `true`
//   - warm Python: runCode('1')                       vs  code_execution `1`
//   - files: files.write() of 1 KiB until watchDir()'s callback has its `write`
//            vs  PUT /files/{key} of the same bytes (and files.write() alone)
// Each pair alternates call by call (the same noise for both sides), through node's
// fetch on both sides; the goal is a ratio (E2B's SDK / sandboxd's API at p50 <= 1.3x).
// E2B's own published figure for a sandbox start (~150 ms) is printed beside them: a
// number from their cloud, not measured here.
//
// Run by scripts/bench.sh (SANDBOXD_BENCH_ONLY=e2b) with SANDBOXD_PATH; the SDKs come
// from tests/e2b (npm ci). BENCH_E2B_COLD, BENCH_E2B_WARM: iteration counts (30, 300).
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { startServer, stopProgram } from '../tests/harness.mjs';

const require = createRequire(new URL('../tests/e2b/package.json', import.meta.url));
const { Sandbox } = await import(pathToFileURL(require.resolve('@e2b/code-interpreter')).href);

const TOKEN = 'e2b-bench-token';
const COLD = Number(process.env.BENCH_E2B_COLD || 30);
const WARM = Number(process.env.BENCH_E2B_WARM || 300);
const PUBLISHED_CREATE_MS = 150;  // e2b.dev: "a sandbox starts in about 150 ms"

function stats(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { p50: at(0.5), p99: at(0.99), n: sorted.length };
}
function row(label, s) {
  console.log(`  ${label.padEnd(58)} p50 ${s.p50.toFixed(2).padStart(8)} ms   p99 ${s.p99.toFixed(2).padStart(8)} ms   (n=${s.n})`);
}
function ratio(label, e2b, own, goal) {
  console.log(`  ratio (p50) ${label.padEnd(46)} ${(e2b.p50 / own.p50).toFixed(2).padStart(6)}x${goal ? `   (goal <= ${goal}x)` : ''}`);
}
async function timed(fn) {
  const started = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

const dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-bench-'));
const server = await startServer(dir, 'data', [`auth: { tokens: [ { token: ${TOKEN}, owner: bench } ] }`]);
const opts = { apiKey: TOKEN, apiUrl: `${server.url}/e2b`, sandboxUrl: `${server.url}/e2b/sandbox` };
const api = `${server.url}/api/gpt/v1`;
const headers = { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' };

async function call(method, path, body) {
  const response = await fetch(`${api}${path}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
async function bash(container, command) {
  const result = await call('POST', `/containers/${container}/tools/bash_code_execution`, { command });
  if (result.return_code !== 0) throw new Error(`bash ${command}: ${JSON.stringify(result)}`);
}
async function python(container, code) {
  const result = await call('POST', `/containers/${container}/tools/code_execution`, { code });
  if (result.return_code !== 0) throw new Error(`python ${code}: ${JSON.stringify(result)}`);
}

try {
  console.log(`E2B SDK (e2b, @e2b/code-interpreter) against sandboxd's HTTP API, one server, node's fetch on both sides`);

  // Cold: a new sandbox and its first command. What follows (the kill, the delete) is
  // not timed.
  const coldE2b = [], coldOwn = [];
  for (let i = 0; i < COLD; ++i) {
    let sandbox;
    coldE2b.push(await timed(async () => {
      sandbox = await Sandbox.create(opts);
      const result = await sandbox.commands.run('true');
      if (result.exitCode !== 0) throw new Error(`true exited with ${result.exitCode}`);
    }));
    await sandbox.kill();
    let id;
    coldOwn.push(await timed(async () => {
      id = (await call('POST', '/containers', {})).id;
      await bash(id, 'true');
    }));
    await call('DELETE', `/containers/${id}`);
  }
  const e2bCold = stats(coldE2b), ownCold = stats(coldOwn);
  row("Sandbox.create() + commands.run('true')", e2bCold);
  row("POST /containers + bash_code_execution 'true'", ownCold);
  console.log(`  ${"E2B's published sandbox start (their cloud, not measured)".padEnd(58)} ~${PUBLISHED_CREATE_MS} ms`);
  ratio('cold: E2B SDK / sandboxd API', e2bCold, ownCold, 1.3);

  // Warm: one sandbox each, already running.
  const sandbox = await Sandbox.create({ ...opts, timeoutMs: 3_600_000 });  // E2B's default end is 15 s away
  const own = (await call('POST', '/containers', {})).id;
  await sandbox.commands.run('true');
  await bash(own, 'true');
  const warmE2b = [], warmOwn = [];
  for (let i = 0; i < WARM; ++i) {
    warmE2b.push(await timed(() => sandbox.commands.run('true')));
    warmOwn.push(await timed(() => bash(own, 'true')));
  }
  const e2bWarm = stats(warmE2b), ownWarm = stats(warmOwn);
  row("warm commands.run('true')", e2bWarm);
  row("warm bash_code_execution 'true'", ownWarm);
  ratio('warm: E2B SDK / sandboxd API', e2bWarm, ownWarm, 1.3);

  // Warm Python: the kernels are up (their first cell starts them).
  await sandbox.runCode('1');
  await python(own, '1');
  const codeE2b = [], codeOwn = [];
  for (let i = 0; i < WARM; ++i) {
    codeE2b.push(await timed(async () => {
      const execution = await sandbox.runCode('1');
      if (execution.text !== '1') throw new Error(`runCode('1') gave ${JSON.stringify(execution.toJSON())}`);
    }));
    codeOwn.push(await timed(() => python(own, '1')));
  }
  const e2bCode = stats(codeE2b), ownCode = stats(codeOwn);
  row("warm runCode('1')", e2bCode);
  row("warm code_execution '1'", ownCode);
  ratio('warm Python: E2B SDK / sandboxd API', e2bCode, ownCode, 1.3);

  // Files: a write seen by a watch of its folder (the round trip a client that syncs
  // files makes: write, then learn of it from the watch) against sandboxd's own upload
  // of the same bytes, and the E2B write alone (what the watch adds). The outputs folder
  // on both sides: the same file system and the same commit path.
  const body = 'x'.repeat(1024);
  const folder = '/mnt/user-data/outputs/watched';
  await sandbox.files.makeDir(folder);
  let waiting = null;
  const watch = await sandbox.files.watchDir(folder, (event) => {
    if (waiting && event.type === 'write' && event.name === waiting.name) {
      const done = waiting.done;
      waiting = null;
      done();
    }
  }, { timeoutMs: 0 });
  const seen = (name) => new Promise((done) => { waiting = { name, done }; });
  const put = async (key) => {
    const response = await fetch(`${server.url}/api/gpt/v1/files/${key}?scope_id=${own}`,
                                 { method: 'PUT', headers: { Authorization: `Bearer ${TOKEN}` }, body });
    await response.text();
    if (!response.ok) throw new Error(`PUT ${key}: ${response.status}`);
  };
  const roundE2b = [], writeE2b = [], putOwn = [];
  for (let i = 0; i < WARM; ++i) {
    const name = `f${i % 16}.txt`;
    roundE2b.push(await timed(async () => {
      const event = seen(name);
      await sandbox.files.write(`${folder}/${name}`, body);
      await event;
    }));
    writeE2b.push(await timed(() => sandbox.files.write(`/home/user/${name}`, body)));
    putOwn.push(await timed(() => put(`outputs/bench/${name}`)));
  }
  await watch.stop();
  const e2bRound = stats(roundE2b), e2bWrite = stats(writeE2b), ownPut = stats(putOwn);
  row('files.write() 1 KiB until watchDir() sees its write', e2bRound);
  row('files.write() 1 KiB', e2bWrite);
  row('PUT /files/{key} 1 KiB', ownPut);
  ratio('files: E2B write + watch / sandboxd PUT', e2bRound, ownPut);
  ratio('files: E2B write + watch / E2B write', e2bRound, e2bWrite);

  await sandbox.kill();
  await call('DELETE', `/containers/${own}`);
} finally {
  await stopProgram(server.child);
  rmSync(dir, { recursive: true, force: true });
}
