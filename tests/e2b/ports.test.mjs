// E2B's getHost(port): a process in a sandbox listens on a port and a client outside
// reaches it through the server at the host the SDK names (PORT-SANDBOXID.<domain>, the
// name resolved to the server's loopback address as wildcard DNS would), plain HTTP
// and WebSocket, only with the owner's credentials (the traffic access token among
// them). E2B's SDK unmodified. With SANDBOXD_E2B_ISOLATION=gvisor every sandbox is a
// runsc sandbox (the test is skipped where runsc is not installed). Run by CTest with
// SANDBOXD_PATH.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, createHash } from 'node:crypto';
import http from 'node:http';
import { Sandbox } from 'e2b';
import { startProgram, stopProgram } from '../harness.mjs';

const ALICE = `e2b_${'a1ce'.repeat(10)}`;
const BOB = `e2b_${'b0b0'.repeat(10)}`;
const SANDBOX_DOMAIN = 'ports.test';
const ISOLATION = process.env.SANDBOXD_E2B_ISOLATION || 'native';
const RUNSC = ['/usr/sbin/runsc', '/usr/bin/runsc', '/usr/local/sbin/runsc', '/usr/local/bin/runsc'].some(existsSync);
const SKIP = ISOLATION === 'gvisor' && !RUNSC ? 'runsc is not installed (Debian: apt-get install runsc)' : false;
let dir;
let server;
let sandbox;

function stopServerNow() {
  if (server && server.child.exitCode === null) server.child.kill('SIGTERM');
}
process.on('exit', stopServerNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    stopServerNow();
    process.exit(1);
  });

// Every name resolves to the server (wildcard DNS for the sandbox domain).
const lookup = (host, opts, done) =>
  opts && opts.all ? done(null, [{ address: '127.0.0.1', family: 4 }]) : done(null, '127.0.0.1', 4);

// A request to http://<host><path> through the server; resolves with status, headers, body.
function request(host, path, { method = 'GET', headers = {}, body, onFirstChunk } = {}) {
  const port = new URL(server.url).port;
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path, method, headers, lookup, agent: false }, (res) => {
      let text = '';
      let first = true;
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        text += chunk;
        if (first && onFirstChunk) onFirstChunk(chunk);
        first = false;
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

// An HTTP server in the sandbox (the standard library's): GET / answers what it was
// sent, POST echoes its body, /stream sends a line, waits until /release is asked,
// then sends another (an answer that a buffering proxy could never deliver in time).
const APP = `
import json, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
released = threading.Event()
class App(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/stream':
            self.send_response(200)
            self.send_header('Content-Type', 'text/plain')
            self.end_headers()
            self.wfile.write(b'first\\n')
            self.wfile.flush()
            released.wait(60)
            self.wfile.write(b'second\\n')
            return
        if self.path == '/release':
            released.set()
        body = json.dumps({'path': self.path, 'headers': {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        self.send_response(201)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(('0.0.0.0', 8000), App).serve_forever()
`;

// A WebSocket echo server with the standard library only (the image has no websockets
// module): the RFC 6455 handshake, then every text or binary frame sent back.
const WS_ECHO = `
import base64, hashlib, socket, struct, threading
GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
def exact(c, n):
    data = b''
    while len(data) < n:
        got = c.recv(n - len(data))
        if not got: raise EOFError()
        data += got
    return data
def serve(c):
    try:
        head = b''
        while b'\\r\\n\\r\\n' not in head: head += c.recv(4096)
        lines = head.split(b'\\r\\n\\r\\n')[0].decode().split('\\r\\n')
        key = [l.split(':', 1)[1].strip() for l in lines if l.lower().startswith('sec-websocket-key:')][0]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        c.sendall(('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n'
                   'Sec-WebSocket-Accept: ' + accept + '\\r\\n\\r\\n').encode())
        while True:
            b1, b2 = exact(c, 2)
            op, n = b1 & 15, b2 & 127
            if n == 126: n = struct.unpack('>H', exact(c, 2))[0]
            elif n == 127: n = struct.unpack('>Q', exact(c, 8))[0]
            mask = exact(c, 4) if b2 & 128 else b'\\0\\0\\0\\0'
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(exact(c, n)))
            if op == 8:
                c.sendall(b'\\x88\\x00')
                break
            size = bytes([n]) if n < 126 else b'\\x7e' + struct.pack('>H', n)
            c.sendall(bytes([0x80 | op]) + size + payload)
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 8765))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`;

// A client frame (masked, as RFC 6455 requires of clients) of a text message.
function textFrame(text) {
  const payload = Buffer.from(text);
  assert.ok(payload.length < 126);
  const mask = randomBytes(4);
  const masked = Buffer.from(payload.map((byte, i) => byte ^ mask[i % 4]));
  return Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, masked]);
}

// Opens a WebSocket to ws://<host>/ through the server (the handshake by hand: node 20
// has no WebSocket client that sets a Host); resolves with the socket, the 101's
// headers, and a reader of the next whole frame's text.
function openWebSocket(host, headers) {
  const port = new URL(server.url).port;
  const key = randomBytes(16).toString('base64');
  return new Promise((resolve, reject) => {
    const req = http.request({
      host, port, path: '/', lookup, agent: false,
      headers: { ...headers, Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13',
                 'Sec-WebSocket-Key': key },
    });
    req.on('upgrade', (res, socket, head) => {
      const expected = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
      let pending = head;
      const waiters = [];
      const deliver = () => {
        while (waiters.length && pending.length >= 2 && pending.length >= 2 + (pending[1] & 127)) {
          const size = pending[1] & 127;
          const frame = { opcode: pending[0] & 15, text: pending.subarray(2, 2 + size).toString() };
          pending = pending.subarray(2 + size);
          waiters.shift()(frame);
        }
      };
      socket.on('data', (chunk) => {
        pending = Buffer.concat([pending, chunk]);
        deliver();
      });
      const next = () => new Promise((done) => {
        waiters.push(done);
        deliver();
      });
      resolve({ socket, status: res.statusCode, accept: res.headers['sec-websocket-accept'], expected, next });
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => reject(new Error(`no upgrade: ${res.statusCode} ${text}`)));
    });
    req.on('error', reject);
    req.end();
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

describe(`getHost(port) on the ${ISOLATION} tier`, { skip: SKIP }, () => {
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-ports-'));
    const config = join(dir, 'server.yaml');
    writeFileSync(config, [
      `server: { listen: "127.0.0.1:0", dataDir: "${join(dir, 'data')}" }`,
      `auth: { tokens: [ { token: ${ALICE}, owner: alice }, { token: ${BOB}, owner: bob } ] }`,
      `e2b: { sandboxDomain: "${SANDBOX_DOMAIN}" }`,
      ...(ISOLATION === 'gvisor' ? ['runtime: { isolation: gvisor, gvisorPlatform: ptrace }'] : []),
      '',
    ].join('\n'));
    const started = await startProgram(process.env.SANDBOXD_PATH, ['serve', '--config', config],
                                       /listening on (http:\/\/127\.0\.0\.1:\d+)/);
    server = { child: started.child, url: started.match[1] };
    process.env.E2B_API_URL = `${server.url}/e2b`;
    process.env.E2B_SANDBOX_URL = `${server.url}/e2b/sandbox`;
    process.env.E2B_API_KEY = ALICE;
    sandbox = await Sandbox.create({ timeoutMs: 300_000 });
    await sandbox.files.write('/home/user/app.py', APP);
    await sandbox.files.write('/home/user/ws_echo.py', WS_ECHO);
    await sandbox.commands.run('python3 /home/user/app.py', { background: true });
    await sandbox.commands.run('python3 /home/user/ws_echo.py', { background: true });
  });

  after(async () => {
    if (server) {
      if (sandbox) await sandbox.kill().catch(() => {});
      await stopProgram(server.child);
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('a server in the sandbox answers at the host getHost names, with the traffic access token', async () => {
    const host = sandbox.getHost(8000);
    assert.equal(host, `8000-${sandbox.sandboxId}.${SANDBOX_DOMAIN}`);
    assert.ok(sandbox.trafficAccessToken, 'the create answer carries a traffic access token');
    const token = { 'e2b-traffic-access-token': sandbox.trafficAccessToken };
    // The server starts in the background: wait until it listens.
    assert.ok(await eventually(async () => (await request(host, '/', { headers: token })).status === 200));
    const answer = await request(host, '/some/page?q=1', { headers: token });
    assert.equal(answer.status, 200);
    const seen = JSON.parse(answer.body);
    assert.equal(seen.path, '/some/page?q=1');
    // The Host as the client sent it; the credentials never reach the sandbox's code.
    assert.equal(seen.headers.host, `${host}:${new URL(server.url).port}`);
    assert.equal(seen.headers['e2b-traffic-access-token'], undefined);
    assert.equal(seen.headers['e2b-sandbox-id'], undefined);
    // A body both ways; the owner's API key opens the port too.
    const body = 'x'.repeat(300_000);
    const echoed = await request(host, '/echo', { method: 'POST', body, headers: { 'X-API-Key': ALICE } });
    assert.equal(echoed.status, 201);
    assert.equal(echoed.body, body);
  });

  test('an answer streams as the sandbox sends it', async () => {
    const host = sandbox.getHost(8000);
    const token = { 'e2b-traffic-access-token': sandbox.trafficAccessToken };
    let firstChunk;
    const firstArrived = new Promise((resolve) => { firstChunk = resolve; });
    const streaming = request(host, '/stream', { headers: token, onFirstChunk: firstChunk });
    // The first line arrives while the answer is open: only then is it released.
    assert.equal(await firstArrived, 'first\n');
    assert.equal((await request(host, '/release', { headers: token })).status, 200);
    const streamed = await streaming;
    assert.equal(streamed.status, 200);
    assert.equal(streamed.body, 'first\nsecond\n');
  });

  test('a WebSocket echoes through the proxy', async () => {
    const host = sandbox.getHost(8765);
    const token = { 'e2b-traffic-access-token': sandbox.trafficAccessToken };
    let ws;
    assert.ok(await eventually(async () => {
      ws = await openWebSocket(host, token).catch(() => null);
      return ws !== null;
    }));
    assert.equal(ws.status, 101);
    assert.equal(ws.accept, ws.expected);
    for (const message of ['hello', 'from outside', 'x'.repeat(100)]) {
      ws.socket.write(textFrame(message));
      const frame = await ws.next();
      assert.equal(frame.opcode, 1);
      assert.equal(frame.text, message);
    }
    ws.socket.write(Buffer.from([0x88, 0x80, 1, 2, 3, 4]));  // close
    assert.equal((await ws.next()).opcode, 8);
    await new Promise((resolve) => ws.socket.on('close', resolve).end());
  });

  test('a sandbox has at most 64 proxied connections open; a closed one frees its place', async () => {
    const host = sandbox.getHost(8765);
    const token = { 'e2b-traffic-access-token': sandbox.trafficAccessToken };
    const open = [];
    try {
      for (let i = 0; i < 64; i++) open.push(await openWebSocket(host, token));
      const refused = await request(host, '/', { headers: token });
      assert.equal(refused.status, 429);
      assert.match(JSON.parse(refused.body).message, /has 64 proxied connections open/);
      // One closes: its place is free again once the server has seen it end.
      const closing = open.pop();
      closing.socket.write(Buffer.from([0x88, 0x80, 1, 2, 3, 4]));
      await new Promise((resolve) => closing.socket.on('close', resolve).end());
      let again;
      assert.ok(await eventually(async () => {
        again = await openWebSocket(host, token).catch(() => null);
        return again !== null;
      }));
      open.push(again);
    } finally {
      for (const ws of open) ws.socket.destroy();
    }
  });

  test('without the owner\'s credentials a port is refused', async () => {
    const host = sandbox.getHost(8000);
    const anonymous = await request(host, '/');
    assert.equal(anonymous.status, 401);
    assert.equal(JSON.parse(anonymous.body).code, 401);
    const stranger = await request(host, '/', { headers: { 'e2b-traffic-access-token': BOB } });
    assert.equal(stranger.status, 502);
    assert.match(JSON.parse(stranger.body).message, /was not found/);
    await assert.rejects(openWebSocket(sandbox.getHost(8765), { 'e2b-traffic-access-token': BOB }), /no upgrade: 502/);
    // Public traffic (E2B's default: anyone with the URL) is never turned on here.
    await assert.rejects(Sandbox.create({ network: { allowPublicTraffic: true } }), /Public traffic is not available/);
  });

  test('a paused sandbox\'s port answers E2B\'s 502 (no auto-resume: pause keeps files only)', async () => {
    const other = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      assert.equal(await other.pause(), true);
      const answer = await request(other.getHost(8000), '/', { headers: { 'X-API-Key': ALICE } });
      assert.equal(answer.status, 502);
      assert.match(JSON.parse(answer.body).message, new RegExp(`Sandbox ${other.sandboxId} is paused`));
    } finally {
      await other.kill().catch(() => {});
    }
  });

  test('a port nothing listens on answers 502 with a clear message at once', async () => {
    const answer = await request(sandbox.getHost(8001), '/', { headers: { 'X-API-Key': ALICE } });
    assert.equal(answer.status, 502);
    const error = JSON.parse(answer.body);
    assert.equal(error.code, 502);
    assert.match(error.message, new RegExp(`Nothing listens on port 8001 of sandbox ${sandbox.sandboxId}`));
  });
});
