// A client of the replicas in the cluster suites with every real part
// (cluster_durability_test, cluster_consistency_test): curl with alice's token, each
// answer with its status, headers and body, and the checks those suites share.
#pragma once

#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "base/hex.h"
#include "cluster_harness.h"
#include "eventually.h"
#include "store/s3_client.h"

namespace sandboxd::testing {

inline std::string md5_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_md5(), nullptr);
  return sandboxd::hex_encode(digest, length);
}

inline std::string random_bytes(size_t n) {
  static std::mt19937_64 rng{std::random_device{}()};
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// An HTTP answer as curl saw it.
struct Answer {
  int status = 0;
  std::string headers, body;
  bool retry_after() const { return headers.find("Retry-After: ") != std::string::npos; }
  std::string describe() const { return std::to_string(status) + " " + headers + body.substr(0, 400); }
};

// curl with `token` (`args` are curl's, quoted by the caller); the headers and body pass
// through files in `scratch`, named with `counter`.
inline Answer curl_with_token(const fs::path& scratch, std::atomic<int>& counter, const std::string& token,
                              const std::string& args) {
  const std::string n = std::to_string(++counter);
  const fs::path headers = scratch / ("h-" + n), body = scratch / ("b-" + n);
  Answer answer;
  answer.status = std::atoi(sh("curl -s -D '" + headers.string() + "' -o '" + body.string() +
                               "' -w '%{http_code}' -H 'Authorization: Bearer " + token + "' " + args)
                                .c_str());
  answer.headers = read_file(headers);
  answer.body = read_file(body);
  std::error_code ec;
  fs::remove(headers, ec);
  fs::remove(body, ec);
  return answer;
}

// The same with alice's token.
inline Answer curl_as_alice(const fs::path& scratch, std::atomic<int>& counter, const std::string& args) {
  return curl_with_token(scratch, counter, Replica::kToken, args);
}

// PUT `data` as the upload `name` of `container` through `base`.
inline Answer put_as_alice(const fs::path& scratch, std::atomic<int>& counter, const std::string& base,
                           const std::string& container, const std::string& name, const std::string& data) {
  const fs::path file = scratch / ("put-" + std::to_string(++counter));
  std::ofstream(file, std::ios::binary) << data;
  Answer answer = curl_as_alice(scratch, counter,
                                "-X PUT --data-binary @" + file.string() + " '" + base +
                                    "/api/gpt/v1/files/" + name + "?scope_id=" + container + "'");
  fs::remove(file);
  return answer;
}

// The MD5 of every object under `prefix`, each read back from the bucket.
inline std::multiset<std::string> object_md5s(sandboxd::store::S3Client& bucket, const std::string& prefix) {
  std::multiset<std::string> out;
  auto listed = bucket.list_objects(prefix);
  if (!listed) return out;
  for (const auto& object : *listed) {
    char name[] = "/tmp/sandboxd-cluster-object-XXXXXX";
    int fd = mkstemp(name);
    unlink(name);
    if (bucket.get_object(object.key, fd)) {
      std::string bytes;
      char buf[65536];
      ssize_t n;
      off_t at = 0;
      while ((n = pread(fd, buf, sizeof buf, at)) > 0) bytes.append(buf, static_cast<size_t>(n)), at += n;
      out.insert(md5_hex(bytes));
    }
    close(fd);
  }
  return out;
}

}  // namespace sandboxd::testing
