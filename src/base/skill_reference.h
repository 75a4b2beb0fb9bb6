// One entry of a request's `container.skills`: which skill, of which source, at which
// version. Parsed from /messages (model/messages_request.h), resolved by the skill
// store and mounted into a sandbox for the request (service/skill_mounts.h).
#pragma once

#include <string>

namespace sandboxd {

struct SkillReference {
  std::string type;  // "custom" | "anthropic"
  std::string skill_id;
  std::string version;  // "latest" when not given
};

}  // namespace sandboxd
