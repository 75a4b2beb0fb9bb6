#include "store/file_cache.h"

#include <algorithm>

namespace sandboxd::store {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// The database's prefix filter: a path under any of the prefixes (none: every path).
bool selected(const std::string& path, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return true;
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&path](const std::string& prefix) { return starts_with(path, prefix); });
}

}  // namespace

size_t FileCache::bytes_of(const FileRecord& record) {
  // The record, its strings and about what the two maps spend on it.
  return sizeof(FileRecord) + 2 * record.path.size() + record.storage.size() + record.etag.size() +
         record.mime.size() + 128;
}

FileCache::Entry* FileCache::held(const std::string& storage, int64_t token, State& state) {
  auto it = entries_.find(storage);
  if (it == entries_.end()) {
    state = State::kMissing;
    return nullptr;
  }
  if (it->second.token != token) {  // made under another lease: never served
    erase_entry(it);
    state = State::kMissing;
    return nullptr;
  }
  recent_.splice(recent_.begin(), recent_, it->second.recent);
  state = it->second.too_large ? State::kTooLarge : State::kHeld;
  return it->second.too_large ? nullptr : &it->second;
}

FileCache::State FileCache::find(const std::string& storage, int64_t token, const std::string& path,
                                 std::optional<FileRecord>& out) {
  std::lock_guard lock(mutex_);
  State state;
  Entry* entry = held(storage, token, state);
  if (!entry) return state;
  auto it = entry->position_of.find(path);
  out = it == entry->position_of.end() ? std::nullopt
                                       : std::optional<FileRecord>(entry->by_position.at(it->second));
  return state;
}

// The same page as Metadata's query: ordered by (created_at, seq), strictly after and
// before the cursors' positions, one more row than the limit to tell has_more; with
// only a `before` cursor, the rows right before it.
FileCache::State FileCache::list(const std::string& storage, int64_t token,
                                 const std::vector<std::string>& path_prefixes, size_t limit,
                                 const std::optional<std::string>& after_path,
                                 const std::optional<std::string>& before_path, FilePage& out) {
  std::lock_guard lock(mutex_);
  State state;
  Entry* entry = held(storage, token, state);
  if (!entry) return state;
  out = FilePage{};
  std::optional<Position> after, before;
  auto position = [entry](const std::string& path) -> std::optional<Position> {
    auto it = entry->position_of.find(path);
    if (it == entry->position_of.end()) return std::nullopt;
    return it->second;
  };
  if (after_path && !(after = position(*after_path))) return state;
  if (before_path && !(before = position(*before_path))) return state;
  const size_t wanted = std::min<size_t>(limit, SIZE_MAX - 1) + 1;
  auto& rows = entry->by_position;
  if (before && !after) {
    for (auto it = std::make_reverse_iterator(rows.lower_bound(*before));
         it != rows.rend() && out.files.size() < wanted; ++it)
      if (selected(it->second.path, path_prefixes)) out.files.push_back(it->second);
  } else {
    for (auto it = after ? rows.upper_bound(*after) : rows.begin();
         it != rows.end() && out.files.size() < wanted && (!before || it->first < *before); ++it)
      if (selected(it->second.path, path_prefixes)) out.files.push_back(it->second);
  }
  if (out.files.size() > limit) {
    out.has_more = true;
    out.files.resize(limit);
  }
  if (before && !after) std::reverse(out.files.begin(), out.files.end());
  return state;
}

FileCache::State FileCache::all(const std::string& storage, int64_t token, std::vector<FileRecord>& out) {
  std::lock_guard lock(mutex_);
  State state;
  Entry* entry = held(storage, token, state);
  if (!entry) return state;
  out.clear();
  out.reserve(entry->by_position.size());
  for (const auto& [position, record] : entry->by_position) out.push_back(record);
  return state;
}

void FileCache::insert(Entry& entry, FileRecord record) {
  const Position position{record.created_at, record.seq};
  const size_t bytes = bytes_of(record);
  entry.position_of[record.path] = position;
  entry.by_position[position] = std::move(record);
  entry.bytes += bytes;
  bytes_ += bytes;
  ++records_;
}

void FileCache::remove(Entry& entry, std::unordered_map<std::string, Position>::iterator it) {
  auto row = entry.by_position.find(it->second);
  if (row != entry.by_position.end()) {
    const size_t bytes = bytes_of(row->second);
    entry.bytes -= bytes;
    bytes_ -= bytes;
    --records_;
    entry.by_position.erase(row);
  }
  entry.position_of.erase(it);
}

void FileCache::erase_entry(std::unordered_map<std::string, Entry>::iterator it) {
  records_ -= it->second.by_position.size();
  bytes_ -= it->second.bytes;
  recent_.erase(it->second.recent);
  entries_.erase(it);
}

void FileCache::install(const std::string& storage, int64_t token, std::vector<FileRecord> records,
                        bool too_large) {
  if (limits_.max_records == 0) return;
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(storage); it != entries_.end()) erase_entry(it);
  recent_.push_front(storage);
  Entry& entry = entries_[storage];
  entry.token = token;
  entry.recent = recent_.begin();
  entry.too_large = too_large || records.size() > limits_.max_records;
  if (!entry.too_large)
    for (auto& record : records) insert(entry, std::move(record));
  if (entry.bytes > limits_.max_bytes) {  // alone over the limit: read from the database
    records_ -= entry.by_position.size();
    bytes_ -= entry.bytes;
    entry.by_position.clear();
    entry.position_of.clear();
    entry.bytes = 0;
    entry.too_large = true;
  }
  evict_beyond_limits(storage);
}

void FileCache::evict_beyond_limits(const std::string& keep) {
  while ((records_ > limits_.max_records || bytes_ > limits_.max_bytes) && !recent_.empty()) {
    const std::string& oldest = recent_.back();
    auto it = entries_.find(oldest);
    if (oldest == keep) {
      // The container being written or filled is the least recently used one: its own
      // records are over the limits (the others go first, it is marked too large).
      Entry& entry = it->second;
      if (entry.by_position.empty()) break;
      records_ -= entry.by_position.size();
      bytes_ -= entry.bytes;
      entry.by_position.clear();
      entry.position_of.clear();
      entry.bytes = 0;
      entry.too_large = true;
      recent_.splice(recent_.begin(), recent_, entry.recent);
      continue;
    }
    erase_entry(it);
  }
}

void FileCache::upsert(const FileRecord& record) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(record.storage);
  if (it == entries_.end() || it->second.too_large) return;
  Entry& entry = it->second;
  recent_.splice(recent_.begin(), recent_, entry.recent);  // a write is a use
  if (auto known = entry.position_of.find(record.path); known != entry.position_of.end())
    remove(entry, known);
  insert(entry, record);
  evict_beyond_limits(record.storage);
}

void FileCache::erase(const std::string& storage, const std::string& path) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(storage);
  if (it == entries_.end()) return;
  if (it->second.too_large) {  // it may fit now: the next read tries again
    erase_entry(it);
    return;
  }
  if (auto known = it->second.position_of.find(path); known != it->second.position_of.end())
    remove(it->second, known);
}

void FileCache::erase_prefix(const std::string& storage, const std::string& path_prefix) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(storage);
  if (it == entries_.end()) return;
  if (it->second.too_large) {
    erase_entry(it);
    return;
  }
  Entry& entry = it->second;
  for (auto known = entry.position_of.begin(); known != entry.position_of.end();) {
    auto next = std::next(known);
    if (starts_with(known->first, path_prefix)) remove(entry, known);
    known = next;
  }
}

void FileCache::drop(const std::string& storage) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(storage); it != entries_.end()) erase_entry(it);
}

// --- container lists ------------------------------------------------------------------

FileCache::Owner* FileCache::held_owner(const std::string& owner, State& state) {
  auto it = owners_.find(owner);
  if (it == owners_.end()) {
    state = State::kMissing;
    return nullptr;
  }
  recent_owners_.splice(recent_owners_.begin(), recent_owners_, it->second.recent);
  state = it->second.too_large ? State::kTooLarge : State::kHeld;
  return it->second.too_large ? nullptr : &it->second;
}

void FileCache::erase_owner(std::unordered_map<std::string, Owner>::iterator it) {
  container_records_ -= it->second.by_order.size();
  recent_owners_.erase(it->second.recent);
  owners_.erase(it);
}

// The database's page: ordered by (created_at, id), strictly after the cursor's
// position; a cursor that names no container gives an empty page.
FileCache::State FileCache::list_containers(const std::string& owner, size_t limit,
                                            const std::string& after_id, std::vector<ContainerRecord>& out) {
  std::lock_guard lock(mutex_);
  State state;
  Owner* entry = held_owner(owner, state);
  if (!entry) return state;
  out.clear();
  auto it = entry->by_order.begin();
  if (!after_id.empty()) {
    auto cursor = entry->created_at_of.find(after_id);
    if (cursor == entry->created_at_of.end()) return state;
    it = entry->by_order.upper_bound(Order{cursor->second, after_id});
  }
  for (; it != entry->by_order.end() && out.size() < limit; ++it) out.push_back(it->second);
  return state;
}

void FileCache::install_containers(const std::string& owner, std::vector<ContainerRecord> records,
                                   bool too_large) {
  if (limits_.max_records == 0) return;
  std::lock_guard lock(mutex_);
  if (auto it = owners_.find(owner); it != owners_.end()) erase_owner(it);
  recent_owners_.push_front(owner);
  Owner& entry = owners_[owner];
  entry.recent = recent_owners_.begin();
  entry.too_large = too_large || records.size() > limits_.max_records;
  if (!entry.too_large) {
    for (auto& record : records) {
      entry.created_at_of[record.id] = record.created_at;
      Order order{record.created_at, record.id};
      entry.by_order.emplace(std::move(order), std::move(record));
    }
    container_records_ += entry.by_order.size();
  }
  while (container_records_ > limits_.max_records && recent_owners_.back() != owner)
    erase_owner(owners_.find(recent_owners_.back()));
}

void FileCache::put_container(const ContainerRecord& record) {
  std::lock_guard lock(mutex_);
  auto it = owners_.find(record.owner);
  if (it == owners_.end() || it->second.too_large) return;
  Owner& entry = it->second;
  if (auto known = entry.created_at_of.find(record.id); known != entry.created_at_of.end()) {
    container_records_ -= entry.by_order.erase(Order{known->second, record.id});
    entry.created_at_of.erase(known);
  }
  entry.created_at_of[record.id] = record.created_at;
  entry.by_order[Order{record.created_at, record.id}] = record;
  ++container_records_;
  if (container_records_ > limits_.max_records) erase_owner(it);  // read from the database again
}

void FileCache::touch_container(const std::string& owner, const std::string& id, int64_t now) {
  std::lock_guard lock(mutex_);
  auto it = owners_.find(owner);
  if (it == owners_.end() || it->second.too_large) return;
  auto known = it->second.created_at_of.find(id);
  if (known == it->second.created_at_of.end()) return;
  it->second.by_order.at(Order{known->second, id}).last_used_at = now;
}

void FileCache::erase_container(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  if (it->second.too_large) {
    erase_owner(it);
    return;
  }
  auto known = it->second.created_at_of.find(id);
  if (known == it->second.created_at_of.end()) return;
  container_records_ -= it->second.by_order.erase(Order{known->second, id});
  it->second.created_at_of.erase(known);
}

void FileCache::drop_owner(const std::string& owner) {
  std::lock_guard lock(mutex_);
  if (auto it = owners_.find(owner); it != owners_.end()) erase_owner(it);
}

size_t FileCache::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

size_t FileCache::containers() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace sandboxd::store
