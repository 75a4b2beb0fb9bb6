#include "runtime/command_region.h"

#include <linux/futex.h>
#include <sys/mman.h>

#include <cstring>
#include <utility>

#include "runtime/child_syscalls.h"

namespace sandboxd::runtime {
namespace {

constexpr size_t kRegionSize = 4 << 20;  // virtual; only touched pages cost memory
constexpr size_t kStackSize = 64 << 10;
constexpr size_t kPage = 4096;
// A request whose bytes went past this is not kept for reuse (its pages are resident).
constexpr size_t kReusableDataSize = 64 << 10;

// Regions ready for reuse: PID 1 normally has one or two children in flight.
CommandRegion* free_regions[2] = {nullptr, nullptr};

}  // namespace

CommandRegion* acquire_region() {
  for (auto& slot : free_regions)
    if (slot) return std::exchange(slot, nullptr);
  void* base =
      mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  // The guard page under the stack stops an overflow from running into the request.
  char* guard = static_cast<char*>(base) + kRegionSize - kStackSize - kPage;
  if (mprotect(guard, kPage, PROT_NONE) != 0) {
    munmap(base, kRegionSize);
    return nullptr;
  }
  auto* region = static_cast<CommandRegion*>(base);
  region->data_capacity = static_cast<size_t>(guard - region->data());
  return region;
}

void prepare_child_region(CommandRegion* region, const CommandContext& ctx, int cgroup_procs,
                          int request_read, int in_r, int out_w, int err_w, int report_fd,
                          bool from_template) {
  region->ctx = &ctx;
  region->cgroup_procs = cgroup_procs;
  region->request_read = request_read;
  region->in_r = in_r;
  region->out_w = out_w;
  region->err_w = err_w;
  region->report_fd = report_fd;
  region->data_used = 0;
  region->request = {};
  region->from_template = from_template;
  region->template_child_pid = 0;
  region->start_word = 0;
  region->failure = {};
}

void wake_template_child(CommandRegion& region, uint32_t token) {
  // The request's bytes (written before) are visible to the child once it sees the token.
  __atomic_store_n(&region.start_word, token, __ATOMIC_RELEASE);
  sys(SYS_futex, reinterpret_cast<long>(&region.start_word), FUTEX_WAKE_PRIVATE, 1);
}

bool template_child_done(const CommandRegion& region) {
  return __atomic_load_n(&region.template_child_pid, __ATOMIC_ACQUIRE) == 0;
}

void* stack_top(CommandRegion* region) {
  return reinterpret_cast<char*>(region) + kRegionSize - 64;  // 16-byte aligned
}

bool lay_out(CommandRegion& region, size_t length, const char* static_bash) {
  char* data = region.data();
  size_t pos = 0;
  auto take = [&](const char*& item) {
    item = data + pos;
    while (pos < length && data[pos] != '\0') ++pos;
    if (pos == length) return false;
    ++pos;  // past the NUL
    return true;
  };
  auto take_count = [&](size_t& count) {
    const char* text;
    if (!take(text)) return false;
    size_t digits = length_of(text);
    if (digits == 0 || digits > 6) return false;
    count = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      count = count * 10 + static_cast<size_t>(text[i] - '0');
    }
    return true;
  };
  size_t pointers_at = (length + alignof(char*) - 1) & ~(alignof(char*) - 1);
  if (pointers_at >= region.data_capacity) return false;
  auto** pointers = reinterpret_cast<char**>(data + pointers_at);
  size_t room = (region.data_capacity - pointers_at) / sizeof(char*), used = 0;
  auto take_list = [&](char* const*& list) {
    size_t count;
    if (!take_count(count) || count + 1 > room - used) return false;
    list = pointers + used;
    for (size_t i = 0; i < count; ++i) {
      const char* item;
      if (!take(item)) return false;
      pointers[used++] = const_cast<char*>(item);
    }
    pointers[used++] = nullptr;
    return true;
  };
  CommandRequestLayout& out = region.request;
  if (!take(out.cwd) || !take_list(out.argv) || !take_list(out.envp) || !out.argv[0]) return false;
  out.terminal = nullptr;
  if (pos != length && (!take(out.terminal) || out.terminal[0] == '\0' || pos != length)) return false;
  out.program = out.argv[0];
  if (static_bash && std::strcmp(out.argv[0], "/bin/bash") == 0) out.program = static_bash;
  region.data_used = pointers_at + used * sizeof(char*);
  return true;
}

void release_region(CommandRegion* region) {
  if (!region) return;
  if (region->data_used <= kReusableDataSize) {
    for (auto& slot : free_regions)
      if (!slot) {
        slot = region;
        return;
      }
  }
  munmap(region, kRegionSize);
}

}  // namespace sandboxd::runtime
