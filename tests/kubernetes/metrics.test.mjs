// Every metric the Helm chart's alerts (deploy/helm/sandboxd/files/prometheus-rules.yaml)
// and Grafana dashboard (files/grafana-dashboard.json) query is one a running
// `sandboxd serve` exports on /metrics: a server with every optional family on (the
// bucket, through s3rver; NetworkPolicy peers, whose watch has no API server to reach
// here), after one GET /ready. A histogram counts with its _bucket, _sum and _count.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import { startServer, stopProgram } from "../harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const chart = path.join(repo, "deploy/helm/sandboxd");
const s3rver = path.join(repo, "tests/s3/node_modules/s3rver/bin/s3rver.js");

const freePort = () => new Promise((resolve, reject) => {
  const server = net.createServer().listen(0, "127.0.0.1", () => {
    const { port } = server.address();
    server.close(() => resolve(port));
  }).on("error", reject);
});

// The PromQL expressions: each rule's `expr`, each dashboard target's and variable's query.
function expressions() {
  const rules = YAML.parse(fs.readFileSync(path.join(chart, "files/prometheus-rules.yaml"), "utf8"));
  const dashboard = JSON.parse(fs.readFileSync(path.join(chart, "files/grafana-dashboard.json"), "utf8"));
  const found = [];
  for (const group of rules.groups) for (const rule of group.rules) found.push([`alert ${rule.alert}`, rule.expr]);
  for (const panel of dashboard.panels)
    for (const target of panel.targets ?? []) found.push([`panel "${panel.title}"`, target.expr]);
  for (const variable of dashboard.templating.list)
    if (variable.type === "query") found.push([`variable ${variable.name}`, variable.query]);
  return found;
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sandboxd-metrics-"));
const children = [];
after(async () => {
  for (const child of children.reverse()) await stopProgram(child);
  fs.rmSync(scratch, { recursive: true, force: true });
});

test("every metric the alerts and the dashboard query is exported by /metrics", async () => {
  assert.ok(process.env.SANDBOXD_PATH, "SANDBOXD_PATH names the sandboxd binary");
  assert.ok(fs.existsSync(s3rver), `${s3rver} is missing: npm ci --prefix tests/s3`);

  // The bucket: s3rver (its listing tokens need OpenSSL's legacy provider), the bucket made through its API.
  const s3Port = await freePort();
  const bucketServer = spawn(process.execPath, ["--openssl-legacy-provider", s3rver, "-d", path.join(scratch, "s3"),
                                                "-a", "127.0.0.1", "-p", String(s3Port), "--silent"],
                             { stdio: "ignore" });
  children.push(bucketServer);
  const endpoint = `http://127.0.0.1:${s3Port}`;
  let made = null;
  for (let i = 0; i < 200 && made?.stdout !== "200"; ++i) {
    // curl signs as s3rver's default user (s3rver refuses an unknown access key).
    made = spawnSync("curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
                              "-u", "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT",
                              `${endpoint}/sessions`], { encoding: "utf8" });
    if (made.stdout !== "200") await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(made.stdout, "200", `s3rver made no bucket: ${made.stderr}`);

  // The peers' watch needs an API server's address, a CA and a token; none answers here.
  fs.writeFileSync(path.join(scratch, "token"), "unused\n");
  fs.copyFileSync("/etc/ssl/certs/ca-certificates.crt", path.join(scratch, "ca.crt"));
  const server = await startServer(scratch, "server", [
    "auth: { tokens: [ { token: metrics-test-token, owner: alice } ] }",
    "runtime: { prestartedSandboxes: 0 }",
    `storage: { backend: s3, s3: { endpoint: "${endpoint}", bucket: sessions, accessKeyId: S3RVER, ` +
      "secretAccessKey: S3RVER, forcePathStyle: true } }",
    "external: { opensandbox: { codeExecution: { internal: { services: [ { ipBlock: { cidr: 10.255.0.0/24 }, ports: [ { port: 443 } ] } ] } } } }",
    `kubernetes: { apiServer: "https://127.0.0.1:${await freePort()}", caFile: "${path.join(scratch, "ca.crt")}", ` +
      `tokenFile: "${path.join(scratch, "token")}", namespace: sandboxd }`,
  ]);
  children.push(server.child);

  // sandboxd_ready is the last /ready's answer (not ready here: the peers are not listed).
  const ready = await fetch(`${server.url}/ready`);
  assert.ok([200, 503].includes(ready.status));
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const exported = new Set();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    exported.add(name);
    if (type === "histogram") for (const suffix of ["_bucket", "_sum", "_count"]) exported.add(name + suffix);
  }
  assert.ok(exported.has("sandboxd_storage_flush_failures_total"), "the bucket's family is on");
  assert.ok(exported.has("sandboxd_network_peers_seconds_not_current"), "the peers' family is on");

  const found = expressions();
  assert.ok(found.length >= 20, `the rules and the dashboard hold their expressions (${found.length})`);
  for (const [where, expr] of found) {
    const names = expr.match(/\bsandboxd_[a-z0-9_]+/g) ?? [];
    assert.ok(names.length > 0, `${where} names no sandboxd metric: ${expr}`);
    for (const name of names) assert.ok(exported.has(name), `${where}: ${name} is not exported by /metrics`);
  }
});
