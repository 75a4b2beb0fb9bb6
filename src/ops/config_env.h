// Configuration values that may come from the environment instead of the file, for
// deployments that hand a process its identity and its secrets as environment variables
// (Kubernetes: the pod's name through the downward API, tokens from a Secret; see
// deploy/kubernetes/). A variable that is set and not empty wins over the file's value;
// the result is then validated as if the file said it, under the key's path.
//
//   SANDBOXD_AUTH_TOKENS    auth.tokens (YAML: [{token: ..., owner: ...}, ...])
//   SANDBOXD_ADMIN_TOKEN    auth.adminToken (also what `sandboxd ps`/`stop`/`admin` send)
//   SANDBOXD_REPLICA_ID     cluster.replicaId
//   SANDBOXD_ADVERTISE_URL  cluster.advertiseUrl
#pragma once

#include <yaml-cpp/yaml.h>

namespace sandboxd::ops {

// Writes each set variable into the parsed document (creating the sections it needs).
// Throws ConfigError for a variable whose value is not valid YAML where YAML is expected.
void apply_environment_overrides(YAML::Node& root);

}  // namespace sandboxd::ops
