// A container's files as a service, whichever surface reaches them (the Files API, the
// thread endpoints, MCP, E2B's envd, /messages' container_upload): the container opened
// and made ready, a body stored (streamed, never held whole), copied, found, listed,
// removed, and a change noted for the sessions bucket. Every rule about a file that is
// not HTTP lives here, once: the owner's stored-bytes quota (quotas.storedBytesPerOwner),
// the body's copy in the sessions bucket (storage.backend s3, reached through
// service/cluster_hooks.h), the record in the metadata, the download rule. A surface
// parses the request, calls this and maps the result to its own wire format.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "service/cluster_hooks.h"
#include "service/owner_quotas.h"
#include "service/services.h"
#include "store/atomic_writer.h"
#include "store/file_io.h"

namespace sandboxd::service {

// Which of a container's files may be downloaded. The Files API's own rule is "generated
// files only" (outputs/). A chat thread's container follows the organisation's settings
// (workspace.downloads) whichever API reaches it: outputs/ when generatedResources,
// uploads/ when uploadedResources.
struct DownloadRule {
  bool thread = false;  // the container is a chat thread's
  bool outputs = true;
  bool uploads = false;
  bool allows(const std::string& sandbox_path) const;
  // The refusal for a path it does not allow.
  ApiError refusal(const std::string& sandbox_path) const;
  // A chat thread's rule: the organisation's settings.
  static DownloadRule for_thread(const ops::Config& config);
};

// How a surface words a store error about `path` for its clients (E2B words a full
// disk as envd does, the Files API as a 413). The service's own wording is file_error.
using FileErrorWording = std::function<ApiError(store::FileError error, const std::string& path)>;
ApiError file_error(store::FileError error, const std::string& path);
// The same for a body being received: a full host disk under uploads/ is a 503 (the
// host out of space, which the client can only wait out), not a full container.
ApiError upload_error(const Services& services, store::FileError error, const std::string& path);

// The sandbox path of a Files API key (uploads/..., outputs/...); 400 for a key that
// store::validate_key refuses.
Result<std::string> sandbox_path_of_key(const std::string& key);

// One file's body on its way in: charged against its owner's stored bytes as its bytes
// arrive (a 403 past the quota), written to a temporary file that takes the name only
// at finish (the previous version stays until then, and stays on any failure), and,
// with the sessions bucket, sent there while it streams (the object complete in the
// bucket before the local file is committed). A file under uploads/ or outputs/ gets its
// record (and its manifest row) at finish; one in the workspace is bounded by the
// workspace's own size afterwards, and its change is noted for the bucket's flush.
class FileUpload {
 public:
  ~FileUpload();  // an upload neither finished nor aborted is dropped (the writer's file goes)
  FileUpload(const FileUpload&) = delete;
  FileUpload& operator=(const FileUpload&) = delete;

  const std::string& path() const { return path_; }
  // The body also streams to the bucket: fed with write() and drained after each
  // chunk, never read straight into the writer's buffers (lend/fill).
  bool to_bucket() const { return bucket_ != nullptr; }

  // The next bytes (synchronous: for a body reader's callback): the charge, the local
  // file (blocking while its buffers are full: await room() first on an I/O thread), the
  // bucket's buffer.
  Result<void> write(std::string_view data);
  // Room for `bytes` (up to 1 MiB) in the writer's buffers.
  boost::asio::awaitable<void> room(size_t bytes);
  // The bucket's full parts sent (none without the bucket): awaited after each chunk.
  boost::asio::awaitable<Result<void>> drain();
  // write() with the waits around it, for bytes of any length (in pieces of a buffer).
  boost::asio::awaitable<Result<void>> append(std::string_view data);
  // Without the bucket: the body read straight into the writer's buffers. lend() is
  // where the next bytes go; fill(n) charges and takes n bytes of it.
  boost::asio::awaitable<Result<std::span<char>>> lend();
  Result<void> fill(size_t size);

  // The body is complete: the bucket's object, then the local file (on the blocking
  // pool), then its record and manifest row. Any failure leaves the previous version.
  boost::asio::awaitable<Result<store::FileRecord>> finish();
  // Drops the body: the local file and whatever the bucket was sent.
  boost::asio::awaitable<void> abort();

 private:
  friend class ContainerFiles;
  FileUpload(Services& services, Container& container, std::string path, FileErrorWording wording,
             std::unique_ptr<OwnerQuotas::UploadCharge> charge, std::unique_ptr<store::FileWriter> writer,
             std::unique_ptr<BucketObjectUpload> bucket);
  Services& services_;
  Container& container_;
  std::string path_;
  FileErrorWording wording_;
  std::unique_ptr<OwnerQuotas::UploadCharge> charge_;
  std::unique_ptr<store::FileWriter> writer_;
  std::unique_ptr<BucketObjectUpload> bucket_;
  bool done_ = false;  // finished or aborted
};

// A page of a container's uploads and outputs by creation time.
struct FilePage {
  std::vector<store::FileRecord> files;
  bool has_more = false;
};
struct FilePageQuery {
  std::string prefix;  // a key prefix ("outputs/" selects outputs)
  size_t limit = 20;
  std::optional<std::string> after_id, before_id;  // file ids
};

class ContainerFiles {
 public:
  explicit ContainerFiles(Services& services) : services_(services) {}

  // The container (owner, id), opened (made when `create`) and ready: with the
  // sessions bucket, restored from it when its local copy is missing or stale (503
  // with Retry-After when the bucket cannot be read). Every file call starts here.
  boost::asio::awaitable<Result<std::shared_ptr<Container>>> open_ready(std::string owner, std::string id,
                                                                        bool create);
  // The same for a container already opened; passes an error through.
  boost::asio::awaitable<Result<std::shared_ptr<Container>>> ready(
      Result<std::shared_ptr<Container>> container);

  // What the owner stores now (quotas.storedBytesPerOwner), measured once for an
  // upload of several files.
  boost::asio::awaitable<OwnerQuotas::StoredBytes> stored_bytes(const Container& container);

  struct StoreOptions {
    std::optional<uint64_t> declared_size;  // the body's length when the request says it
    bool workspace_too = false;             // the workspace may be written too (E2B)
    std::vector<std::pair<std::string, std::string>> attributes;  // extended attributes at commit
    FileErrorWording wording;  // a store error in the surface's words (default: upload_error)
  };
  // Starts storing a body at `sandbox_path` of `container`, charged against `stored`.
  // Synchronous (its charge asks the metadata inline): for a parser's callback.
  Result<std::unique_ptr<FileUpload>> start_store(Container& container, const std::string& sandbox_path,
                                                  const OwnerQuotas::StoredBytes& stored,
                                                  StoreOptions options,
                                                  boost::asio::any_io_executor executor);
  // The same with the charge as a store call; the owner's stored bytes measured first
  // unless given.
  boost::asio::awaitable<Result<std::unique_ptr<FileUpload>>> begin_store(
      Container& container, std::string sandbox_path, StoreOptions options,
      std::optional<OwnerQuotas::StoredBytes> stored = std::nullopt);
  // Bytes already in memory (a body that came inside another message: an MCP tool's
  // argument) stored at `key`, as a body of that size would be.
  boost::asio::awaitable<Result<store::FileRecord>> store_bytes(Container& container, const std::string& key,
                                                                std::string_view bytes);
  // Copies the file at `from_path` in `from` (any mount) to `to_path` (under uploads/ or
  // outputs/) in `to`, as an upload of it would be stored. Both containers ready.
  boost::asio::awaitable<Result<store::FileRecord>> copy(Container& from, const std::string& from_path,
                                                         Container& to, const std::string& to_path);

  // The file with this id, synced with the disk (a changed body is hashed anew); 404.
  boost::asio::awaitable<Result<store::FileRecord>> find(Container& container, const std::string& id);
  // One page of the container's uploads and outputs (files code wrote are found first).
  boost::asio::awaitable<Result<FilePage>> list(Container& container, const FilePageQuery& query);
  // The file with this id removed (and out of the bucket's manifest before the answer).
  boost::asio::awaitable<Result<void>> remove(Container& container, const std::string& id);
  // Every file under a key prefix removed; how many.
  boost::asio::awaitable<size_t> remove_prefix(Container& container, const std::string& prefix);
  // A file's whole body (on the blocking pool); 413 past `limit` bytes.
  boost::asio::awaitable<Result<std::string>> read_bytes(Container& container,
                                                         const store::FileRecord& record, uint64_t limit);

  // Something changed in the container's folders outside a command (a file written,
  // moved or removed by path): the outputs' index is looked at again and the sessions
  // bucket copies the change at its next flush.
  void note_change(Container& container);

  // Which of the container's files may be downloaded (a thread store lookup for a
  // thread's container, as a store call).
  boost::asio::awaitable<DownloadRule> download_rule(const Container& container);

 private:
  Services& services_;
};

}  // namespace sandboxd::service
