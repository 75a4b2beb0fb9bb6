#include "service/store_check.h"

#include <spdlog/spdlog.h>
#include <filesystem>
#include <set>

#include "base/temp_files.h"

namespace sandboxd::service {

namespace fs = std::filesystem;

StoreCheckSummary check_store(store::Metadata& metadata, const std::string& containers_dir) {
  constexpr std::string_view kUploads = "/mnt/user-data/uploads/";
  StoreCheckSummary summary;
  std::set<std::string> known;
  for (const auto& record : metadata.all_containers()) {
    ++summary.containers;
    known.insert(record.storage);
    const fs::path root = fs::path(containers_dir) / record.storage;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      spdlog::error("start-up check: container {} of {} has no folder {}; its files are lost", record.id,
                    record.owner, root.string());
      ++summary.reported;
      continue;
    }
    for (const auto& file : metadata.files_of(record.storage)) {
      if (!file.path.starts_with(kUploads)) continue;  // outputs live in the volume, checked when it mounts
      const fs::path host = root / "uploads" / file.path.substr(kUploads.size());
      if (fs::is_regular_file(fs::symlink_status(host, ec))) continue;
      metadata.delete_file(record.storage, file.path);
      spdlog::warn("start-up check: {} of container {} ({}) is gone from disk; its record is dropped",
                   file.path, record.id, record.owner);
      ++summary.dropped;
    }
    for (auto it = fs::recursive_directory_iterator(root / "uploads",
                                                    fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!is_temp_name(it->path().filename().string())) continue;
      std::error_code removed;
      if (it->is_regular_file(removed) && fs::remove(it->path(), removed)) ++summary.temporaries;
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(containers_dir, ec)) {
    if (known.count(entry.path().filename().string())) continue;
    spdlog::warn("start-up check: {} belongs to no container; kept for inspection", entry.path().string());
    ++summary.reported;
  }
  spdlog::info(
      "start-up check: {} container(s); {} record(s) of vanished uploads dropped, {} temporary file(s) "
      "removed, {} problem(s) reported",
      summary.containers, summary.dropped, summary.temporaries, summary.reported);
  return summary;
}

}  // namespace sandboxd::service
