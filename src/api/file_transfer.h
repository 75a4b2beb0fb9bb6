// Moving file bodies over HTTP, shared by the Files API and the thread endpoints:
// uploads streamed from the socket to disk (multipart or raw), downloads streamed from
// disk to the socket (sendfile), with Range, ETag and If-None-Match.
#pragma once

#include <optional>
#include <string>

#include "api/routes.h"

namespace sandboxd::api {

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
};
// The rule for `container` (a thread store lookup, run as a store call).
asio::awaitable<DownloadRule> download_rule(ApiContext& api, const Container& container);

// The Files API's file object (docs/http-api.md); `downloadable` says what `rule` allows.
boost::json::object file_object(const std::string& container_id, const store::FileRecord& record,
                                const DownloadRule& rule);

// A multipart upload (field `file`). The key is `key` when given, else a `path` form
// field sent before the file, else the part's filename (its last segment).
asio::awaitable<Result<store::FileRecord>> receive_multipart(ApiContext& api, server::RequestContext& ctx,
                                                             Container& container,
                                                             std::optional<std::string> key);
// A raw body stored at `key`.
asio::awaitable<Result<store::FileRecord>> receive_raw(ApiContext& api, server::RequestContext& ctx,
                                                       Container& container, const std::string& key);

// Bytes already in memory (a body that came inside another message: an MCP tool's
// argument) stored at `key`, with the same key rules, quota, bucket copy and record as
// a raw upload.
asio::awaitable<Result<store::FileRecord>> store_bytes(ApiContext& api, Container& container,
                                                       const std::string& key, std::string_view bytes);

// A file's whole body (on the blocking pool); 413 past `limit` bytes.
asio::awaitable<Result<std::string>> read_file_bytes(ApiContext& api, Container& container,
                                                     const store::FileRecord& record, uint64_t limit);

// An upload into `container` answered with its file object: the raw body at `raw_key`
// when given, else a multipart body (key from ?path= or the part).
asio::awaitable<Result<server::Response>> upload_response(ApiContext& api, server::RequestContext& ctx,
                                                          Result<std::shared_ptr<Container>> container,
                                                          std::optional<std::string> raw_key);

// Copies the file at `from_path` in `from` (any mount) to `to_path` (under uploads/ or
// outputs/) in `to`, as an upload of it would: the owner's storage quota, the sessions
// bucket, the record. Both containers must be ready (ready_container).
asio::awaitable<Result<store::FileRecord>> copy_file(ApiContext& api, Container& from,
                                                     const std::string& from_path, Container& to,
                                                     const std::string& to_path);

// The container once its files are local (storage.backend s3: restored from the bucket
// when its local copy is missing or stale); passes errors through.
asio::awaitable<Result<std::shared_ptr<Container>>> ready_container(
    ApiContext& api, Result<std::shared_ptr<Container>> container);

// The content of a file, honouring Range and If-None-Match.
Result<server::Response> send_content(ApiContext& api, server::RequestContext& ctx, Container& container,
                                      const store::FileRecord& record, bool inline_disposition);

// Maps a store error to the API's answer.
ApiError file_error(store::FileError error, const std::string& path);
// The same for a body being received: a full host disk under uploads/ is a 503.
ApiError upload_error(ApiContext& api, store::FileError error, const std::string& path);

}  // namespace sandboxd::api
