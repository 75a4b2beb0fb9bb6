// The sessions bucket: an S3-compatible object store spoken to over libcurl, each
// request signed by libcurl's own AWS SigV4 (CURLOPT_AWS_SIGV4), its XML answers read
// with expat. Bodies stream from and to file descriptors; nothing here holds a whole
// object in memory (a multipart part is the caller's buffer).
//
// Every call blocks on the network: call it from a blocking thread
// (base/blocking.h run_blocking), never from an I/O thread. Thread-safe: each thread
// keeps its own curl handle (and so its own connections to the endpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/result.hpp>

namespace sandboxd::store {

struct S3Settings {
  std::string endpoint;  // http(s)://host[:port]
  std::string region = "us-east-1";
  std::string bucket;
  std::string access_key_id;
  std::string secret_access_key;
  bool force_path_style = false;  // endpoint/bucket/key instead of bucket.host/key
};

struct S3Error {
  enum class Kind {
    kUnreachable,  // no answer: connection refused, DNS, timeout, cut transfer
    kServer,       // 5xx (or a 200 carrying <Error>, as CompleteMultipartUpload may)
    kClient,       // 4xx: the request, the credentials or the key are wrong
    kLocal,        // reading or writing the local file failed
  };
  Kind kind = Kind::kUnreachable;
  long status = 0;      // HTTP status, 0 when there was none
  std::string code;     // S3's <Code> (NoSuchKey, AccessDenied...), when given
  std::string message;  // for the log

  bool not_found() const { return status == 404; }
  std::string describe() const;
};

// boost::system::result needs this to throw from value() (callers test has_value()).
[[noreturn]] void throw_exception_from_error(const S3Error& error, const boost::source_location& loc);

template <typename T>
using S3Result = boost::system::result<T, S3Error>;

struct S3Object {
  std::string key;
  uint64_t size = 0;
  std::string etag;  // without quotes
};

class S3Client {
 public:
  explicit S3Client(S3Settings settings);

  const S3Settings& settings() const { return settings_; }

  // A whole object from memory (small bodies) or from `size` bytes of `fd` at offset 0.
  S3Result<std::string> put_object(const std::string& key, std::string_view body);
  // `on_read` sees every byte as it is sent (to hash the body on the way).
  S3Result<std::string> put_object_from_fd(const std::string& key, int fd, uint64_t size,
                                           const std::function<void(const char*, size_t)>& on_read = {});

  // `size` bytes pulled from `pull` as they are sent, in one PUT: `pull(out, room)` fills up
  // to `room` bytes of `out` (blocking until it has some) and returns how many, or -1 to
  // cut the request (the object is then not stored; a server that keeps a cut PUT's
  // bytes is the caller's to clean up).
  S3Result<std::string> put_object_pulled(const std::string& key, uint64_t size,
                                          const std::function<long(char*, size_t)>& pull);

  // Multipart: create -> upload parts (numbered from 1, each but the last >= 5 MiB) ->
  // complete with the parts' etags in order; abort drops every part uploaded.
  S3Result<std::string> create_multipart(const std::string& key);  // the upload id
  S3Result<std::string> upload_part(const std::string& key, const std::string& upload_id, int part_number,
                                    std::string_view body);  // the part's etag
  S3Result<void> complete_multipart(const std::string& key, const std::string& upload_id,
                                    const std::vector<std::string>& part_etags);
  S3Result<void> abort_multipart(const std::string& key, const std::string& upload_id);

  // The object's bytes appended to `fd` as they arrive; returns how many.
  S3Result<uint64_t> get_object(const std::string& key, int fd);
  S3Result<S3Object> head_object(const std::string& key);
  // Deleting a missing key succeeds (S3 semantics).
  S3Result<void> delete_object(const std::string& key);
  // Every object whose key starts with `prefix` (ListObjectsV2, following continuation
  // tokens; `page_size` keys per request).
  S3Result<std::vector<S3Object>> list_objects(const std::string& prefix, size_t page_size = 1000);
  // Whether the bucket answers (a one-key listing).
  S3Result<void> check_bucket();

 private:
  struct Request;
  S3Result<std::string> perform(Request& request);
  // A PUT of `key` with the body `request` names: the ETag S3 answered.
  S3Result<std::string> put(Request& request, const std::string& key);
  std::string url_for(const std::string& key, const std::string& query) const;

  S3Settings settings_;
  std::string scheme_, host_;  // from the endpoint
};

}  // namespace sandboxd::store
