// E2B's network options (allowInternetAccess, network.allowOut/denyOut, updateNetwork and
// the sandbox's info) from E2B's own SDK, unmodified, against a real `sandboxd serve`
// whose operator policy (network.egress) is the ceiling. No machine here reaches the
// internet, so the test stands up its own "outside" as tests/egress_suite.h does: a DNS
// server of its own that sandboxd uses as its resolver, and an HTTP server on another
// loopback address of the host. curl inside the sandbox is the client. Run by CTest
// (as root: the HTTP server takes port 80) with SANDBOXD_PATH.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import https from 'node:https';
import { Sandbox, ALL_TRAFFIC, SandboxError } from 'e2b';
import { startServer, stopProgram } from '../harness.mjs';
import { startDns } from '../outside_dns.mjs';

const TOKEN = 'e2b-network-token';
let dir;
let server;
let dns;
let web;
let outsideIp;
const made = [];

// An HTTP server on port 80 of a loopback address no other run holds now, answering with
// the Host it was sent.
async function startWeb() {
  for (let x = process.pid % 200; ; x = (x + 1) % 250) {
    const address = `127.2.${x}.21`;
    const server = http.createServer((req, res) => res.end(`outside ${req.headers.host} ${req.url}\n`));
    const listening = await new Promise((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(80, address, () => resolve(true));
    });
    if (listening) return { server, address };
  }
}

// An HTTPS server on port 443 of the same address, with a certificate for vendor.test
// made here (sandboxd verifies it with network.egress.upstreamCaFile), answering with the
// Host and the X-Api-Key header it was sent.
async function startTlsWeb(address) {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=vendor.test',
    '-addext', 'subjectAltName=DNS:vendor.test', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
  { stdio: 'ignore' });
  const server = https.createServer({ key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
    (req, res) => res.end(`outside-tls ${req.headers.host} ${req.url} key=${req.headers['x-api-key'] ?? '-'}\n`));
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(443, address, resolve);
  });
  return server;
}
let tlsWeb;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-network-'));
  web = await startWeb();
  outsideIp = web.address;
  tlsWeb = await startTlsWeb(outsideIp);
  dns = await startDns({
    'allowed.test': outsideIp, 'other.test': outsideIp, 'third.test': outsideIp, 'vendor.test': outsideIp,
  });
  // The operator allows the three names (and the outside's loopback address, which a
  // name may resolve to only when a CIDR entry names it: the server connects from the host).
  configLines = [
    `auth: { tokens: [ { token: ${TOKEN}, owner: alice } ] }`,
    `network: { egress: { allow: [allowed.test, other.test, third.test, vendor.test, "${outsideIp}"], ` +
      `resolvers: ["127.0.0.1:${dns.address().port}"], upstreamCaFile: "${join(dir, 'cert.pem')}" } }`,
  ];
  await startSandboxd();
});

let configLines;
// sandboxd over the test's data folder (again after a stop: the same data).
async function startSandboxd() {
  server = await startServer(dir, 'data', configLines);
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
  process.env.E2B_API_KEY = TOKEN;
}

after(async () => {
  for (const sandbox of made) await sandbox.kill().catch(() => {});
  if (server) await stopProgram(server.child);
  if (dir) rmSync(dir, { recursive: true, force: true });
  dns?.close();
  web?.server.close();
  tlsWeb?.close();
});

async function create(opts = {}) {
  const sandbox = await Sandbox.create({ timeoutMs: 300_000, ...opts });
  made.push(sandbox);
  return sandbox;
}

// curl inside the sandbox: the body, or "exit N" (6: the name does not resolve).
async function fetchInside(sandbox, url) {
  const result = await sandbox.commands.run(`curl -sS -m 20 ${url} 2>/dev/null || echo "exit $?"`);
  return result.stdout;
}

test('without options a sandbox has the operator policy', async () => {
  const sandbox = await create();
  assert.equal(await fetchInside(sandbox, 'http://other.test/plain'), 'outside other.test /plain\n');
  const info = await sandbox.getInfo();
  assert.equal(info.allowInternetAccess, undefined);
  assert.equal(info.network, undefined);
});

test('allowInternetAccess: false refuses every outside name', async () => {
  const sandbox = await create({ allowInternetAccess: false });
  assert.equal(await fetchInside(sandbox, 'http://allowed.test/'), 'exit 6\n');
  // The name's address directly (with the name the listener expects): reset or refused.
  const direct = await fetchInside(sandbox, 'http://198.18.0.1/');
  assert.match(direct, /^exit (7|52|56)\n$/);
  assert.equal((await sandbox.getInfo()).allowInternetAccess, false);
});

test('allowOut narrows to its names; updateNetwork changes them live and they last across pause', async () => {
  const sandbox = await create({ network: { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] } });
  assert.equal(await fetchInside(sandbox, 'http://allowed.test/a'), 'outside allowed.test /a\n');
  // The operator allows other.test, the sandbox's own options do not.
  assert.equal(await fetchInside(sandbox, 'http://other.test/b'), 'exit 6\n');
  let info = await sandbox.getInfo();
  assert.deepEqual(info.network.allowOut, ['allowed.test']);
  assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC]);

  await sandbox.updateNetwork({ allowOut: ['allowed.test', 'other.test'], denyOut: ({ allTraffic }) => [allTraffic] });
  assert.equal(await fetchInside(sandbox, 'http://other.test/c'), 'outside other.test /c\n');
  assert.equal(await fetchInside(sandbox, 'http://third.test/'), 'exit 6\n');
  info = await sandbox.getInfo();
  assert.deepEqual(info.network.allowOut, ['allowed.test', 'other.test']);

  // Paused (the sandbox stopped) and resumed (a new one started): the options hold.
  assert.equal(await sandbox.pause(), true);
  const resumed = await Sandbox.connect(sandbox.sandboxId);
  assert.equal(await fetchInside(resumed, 'http://other.test/d'), 'outside other.test /d\n');
  assert.equal(await fetchInside(resumed, 'http://third.test/'), 'exit 6\n');

  // An update that leaves everything out clears it: the operator's policy again.
  await resumed.updateNetwork({});
  assert.equal(await fetchInside(resumed, 'http://third.test/e'), 'outside third.test /e\n');
  assert.equal((await resumed.getInfo()).network, undefined);
});

test('a request wider than the operator policy is a 400 that names the entry', async () => {
  await assert.rejects(create({ network: { allowOut: ['elsewhere.test'], denyOut: [ALL_TRAFFIC] } }), (error) => {
    // (E2B's SDK raises a 400 as a SandboxError whose message starts with the status.)
    assert.ok(error instanceof SandboxError, String(error));
    assert.match(error.message, /^400: 'network\.allowOut' entry 'elsewhere\.test' is not allowed by this server's egress policy/);
    return true;
  });
  await assert.rejects(create({ network: { allowOut: [ALL_TRAFFIC] } }), /^SandboxError: 400: .*'0\.0\.0\.0\/0' is not allowed/);
  const sandbox = await create({ network: { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] } });
  await assert.rejects(sandbox.updateNetwork({ allowOut: ['*.test'] }), (error) => {
    assert.ok(error instanceof SandboxError, String(error));
    assert.match(error.message, /^400: .*'\*\.test' is not allowed by this server's egress policy/);
    return true;
  });
  // Names are not taken in denyOut (E2B: deny rules are addresses and CIDRs).
  await assert.rejects(sandbox.updateNetwork({ denyOut: ['other.test'] }), /domain names are not supported/);
  // The refused update changed nothing.
  assert.equal(await fetchInside(sandbox, 'http://allowed.test/f'), 'outside allowed.test /f\n');
  assert.equal(await fetchInside(sandbox, 'http://other.test/'), 'exit 6\n');
});

test('network.rules: the header reaches the outside host, never the sandbox', async () => {
  const secret = 'e2b-secret-' + '5120';
  const sandbox = await create({
    network: { rules: { 'vendor.test': [{ transform: { headers: { 'X-Api-Key': secret } } }] } },
  });
  // The installation's CA (in the data folder), as the sandbox trusts it.
  const ca = readFileSync(join(dir, 'data', 'egress-ca', 'ca.pem'), 'utf8');
  await sandbox.commands.run(`printf '%s' '${ca}' > /tmp/sbxca.pem`);
  const result = await sandbox.commands.run('curl -sS -m 20 --noproxy "*" --cacert /tmp/sbxca.pem https://vendor.test/k');
  assert.equal(result.stdout, `outside-tls vendor.test /k key=${secret}\n`);
  // With no CA given: the sandbox's trust stores hold the installation's CA (its
  // environment names the bundle), for curl and Node alike.
  const trusted = await sandbox.commands.run('curl -sS -m 20 --noproxy "*" https://vendor.test/t');
  assert.equal(trusted.stdout, `outside-tls vendor.test /t key=${secret}\n`);
  const node = await sandbox.commands.run(`node -e "fetch('https://vendor.test/n').then((r) => r.text())` +
    `.then((t) => process.stdout.write(t), (e) => console.log(String(e.cause ?? e)))"`);
  assert.equal(node.stdout, `outside-tls vendor.test /n key=${secret}\n`);
  // A command's own value of one of those names wins (and is the only one it has).
  const own = await sandbox.commands.run('printenv SSL_CERT_FILE; env | grep -c ^SSL_CERT_FILE=',
    { envs: { SSL_CERT_FILE: '/tmp/own.pem' } });
  assert.equal(own.stdout, '/tmp/own.pem\n1\n');
  // Not in the sandbox's environment.
  const env = await sandbox.commands.run('env | grep -c "e2b-secre[t]" || true');
  assert.equal(env.stdout, '0\n');
  // The info shows the rule.
  const info = await sandbox.getInfo();
  assert.deepEqual(info.network?.rules?.['vendor.test'], [{ transform: { headers: { 'X-Api-Key': secret } } }]);
});

test('network.rules keyed by an IP address or a CIDR are a 400: rules apply by host name', async () => {
  // E2B's API takes DNS names and "*." wildcards as rule keys; TLS is intercepted by the
  // server name the client asks for, which is never an address.
  for (const key of ['198.51.100.7', '10.0.0.0/8']) {
    await assert.rejects(create({ network: { rules: { [key]: [{ transform: { headers: { 'X-Api-Key': 'k' } } }] } } }),
      (error) => {
        assert.ok(error instanceof SandboxError, String(error));
        assert.equal(error.message, `400: 'network.rules["${key}"]' is an IP address or CIDR: header rules apply ` +
          `to HTTPS by host name (the TLS server name), so a rule names a host or '*.' and one`);
        return true;
      });
  }
  const sandbox = await create({ network: { rules: { 'vendor.test': [{ transform: { headers: { 'X-Api-Key': 'k' } } }] } } });
  await assert.rejects(sandbox.updateNetwork({ rules: { '*.10.0.0.1': [{ transform: { headers: { 'X-Api-Key': 'k' } } }] } }),
    /^SandboxError: 400: 'network\.rules\["\*\.10\.0\.0\.1"\]' is an IP address or CIDR/);
  // The refused update changed nothing.
  assert.deepEqual(Object.keys((await sandbox.getInfo()).network?.rules ?? {}), ['vendor.test']);
});

test('the options are kept with the sandbox: they hold across a restart of the server', async () => {
  const sandbox = await create({ network: { allowOut: ['allowed.test'], denyOut: [ALL_TRAFFIC] } });
  assert.equal(await fetchInside(sandbox, 'http://allowed.test/r'), 'outside allowed.test /r\n');
  assert.equal(await fetchInside(sandbox, 'http://other.test/'), 'exit 6\n');
  // SIGTERM, and a new process over the same data folder.
  await stopProgram(server.child);
  await startSandboxd();
  // Its info, before anything opened its container here, shows them.
  const info = await Sandbox.getInfo(sandbox.sandboxId);
  assert.deepEqual(info.network.allowOut, ['allowed.test']);
  assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC]);
  // A sandbox started by the new process: the operator still allows other.test, the
  // sandbox's own options still do not.
  const again = await Sandbox.connect(sandbox.sandboxId);
  made.push(again);
  assert.equal(await fetchInside(again, 'http://other.test/after'), 'exit 6\n');
  assert.equal(await fetchInside(again, 'http://allowed.test/after'), 'outside allowed.test /after\n');
  // And an update made now is kept too (a connection of the sandbox checks it at once).
  await again.updateNetwork({ allowOut: ['other.test'], denyOut: [ALL_TRAFFIC] });
  assert.equal(await fetchInside(again, 'http://other.test/updated'), 'outside other.test /updated\n');
  assert.equal(await fetchInside(again, 'http://allowed.test/'), 'exit 6\n');
});
