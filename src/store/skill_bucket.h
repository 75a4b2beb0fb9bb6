// Custom skills in the sessions bucket (storage.backend s3), so that every replica of a
// cluster serves every skill: each version is written once, under keys of its own
// (versions are immutable, never overwritten),
//
//   <prefix>skills/<skill id>/<version>/files/<hex of the path>   one object per file
//   <prefix>skills/<skill id>/<version>/manifest                   written last
//
// the manifest listing the version's folders and files (path, mode, size; paths hex, as
// they are bytes). A version whose manifest is missing is incomplete (a publish cut
// short) and is never used. A replica without a local copy materialises one from these
// objects on first use, read-only like the original; a deleted skill's objects go.
//
// Every call blocks on the network and the disk: blocking threads only.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "store/s3_client.h"

namespace sandboxd::store {

// The bucket could not be read or written: the caller answers 503 (try again later).
class SkillBucketError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SkillBucket {
 public:
  SkillBucket(std::shared_ptr<S3Client> client, std::string prefix);

  // Uploads the version stored at `directory` (objects first, the manifest last).
  // Throws SkillBucketError.
  void publish(const std::string& skill_id, const std::string& version, const std::string& directory);
  // Writes the bucket's copy of the version into `staging` (a new, empty folder the
  // caller then seals and renames into place), modes as published. Throws
  // SkillBucketError, also when the version was never published whole.
  void materialise(const std::string& skill_id, const std::string& version, const std::string& staging);
  // Deletes every object of the skill (`version` empty) or of one version; false when
  // the bucket did not answer (what is left is logged by the caller).
  bool forget(const std::string& skill_id, const std::string& version = "");

  std::string version_prefix(const std::string& skill_id, const std::string& version) const;

 private:
  std::shared_ptr<S3Client> client_;
  std::string prefix_;  // "<storage prefix>skills/"
};

}  // namespace sandboxd::store
