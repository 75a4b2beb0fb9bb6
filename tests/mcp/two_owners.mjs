// The server the v2 tests share the shape of: a real `sandboxd serve` for one test file
// with two owners (alice and bob, each by its token), started before the file's tests
// and stopped after them, with every client the file made closed first.
import { before, after } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, stopProgram } from '../harness.mjs';

// `served.url` is set once the server listens; push the file's clients on `served.clients`.
export function serveTwoOwners(prefix, aliceToken, bobToken) {
  const served = { url: undefined, clients: [] };
  let dir;
  let server;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), prefix));
    server = await startServer(dir, 'data', [
      `auth: { tokens: [ { token: ${aliceToken}, owner: alice }, { token: ${bobToken}, owner: bob } ] }`,
    ]);
    served.url = server.url;
  });
  after(async () => {
    for (const client of served.clients) await client.close().catch(() => {});
    if (server) await stopProgram(server.child);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  return served;
}
