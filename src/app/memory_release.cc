#include "app/memory_release.h"

#include <malloc.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

// gperftools' C interface, weak: present when the server is linked with tcmalloc
// (CMakeLists.txt, SANDBOXD_MALLOC), null in a binary on glibc's malloc.
extern "C" {
int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));
void MallocExtension_ReleaseFreeMemory() __attribute__((weak));
}

namespace sandboxd::app {
namespace {

constexpr std::chrono::seconds kInterval{1};

bool tcmalloc_linked() { return MallocExtension_GetNumericProperty && MallocExtension_ReleaseFreeMemory; }

// What the allocator holds free (mapped, unused), in bytes.
size_t free_bytes() {
  if (tcmalloc_linked()) {
    size_t value = 0;
    return MallocExtension_GetNumericProperty("tcmalloc.pageheap_free_bytes", &value) ? value : 0;
  }
  const struct mallinfo2 info = mallinfo2();
  return info.fordblks;
}

void schedule(std::shared_ptr<boost::asio::steady_timer> timer) {
  timer->expires_after(kInterval);
  timer->async_wait([timer](const boost::system::error_code& ec) {
    if (ec) return;
    release_free_memory();
    schedule(timer);
  });
}

}  // namespace

size_t release_free_memory(bool force) {
  const size_t held = free_bytes();
  if (!force && held <= kFreeMemoryKept) return held;
  if (tcmalloc_linked())
    MallocExtension_ReleaseFreeMemory();
  else
    malloc_trim(0);
  spdlog::debug("memory: {} MiB the allocator held free given back to the kernel", held >> 20);
  return held;
}

void start_memory_release(boost::asio::io_context& io) {
  schedule(std::make_shared<boost::asio::steady_timer>(io));
}

}  // namespace sandboxd::app
