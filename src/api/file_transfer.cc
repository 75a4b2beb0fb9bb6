#include "api/file_transfer.h"

#include <unistd.h>

#include <cerrno>

#include <boost/asio/this_coro.hpp>

#include "base/utf8.h"
#include "server/header_values.h"
#include "store/keys.h"
#include "store/multipart.h"

namespace sandboxd::api {

using service::ContainerFiles;
using service::DownloadRule;
using service::file_error;
using service::FileUpload;
using service::sandbox_path_of_key;
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

}  // namespace

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

asio::awaitable<Result<void>> receive_body(server::RequestContext& ctx, FileUpload& upload, uint64_t limit) {
  if (!upload.to_bucket()) {
    // Read straight into the writer's buffers, hashed and written on its threads.
    server::RequestContext::BodyBuffers buffers;
    buffers.lend = [&upload] { return upload.lend(); };
    buffers.filled = [&upload](size_t size) { return upload.fill(size); };
    co_return co_await ctx.read_body_into(limit, buffers);
  }
  // (Named, not temporaries in the co_await: GCC 12 mishandles those.)
  const std::function<Result<void>(std::string_view)> on_chunk = [&upload](std::string_view chunk) {
    return upload.write(chunk);
  };
  const std::function<asio::awaitable<Result<void>>()> after_chunk = [&upload] { return upload.drain(); };
  co_return co_await ctx.read_body_stream(limit, on_chunk, after_chunk);
}

asio::awaitable<Result<store::FileRecord>> receive_raw(ApiContext& api, server::RequestContext& ctx,
                                                       Container& container, const std::string& key) {
  auto path = sandbox_path_of_key(key);
  if (!path) co_return path.error();
  ContainerFiles files(api);
  ContainerFiles::StoreOptions options{.declared_size = ctx.declared_body_size()};
  auto upload = co_await files.begin_store(container, *path, std::move(options));
  if (!upload) co_return upload.error();
  if (auto received = co_await receive_body(ctx, **upload, api.config()->max_upload_bytes); !received) {
    co_await (*upload)->abort();  // the previous version of the key stays
    co_return received.error();
  }
  co_return co_await (*upload)->finish();
}

asio::awaitable<Result<store::FileRecord>> receive_multipart(ApiContext& api, server::RequestContext& ctx,
                                                             Container& container,
                                                             std::optional<std::string> key) {
  auto boundary =
      store::MultipartParser::boundary_from_content_type(ctx.header_value(http::field::content_type));
  if (!boundary)
    co_return ApiError::invalid_request("Expected a multipart/form-data body with a 'file' field");
  ContainerFiles files(api);
  const auto stored = co_await files.stored_bytes(container);
  std::unique_ptr<FileUpload> upload;
  const auto executor = co_await asio::this_coro::executor;
  std::optional<ApiError> failure;
  std::string path_field;
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
        if (part.name != "file" || file_done || upload) return true;  // other fields are ignored
        std::string chosen = key ? *key : !path_field.empty() ? path_field : leaf(part.filename.value_or(""));
        if (chosen.empty()) {
          failure = ApiError::invalid_request("The 'file' part has no filename; pass ?path=KEY");
          return false;
        }
        auto path = sandbox_path_of_key(chosen);
        if (!path) {
          failure = path.error();
          return false;
        }
        auto started = files.start_store(container, *path, stored, {}, executor);
        if (!started) {
          failure = started.error();
          return false;
        }
        upload = std::move(*started);
        current = Part::kFile;
        return true;
      },
      [&](std::string_view data) {
        if (current == Part::kPath) {
          path_field.append(data);
          return path_field.size() <= store::kMaxKeyLength;
        }
        if (current != Part::kFile) return true;
        if (auto written = upload->write(data); !written) {
          failure = written.error();
          return false;
        }
        return true;
      },
      [&]() {
        if (current == Part::kFile) file_done = true;
        current = Part::kOther;
        return true;
      });
  // Room for a whole chunk awaited before it is fed, so that the writer never blocks
  // the I/O thread; the bucket's full parts sent after it.
  server::RequestContext::AsyncChunkConsumer on_chunk =
      [&](std::string_view chunk) -> asio::awaitable<Result<void>> {
    if (upload) co_await upload->room(chunk.size());
    if (!parser.feed(chunk)) {
      if (failure) co_return *failure;
      co_return ApiError::invalid_request("Malformed multipart body: " + parser.error());
    }
    if (upload) co_return co_await upload->drain();
    co_return Result<void>();
  };
  Result<void> received = co_await ctx.read_body_stream_async(api.config()->max_upload_bytes, on_chunk);
  if (received && (!upload || !file_done || !parser.finished()))
    received = ApiError::invalid_request(upload ? "The multipart body ended before its closing boundary"
                                                : "The multipart body has no 'file' field");
  if (!received) {
    if (upload) co_await upload->abort();
    co_return received.error();
  }
  co_return co_await upload->finish();
}

asio::awaitable<Result<server::Response>> upload_response(ApiContext& api, server::RequestContext& ctx,
                                                          Result<std::shared_ptr<Container>> container,
                                                          std::optional<std::string> raw_key) {
  if (!container) co_return container.error();
  // (Two statements, not a conditional expression: GCC 12 miscompiles co_await in ?:.)
  Result<store::FileRecord> record = ApiError::internal();
  if (raw_key)
    record = co_await receive_raw(api, ctx, **container, *raw_key);
  else
    record = co_await receive_multipart(api, ctx, **container, ctx.query_value("path"));
  if (!record) co_return record.error();
  ContainerFiles files(api);
  const DownloadRule rule = co_await files.download_rule(**container);
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
      auto res = server::error_response(ApiError::range_not_satisfiable(
          "Range not satisfiable for a file of " + std::to_string(file.size) + " bytes"));
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
