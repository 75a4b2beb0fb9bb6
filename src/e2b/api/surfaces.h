// E2B's API on a server (docs/e2b.md): its control plane (/e2b), envd's processes,
// filesystem and /files over Connect (/e2b/sandbox), the code interpreter's /execute and
// /contexts, and the proxy to a sandbox's own ports. A library of its own beside the
// core (docs/architecture.md, "Why E2B is a library of its own"): the composition root
// (app/serve.cc) installs it after the core's surfaces; no core layer sees it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "api/routes.h"

namespace sandboxd::e2b {

class Sandboxes;
class Snapshots;
class Processes;

// What E2B's surfaces reach: the core surfaces' context and E2B's own service. One
// object, which the core's surfaces get as their api::ApiContext: what the composition
// sets on it later (the cluster routing's replica connections) both see.
struct ApiContext : api::ApiContext {
  Sandboxes& sandboxes;  // E2B's sandboxes over containers (e2b/service/sandboxes.h)
  Snapshots& snapshots;  // their snapshots and forks
  Processes& processes;  // envd's processes
};

// Every E2B surface's routes, each with its errors in E2B's shape (Connect's for envd's
// RPCs), and the two headers E2B's SDKs present their token in. `tokens`: the server's
// (token, owner) pairs, which envd's signed file URLs are checked against.
void install_surfaces(server::HttpServer& http, ApiContext& api,
                      std::vector<std::pair<std::string, std::string>> tokens);

}  // namespace sandboxd::e2b
