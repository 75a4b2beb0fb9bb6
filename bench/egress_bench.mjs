// The egress path (network.egress, docs/network.md) against a direct connection from the
// host, in one run, to the same HTTPS server of the benchmark's own (no machine here
// reaches the internet: a Node HTTPS server on another loopback address, its name
// served by the benchmark's DNS server, which sandboxd uses as its resolver):
//   - time to first byte of a small HTTPS request (a new connection each: DNS, TCP,
//     TLS, the request): curl in a sandbox, by the name's sandbox-local address, through
//     the HTTP proxy (CONNECT), and to a name with a header rule (TLS terminated by
//     sandboxd, which sets the header on each request; curl trusts the installation's CA
//     by the sandbox's own bundle), against curl on the host;
//   - the throughput of a 100 MiB download, the same four ways.
// Each side alternates round by round (the same noise for both). Printed as ratios
// (goal: throughput >= 0.8x direct).
//
// Run by scripts/bench.sh (SANDBOXD_BENCH_ONLY=egress) with SANDBOXD_PATH, as root (the
// HTTPS server takes port 443). BENCH_EGRESS_TTFB, BENCH_EGRESS_DOWNLOADS: counts (50, 5).
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, stopProgram } from '../tests/harness.mjs';
import { startDns } from '../tests/outside_dns.mjs';

const TOKEN = 'egress-bench-token';
const TTFB_ROUNDS = Number(process.env.BENCH_EGRESS_TTFB || 50);
const DOWNLOADS = Number(process.env.BENCH_EGRESS_DOWNLOADS || 5);
const MIB = 1 << 20;
const DOWNLOAD_MIB = 100;

function p50(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

const dir = mkdtempSync(join(tmpdir(), 'sandboxd-egress-bench-'));
execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=bench.test',
  '-addext', 'subjectAltName=DNS:bench.test,DNS:rule.bench.test', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
{ stdio: 'ignore' });
const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
const chunk = Buffer.alloc(MIB, 'x');
const web = https.createServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (req, res) => {
  if (req.url === '/download') {
    res.writeHead(200, { 'Content-Length': String(DOWNLOAD_MIB * MIB) });
    let sent = 0;
    const more = () => {
      while (sent < DOWNLOAD_MIB) {
        sent++;
        if (!res.write(chunk)) return res.once('drain', more);
      }
      res.end();
    };
    return more();
  }
  res.end('ok\n');
});
let address;
for (let x = process.pid % 200; !address; x = (x + 1) % 250) {
  const candidate = `127.3.${x}.21`;
  if (await new Promise((resolve) => {
    web.once('error', () => resolve(false));
    web.listen(443, candidate, () => resolve(true));
  })) address = candidate;
}
const dns = await startDns({ 'bench.test': address, 'rule.bench.test': address });
const server = await startServer(dir, 'data', [
  `auth: { tokens: [ { token: ${TOKEN}, owner: bench } ] }`,
  `network: { egress: { allow: [bench.test, rule.bench.test, "${address}"], resolvers: ["127.0.0.1:${dns.address().port}"], ` +
    `rules: [ { host: rule.bench.test, headers: { X-Bench-Key: k } } ], upstreamCaFile: "${join(dir, 'cert.pem')}" } }`,
]);
const headers = { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' };
async function bash(command) {
  const response = await fetch(`${server.url}/api/gpt/v1/containers/egress-bench/tools/bash_code_execution`,
    { method: 'POST', headers, body: JSON.stringify({ command, timeout: 600 }) });
  const result = await response.json();
  if (!response.ok || result.return_code !== 0) throw new Error(`bash ${command}: ${JSON.stringify(result)}`);
  return result.stdout;
}
// curl's -w figures, one line per run: time to first byte (s) and bytes per second.
const WRITE_OUT = "-w '%{time_starttransfer} %{speed_download}\\n'";
function parse(lines) {
  return lines.trim().split('\n').map((line) => line.split(' ').map(Number));
}
// side: 'egress' (the name's own address), 'proxy' (CONNECT) or 'rule' (the name with a
// header rule, by its own address, with no CA given: the sandbox's bundle has sandboxd's).
function inside(path, count, side) {
  const options = side === 'rule' ? "--noproxy '*'" : `--cacert /tmp/ca.pem ${side === 'proxy' ? '' : "--noproxy '*'"}`;
  const host = side === 'rule' ? 'rule.bench.test' : 'bench.test';
  return bash(`for i in $(seq ${count}); do curl -sS -o /dev/null ${options} ` +
    `${WRITE_OUT} https://${host}${path}; done`).then(parse);
}
// (Asynchronous: the HTTPS server is this process's own. A bare environment, as the
// sandbox's curl has: no CA or proxy settings of the host's.)
async function direct(path, count) {
  const { stdout } = await promisify(execFile)('bash', ['-c', `for i in $(seq ${count}); do curl -sS -o /dev/null ` +
    `--noproxy '*' --cacert ${join(dir, 'cert.pem')} --resolve bench.test:443:${address} ${WRITE_OUT} ` +
    `https://bench.test${path}; done`], { env: { PATH: '/usr/bin:/bin' } });
  return parse(stdout);
}

try {
  await bash(`printf '%s' '${cert}' > /tmp/ca.pem`);
  // Warm: the sandbox has resolved the name and its listeners are open.
  const sides = ['egress', 'proxy', 'rule'];
  for (const side of sides) await inside('/small', 2, side);
  await direct('/small', 2);
  const ttfb = { egress: [], proxy: [], rule: [], direct: [] };
  const rate = { egress: [], proxy: [], rule: [], direct: [] };
  for (let round = 0; round < TTFB_ROUNDS; round += 10) {
    const n = Math.min(10, TTFB_ROUNDS - round);
    for (const side of sides) for (const [t] of await inside('/small', n, side)) ttfb[side].push(t * 1000);
    for (const [t] of await direct('/small', n)) ttfb.direct.push(t * 1000);
  }
  for (let round = 0; round < DOWNLOADS; round++) {
    for (const side of sides) rate[side].push((await inside('/download', 1, side))[0][1] / MIB);
    rate.direct.push((await direct('/download', 1))[0][1] / MIB);
  }
  console.log(`egress: HTTPS from a sandbox through sandboxd against curl on the host (${address})`);
  for (const side of ['direct', ...sides]) {
    console.log(`  ${side.padEnd(7)} time to first byte p50 ${p50(ttfb[side]).toFixed(2).padStart(8)} ms (n=${ttfb[side].length})` +
      `   ${DOWNLOAD_MIB} MiB download p50 ${p50(rate[side]).toFixed(0).padStart(6)} MiB/s (n=${rate[side].length})`);
  }
  for (const side of sides) {
    console.log(`  ratio ${side.padEnd(7)} time to first byte ${(p50(ttfb[side]) / p50(ttfb.direct)).toFixed(2)}x direct` +
      `   throughput ${(p50(rate[side]) / p50(rate.direct)).toFixed(2)}x direct (goal >= 0.8x)`);
  }
} finally {
  await stopProgram(server.child);
  dns.close();
  web.close();
  rmSync(dir, { recursive: true, force: true });
}
