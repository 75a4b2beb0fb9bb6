// E2B's snapshots in the sessions bucket (cluster mode; docs/storage.md, "Snapshots"):
// what ContainerSnapshots::capture_state put in a folder, under
// <prefix>snapshots/<md5 of the owner>/<snapshot id>/:
//
//   volume.extents   "sandboxd-extents 1", the image's apparent size, then one
//                    "<offset> <length>" line per extent that holds data
//   volume.data      those extents' bytes, one after the other
//   memory/<path>    the checkpoint of the sandbox's memory, file by file (gvisor tier)
//
// The volume's image is sparse (its apparent size is the volume's quota, mostly holes):
// only its data extents go up (found with SEEK_DATA/SEEK_HOLE), and the image comes
// back as sparse as it was, its blocks at the same offsets, so that the file system in
// it is the very one captured (inodes, times, extended attributes: what a restored
// gVisor checkpoint finds again). A tree of files would lose that; an object per extent
// would be thousands of requests for a fragmented image.
//
// Every call blocks on curl and the disk: they run on the blocking pool
// (base/blocking.h), never on an I/O thread.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "service/cluster_hooks.h"
#include "store/s3_client.h"

namespace sandboxd::cluster {

class SnapshotBucket : public service::SnapshotBucket {
 public:
  // `part_bytes`: storage.s3.partSize (a body past it goes up in parts of that size).
  SnapshotBucket(std::shared_ptr<store::S3Client> client, std::string prefix, uint64_t part_bytes,
                 int retry_after_sec);

  boost::asio::awaitable<Result<void>> upload(std::string owner, std::string id, std::string folder) override;
  boost::asio::awaitable<Result<void>> download(std::string owner, std::string id,
                                                std::string folder) override;
  boost::asio::awaitable<void> remove(std::string owner, std::string id) override;

  // The snapshot's folder in the bucket: <prefix>snapshots/<md5 of owner>/<id>/ (an owner
  // is any string a credential names; its hash is always a key's valid part).
  std::string prefix_of(const std::string& owner, const std::string& id) const;

 private:
  struct Failure {
    bool local = false;  // the disk, not the bucket
    std::string why;
  };
  std::optional<Failure> upload_blocking(const std::string& prefix, const std::string& folder);
  std::optional<Failure> download_blocking(const std::string& prefix, const std::string& folder);
  void remove_blocking(const std::string& prefix);

  std::shared_ptr<store::S3Client> client_;
  std::string prefix_;
  uint64_t part_bytes_;
  int retry_after_sec_;
};

}  // namespace sandboxd::cluster
