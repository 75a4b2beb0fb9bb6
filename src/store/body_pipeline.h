// An upload body through its two steps at once: hashing (MD5, inherently serial and the
// slowest step) and writing to the file, each on a thread of its own, while the I/O
// thread only reads the socket. The socket is read straight into the pipeline's buffers
// (lend/fill: no copy between the socket and the two steps); a producer that has its
// bytes elsewhere copies them in (append). The buffers are a fixed ring: a body costs
// at most kBuffers * kBufferBytes of memory however large it is, and a producer faster
// than the steps waits for a free buffer (asynchronously: when_room).
//
// A body that fits in one buffer starts no thread: finish() runs both steps inline.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "store/file_io.h"

namespace sandboxd::store {

class BodyPipeline {
 public:
  using HashStep = std::function<void(const char* data, size_t size)>;
  using WriteStep = std::function<FileResult<void>(const char* data, size_t size)>;
  static constexpr size_t kBufferBytes = 1u << 20;
  static constexpr size_t kBuffers = 8;

  // The steps see every byte once, in order; each runs on one thread at a time.
  BodyPipeline(HashStep hash, WriteStep write);
  ~BodyPipeline();  // abandons what is in flight (stop)
  BodyPipeline(const BodyPipeline&) = delete;
  BodyPipeline& operator=(const BodyPipeline&) = delete;

  // Where the next bytes go, without copying; empty while every buffer is in flight.
  std::span<char> lend();
  // `size` bytes of the lent span are filled. Fails once the write step has failed.
  FileResult<void> fill(size_t size);
  // Copies bytes in, blocking while every buffer is in flight (a caller that must not
  // block awaits when_room first).
  FileResult<void> append(const char* data, size_t size);
  // How many bytes can be filled or appended now without waiting.
  size_t room();
  // Calls `ready` once `bytes` (at most kBufferBytes) can be filled without waiting: at
  // once, on this thread, if they can now; else later, on a step's thread. One waiter.
  void when_room(size_t bytes, std::function<void()> ready);
  // Both steps over the rest of the body; waits for them. The write step's failure, if any.
  FileResult<void> finish();
  // Stops the steps, dropping what they have not taken yet.
  void stop();

 private:
  enum class Step { kHash, kWrite };
  char* buffer_of(uint64_t sequence) { return buffers_ + (sequence % kBuffers) * kBufferBytes; }
  uint64_t taken_locked() const { return std::min(hashed_, written_); }  // buffers free again below this
  size_t room_locked() const;
  void submit_locked();
  void start_steps_locked();
  void run_step(Step step);
  void wake_waiter(std::unique_lock<std::mutex>& lock);

  HashStep hash_;
  WriteStep write_;
  char* buffers_ = nullptr;  // kBuffers * kBufferBytes, mapped (never kept by malloc)
  size_t sizes_[kBuffers] = {};
  size_t fill_ = 0;  // bytes in the buffer being filled (number submitted_)

  std::mutex mutex_;
  std::condition_variable work_;                       // the steps wait for buffers
  std::condition_variable room_;                       // append waits for a free buffer
  uint64_t submitted_ = 0, hashed_ = 0, written_ = 0;  // buffers, by sequence number
  bool closed_ = false;                                // no more buffers: the steps finish what is submitted
  bool stopping_ = false;                              // the steps leave now
  std::optional<FileError> failure_;                   // the write step failed: later buffers are not written
  std::function<void()> waiter_;
  size_t waiter_bytes_ = 0;
  std::thread hasher_, writer_;
};

}  // namespace sandboxd::store
