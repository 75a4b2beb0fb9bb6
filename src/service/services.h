// The services a surface or a service-level helper reaches: the containers and their
// sandboxes, the file store, the configuration in effect, the skills and the owners'
// quotas. The surfaces' own context (api/routes.h) adds what only HTTP needs.
#pragma once

#include <memory>

#include "ops/live_config.h"
#include "service/container_service.h"
#include "service/owner_quotas.h"
#include "store/file_store.h"
#include "store/skill_store.h"
#include "store/thread_store.h"

namespace sandboxd::service {

class SkillMounts;

struct Services {
  ContainerService& containers;
  store::FileStore& files;
  ops::LiveConfig& live_config;
  store::SkillStore* skills = nullptr;  // the Skills API and container.skills
  SkillMounts* skill_mounts = nullptr;  // each request's skills in its sandbox
  OwnerQuotas quotas;                   // stored bytes, threads, skills per owner
  // The Workspace's chat threads: a container is a thread's when the thread store holds a
  // thread of the same owner and id (the thread's turns run in it; its downloads follow
  // the organisation's settings).
  store::ThreadStore* threads = nullptr;

  // The configuration in effect now: a request takes it once and keeps it.
  std::shared_ptr<const ops::Config> config() const { return live_config.get(); }
};

}  // namespace sandboxd::service
