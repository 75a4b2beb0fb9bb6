#include "store/s3_client.h"

#include <curl/curl.h>
#include <expat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "base/percent_encoding.h"

namespace sandboxd::store {
namespace {

// Connecting must be quick (an endpoint that does not answer is "unreachable", and an
// upload then fails with 503 instead of hanging); a transfer that stalls (under one
// byte a second for 30 s) is cut.
constexpr long kConnectTimeoutSec = 5;
constexpr long kStallSeconds = 30;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One handle per thread, reset before each request: its connection cache survives, so
// consecutive requests to the endpoint reuse a connection.
CURL* thread_handle() {
  struct Holder {
    CURL* handle = nullptr;
    ~Holder() {
      if (handle) curl_easy_cleanup(handle);
    }
  };
  thread_local Holder holder;
  if (!holder.handle) {
    init_curl_once();
    holder.handle = curl_easy_init();
    if (!holder.handle) throw std::runtime_error("curl_easy_init failed");
  } else {
    curl_easy_reset(holder.handle);
  }
  return holder.handle;
}

// --- XML --------------------------------------------------------------------------

// Calls on_element(path, text) at the end of every element, `path` being the names
// from the root joined by '/', e.g. "ListBucketResult/Contents/Key". Namespaces are
// dropped from names. False when the document is not well-formed.
class XmlWalker {
 public:
  using Visitor = std::function<void(const std::string& path, const std::string& text)>;
  explicit XmlWalker(Visitor visit) : visit_(std::move(visit)) {}

  bool parse(std::string_view document) {
    XML_Parser parser = XML_ParserCreate(nullptr);
    if (!parser) return false;
    XML_SetUserData(parser, this);
    XML_SetElementHandler(parser, &XmlWalker::start, &XmlWalker::end);
    XML_SetCharacterDataHandler(parser, &XmlWalker::characters);
    bool ok =
        XML_Parse(parser, document.data(), static_cast<int>(document.size()), XML_TRUE) == XML_STATUS_OK;
    XML_ParserFree(parser);
    return ok;
  }

 private:
  static void start(void* self_ptr, const XML_Char* name, const XML_Char**) {
    auto* self = static_cast<XmlWalker*>(self_ptr);
    std::string_view local(name);
    if (auto colon = local.rfind(':'); colon != std::string_view::npos) local.remove_prefix(colon + 1);
    self->lengths_.push_back(self->path_.size());
    if (!self->path_.empty()) self->path_.push_back('/');
    self->path_.append(local);
    self->text_.clear();
  }
  static void end(void* self_ptr, const XML_Char*) {
    auto* self = static_cast<XmlWalker*>(self_ptr);
    self->visit_(self->path_, self->text_);
    self->text_.clear();
    self->path_.resize(self->lengths_.back());
    self->lengths_.pop_back();
  }
  static void characters(void* self_ptr, const XML_Char* data, int length) {
    auto* self = static_cast<XmlWalker*>(self_ptr);
    if (self->text_.size() < 64 * 1024) self->text_.append(data, static_cast<size_t>(length));
  }

  Visitor visit_;
  std::string path_, text_;
  std::vector<size_t> lengths_;
};

// S3's <Error><Code>..</Code><Message>..</Message></Error>, if `body` is one.
bool parse_error_body(const std::string& body, std::string& code, std::string& message) {
  bool is_error = false;
  XmlWalker walker([&](const std::string& path, const std::string& text) {
    if (path == "Error/Code")
      code = text, is_error = true;
    else if (path == "Error/Message")
      message = text;
    else if (path == "Error")
      is_error = true;
  });
  return walker.parse(body) && is_error;
}

std::string unquote(std::string etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n' || text.back() == ' '))
    text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

std::string S3Error::describe() const {
  std::string kind_name = kind == Kind::kUnreachable ? "unreachable"
                          : kind == Kind::kServer    ? "server error"
                          : kind == Kind::kClient    ? "refused"
                                                     : "local file error";
  std::string out = "bucket " + kind_name;
  if (status) out += " (HTTP " + std::to_string(status) + ")";
  if (!code.empty()) out += " " + code;
  if (!message.empty()) out += ": " + message;
  return out;
}

void throw_exception_from_error(const S3Error& error, const boost::source_location&) {
  throw std::runtime_error(error.describe());
}

// What one request sends and where its answer goes.
struct S3Client::Request {
  const char* method = "GET";
  std::string key;    // empty: the bucket itself
  std::string query;  // already encoded, parameters in sorted order (SigV4's canonical form)
  // The body: from memory, or from an fd (pread from offset 0), or none.
  std::string_view body;
  int body_fd = -1;
  uint64_t body_size = 0;
  bool has_body = false;
  const std::function<void(const char*, size_t)>* on_read = nullptr;
  const std::function<long(char*, size_t)>* pull = nullptr;  // the body from a producer
  // The answer's body: into `sink_fd` on success when set, else returned.
  int sink_fd = -1;
  uint64_t sunk = 0;
  bool sink_failed = false;
  std::vector<std::string> headers;
  // Filled from the answer.
  long status = 0;
  std::string etag;
  uint64_t content_length = 0;
  bool head = false;

  // Transfer state.
  CURL* handle = nullptr;
  uint64_t hashed = 0;
  uint64_t sent = 0;
  std::string answer;
};

S3Client::S3Client(S3Settings settings) : settings_(std::move(settings)) {
  std::string_view endpoint = settings_.endpoint;
  auto scheme_end = endpoint.find("://");
  if (scheme_end == std::string_view::npos) throw std::invalid_argument("S3 endpoint must be an http(s) URL");
  scheme_ = std::string(endpoint.substr(0, scheme_end));
  host_ = std::string(endpoint.substr(scheme_end + 3));
  while (!host_.empty() && host_.back() == '/') host_.pop_back();
}

std::string S3Client::url_for(const std::string& key, const std::string& query) const {
  std::string url = scheme_ + "://";
  if (settings_.force_path_style)
    url += host_ + "/" + settings_.bucket;
  else
    url += settings_.bucket + "." + host_;
  url += "/";
  // Keys are made of safe characters by their makers (prefix checked by the config);
  // '/' stays a separator, anything else is encoded as SigV4 expects.
  url += percent_encode(key, /*keep_slash=*/true);
  if (!query.empty()) url += "?" + query;
  return url;
}

S3Result<std::string> S3Client::perform(Request& r) {
  CURL* curl = thread_handle();
  r.handle = curl;
  const std::string url = url_for(r.key, r.query);
  const std::string credentials = settings_.access_key_id + ":" + settings_.secret_access_key;
  const std::string sigv4 = "aws:amz:" + settings_.region + ":s3";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutSec);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, kStallSeconds);
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERPWD, credentials.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method);
  if (r.head) curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);

  curl_slist* headers = nullptr;
  // The payload is not hashed into the signature (it streams; TLS protects it on the
  // wire), as S3 allows with this marker.
  headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  // No 100-continue round trip: curl still sends "Expect: 100-continue" but does not wait
  // for the 100. (Not "Expect:" in the header list: libcurl's SigV4 signs every header of
  // that list, and would sign an empty expect header that is never sent; a verifying
  // server refuses that.)
  curl_easy_setopt(curl, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
  for (const auto& header : r.headers) headers = curl_slist_append(headers, header.c_str());
  if (r.has_body) {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(r.body_fd >= 0 || r.pull ? r.body_size : r.body.size()));
    curl_easy_setopt(curl, CURLOPT_READDATA, &r);
    curl_easy_setopt(
        curl, CURLOPT_READFUNCTION, +[](char* buffer, size_t size, size_t count, void* user) -> size_t {
          auto& req = *static_cast<Request*>(user);
          size_t room = size * count;
          if (req.pull) {
            const uint64_t left = req.body_size - req.sent;
            if (left == 0) return 0;
            const long n = (*req.pull)(buffer, static_cast<size_t>(std::min<uint64_t>(left, room)));
            if (n <= 0) return CURL_READFUNC_ABORT;  // cut by the producer (or it ran dry early)
            req.sent += static_cast<uint64_t>(n);
            return static_cast<size_t>(n);
          }
          if (req.body_fd >= 0) {
            uint64_t left = req.body_size - req.sent;
            size_t want = static_cast<size_t>(std::min<uint64_t>(left, room));
            if (want == 0) return 0;
            ssize_t n;
            do n = ::pread(req.body_fd, buffer, want, static_cast<off_t>(req.sent));
            while (n < 0 && errno == EINTR);
            if (n <= 0) {
              req.sink_failed = true;
              return CURL_READFUNC_ABORT;
            }
            // curl may rewind and send again (a redirect, a retried connection): only the
            // first pass is hashed.
            if (req.on_read && req.sent + static_cast<uint64_t>(n) > req.hashed) {
              (*req.on_read)(buffer, static_cast<size_t>(n));
              req.hashed = req.sent + static_cast<uint64_t>(n);
            }
            req.sent += static_cast<uint64_t>(n);
            return static_cast<size_t>(n);
          }
          size_t want = std::min<size_t>(req.body.size() - req.sent, room);
          std::memcpy(buffer, req.body.data() + req.sent, want);
          req.sent += want;
          return want;
        });
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(
      curl, CURLOPT_HEADERFUNCTION, +[](char* line, size_t size, size_t count, void* user) -> size_t {
        auto& req = *static_cast<Request*>(user);
        std::string_view text(line, size * count);
        if (text.rfind("HTTP/", 0) == 0) {  // a new status line (after a redirect or 100)
          req.etag.clear();
          return size * count;
        }
        auto colon = text.find(':');
        if (colon == std::string_view::npos) return size * count;
        std::string name(text.substr(0, colon));
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (name == "etag")
          req.etag = unquote(trim(text.substr(colon + 1)));
        else if (name == "content-length")
          req.content_length = std::strtoull(trim(text.substr(colon + 1)).c_str(), nullptr, 10);
        return size * count;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* user) -> size_t {
        auto& req = *static_cast<Request*>(user);
        size_t length = size * count;
        if (req.status == 0) curl_easy_getinfo(req.handle, CURLINFO_RESPONSE_CODE, &req.status);
        if (req.sink_fd >= 0 && req.status >= 200 && req.status < 300) {
          size_t done = 0;
          while (done < length) {
            ssize_t n = ::write(req.sink_fd, data + done, length - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
              req.sink_failed = true;
              return 0;  // aborts the transfer
            }
            done += static_cast<size_t>(n);
          }
          req.sunk += length;
          return length;
        }
        if (req.answer.size() < (1u << 20)) req.answer.append(data, length);  // XML answers are small
        return length;
      });

  char error_text[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_text);
  CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(headers);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);

  if (r.sink_failed) return S3Error{S3Error::Kind::kLocal, r.status, "", std::strerror(errno)};
  if (rc != CURLE_OK) {
    return S3Error{
        S3Error::Kind::kUnreachable, r.status, "",
        std::string(curl_easy_strerror(rc)) + (error_text[0] ? std::string(": ") + error_text : "")};
  }
  std::string code, message;
  if (r.status >= 300 || r.status < 200) {
    parse_error_body(r.answer, code, message);
    auto kind = r.status >= 500 ? S3Error::Kind::kServer : S3Error::Kind::kClient;
    return S3Error{kind, r.status, code, message.empty() ? r.answer.substr(0, 200) : message};
  }
  // A 200 can still carry an error (CompleteMultipartUpload fails after sending 200).
  if (!r.answer.empty() && r.answer.find("<Error") != std::string::npos &&
      parse_error_body(r.answer, code, message))
    return S3Error{S3Error::Kind::kServer, r.status, code, message};
  return std::move(r.answer);
}

S3Result<std::string> S3Client::put(Request& r, const std::string& key) {
  r.method = "PUT";
  r.key = key;
  r.has_body = true;
  auto answer = perform(r);
  if (!answer) return answer.error();
  return r.etag;
}

S3Result<std::string> S3Client::put_object(const std::string& key, std::string_view body) {
  Request r;
  r.body = body;
  return put(r, key);
}

S3Result<std::string> S3Client::put_object_from_fd(const std::string& key, int fd, uint64_t size,
                                                   const std::function<void(const char*, size_t)>& on_read) {
  Request r;
  if (on_read) r.on_read = &on_read;
  r.body_fd = fd;
  r.body_size = size;
  auto etag = put(r, key);
  if (etag && r.sent != size)
    return S3Error{S3Error::Kind::kLocal, 0, "", "the file changed size while it was sent"};
  return etag;
}

S3Result<std::string> S3Client::put_object_pulled(const std::string& key, uint64_t size,
                                                  const std::function<long(char*, size_t)>& pull) {
  Request r;
  r.pull = &pull;
  r.body_size = size;
  auto etag = put(r, key);
  if (etag && etag->empty())
    return S3Error{S3Error::Kind::kServer, r.status, "", "no ETag in the answer to PutObject"};
  return etag;
}

S3Result<std::string> S3Client::create_multipart(const std::string& key) {
  Request r;
  r.method = "POST";
  r.key = key;
  r.query = "uploads=";
  r.has_body = true;  // an empty body, sent with Content-Length: 0
  auto answer = perform(r);
  if (!answer) return answer.error();
  std::string upload_id;
  XmlWalker walker([&](const std::string& path, const std::string& text) {
    if (path == "InitiateMultipartUploadResult/UploadId") upload_id = text;
  });
  if (!walker.parse(*answer) || upload_id.empty())
    return S3Error{S3Error::Kind::kServer, r.status, "",
                   "no UploadId in the answer to CreateMultipartUpload"};
  return upload_id;
}

S3Result<std::string> S3Client::upload_part(const std::string& key, const std::string& upload_id,
                                            int part_number, std::string_view body) {
  Request r;
  r.method = "PUT";
  r.key = key;
  r.query = "partNumber=" + std::to_string(part_number) + "&uploadId=" + percent_encode(upload_id);
  r.body = body;
  r.has_body = true;
  auto answer = perform(r);
  if (!answer) return answer.error();
  if (r.etag.empty())
    return S3Error{S3Error::Kind::kServer, r.status, "", "no ETag in the answer to UploadPart"};
  return r.etag;
}

S3Result<void> S3Client::complete_multipart(const std::string& key, const std::string& upload_id,
                                            const std::vector<std::string>& part_etags) {
  std::string document = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < part_etags.size(); ++i) {
    document += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>\"" + part_etags[i] +
                "\"</ETag></Part>";
  }
  document += "</CompleteMultipartUpload>";
  Request r;
  r.method = "POST";
  r.key = key;
  r.query = "uploadId=" + percent_encode(upload_id);
  r.body = document;
  r.has_body = true;
  r.headers.push_back("Content-Type: application/xml");
  auto answer = perform(r);
  if (!answer) return answer.error();
  return {};
}

S3Result<void> S3Client::abort_multipart(const std::string& key, const std::string& upload_id) {
  Request r;
  r.method = "DELETE";
  r.key = key;
  r.query = "uploadId=" + percent_encode(upload_id);
  auto answer = perform(r);
  if (!answer && !answer.error().not_found()) return answer.error();
  return {};
}

S3Result<uint64_t> S3Client::get_object(const std::string& key, int fd) {
  Request r;
  r.key = key;
  r.sink_fd = fd;
  auto answer = perform(r);
  if (!answer) return answer.error();
  return r.sunk;
}

S3Result<S3Object> S3Client::head_object(const std::string& key) {
  Request r;
  r.method = "HEAD";
  r.key = key;
  r.head = true;
  auto answer = perform(r);
  if (!answer) return answer.error();
  return S3Object{key, r.content_length, r.etag};
}

S3Result<void> S3Client::delete_object(const std::string& key) {
  Request r;
  r.method = "DELETE";
  r.key = key;
  auto answer = perform(r);
  if (!answer && !answer.error().not_found()) return answer.error();
  return {};
}

S3Result<std::vector<S3Object>> S3Client::list_objects(const std::string& prefix, size_t page_size) {
  std::vector<S3Object> objects;
  std::string token;
  for (;;) {
    Request r;
    r.query = token.empty() ? "" : "continuation-token=" + percent_encode(token) + "&";
    r.query += "list-type=2&max-keys=" + std::to_string(page_size) + "&prefix=" + percent_encode(prefix);
    auto answer = perform(r);
    if (!answer) return answer.error();
    S3Object current;
    bool truncated = false;
    std::string next;
    XmlWalker walker([&](const std::string& path, const std::string& text) {
      if (path == "ListBucketResult/Contents/Key")
        current.key = text;
      else if (path == "ListBucketResult/Contents/Size")
        current.size = std::strtoull(text.c_str(), nullptr, 10);
      else if (path == "ListBucketResult/Contents/ETag")
        current.etag = unquote(text);
      else if (path == "ListBucketResult/Contents")
        objects.push_back(std::exchange(current, S3Object{}));
      else if (path == "ListBucketResult/IsTruncated")
        truncated = text == "true";
      else if (path == "ListBucketResult/NextContinuationToken")
        next = text;
    });
    if (!walker.parse(*answer))
      return S3Error{S3Error::Kind::kServer, r.status, "", "the answer to ListObjectsV2 is not XML"};
    if (!truncated || next.empty() || next == token) break;
    token = next;
  }
  return objects;
}

S3Result<void> S3Client::check_bucket() {
  Request r;
  r.query = "list-type=2&max-keys=1";
  auto answer = perform(r);
  if (!answer) return answer.error();
  return {};
}

}  // namespace sandboxd::store
