#include "store/body_pipeline.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace sandboxd::store {

BodyPipeline::BodyPipeline(HashStep hash, WriteStep write)
    : hash_(std::move(hash)), write_(std::move(write)) {
  // Mapped rather than allocated: pages are touched only as the body needs them, and
  // they go back to the system with the pipeline instead of staying in malloc's heap
  // (the server's RSS does not keep the peak of its largest uploads).
  void* mapped =
      mmap(nullptr, kBuffers * kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  buffers_ = static_cast<char*>(mapped);
}

BodyPipeline::~BodyPipeline() {
  stop();
  munmap(buffers_, kBuffers * kBufferBytes);
}

size_t BodyPipeline::room_locked() const {
  const uint64_t in_flight = submitted_ - taken_locked();  // not counting the one being filled
  if (in_flight >= kBuffers) return 0;
  return (kBuffers - in_flight) * kBufferBytes - fill_;
}

std::span<char> BodyPipeline::lend() {
  std::lock_guard lock(mutex_);
  if (submitted_ - taken_locked() >= kBuffers) return {};
  return {buffer_of(submitted_) + fill_, kBufferBytes - fill_};
}

FileResult<void> BodyPipeline::fill(size_t size) {
  std::lock_guard lock(mutex_);
  if (failure_) return *failure_;
  fill_ += size;
  if (fill_ == kBufferBytes) {
    submit_locked();
    start_steps_locked();
  }
  return {};
}

FileResult<void> BodyPipeline::append(const char* data, size_t size) {
  while (size > 0) {
    std::span<char> space;
    {
      std::unique_lock lock(mutex_);
      room_.wait(lock, [&] { return submitted_ - taken_locked() < kBuffers; });
      space = {buffer_of(submitted_) + fill_, kBufferBytes - fill_};
    }
    const size_t take = std::min(size, space.size());
    std::memcpy(space.data(), data, take);
    if (auto filled = fill(take); !filled) return filled;
    data += take;
    size -= take;
  }
  return {};
}

size_t BodyPipeline::room() {
  std::lock_guard lock(mutex_);
  return room_locked();
}

void BodyPipeline::when_room(size_t bytes, std::function<void()> ready) {
  {
    std::lock_guard lock(mutex_);
    if (room_locked() < std::min(bytes, kBufferBytes)) {
      waiter_ = std::move(ready);
      waiter_bytes_ = std::min(bytes, kBufferBytes);
      return;
    }
  }
  ready();
}

void BodyPipeline::submit_locked() {
  sizes_[submitted_ % kBuffers] = fill_;
  ++submitted_;
  fill_ = 0;
  work_.notify_all();
}

void BodyPipeline::start_steps_locked() {
  if (hasher_.joinable()) return;
  hasher_ = std::thread([this] { run_step(Step::kHash); });
  writer_ = std::thread([this] { run_step(Step::kWrite); });
}

void BodyPipeline::wake_waiter(std::unique_lock<std::mutex>& lock) {
  room_.notify_all();
  if (!waiter_ || room_locked() < waiter_bytes_) return;
  auto ready = std::move(waiter_);
  waiter_ = nullptr;
  lock.unlock();
  ready();
  lock.lock();
}

void BodyPipeline::run_step(Step step) {
  uint64_t& done = step == Step::kHash ? hashed_ : written_;
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || closed_ || done < submitted_; });
    if (stopping_ || done == submitted_) return;  // stopped, or closed and all done
    // Every buffer ready up to the end of the ring in one go: they are contiguous, and
    // all full but the body's last one.
    const uint64_t count = std::min<uint64_t>(submitted_ - done, kBuffers - done % kBuffers);
    const char* data = buffer_of(done);
    size_t size = 0;
    for (uint64_t i = 0; i < count; ++i) size += sizes_[(done + i) % kBuffers];
    const bool skip = step == Step::kWrite && failure_.has_value();
    lock.unlock();
    FileResult<void> result;
    if (step == Step::kHash)
      hash_(data, size);
    else if (!skip)
      result = write_(data, size);
    lock.lock();
    if (!result && !failure_) failure_ = result.error();
    done += count;
    wake_waiter(lock);
  }
}

FileResult<void> BodyPipeline::finish() {
  std::unique_lock lock(mutex_);
  if (fill_ > 0) submit_locked();
  if (!hasher_.joinable()) {
    // Nothing filled a whole buffer: at most this one, done here.
    for (; written_ < submitted_; ++written_, ++hashed_) {
      const char* data = buffer_of(written_);
      const size_t size = sizes_[written_ % kBuffers];
      hash_(data, size);
      if (auto written = write_(data, size); !written) failure_ = written.error();
    }
  } else {
    closed_ = true;
    work_.notify_all();
    lock.unlock();
    hasher_.join();
    writer_.join();
    lock.lock();
  }
  if (failure_) return *failure_;
  return {};
}

void BodyPipeline::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    waiter_ = nullptr;
    work_.notify_all();
  }
  if (hasher_.joinable()) hasher_.join();
  if (writer_.joinable()) writer_.join();
}

}  // namespace sandboxd::store
