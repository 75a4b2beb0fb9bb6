#include "api/file_transfer.h"

#include <unistd.h>

#include <cerrno>

#include "api/upload_buffers.h"
#include "base/blocking.h"
#include "base/unique_fd.h"
#include "base/utf8.h"
#include "cluster/bucket_upload.h"
#include "cluster/container_durability.h"
#include "ops/metrics.h"
#include "server/header_values.h"
#include "service/store_call.h"
#include "store/keys.h"
#include "store/multipart.h"

namespace sandboxd::api {
namespace {

std::string leaf(const std::string& path) { return path.substr(path.rfind('/') + 1); }

struct ByteRange {
  uint64_t first = 0, last = 0;
};

// One "bytes=a-b" range (the only form clients use for resuming and seeking).
// nullopt: not satisfiable. A header this does not understand is ignored (200).
std::optional<std::optional<ByteRange>> parse_range(std::string_view header, uint64_t size) {
  if (header.substr(0, 6) != "bytes=" || header.find(',') != std::string_view::npos)
    return std::optional<ByteRange>();
  std::string_view spec = header.substr(6);
  auto dash = spec.find('-');
  if (dash == std::string_view::npos) return std::optional<ByteRange>();
  // Digits of any length; a value past 2^64-1 saturates (RFC 9110 §14.1.2: a last-pos
  // past the end means "to the end", so 0-18446744073709551615 is the whole body).
  auto number = [](std::string_view text, uint64_t& out) {
    if (text.empty()) return false;
    out = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return false;
      uint64_t digit = static_cast<uint64_t>(c - '0');
      out = out > (UINT64_MAX - digit) / 10 ? UINT64_MAX : out * 10 + digit;
    }
    return true;
  };
  uint64_t a = 0, b = 0;
  std::string_view first = spec.substr(0, dash), last = spec.substr(dash + 1);
  if (first.empty()) {  // suffix: the last N bytes
    if (!number(last, b)) return std::optional<ByteRange>();
    if (b == 0 || size == 0) return std::nullopt;
    return std::optional<ByteRange>(ByteRange{size - std::min(b, size), size - 1});
  }
  if (!number(first, a)) return std::optional<ByteRange>();
  if (last.empty())
    b = size == 0 ? 0 : size - 1;
  else if (!number(last, b) || b < a)
    return std::optional<ByteRange>();
  if (a >= size) return std::nullopt;
  return std::optional<ByteRange>(ByteRange{a, std::min(b, size - 1)});
}

Result<std::string> checked_key(const std::string& key) {
  if (std::string problem = store::validate_key(key); !problem.empty())
    return ApiError::invalid_request("Invalid key '" + key.substr(0, 200) + "': " + problem);
  return key;
}

// Puts the body in place (on the blocking pool: the writer's last bytes, fsync and
// rename wait on the disk), then its record (an overwrite is a new file: created_at now)
// and, when `object_key` is given (the sessions bucket holds the body), its manifest row.
asio::awaitable<Result<store::FileRecord>> commit_upload(ApiContext& api, Container& container,
                                                         store::FileWriter& writer, const std::string& path,
                                                         OwnerQuotas::UploadCharge& quota,
                                                         const std::string* object_key);

// quotas.storedBytesPerOwner: what the owner stores, measured before the body is read.
asio::awaitable<OwnerQuotas::StoredBytes> stored_bytes(ApiContext& api, Container& container) {
  return api.quotas.stored_bytes(api.containers.metadata(), api.config()->stored_bytes_per_owner,
                                 container.owner);
}
Result<std::unique_ptr<OwnerQuotas::UploadCharge>> begin_upload_charge(ApiContext& api, Container& container,
                                                                       const OwnerQuotas::StoredBytes& stored,
                                                                       const std::string& path,
                                                                       std::optional<uint64_t> declared) {
  return api.quotas.begin_upload(stored, api.containers.metadata(), container.storage, path, declared);
}

// With the sessions bucket: the object is complete in the bucket first, then the local
// file and its record, then its manifest row; any failure leaves neither (the previous
// version of the key stays) and a bucket that does not answer is a 503.
asio::awaitable<Result<store::FileRecord>> finish_upload(ApiContext& api, Container& container,
                                                         store::FileWriter& writer,
                                                         cluster::BucketUpload* upload,
                                                         const std::string& path,
                                                         OwnerQuotas::UploadCharge& quota);

// The bucket's side of an upload (storage.backend s3), or none.
std::unique_ptr<cluster::BucketUpload> begin_bucket_upload(
    ApiContext& api, Container& container, asio::any_io_executor executor,
    std::optional<uint64_t> declared_size = std::nullopt) {
  if (!api.durability) return nullptr;
  return api.durability->begin_upload(container, std::move(executor), declared_size);
}

// Awaited after each chunk of a body: the bucket takes its full parts.
std::function<asio::awaitable<Result<void>>()> bucket_drain(std::unique_ptr<cluster::BucketUpload>& upload) {
  return [&upload]() -> asio::awaitable<Result<void>> {
    if (!upload) co_return Result<void>();
    co_return co_await upload->drain();
  };
}

}  // namespace

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

ApiError upload_error(ApiContext& api, store::FileError error, const std::string& path) {
  // uploads/ lives on the host's disk, not on the container's volume: ENOSPC there is the
  // host out of space, which the client can only wait out (503), not a full container (413).
  const bool on_host_disk = path.size() > kUploadsMount.size() &&
                            path.compare(0, kUploadsMount.size(), kUploadsMount) == 0 &&
                            path[kUploadsMount.size()] == '/';
  if (error == store::FileError::kNoSpace && on_host_disk) {
    ops::metrics().execution_rejected("503", "host_resources");
    return ApiError::overloaded("The host is out of disk space for uploads; try again later",
                                api.config()->retry_after_sec);
  }
  return file_error(error, path);
}

namespace {
bool under(const std::string& path, std::string_view mount) {
  return path.size() > mount.size() && path.compare(0, mount.size(), mount) == 0 && path[mount.size()] == '/';
}
}  // namespace

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

asio::awaitable<DownloadRule> download_rule(ApiContext& api, const Container& container) {
  // Most containers are not a thread's, and their id says so: no database round trip
  // for them on every file call.
  if (!api.threads || !container.id.starts_with(store::kThreadIdPrefix)) co_return DownloadRule{};
  auto find = [&api, owner = container.owner, id = container.id] {
    return api.threads->find(owner, id).has_value();
  };
  const bool thread = co_await store_call(api, std::move(find));
  if (!thread) co_return DownloadRule{};
  const auto config = api.config();
  co_return DownloadRule{
      .thread = true, .outputs = config->download_generated, .uploads = config->download_uploaded};
}

boost::json::object file_object(const std::string& container_id, const store::FileRecord& record,
                                const DownloadRule& rule) {
  const bool downloadable = rule.allows(record.path);
  return {{"id", store::file_id_for_path(record.path)},
          {"created_at", ContainerService::format_time(record.created_at)},
          // The name for display: bytes that are not UTF-8 (code in a sandbox may name a
          // file anything) show as U+FFFD; the id keeps the exact bytes.
          {"filename", to_valid_utf8(leaf(record.path))},
          {"mime_type", record.mime},
          {"size_bytes", record.size},
          {"type", "file"},
          {"downloadable", downloadable},
          {"etag", record.etag},
          {"namespace", "session"},
          {"scope", {{"id", container_id}, {"type", "session"}}}};
}

namespace {
asio::awaitable<Result<store::FileRecord>> commit_upload(ApiContext& api, Container& container,
                                                         store::FileWriter& writer, const std::string& path,
                                                         OwnerQuotas::UploadCharge& quota,
                                                         const std::string* object_key) {
  auto commit = [&writer] { return writer.commit(); };
  auto committed = co_await run_blocking(std::move(commit));
  if (!committed) co_return upload_error(api, committed.error(), path);
  store::FileRecord record = std::move(*committed);
  record.storage = container.storage;
  // The record, then (sessions bucket) its manifest row: both in the metadata database.
  auto index = [&api, &container, &record, &quota, object_key] {
    api.containers.metadata().put_file(record, /*reset_created=*/true);
    quota.committed();
    if (object_key) api.durability->commit_upload(container, record, *object_key);
    return true;
  };
  co_await store_call(api, std::move(index));
  co_return record;
}

asio::awaitable<Result<store::FileRecord>> finish_upload(ApiContext& api, Container& container,
                                                         store::FileWriter& writer,
                                                         cluster::BucketUpload* upload,
                                                         const std::string& path,
                                                         OwnerQuotas::UploadCharge& quota) {
  if (!upload) co_return co_await commit_upload(api, container, writer, path, quota, nullptr);
  if (auto sent = co_await upload->finish(); !sent) {
    writer.abort();
    co_await upload->discard();
    co_return sent.error();
  }
  auto record = co_await commit_upload(api, container, writer, path, quota, &upload->key());
  if (!record) co_await upload->discard();
  co_return record;
}
}  // namespace

asio::awaitable<Result<store::FileRecord>> copy_file(ApiContext& api, Container& from,
                                                     const std::string& from_path, Container& to,
                                                     const std::string& to_path) {
  auto open = [&api, &from, &from_path] { return api.files.open_for_read(from.paths, from_path); };
  auto opened = co_await run_blocking(std::move(open));
  if (!opened) co_return file_error(opened.error(), from_path);
  UniqueFd source(opened->fd);
  const auto stored = co_await stored_bytes(api, to);
  auto charge = [&api, &to, &stored, &to_path, size = opened->size] {
    return begin_upload_charge(api, to, stored, to_path, size);
  };
  auto quota = co_await store_call(api, std::move(charge));
  if (!quota) co_return quota.error();
  auto begin = [&api, &to, &to_path] { return api.files.begin_write(to.paths, to_path); };
  auto begun = co_await run_blocking(std::move(begin));
  if (!begun) co_return upload_error(api, begun.error(), to_path);
  std::unique_ptr<store::FileWriter> writer = std::move(*begun);
  auto upload = begin_bucket_upload(api, to, co_await asio::this_coro::executor, opened->size);
  // Chunk by chunk: the read and the write (which may wait for the writer's buffers)
  // on the blocking pool, the bucket's parts from here.
  std::string chunk(1u << 20, '\0');
  for (;;) {
    auto step = [&source, &chunk, &writer, &quota, &api, &to_path]() -> Result<size_t> {
      ssize_t n;
      do n = ::read(source.get(), chunk.data(), chunk.size());
      while (n < 0 && errno == EINTR);
      if (n < 0) return ApiError::internal();
      if (auto room = (*quota)->add(static_cast<size_t>(n)); !room) return room.error();
      if (n > 0)
        if (auto written = writer->write(chunk.data(), static_cast<size_t>(n)); !written)
          return upload_error(api, written.error(), to_path);
      return static_cast<size_t>(n);
    };
    auto copied = co_await run_blocking(std::move(step));
    Result<void> drained;
    if (copied && *copied > 0 && upload) {
      upload->append(std::string_view(chunk.data(), *copied));
      drained = co_await upload->drain();
    }
    if (!copied || !drained) {
      writer->abort();
      if (upload) co_await upload->discard();
      co_return !copied ? copied.error() : drained.error();
    }
    if (*copied == 0) break;
  }
  co_return co_await finish_upload(api, to, *writer, upload.get(), to_path, **quota);
}

asio::awaitable<Result<store::FileRecord>> receive_raw(ApiContext& api, server::RequestContext& ctx,
                                                       Container& container, const std::string& key) {
  auto valid = checked_key(key);
  if (!valid) co_return valid.error();
  std::string path = store::sandbox_path_for_key(key);
  const auto stored = co_await stored_bytes(api, container);
  auto charge = [&api, &container, &stored, &path, declared = ctx.declared_body_size()] {
    return begin_upload_charge(api, container, stored, path, declared);
  };
  auto quota = co_await store_call(api, std::move(charge));
  if (!quota) co_return quota.error();
  auto begun = api.files.begin_write(container.paths, path);
  if (!begun) co_return upload_error(api, begun.error(), path);
  std::unique_ptr<store::FileWriter> writer = std::move(*begun);
  auto upload =
      begin_bucket_upload(api, container, co_await asio::this_coro::executor, ctx.declared_body_size());
  auto on_chunk = [&](std::string_view chunk) -> Result<void> {
    if (auto room = (*quota)->add(chunk.size()); !room) return room.error();
    if (auto written = writer->write(chunk.data(), chunk.size()); !written)
      return upload_error(api, written.error(), path);
    if (upload) upload->append(chunk);
    return {};
  };
  // (Statements, not a conditional expression: GCC 12 miscompiles co_await in ?:.)
  Result<void> received;
  if (upload) {
    received = co_await ctx.read_body_stream(api.config()->max_upload_bytes, on_chunk, bucket_drain(upload));
  } else {  // read straight into the writer's buffers, hashed and written on its threads
    auto charge = [&quota](size_t size) { return (*quota)->add(size); };
    received = co_await ctx.read_body_into(api.config()->max_upload_bytes,
                                           writer_buffers(api, *writer, path, charge));
  }
  if (!received) {
    writer->abort();  // the previous version of the key stays
    if (upload) co_await upload->discard();
    co_return received.error();
  }
  co_return co_await finish_upload(api, container, *writer, upload.get(), path, **quota);
}

asio::awaitable<Result<store::FileRecord>> store_bytes(ApiContext& api, Container& container,
                                                       const std::string& key, std::string_view bytes) {
  auto valid = checked_key(key);
  if (!valid) co_return valid.error();
  if (bytes.size() > api.config()->max_upload_bytes)
    co_return ApiError::too_large("The file is " + std::to_string(bytes.size()) + " bytes; the limit is " +
                                  std::to_string(api.config()->max_upload_bytes) + " bytes");
  std::string path = store::sandbox_path_for_key(key);
  const auto stored = co_await stored_bytes(api, container);
  auto charge = [&api, &container, &stored, &path, size = uint64_t{bytes.size()}] {
    return begin_upload_charge(api, container, stored, path, size);
  };
  auto quota = co_await store_call(api, std::move(charge));
  if (!quota) co_return quota.error();
  auto begun = api.files.begin_write(container.paths, path);
  if (!begun) co_return upload_error(api, begun.error(), path);
  std::unique_ptr<store::FileWriter> writer = std::move(*begun);
  auto upload = begin_bucket_upload(api, container, co_await asio::this_coro::executor, bytes.size());
  // In pieces of at most a buffer, each awaiting room (or the bucket) as a body's chunks do.
  constexpr size_t kPiece = 1u << 20;
  for (size_t at = 0; at < bytes.size(); at += kPiece) {
    std::string_view piece = bytes.substr(at, kPiece);
    if (!upload) co_await room_in(*writer, piece.size());
    Result<void> step;
    if (auto room = (*quota)->add(piece.size()); !room) {
      step = room.error();
    } else if (auto written = writer->write(piece.data(), piece.size()); !written) {
      step = upload_error(api, written.error(), path);
    } else if (upload) {
      upload->append(piece);
      step = co_await upload->drain();
    }
    if (!step) {
      writer->abort();  // the previous version of the key stays
      if (upload) co_await upload->discard();
      co_return step.error();
    }
  }
  co_return co_await finish_upload(api, container, *writer, upload.get(), path, **quota);
}

asio::awaitable<Result<std::string>> read_file_bytes(ApiContext& api, Container& container,
                                                     const store::FileRecord& record, uint64_t limit) {
  auto read = [&api, &container, &record, limit]() -> Result<std::string> {
    auto opened = api.files.open_for_read(container.paths, record.path);
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

asio::awaitable<Result<store::FileRecord>> receive_multipart(ApiContext& api, server::RequestContext& ctx,
                                                             Container& container,
                                                             std::optional<std::string> key) {
  auto boundary =
      store::MultipartParser::boundary_from_content_type(ctx.header_value(http::field::content_type));
  if (!boundary)
    co_return ApiError::invalid_request("Expected a multipart/form-data body with a 'file' field");
  const auto stored = co_await stored_bytes(api, container);
  std::unique_ptr<store::FileWriter> writer;
  Result<std::unique_ptr<OwnerQuotas::UploadCharge>> quota = std::unique_ptr<OwnerQuotas::UploadCharge>();
  std::unique_ptr<cluster::BucketUpload> upload;
  const auto executor = co_await asio::this_coro::executor;
  std::optional<ApiError> failure;
  std::string path, path_field;
  enum class Part { kOther, kPath, kFile } current = Part::kOther;
  bool file_done = false;
  store::MultipartParser parser(
      *boundary,
      [&](const store::PartHeaders& part) {
        current = Part::kOther;
        if (part.name == "path" && !part.filename) {
          current = Part::kPath;
          path_field.clear();
          return true;
        }
        if (part.name != "file" || file_done || writer) return true;  // other fields are ignored
        std::string chosen = key ? *key : !path_field.empty() ? path_field : leaf(part.filename.value_or(""));
        if (chosen.empty()) {
          failure = ApiError::invalid_request("The 'file' part has no filename; pass ?path=KEY");
          return false;
        }
        auto valid = checked_key(chosen);
        if (!valid) {
          failure = valid.error();
          return false;
        }
        path = store::sandbox_path_for_key(chosen);
        quota = begin_upload_charge(api, container, stored, path, std::nullopt);
        if (!quota) {
          failure = quota.error();
          return false;
        }
        auto begun = api.files.begin_write(container.paths, path);
        if (!begun) {
          failure = upload_error(api, begun.error(), path);
          return false;
        }
        writer = std::move(*begun);
        upload = begin_bucket_upload(api, container, executor);
        current = Part::kFile;
        return true;
      },
      [&](std::string_view data) {
        if (current == Part::kPath) {
          path_field.append(data);
          return path_field.size() <= store::kMaxKeyLength;
        }
        if (current != Part::kFile) return true;
        if (auto room = (*quota)->add(data.size()); !room) {
          failure = room.error();
          return false;
        }
        if (auto written = writer->write(data.data(), data.size()); !written) {
          failure = upload_error(api, written.error(), path);
          return false;
        }
        if (upload) upload->append(data);
        return true;
      },
      [&]() {
        if (current == Part::kFile) file_done = true;
        current = Part::kOther;
        return true;
      });
  auto on_chunk = [&](std::string_view chunk) -> Result<void> {
    if (parser.feed(chunk)) return {};
    if (failure) return *failure;
    return ApiError::invalid_request("Malformed multipart body: " + parser.error());
  };
  // Without the bucket: room for a whole chunk awaited before it is fed, so that the
  // writer never blocks the I/O thread.
  server::RequestContext::AsyncChunkConsumer on_chunk_with_room =
      [&](std::string_view chunk) -> asio::awaitable<Result<void>> {
    if (writer) co_await room_in(*writer, chunk.size());
    co_return on_chunk(chunk);
  };
  Result<void> received;
  if (api.durability)
    received = co_await ctx.read_body_stream(api.config()->max_upload_bytes, on_chunk, bucket_drain(upload));
  else
    received = co_await ctx.read_body_stream_async(api.config()->max_upload_bytes, on_chunk_with_room);
  if (!received) {
    if (writer) writer->abort();
    if (upload) co_await upload->discard();
    co_return received.error();
  }
  if (!writer || !file_done || !parser.finished()) {
    if (writer) writer->abort();
    if (upload) co_await upload->discard();
    co_return ApiError::invalid_request(writer ? "The multipart body ended before its closing boundary"
                                               : "The multipart body has no 'file' field");
  }
  co_return co_await finish_upload(api, container, *writer, upload.get(), path, **quota);
}

asio::awaitable<Result<std::shared_ptr<Container>>> ready_container(
    ApiContext& api, Result<std::shared_ptr<Container>> container) {
  if (!container || !api.durability) co_return container;
  if (auto ready = co_await api.durability->ensure_local(*container); !ready) co_return ready.error();
  co_return container;
}

asio::awaitable<Result<server::Response>> upload_response(ApiContext& api, server::RequestContext& ctx,
                                                          Result<std::shared_ptr<Container>> container,
                                                          std::optional<std::string> raw_key) {
  if (!container) co_return container.error();
  if (api.durability) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await api.durability->ensure_local(*container); !ready) co_return ready.error();
  }
  // (Two statements, not a conditional expression: GCC 12 miscompiles co_await in ?:.)
  Result<store::FileRecord> record = ApiError::internal();
  if (raw_key)
    record = co_await receive_raw(api, ctx, **container, *raw_key);
  else
    record = co_await receive_multipart(api, ctx, **container, ctx.query_value("path"));
  if (!record) co_return record.error();
  const DownloadRule rule = co_await download_rule(api, **container);
  co_return json_ok(file_object((*container)->id, *record, rule));
}

Result<server::Response> send_content(ApiContext& api, server::RequestContext& ctx, Container& container,
                                      const store::FileRecord& record, bool inline_disposition) {
  auto opened = api.files.open_for_read(container.paths, record.path);
  if (!opened) return file_error(opened.error(), record.path);
  store::OpenedFile file = *opened;
  struct Closer {
    int& fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{file.fd};
  const std::string etag = "\"" + record.etag + "\"";
  std::string_view if_none_match = ctx.header_value(http::field::if_none_match);
  if (!if_none_match.empty() &&
      (if_none_match == "*" || if_none_match.find(etag) != std::string_view::npos)) {
    server::StringResponse not_modified{http::status::not_modified, 11};
    not_modified.set(http::field::etag, etag);
    return server::Response(std::move(not_modified));
  }
  server::FileResponse response;
  response.header.version(11);
  const bool known_type = !record.mime.empty() && server::safe_header_value(record.mime);
  response.header.set(http::field::content_type, known_type ? record.mime : "application/octet-stream");
  // Code in the sandbox wrote this body: a browser must not run it in the service's
  // origin (HTML, SVG, XML with script...). A sandbox CSP gives the document a unique
  // origin and no scripts; PDFs are left out, browsers' viewers refuse sandboxed PDFs
  // (and their scripts never reach the page's origin).
  if (record.mime.rfind("application/pdf", 0) != 0) response.header.set("Content-Security-Policy", "sandbox");
  response.header.set(http::field::etag, etag);
  response.header.set(http::field::accept_ranges, "bytes");
  response.header.set(http::field::content_disposition,
                      server::content_disposition(inline_disposition, leaf(record.path)));
  response.header.set("X-Content-Type-Options", "nosniff");
  response.length = file.size;
  response.header.result(http::status::ok);
  if (std::string_view range = ctx.header_value(http::field::range); !range.empty()) {
    auto parsed = parse_range(range, file.size);
    if (!parsed) {
      auto res = server::error_response(
          {http::status::range_not_satisfiable,
           "invalid_request_error",
           "Range not satisfiable for a file of " + std::to_string(file.size) + " bytes",
           {}});
      res.set(http::field::content_range, "bytes */" + std::to_string(file.size));
      return server::Response(std::move(res));
    }
    if (*parsed) {
      response.header.result(http::status::partial_content);
      response.offset = (*parsed)->first;
      response.length = (*parsed)->last - (*parsed)->first + 1;
      response.header.set(http::field::content_range, "bytes " + std::to_string((*parsed)->first) + "-" +
                                                          std::to_string((*parsed)->last) + "/" +
                                                          std::to_string(file.size));
    }
  }
  response.fd = file.fd;
  file.fd = -1;
  return server::Response(std::move(response));
}

}  // namespace sandboxd::api
