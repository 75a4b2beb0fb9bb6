// The start-up check: after a crash as after a clean stop, the index and the disk agree
// for what can be checked without mounting volumes. Records of uploads that are gone
// are dropped, temporary files of cut uploads removed; folders that belong to no
// container, and containers without a folder, are reported (and kept). Logs a summary.
#pragma once

#include <cstddef>
#include <string>

#include "store/metadata.h"

namespace sandboxd::service {

struct StoreCheckSummary {
  size_t containers = 0, dropped = 0, temporaries = 0, reported = 0;
};

StoreCheckSummary check_store(store::Metadata& metadata, const std::string& containers_dir);

}  // namespace sandboxd::service
