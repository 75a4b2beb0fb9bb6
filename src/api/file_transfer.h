// Moving file bodies over HTTP, shared by the Files API and the thread endpoints:
// uploads streamed from the socket into the file service (service/container_files.h:
// the quota, the bucket copy and the record are its), multipart or raw, and downloads
// streamed from disk to the socket (sendfile), with Range, ETag and If-None-Match.
#pragma once

#include <optional>
#include <string>

#include "api/routes.h"
#include "service/container_files.h"

namespace sandboxd::api {

// The Files API's file object (docs/http-api.md); `downloadable` says what `rule` allows.
boost::json::object file_object(const std::string& container_id, const store::FileRecord& record,
                                const service::DownloadRule& rule);

// A multipart upload (field `file`). The key is `key` when given, else a `path` form
// field sent before the file, else the part's filename (its last segment).
asio::awaitable<Result<store::FileRecord>> receive_multipart(ApiContext& api, server::RequestContext& ctx,
                                                             Container& container,
                                                             std::optional<std::string> key);
// A raw body stored at `key`.
asio::awaitable<Result<store::FileRecord>> receive_raw(ApiContext& api, server::RequestContext& ctx,
                                                       Container& container, const std::string& key);
// A request's whole body (up to `limit` bytes) into `upload`: read straight into the
// writer's buffers, or chunk by chunk with the bucket's parts sent between them. The
// upload is neither finished nor aborted here.
asio::awaitable<Result<void>> receive_body(server::RequestContext& ctx, service::FileUpload& upload,
                                           uint64_t limit);

// An upload into `container` answered with its file object: the raw body at `raw_key`
// when given, else a multipart body (key from ?path= or the part). `container` is
// ready (ContainerFiles::open_ready).
asio::awaitable<Result<server::Response>> upload_response(ApiContext& api, server::RequestContext& ctx,
                                                          Result<std::shared_ptr<Container>> container,
                                                          std::optional<std::string> raw_key);

// The content of a file, honouring Range and If-None-Match.
Result<server::Response> send_content(ApiContext& api, server::RequestContext& ctx, Container& container,
                                      const store::FileRecord& record, bool inline_disposition);

}  // namespace sandboxd::api
