#include "service/container_files.h"

#include <unistd.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>

#include "base/blocking.h"
#include "base/sandbox_paths.h"
#include "base/unique_fd.h"
#include "ops/metrics.h"
#include "service/discovery.h"
#include "service/store_call.h"
#include "store/keys.h"

namespace sandboxd::service {

namespace asio = boost::asio;

namespace {

// One buffer of the writer: the most room() waits for, and the piece append() writes.
constexpr size_t kPiece = 1u << 20;

bool under(const std::string& path, std::string_view mount) {
  return path.size() > mount.size() && path.compare(0, mount.size(), mount) == 0 && path[mount.size()] == '/';
}

// Files under uploads/ and outputs/ have records (the Files API lists them, the quota
// counts them); the workspace's are code's working files, flushed with the workspace.
bool recorded(const std::string& sandbox_path) {
  return under(sandbox_path, kUploadsMount) || under(sandbox_path, kOutputsMount);
}

Result<std::string> path_of_id(const std::string& id) {
  auto path = store::path_for_file_id(id);
  if (!path) return ApiError::invalid_request("Invalid file id: " + id.substr(0, 200));
  return *path;
}

// The sandbox-path prefixes that a key prefix selects, in uploads and outputs.
std::vector<std::string> path_prefixes_for(const std::string& key_prefix) {
  const std::string uploads = std::string(kUploadsMount) + "/";
  const std::string outputs = std::string(kOutputsMount) + "/";
  const std::string outputs_key = "outputs/";
  std::vector<std::string> prefixes{uploads + key_prefix};
  if (key_prefix.rfind(outputs_key, 0) == 0)
    prefixes.push_back(outputs + key_prefix.substr(outputs_key.size()));
  else if (outputs_key.rfind(key_prefix, 0) == 0)
    prefixes.push_back(outputs);
  return prefixes;
}

}  // namespace

Result<std::string> sandbox_path_of_key(const std::string& key) {
  if (std::string problem = store::validate_key(key); !problem.empty())
    return ApiError::invalid_request("Invalid key '" + key.substr(0, 200) + "': " + problem);
  return store::sandbox_path_for_key(key);
}

// --- errors -----------------------------------------------------------------------------

ApiError file_error(store::FileError error, const std::string& path) {
  switch (error) {
    case store::FileError::kNotFound:
      return ApiError::not_found("File not found: " + path);
    case store::FileError::kNotAFile:
      return ApiError::invalid_request("Not a regular file: " + path);
    case store::FileError::kOutsideMounts:
      return ApiError::invalid_request("Path '" + path + "' does not match any session mount");
    case store::FileError::kNoSpace:
      return ApiError::too_large("Not enough space in the container for " + path);
    case store::FileError::kTooLarge:
      return ApiError::too_large("File too large: " + path);
    default:
      return ApiError::internal();
  }
}

ApiError upload_error(const Services& services, store::FileError error, const std::string& path) {
  // uploads/ lives on the host's disk, not on the container's volume: ENOSPC there is the
  // host out of space, which the client can only wait out (503), not a full container (413).
  if (error == store::FileError::kNoSpace && under(path, kUploadsMount)) {
    ops::metrics().execution_rejected("503", "host_resources");
    return ApiError::overloaded("The host is out of disk space for uploads; try again later",
                                services.config()->retry_after_sec);
  }
  return file_error(error, path);
}

namespace {
// Resumes once `bytes` (up to one buffer, 1 MiB) can be written to `writer` without
// blocking (the writer hashes and writes on threads of its own, store/body_pipeline.h;
// the I/O thread only waits, asynchronously, when they lag).
asio::awaitable<void> room_in(store::FileWriter& writer, size_t bytes) {
  if (writer.room() >= bytes) co_return;
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [&writer, bytes](auto handler) {
        // when_room may call back from one of the writer's threads: the coroutine resumes
        // on its own executor (post goes through the handler's associated executor).
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        writer.when_room(bytes, [shared] { asio::post(std::move(*shared)); });
      },
      asio::use_awaitable);
}
}  // namespace

// --- the download rule ------------------------------------------------------------------

bool DownloadRule::allows(const std::string& sandbox_path) const {
  return (outputs && under(sandbox_path, kOutputsMount)) || (uploads && under(sandbox_path, kUploadsMount));
}

ApiError DownloadRule::refusal(const std::string& sandbox_path) const {
  if (thread && under(sandbox_path, kOutputsMount))
    return ApiError::permission("Downloads of generated files are disabled by the organisation's settings");
  if (thread && under(sandbox_path, kUploadsMount))
    return ApiError::permission("Downloads of uploaded files are disabled by the organisation's settings");
  if (thread)
    return ApiError::permission(
        "Only files in /mnt/user-data/outputs/ and /mnt/user-data/uploads/ can be downloaded");
  return ApiError::permission(
      "File is not downloadable: only files in /mnt/user-data/outputs/ can be downloaded");
}

asio::awaitable<DownloadRule> ContainerFiles::download_rule(const Container& container) {
  // Most containers are not a thread's, and their id says so: no database round trip
  // for them on every file call.
  if (!services_.threads || !container.id.starts_with(store::kThreadIdPrefix)) co_return DownloadRule{};
  auto find = [threads = services_.threads, owner = container.owner, id = container.id] {
    return threads->find(owner, id).has_value();
  };
  const bool thread = co_await store_call(services_, std::move(find));
  if (!thread) co_return DownloadRule{};
  co_return DownloadRule::for_thread(*services_.config());
}

DownloadRule DownloadRule::for_thread(const ops::Config& config) {
  return DownloadRule{
      .thread = true, .outputs = config.download_generated, .uploads = config.download_uploaded};
}

// --- one upload -------------------------------------------------------------------------

FileUpload::FileUpload(Services& services, Container& container, std::string path, FileErrorWording wording,
                       std::unique_ptr<OwnerQuotas::UploadCharge> charge,
                       std::unique_ptr<store::FileWriter> writer, std::unique_ptr<BucketObjectUpload> bucket)
    : services_(services),
      container_(container),
      path_(std::move(path)),
      wording_(std::move(wording)),
      charge_(std::move(charge)),
      writer_(std::move(writer)),
      bucket_(std::move(bucket)) {}

FileUpload::~FileUpload() {
  // (The bucket upload's own destructor aborts what it sent once its parts are back.)
  if (!done_) writer_->abort();
}

Result<void> FileUpload::write(std::string_view data) {
  if (auto room = charge_->add(data.size()); !room) return room.error();
  if (!data.empty())
    if (auto written = writer_->write(data.data(), data.size()); !written)
      return wording_(written.error(), path_);
  if (bucket_) bucket_->append(data);
  return {};
}

asio::awaitable<void> FileUpload::room(size_t bytes) { co_await room_in(*writer_, std::min(bytes, kPiece)); }

asio::awaitable<Result<void>> FileUpload::drain() {
  if (!bucket_) co_return Result<void>();
  co_return co_await bucket_->drain();
}

asio::awaitable<Result<void>> FileUpload::append(std::string_view data) {
  for (size_t at = 0; at < data.size(); at += kPiece) {
    std::string_view piece = data.substr(at, kPiece);
    co_await room(piece.size());
    if (auto written = write(piece); !written) co_return written;
    if (auto drained = co_await drain(); !drained) co_return drained;
  }
  co_return Result<void>();
}

asio::awaitable<Result<std::span<char>>> FileUpload::lend() {
  std::span<char> lent = writer_->lend();
  if (lent.empty()) {
    co_await room_in(*writer_, 1);
    lent = writer_->lend();
  }
  if (lent.empty()) co_return ApiError::internal();  // room_in promised room
  co_return lent;
}

Result<void> FileUpload::fill(size_t size) {
  if (auto accepted = charge_->add(size); !accepted) return accepted;
  if (auto filled = writer_->fill(size); !filled) return wording_(filled.error(), path_);
  return {};
}

asio::awaitable<Result<store::FileRecord>> FileUpload::finish() {
  done_ = true;
  // With the sessions bucket: the object is complete in the bucket first, then the
  // local file and its record, then its manifest row; any failure leaves neither (the
  // previous version of the key stays) and a bucket that does not answer is a 503.
  if (bucket_) {
    if (auto sent = co_await bucket_->finish(); !sent) {
      writer_->abort();
      co_await bucket_->discard();
      co_return sent.error();
    }
  }
  // The body in place, on the blocking pool: the writer's last bytes, fsync and rename
  // wait on the disk.
  auto commit = [writer = writer_.get()] { return writer->commit(); };
  auto committed = co_await run_blocking(std::move(commit));
  if (!committed) {
    if (bucket_) co_await bucket_->discard();
    co_return wording_(committed.error(), path_);
  }
  store::FileRecord record = std::move(*committed);
  record.storage = container_.storage;
  BucketCopy* bucket_copy = services_.containers.durability();
  if (recorded(path_)) {
    // Its record (an overwrite is a new file: created_at now), then (sessions bucket)
    // its manifest row: both in the metadata database.
    auto index = [this, &record, bucket_copy] {
      services_.containers.metadata().put_file(record, /*reset_created=*/true);
      charge_->committed();
      if (bucket_ && bucket_copy) bucket_copy->commit_upload(container_, record, bucket_->key());
      return true;
    };
    co_await store_call(services_, std::move(index));
  } else if (bucket_copy) {
    bucket_copy->note_change(container_);  // the workspace goes up with its next flush
  }
  co_return record;
}

asio::awaitable<void> FileUpload::abort() {
  if (done_) co_return;
  done_ = true;
  writer_->abort();  // the previous version of the key stays
  if (bucket_) co_await bucket_->discard();
}

// --- the container's files --------------------------------------------------------------

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerFiles::open_ready(std::string owner,
                                                                               std::string id, bool create) {
  auto container =
      co_await services_.containers.lifecycle().async_open(std::move(owner), std::move(id), create);
  co_return co_await ready(std::move(container));
}

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerFiles::ready(
    Result<std::shared_ptr<Container>> container) {
  BucketCopy* bucket_copy = services_.containers.durability();
  if (!container || !bucket_copy) co_return container;
  if (auto ready = co_await bucket_copy->ensure_local(*container); !ready) co_return ready.error();
  co_return container;
}

asio::awaitable<OwnerQuotas::StoredBytes> ContainerFiles::stored_bytes(const Container& container) {
  return services_.quotas.stored_bytes(services_.containers.metadata(),
                                       services_.config()->stored_bytes_per_owner, container.owner);
}

Result<std::unique_ptr<FileUpload>> ContainerFiles::start_store(Container& container,
                                                                const std::string& sandbox_path,
                                                                const OwnerQuotas::StoredBytes& stored,
                                                                StoreOptions options,
                                                                asio::any_io_executor executor) {
  FileErrorWording wording = options.wording;
  if (!wording)
    wording = [&services = services_](store::FileError error, const std::string& path) {
      return upload_error(services, error, path);
    };
  auto charge = services_.quotas.begin_upload(stored, services_.containers.metadata(), container.storage,
                                              sandbox_path, options.declared_size);
  if (!charge) return charge.error();
  auto begun = services_.files.begin_write(container.paths, sandbox_path, options.workspace_too);
  if (!begun) return wording(begun.error(), sandbox_path);
  if (!options.attributes.empty() || options.workspace_too)
    // Every such upload sets the file's attributes whole: none when it sends none (a new
    // inode takes the name, without the previous version's attributes).
    (*begun)->set_extended_attributes(std::move(options.attributes));
  // Only files with records go up with their body: the workspace is flushed whole, by
  // the bucket copy's walk after the change is noted.
  std::unique_ptr<BucketObjectUpload> bucket;
  if (BucketCopy* bucket_copy = services_.containers.durability(); bucket_copy && recorded(sandbox_path))
    bucket = bucket_copy->begin_upload(container, std::move(executor), options.declared_size);
  return std::unique_ptr<FileUpload>(new FileUpload(services_, container, sandbox_path, std::move(wording),
                                                    std::move(*charge), std::move(*begun),
                                                    std::move(bucket)));
}

asio::awaitable<Result<std::unique_ptr<FileUpload>>> ContainerFiles::begin_store(
    Container& container, std::string sandbox_path, StoreOptions options,
    std::optional<OwnerQuotas::StoredBytes> stored) {
  if (!stored) stored = co_await stored_bytes(container);
  const auto executor = co_await asio::this_coro::executor;
  // The charge's lookup of the previous version and the writer's first folder and
  // file on the store's pool: a round trip may wait there, never on an I/O thread.
  auto start = [this, &container, &sandbox_path, &stored, &options, executor] {
    return start_store(container, sandbox_path, *stored, std::move(options), executor);
  };
  co_return co_await store_call(services_, std::move(start));
}

asio::awaitable<Result<store::FileRecord>> ContainerFiles::store_bytes(Container& container,
                                                                       const std::string& key,
                                                                       std::string_view bytes) {
  auto path = sandbox_path_of_key(key);
  if (!path) co_return path.error();
  const uint64_t limit = services_.config()->max_upload_bytes;
  if (bytes.size() > limit)
    co_return ApiError::too_large("The file is " + std::to_string(bytes.size()) + " bytes; the limit is " +
                                  std::to_string(limit) + " bytes");
  StoreOptions options{.declared_size = uint64_t{bytes.size()}};
  auto upload = co_await begin_store(container, *path, std::move(options));
  if (!upload) co_return upload.error();
  if (auto written = co_await (*upload)->append(bytes); !written) {
    co_await (*upload)->abort();
    co_return written.error();
  }
  co_return co_await (*upload)->finish();
}

asio::awaitable<Result<store::FileRecord>> ContainerFiles::copy(Container& from, const std::string& from_path,
                                                                Container& to, const std::string& to_path) {
  auto open = [this, &from, &from_path] { return services_.files.open_for_read(from.paths, from_path); };
  auto opened = co_await run_blocking(std::move(open));
  if (!opened) co_return file_error(opened.error(), from_path);
  UniqueFd source(opened->fd);
  StoreOptions options{.declared_size = opened->size};
  auto upload = co_await begin_store(to, to_path, std::move(options));
  if (!upload) co_return upload.error();
  FileUpload& into = **upload;
  // Chunk by chunk: the read and the write (which may wait for the writer's buffers)
  // on the blocking pool, the bucket's parts from here.
  std::string chunk(kPiece, '\0');
  for (;;) {
    auto step = [&source, &chunk, &into]() -> Result<size_t> {
      ssize_t n;
      do n = ::read(source.get(), chunk.data(), chunk.size());
      while (n < 0 && errno == EINTR);
      if (n < 0) return ApiError::internal();
      if (auto written = into.write(std::string_view(chunk.data(), static_cast<size_t>(n))); !written)
        return written.error();
      return static_cast<size_t>(n);
    };
    auto copied = co_await run_blocking(std::move(step));
    Result<void> drained;
    if (copied && *copied > 0) drained = co_await into.drain();
    if (!copied || !drained) {
      co_await into.abort();
      co_return !copied ? copied.error() : drained.error();
    }
    if (*copied == 0) break;
  }
  co_return co_await into.finish();
}

asio::awaitable<Result<store::FileRecord>> ContainerFiles::find(Container& container, const std::string& id) {
  auto path = path_of_id(id);
  if (!path) co_return path.error();
  if (!resolve_sandbox_path(container.paths, *path)) co_return ApiError::not_found("File not found: " + id);
  auto stat = [this, &container, &path] {
    return services_.files.stat_file(container.storage, container.paths, *path);
  };
  auto record = co_await run_blocking(std::move(stat));
  if (!record) co_return ApiError::not_found("File not found: " + id);
  co_return *record;
}

asio::awaitable<Result<FilePage>> ContainerFiles::list(Container& c, const FilePageQuery& query) {
  for (unsigned char ch : query.prefix)
    if (ch < 0x20 || ch == 0x7f)
      co_return ApiError::invalid_request("'prefix' must not contain control characters");
  std::optional<std::string> after, before;
  if (query.after_id) {
    auto path = path_of_id(*query.after_id);
    if (!path) co_return path.error();
    after = *path;
  }
  if (query.before_id) {
    auto path = path_of_id(*query.before_id);
    if (!path) co_return path.error();
    before = *path;
  }
  co_await before_listing(services_, c);  // files that code wrote appear here
  const auto prefixes = path_prefixes_for(query.prefix);
  // From memory when the container's records are held (no round trip, no thread hop);
  // otherwise where a round trip may wait.
  auto& metadata = services_.containers.metadata();
  auto page = metadata.cached_list_files(c.storage, prefixes, query.limit, after, before);
  if (!page) {
    auto list = [&metadata, &c, &query, &after, &before, &prefixes] {
      return metadata.list_files(c.storage, prefixes, query.limit, after, before);
    };
    page = co_await store_call(services_, std::move(list));
  }
  co_return FilePage{std::move(page->files), page->has_more};
}

asio::awaitable<Result<void>> ContainerFiles::remove(Container& c, const std::string& id) {
  auto path = path_of_id(id);
  if (!path) co_return path.error();
  if (!resolve_sandbox_path(c.paths, *path)) co_return ApiError::not_found("File not found: " + id);
  auto remove = [this, &c, &path] { return services_.files.remove(c.storage, c.paths, *path); };
  auto removed = co_await store_call(services_, std::move(remove));
  const bool gone = removed || removed.error() == store::FileError::kNotFound;
  BucketCopy* bucket_copy = services_.containers.durability();
  if (bucket_copy && gone) {  // out of the bucket's manifest before the answer
    bucket_copy->note_change(c);
    auto forget = [bucket_copy, &c, &path] { bucket_copy->forget_files(c, {*path}); };
    co_await run_blocking(std::move(forget));
  }
  if (!removed && removed.error() == store::FileError::kNotFound)
    co_return ApiError::not_found("File not found: " + id);
  if (!removed) co_return file_error(removed.error(), *path);
  co_return Result<void>();
}

asio::awaitable<size_t> ContainerFiles::remove_prefix(Container& c, const std::string& prefix) {
  std::vector<std::string> removed;
  auto remove = [this, &c, &prefix, &removed] {
    return services_.files.remove_prefix(c.storage, c.paths, prefix, &removed);
  };
  size_t count = co_await run_blocking(std::move(remove));
  BucketCopy* bucket_copy = services_.containers.durability();
  if (bucket_copy && count > 0) {  // out of the bucket's manifest before the answer
    bucket_copy->note_change(c);
    auto forget = [bucket_copy, &c, &removed] { bucket_copy->forget_files(c, removed); };
    co_await run_blocking(std::move(forget));
  }
  co_return count;
}

asio::awaitable<Result<std::string>> ContainerFiles::read_bytes(Container& container,
                                                                const store::FileRecord& record,
                                                                uint64_t limit) {
  auto read = [this, &container, &record, limit]() -> Result<std::string> {
    auto opened = services_.files.open_for_read(container.paths, record.path);
    if (!opened) return file_error(opened.error(), record.path);
    UniqueFd fd(opened->fd);
    if (opened->size > limit)
      return ApiError::too_large("File too large to return inline: " + record.path + " is " +
                                 std::to_string(opened->size) + " bytes; the limit is " +
                                 std::to_string(limit));
    std::string body(opened->size, '\0');
    size_t done = 0;
    while (done < body.size()) {
      ssize_t n = ::pread(fd.get(), body.data() + done, body.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return file_error(store::FileError::kIo, record.path);
      if (n == 0) break;  // shrank meanwhile: what is there
      done += static_cast<size_t>(n);
    }
    body.resize(done);
    return body;
  };
  co_return co_await run_blocking(std::move(read));
}

void ContainerFiles::note_change(Container& container) {
  container.index.note_change();
  if (BucketCopy* bucket_copy = services_.containers.durability()) bucket_copy->note_change(container);
}

}  // namespace sandboxd::service
