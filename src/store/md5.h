// MD5 of file bodies (the files' etags). An upload hashes on a thread of its own
// (store/body_pipeline.h).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <openssl/evp.h>

#include "base/hex.h"

namespace sandboxd::store {

class Md5 {
 public:
  Md5() : context_(EVP_MD_CTX_new()) {
    if (!context_ || EVP_DigestInit_ex(context_, EVP_md5(), nullptr) != 1)
      throw std::runtime_error("md5: init failed");
  }
  ~Md5() { EVP_MD_CTX_free(context_); }
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;

  void update(const char* data, size_t size) { EVP_DigestUpdate(context_, data, size); }
  std::string hex_digest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_, digest, &length);
    return hex_encode(digest, length);
  }

 private:
  EVP_MD_CTX* context_;
};

}  // namespace sandboxd::store
