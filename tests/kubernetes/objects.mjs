// What the tests of deploy/ share: rendered YAML as objects, each validated against the
// Kubernetes schemas (kubernetes-models, and the Prometheus Operator's for its
// monitoring.coreos.com kinds), and a pod's environment as the kubelet builds it.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import YAML from "yaml";

// The objects of a multi-document YAML stream.
export function parseObjects(text, what) {
  const docs = YAML.parseAllDocuments(text);
  for (const doc of docs) assert.deepEqual(doc.errors, [], `${what}: YAML errors`);
  const objects = docs.map((doc) => doc.toJS()).filter(Boolean);
  // kustomize folds a Secret's long base64 values into lines; the API server's decoder
  // (Go's encoding/base64) skips line breaks, the schema's "byte" format does not.
  for (const o of objects.filter((o) => o.kind === "Secret"))
    for (const key of Object.keys(o.data ?? {})) o.data[key] = o.data[key].replace(/\s+/g, "");
  return objects;
}

// kubernetes-models' class for an object: "apps/v1" StatefulSet -> kubernetes-models/apps/v1/StatefulSet.
export async function modelClass(apiVersion, kind) {
  const module = apiVersion.startsWith("monitoring.coreos.com/")
    ? `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`
    : `kubernetes-models/${apiVersion}/${kind}`;
  const loaded = await import(module).catch(() => null);
  assert.ok(loaded?.[kind], `no Kubernetes schema for ${apiVersion} ${kind}`);
  return loaded[kind];
}

export async function validateAll(objects, what) {
  for (const object of objects) {
    const Model = await modelClass(object.apiVersion, object.kind);
    assert.doesNotThrow(() => new Model(object).validate(), `${what}: ${object.kind} ${object.metadata?.name} is invalid`);
  }
}

export const only = (objects, kind) => objects.filter((o) => o.kind === kind);
export const one = (objects, kind, name) => {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  assert.equal(found.length, 1, `exactly one ${kind}${name ? " " + name : ""} (found ${found.length})`);
  return found[0];
};
export const selects = (selector, labels) => Object.entries(selector).every(([k, v]) => labels[k] === v);

// The environment of pod `podName` as the kubelet builds it: fieldRef, secretKeyRef, and
// $(VAR) expanded only from variables defined earlier in the list ($$ escapes).
export function podEnvironment(container, pod, objects) {
  const env = {};
  for (const entry of container.env ?? []) {
    let value;
    if (entry.value !== undefined) {
      value = entry.value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (match, name) =>
        match === "$$" ? "$" : name in env ? env[name] : match);
    } else if (entry.valueFrom?.fieldRef) {
      const field = entry.valueFrom.fieldRef.fieldPath;
      assert.ok(field in pod, `${entry.name}: unsupported fieldRef ${field}`);
      value = pod[field];
    } else if (entry.valueFrom?.secretKeyRef) {
      const { name, key } = entry.valueFrom.secretKeyRef;
      const secret = one(objects, "Secret", name);
      assert.ok(secret.data && key in secret.data, `${entry.name}: Secret ${name} has no key ${key}`);
      value = Buffer.from(secret.data[key], "base64").toString("utf8");
    } else {
      assert.fail(`${entry.name}: unexpected env source ${JSON.stringify(entry.valueFrom)}`);
    }
    env[entry.name] = value;
  }
  return env;
}

export function kubectl(args) {
  const result = spawnSync("kubectl", args, { encoding: "utf8" });
  if (result.error?.code === "ENOENT")
    throw new Error("kubectl is not installed: this test renders the manifests with `kubectl kustomize` " +
                    "(the machine image ships Debian's kubectl package; install kubectl >= 1.27)");
  if (result.status !== 0) throw new Error(`kubectl ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}
