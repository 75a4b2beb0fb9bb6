// deploy/kubernetes rendered as an operator deploys it (`kubectl kustomize`, the base and
// every overlay), each object validated against the Kubernetes schemas (kubernetes-models,
// offline), then the properties the deployment depends on: probes, the preStop drain and
// the grace period, replicas, the headless Service, the read-only RBAC of the peers'
// watches, the pods' egress NetworkPolicy, the Secret's keys, the environment a
// pod gets (with Kubernetes' own $(VAR) rules) and the configuration file, checked by the
// sandboxd binary itself (`sandboxd config check`) with that environment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";
import { kubectl, modelClass, one, only, parseObjects, podEnvironment, selects, validateAll } from "./objects.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const deploy = path.join(repo, "deploy/kubernetes");
const sandboxd = process.env.SANDBOXD_PATH || path.join(repo, "build/sandboxd");

// What each known kustomization must render; a new overlay must be added here.
const expectations = {
  base: { replicas: 1, cluster: false },
  "overlays/single-host": { replicas: 1, cluster: false },
  "overlays/cluster": { replicas: 3, cluster: true },
};

function render(dir) {
  return parseObjects(kubectl(["kustomize", path.join(deploy, dir)]), dir);
}

const timeoutStopSec = Number(
  /^TimeoutStopSec=(\d+)$/m.exec(fs.readFileSync(path.join(repo, "packaging/sandboxd.service"), "utf8"))[1]);
const version = /project\(sandboxd VERSION ([0-9.]+)/.exec(fs.readFileSync(path.join(repo, "CMakeLists.txt"), "utf8"))[1];

test("every overlay in deploy/kubernetes/overlays is covered", () => {
  const overlays = fs.readdirSync(path.join(deploy, "overlays")).map((name) => `overlays/${name}`).sort();
  assert.deepEqual(overlays, Object.keys(expectations).filter((k) => k.startsWith("overlays/")).sort());
});

test("the schemas refuse a broken object (the validation is live)", async () => {
  const StatefulSet = await modelClass("apps/v1", "StatefulSet");
  const broken = new StatefulSet({
    metadata: { name: "broken" },
    spec: { selector: {}, serviceName: "x",
            template: { spec: { containers: [{ name: "c", image: "i", ports: [{ containerPort: "http" }] }] } } },
  });
  assert.throws(() => broken.validate(), /containerPort/);
});

for (const [dir, expected] of Object.entries(expectations)) {
  test(`${dir}: renders, validates and deploys what sandboxd needs`, async (t) => {
    const objects = render(dir);
    await validateAll(objects, dir);
    const kinds = objects.map((o) => o.kind).sort();
    assert.deepEqual(kinds, ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Namespace", "NetworkPolicy",
                             "PodDisruptionBudget", "Secret", "Service", "Service", "ServiceAccount", "StatefulSet"]);
    const namespace = one(objects, "Namespace").metadata.name;
    const clusterScoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
    for (const o of objects.filter((o) => !clusterScoped.includes(o.kind))) assert.equal(o.metadata.namespace, namespace);
    // Privileged pods are admitted only in a namespace that allows them.
    assert.equal(one(objects, "Namespace").metadata.labels["pod-security.kubernetes.io/enforce"], "privileged");

    const set = one(objects, "StatefulSet");
    const pod = set.spec.template;
    const labels = pod.metadata.labels;
    assert.ok(selects(set.spec.selector.matchLabels, labels), "the StatefulSet selects its own pods");
    assert.equal(set.spec.replicas, expected.replicas);

    // The headless Service gives each pod its stable name; the client Service spreads requests.
    const services = only(objects, "Service");
    const headless = one(objects, "Service", set.spec.serviceName);
    assert.equal(headless.spec.clusterIP, "None", "serviceName names a headless Service");
    assert.equal(headless.spec.publishNotReadyAddresses, true, "a draining holder stays reachable by name");
    const client = services.find((s) => s !== headless);
    assert.notEqual(client.spec.clusterIP, "None");
    for (const s of services) assert.ok(selects(s.spec.selector, labels), `Service ${s.metadata.name} selects the pods`);

    const [container] = pod.spec.containers;
    assert.equal(pod.spec.containers.length, 1);
    assert.equal(container.image, `sandboxd:${version}`, "the image of scripts/container-image.sh");
    const http = container.ports.find((p) => p.name === "http");
    assert.ok(http, "a port named http");
    for (const s of services) for (const p of s.spec.ports) assert.equal(p.targetPort, "http");
    assert.equal(container.livenessProbe.httpGet.path, "/health");
    assert.equal(container.livenessProbe.httpGet.port, "http");
    assert.equal(container.readinessProbe.httpGet.path, "/ready");
    assert.equal(container.readinessProbe.httpGet.port, "http");
    assert.equal(container.startupProbe.httpGet.path, "/health");
    const preStop = container.lifecycle.preStop.exec.command;
    assert.deepEqual(preStop.slice(0, 3), ["/usr/bin/sandboxd", "admin", "drain"]);
    assert.ok(container.resources.requests.cpu && container.resources.requests.memory);
    assert.ok(container.resources.limits.memory);

    // What sandboxes need (the manifest says why): loop devices (privileged), pivot_root
    // (no seccomp profile of the runtime's), mount (no AppArmor profile).
    const security = container.securityContext;
    assert.equal(security.privileged, true);
    assert.equal(security.seccompProfile.type, "Unconfined");
    assert.equal(security.appArmorProfile.type, "Unconfined");
    // The API token is the read-only account's: list and watch of what NetworkPolicy
    // peers select (namespaces, pods, Services, EndpointSlices), nothing else.
    const account = one(objects, "ServiceAccount");
    assert.equal(pod.spec.serviceAccountName, account.metadata.name);
    assert.equal(pod.spec.automountServiceAccountToken, true);
    assert.equal(account.automountServiceAccountToken, false, "no token in pods that do not ask for one");
    const role = one(objects, "ClusterRole");
    assert.deepEqual(role.rules, [
      { apiGroups: [""], resources: ["namespaces", "pods", "services"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["get", "list", "watch"] },
    ]);
    const binding = one(objects, "ClusterRoleBinding");
    assert.deepEqual(binding.roleRef, { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role.metadata.name });
    assert.deepEqual(binding.subjects, [{ kind: "ServiceAccount", name: account.metadata.name, namespace }]);

    // The pods' own egress: DNS, the API server, the other replicas (and in the cluster
    // overlay the bucket and the database), nothing else.
    const policy = one(objects, "NetworkPolicy");
    assert.ok(selects(policy.spec.podSelector.matchLabels, labels), "the NetworkPolicy covers the pods");
    assert.deepEqual(policy.spec.policyTypes, ["Egress"]);
    const ports = (rule) => rule.ports.map((p) => `${p.protocol}/${p.port}`).sort().join(",");
    const rules = policy.spec.egress;
    const dns = rules.find((r) => ports(r) === "TCP/53,UDP/53");
    assert.ok(dns, "DNS is allowed");
    assert.deepEqual(dns.to[0].podSelector, { matchExpressions: [{ key: "k8s-app", operator: "In", values: ["kube-dns"] }] },
                     "CoreDNS's pods, without the kustomization's labels");
    assert.ok(rules.some((r) => ports(r) === "TCP/443,TCP/6443" && r.to[0].ipBlock), "the API server is allowed");
    const replicas = rules.find((r) => ports(r) === "TCP/8080");
    assert.ok(replicas && selects(replicas.to[0].podSelector.matchLabels, labels), "the other replicas are allowed");
    for (const rule of rules) assert.ok(rule.to?.length && rule.ports?.length, "every rule names its peers and ports");
    const extra = rules.filter((r) => ![dns, replicas].includes(r) && ports(r) !== "TCP/443,TCP/6443").map(ports).sort();
    assert.deepEqual(extra, expected.cluster ? ["TCP/443", "TCP/5432"] : [], "the bucket and the database, in cluster mode");

    const pdb = one(objects, "PodDisruptionBudget");
    assert.ok(selects(pdb.spec.selector.matchLabels, labels), "the PodDisruptionBudget covers the pods");
    assert.ok(pdb.spec.maxUnavailable >= 1 || pdb.spec.minAvailable < expected.replicas,
              "the budget lets a node drain proceed");

    // The configuration file: the ConfigMap mounted where --config points.
    const args = container.args;
    const configPath = args[args.indexOf("--config") + 1];
    const mount = container.volumeMounts.find((m) => configPath.startsWith(m.mountPath + "/"));
    assert.ok(mount, `${configPath} is on a mounted volume`);
    const volume = pod.spec.volumes.find((v) => v.name === mount.name);
    const configMap = one(objects, "ConfigMap", volume.configMap.name);
    const configText = configMap.data[path.basename(configPath)];
    assert.ok(configText, `ConfigMap ${configMap.metadata.name} has ${path.basename(configPath)}`);
    const config = YAML.parse(configText);
    assert.equal(config.server.listen, `0.0.0.0:${http.containerPort}`);
    assert.ok(!config.auth, "no tokens in the ConfigMap (they come from the Secret)");

    // The data directory is the volumeClaimTemplate.
    const claim = set.spec.volumeClaimTemplates.find((c) =>
      container.volumeMounts.some((m) => m.name === c.metadata.name && m.mountPath === config.server.dataDir));
    assert.ok(claim, `server.dataDir (${config.server.dataDir}) is a volumeClaimTemplate`);

    // Secrets: every value a placeholder, clearly marked; every key the pod reads exists.
    const secret = one(objects, "Secret");
    for (const [key, value] of Object.entries(secret.data))
      assert.match(Buffer.from(value, "base64").toString(), /REPLACE-ME/, `Secret key ${key} is a marked placeholder`);
    const podName = `${set.metadata.name}-0`;
    const env = podEnvironment(container, { "metadata.name": podName, "metadata.namespace": namespace }, objects);
    assert.ok(env.SANDBOXD_AUTH_TOKENS && env.SANDBOXD_ADMIN_TOKEN, "tokens come from the Secret");

    // The grace period covers the drain and the exit.
    const grace = pod.spec.terminationGracePeriodSeconds;
    if (config.cluster?.shutdownGraceSec !== undefined)
      assert.ok(grace >= config.cluster.shutdownGraceSec + 10,
                `terminationGracePeriodSeconds ${grace} >= cluster.shutdownGraceSec ${config.cluster.shutdownGraceSec} + 10`);
    else assert.ok(grace >= timeoutStopSec, `terminationGracePeriodSeconds ${grace} >= the unit's TimeoutStopSec`);

    if (expected.cluster) {
      assert.equal(config.storage.backend, "s3");
      assert.equal(config.metadata.backend, "postgres");
      assert.ok(config.cluster.shutdownGraceSec > 0 && config.cluster.leaseSeconds > 0);
      assert.equal(env.SANDBOXD_REPLICA_ID, podName);
      assert.equal(env.SANDBOXD_ADVERTISE_URL,
                   `http://${podName}.${headless.metadata.name}.${namespace}.svc:${http.containerPort}`);
      for (const name of ["SANDBOXD_S3_ACCESS_KEY_ID", "SANDBOXD_S3_SECRET_ACCESS_KEY", "SANDBOXD_POSTGRES_URL"])
        assert.ok(env[name], `${name} from the Secret`);
      assert.ok(!config.storage.s3.accessKeyId && !config.storage.s3.secretAccessKey && !config.metadata.postgres?.url,
                "no credentials in the ConfigMap");
    } else {
      assert.ok(!config.cluster && !env.SANDBOXD_REPLICA_ID, "single-host: no cluster mode");
      assert.ok([undefined, "local"].includes(config.storage?.backend));
      assert.ok([undefined, "sqlite"].includes(config.metadata?.backend));
    }

    // sandboxd itself accepts the file with the pod's environment.
    assert.ok(fs.existsSync(sandboxd), `${sandboxd} is built (SANDBOXD_PATH)`);
    const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "sandboxd-k8s-"));
    try {
      const file = path.join(scratch, "config.yaml");
      fs.writeFileSync(file, configText);
      const check = spawnSync(sandboxd, ["config", "check", file],
                              { encoding: "utf8", env: { PATH: process.env.PATH, ...env } });
      assert.equal(check.status, 0, `sandboxd config check: ${check.stderr}`);
    } finally {
      fs.rmSync(scratch, { recursive: true, force: true });
    }
  });
}
