// MD5 of file bodies (the files' etags): one-shot, and streaming for uploads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <openssl/evp.h>

#include "base/hex.h"

namespace sandboxd::store {

class Md5 {
 public:
  Md5() : context_(EVP_MD_CTX_new()) {
    if (!context_ || EVP_DigestInit_ex(context_, EVP_md5(), nullptr) != 1) throw std::runtime_error("md5: init failed");
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

// MD5 of an upload as it streams: the first bytes are hashed inline; past
// kInlineBytes the hashing moves to a worker thread fed through a small bounded queue,
// so that hashing (about 750 MB/s, inherently serial) overlaps receiving and writing.
class StreamingMd5 {
 public:
  static constexpr size_t kInlineBytes = 4u << 20;
  static constexpr size_t kQueueChunks = 8;

  ~StreamingMd5() { stop_worker(); }

  void update(const char* data, size_t size) {
    if (!worker_.joinable() && seen_ + size <= kInlineBytes) {
      seen_ += size;
      md5_.update(data, size);
      return;
    }
    seen_ += size;
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    space_.wait(lock, [&] { return queue_.size() < kQueueChunks; });
    queue_.emplace_back(data, size);
    ready_.notify_one();
  }

  std::string hex_digest() {
    stop_worker();
    return md5_.hex_digest();
  }

 private:
  void run() {
    for (;;) {
      std::string chunk;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      space_.notify_one();
      md5_.update(chunk.data(), chunk.size());
    }
  }

  void stop_worker() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    ready_.notify_one();
    worker_.join();
  }

  Md5 md5_;
  uint64_t seen_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<std::string> queue_;
  bool done_ = false;
};

}  // namespace sandboxd::store
