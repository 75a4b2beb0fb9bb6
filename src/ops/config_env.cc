#include "ops/config_env.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "ops/config.h"

namespace sandboxd::ops {
namespace {

struct EnvironmentOverride {
  const char* variable;
  std::vector<const char*> path;  // the key's path in the file
  bool yaml_value;                // the value is a YAML document (a list), not a plain string
};

const std::vector<EnvironmentOverride>& environment_overrides() {
  static const std::vector<EnvironmentOverride> overrides = {
      {"SANDBOXD_AUTH_TOKENS", {"auth", "tokens"}, true},
      {"SANDBOXD_ADMIN_TOKEN", {"auth", "adminToken"}, false},
      {"SANDBOXD_REPLICA_ID", {"cluster", "replicaId"}, false},
      {"SANDBOXD_ADVERTISE_URL", {"cluster", "advertiseUrl"}, false},
  };
  return overrides;
}

}  // namespace

void apply_environment_overrides(YAML::Node& root) {
  for (const auto& entry : environment_overrides()) {
    const char* text = std::getenv(entry.variable);
    if (text == nullptr || *text == '\0') continue;
    YAML::Node value;
    if (entry.yaml_value) {
      try {
        value = YAML::Load(text);
      } catch (const YAML::Exception& e) {
        throw ConfigError(std::string(entry.variable) + ": not valid YAML: " + e.what());
      }
    } else {
      value = YAML::Node(std::string(text));  // a plain string, whatever characters it holds
    }
    if (!root || root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));
    // A section of the wrong shape is left alone: the parser names it.
    if (!root.IsMap()) continue;
    // yaml-cpp's Node::operator= writes through to the node it refers to, so the walk
    // rebinds with reset() instead.
    YAML::Node section = root;
    bool shaped = true;
    for (size_t i = 0; i + 1 < entry.path.size(); ++i) {
      const char* key = entry.path[i];
      YAML::Node child = section[key];
      if (!child || child.IsNull()) section[key] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = section[key];
      if (!next.IsMap()) {
        shaped = false;
        break;
      }
      section.reset(next);
    }
    if (shaped) section[entry.path.back()] = value;
  }
}

}  // namespace sandboxd::ops
