// A container's memory across stops (runtime.keepMemory, on a tier whose runtime keeps
// memory: gvisor). A stop checkpoints the sandbox into <container folder>/memory, beside
// its volume and never in it (neither the sandbox nor the Files API sees it), with a
// list of the Python kernels that were between cells; the next start restores it, and
// each kernel's next call takes its process back. A checkpoint is used once: it goes
// when the sandbox it saved runs again, or when it cannot be restored (the sandbox then
// starts fresh over the same files: said in the log and a metric, never an error).
#include <sys/stat.h>

#include <spdlog/spdlog.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/blocking.h"
#include "ops/logging.h"
#include "ops/metrics.h"
#include "service/container_memory.h"
#include "service/store_call.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The folder, the image runsc writes inside it, and the list of kernels, written last:
// a folder without it is an unfinished checkpoint and is never restored.
std::string memory_dir(const Container& container) { return memory_folder(container); }
std::string image_dir(const Container& container) { return memory_dir(container) + "/image"; }
std::string kernels_file(const Container& container) { return memory_dir(container) + "/kernels"; }

void remove_memory(const Container& container) {
  std::error_code ec;
  fs::remove_all(memory_dir(container), ec);
  if (ec) spdlog::warn("removing the checkpoint of container {}: {}", container.id, ec.message());
}

// The checkpoint's bytes in the metadata (0: none), where the owner's stored bytes are
// summed (quotas.storedBytesPerOwner). A failure is logged: the checkpoint is then not
// counted, never lost.
asio::awaitable<void> record_memory_bytes(store::Metadata& metadata, std::shared_ptr<Container> container,
                                          uint64_t bytes) {
  auto update = [&metadata, &container, bytes] {
    metadata.set_container_memory_bytes(container->owner, container->id, container->storage, bytes);
  };
  try {
    co_await store_call(metadata.backend(), std::move(update));
  } catch (const std::exception& e) {
    spdlog::warn("container {} of {}: recording its checkpoint's size: {}", container->id, container->owner,
                 e.what());
  }
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::string memory_folder(const Container& container) {
  return (fs::path(container.volume_image).parent_path() / "memory").string();
}

bool ContainerMemory::keeps_memory() const {
  return parts_.runtime && parts_.runtime->keeps_memory() && parts_.settings()->keep_memory;
}

bool ContainerMemory::keeps_memory_at(const char* reason) const {
  const std::string_view why = reason;
  // (A restart is a fresh sandbox: what ran before it is not to come back.)
  return keeps_memory() && why != "deleted" && why != "restart" && why != kStopKeepingFilesOnly;
}

std::chrono::seconds ContainerMemory::hold_at(const char* reason) const {
  const std::string_view why = reason;
  const bool undoable = why == "idle" || why == "api" || why == "admin" || why == "paused";
  if (!undoable || parts_.leases || !keeps_memory()) return std::chrono::seconds(0);
  return std::chrono::seconds(parts_.settings()->pause_hold_sec);
}

asio::awaitable<void> ContainerMemory::checkpoint(std::shared_ptr<Container> container,
                                                  std::shared_ptr<runtime::Sandbox> sandbox) {
  // The kernels between cells come back; one that runs a cell is not listed (its caller
  // is gone with the stop), and is ended when the sandbox comes back. A kernel of an
  // earlier checkpoint not called since is listed again.
  auto [kernels, listed] = container->python.kernels_of(*sandbox);
  for (const auto& [context, kernel] : kernels) {
    if (auto process = co_await kernel->idle_process())
      listed[context] = *process;
    else
      listed.erase(context);
  }
  std::string list;
  for (const auto& [context, process] : listed) list += std::to_string(process) + " " + context + "\n";

  auto prepare = [&container] {
    remove_memory(*container);
    std::error_code ec;
    fs::create_directories(image_dir(*container), ec);
    if (ec) throw std::runtime_error("creating " + image_dir(*container) + ": " + ec.message());
    // Root's only: the image holds whatever the sandbox had in memory.
    chmod(memory_dir(*container).c_str(), 0700);
  };
  // The list of kernels is written last: a folder without it is never restored.
  auto finish = [&container, &list]() -> uint64_t {
    const std::string file = kernels_file(*container);
    {
      std::ofstream out(file + ".new", std::ios::trunc);
      out << list;
      if (!out.flush()) throw std::runtime_error("writing " + file);
    }
    fs::rename(file + ".new", file);
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : fs::recursive_directory_iterator(image_dir(*container), ec))
      if (entry.is_regular_file(ec)) bytes += entry.file_size(ec);
    return bytes;
  };
  const auto started = Clock::now();
  std::string failure;
  uint64_t bytes = 0;
  double seconds = 0;
  // Its processes a surface keeps (E2B's) end for the server as the checkpoint stops the
  // sandbox: told first, the surface keeps them for the restore instead of ending them.
  if (listener_) listener_->checkpointing(*container);
  try {
    co_await run_blocking(std::move(prepare));
    co_await parts_.runtime->checkpoint(sandbox, image_dir(*container));
    seconds = seconds_since(started);
    bytes = co_await run_blocking(std::move(finish));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // The image is the owner's stored bytes too: one that would take the owner past
  // quotas.storedBytesPerOwner is not kept (the disk is every owner's), and the next
  // start is fresh over the same files, as after a stop that keeps files only.
  if (const uint64_t limit = parts_.settings()->stored_bytes_per_owner; failure.empty() && limit > 0) {
    auto measure = [this, &container] { return parts_.metadata.owner_bytes(container->owner); };
    try {
      const uint64_t stored = co_await store_call(parts_.metadata.backend(), std::move(measure));
      if (stored + bytes > limit)
        failure = "the image's " + std::to_string(bytes) + " bytes would take the owner past " +
                  std::to_string(limit) + " stored bytes (quotas.storedBytesPerOwner)";
    } catch (const std::exception& e) {
      spdlog::warn("container {} of {}: measuring its owner's stored bytes: {}", container->id,
                   container->owner, e.what());
    }
  }
  if (!failure.empty()) {
    ops::metrics().memory_checkpointed(false, 0, 0);
    ops::log_event(spdlog::level::warn, "sandbox_checkpoint_failed",
                   {{"owner", container->owner}, {"container", container->id}, {"error", failure}});
    auto forget = [&container] { remove_memory(*container); };
    co_await run_blocking(std::move(forget));
    if (listener_) listener_->memory_lost(*container);
    co_return;
  }
  co_await record_memory_bytes(parts_.metadata, container, bytes);
  container->python.clear_restored();
  if (parts_.durability) parts_.durability->note_change(*container);  // the checkpoint goes to the bucket
  ops::metrics().memory_checkpointed(true, bytes, seconds);
  if (auto* audit = ops::audit())
    audit->record(
        "sandbox_checkpointed",
        {{"owner", container->owner}, {"container", container->id}, {"bytes", std::to_string(bytes)}});
  ops::log_event(spdlog::level::info, "sandbox_checkpointed",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"bytes", std::to_string(bytes)},
                  {"ms", std::to_string(static_cast<int64_t>(seconds * 1000))}});
}

asio::awaitable<std::shared_ptr<runtime::Sandbox>> ContainerMemory::restore(
    std::shared_ptr<Container> container) {
  if (!parts_.runtime || !parts_.runtime->keeps_memory()) co_return nullptr;
  // The list of kernels, or nothing when there is no finished checkpoint.
  auto read_list = [&container]() -> std::optional<std::string> {
    std::ifstream in(kernels_file(*container));
    if (!in) {
      std::error_code ec;
      if (fs::exists(memory_dir(*container), ec)) remove_memory(*container);  // unfinished
      return std::nullopt;
    }
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto list = co_await run_blocking(std::move(read_list));
  if (!list) {  // a fresh start: what a surface kept of an earlier sandbox is gone
    if (listener_) listener_->memory_lost(*container);
    co_return nullptr;
  }
  const auto started = Clock::now();
  std::shared_ptr<runtime::Sandbox> sandbox;
  std::string failure;
  try {
    auto restored = co_await parts_.start_sandbox(container, image_dir(*container));
    sandbox = std::move(restored.sandbox);
    container->on_strand.slot = std::move(restored.slot);  // given back at its stop
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Used once, whatever the outcome: the sandbox runs on from it, or it cannot be used
  // (and the bucket's copy goes with the next flush).
  auto forget = [&container] { remove_memory(*container); };
  co_await run_blocking(std::move(forget));
  co_await record_memory_bytes(parts_.metadata, container, 0);
  if (parts_.durability) parts_.durability->note_change(*container);
  if (!sandbox) {
    ops::metrics().memory_restored(false, 0);
    ops::log_event(spdlog::level::warn, "sandbox_restore_failed",
                   {{"owner", container->owner},
                    {"container", container->id},
                    {"error", failure},
                    {"outcome", "started fresh over the same files; what was in memory is lost"}});
    if (listener_) listener_->memory_lost(*container);
    co_return nullptr;
  }
  std::map<std::string, uint32_t> kernels;
  std::istringstream lines(*list);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    try {
      kernels[line.substr(space + 1)] = static_cast<uint32_t>(std::stoul(line.substr(0, space)));
    } catch (const std::exception&) {
    }
  }
  // A surface's processes are adopted first: the ones nobody adopts are let go below.
  if (listener_) {
    try {
      co_await listener_->restored(container, sandbox);
    } catch (const std::exception& e) {
      spdlog::warn("container {} of {}: taking back its processes after the restore: {}", container->id,
                   container->owner, e.what());
    }
  }
  std::vector<uint32_t> keep;
  for (const auto& [context, process] : kernels) keep.push_back(process);
  sandbox->release_unadopted_processes(std::move(keep));
  container->python.set_restored(std::move(kernels));
  const double seconds = seconds_since(started);
  ops::metrics().memory_restored(true, seconds);
  if (auto* audit = ops::audit())
    audit->record("sandbox_restored", {{"owner", container->owner}, {"container", container->id}});
  ops::log_event(spdlog::level::info, "sandbox_restored",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"ms", std::to_string(static_cast<int64_t>(seconds * 1000))}});
  co_return sandbox;
}

}  // namespace sandboxd::service
