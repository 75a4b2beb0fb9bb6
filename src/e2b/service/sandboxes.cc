#include "e2b/service/sandboxes.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/ids.h"
#include "ops/logging.h"
#include "service/egress_options.h"
#include "service/store_call.h"

namespace sandboxd::e2b {
namespace {

using service::decode_egress_options;
using service::encode_egress_options;
using service::kStopKeepingFilesOnly;
using service::store_call;

namespace fs = std::filesystem;
namespace json = boost::json;

// Sandboxes past their end time looked at in one pass (one pass a second).
constexpr size_t kDueBatch = 64;
// A connect that resumes a paused sandbox without a timeout gives it at least this long.
constexpr int64_t kResumeDefaultSec = 300;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::map<std::string, std::string> string_map(const json::value* value) {
  std::map<std::string, std::string> out;
  if (!value || !value->is_object()) return out;
  for (const auto& [key, item] : value->as_object())
    if (item.is_string()) out[std::string(key)] = std::string(item.as_string());
  return out;
}

// A record as older versions wrote it, one JSON file per sandbox.
std::optional<Sandbox> decode_json_record(const std::string& text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) return std::nullopt;
  const auto& o = value.as_object();
  auto text_of = [&o](const char* key) -> std::string {
    const auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  auto int_of = [&o](const char* key) -> int64_t {
    const auto* v = o.if_contains(key);
    return v && v->is_int64() ? v->as_int64() : 0;
  };
  auto bool_of = [&o](const char* key) {
    const auto* v = o.if_contains(key);
    return v && v->is_bool() && v->as_bool();
  };
  Sandbox s;
  s.id = text_of("id");
  s.owner = text_of("owner");
  s.template_id = text_of("template");
  s.metadata = string_map(o.if_contains("metadata"));
  s.env_vars = string_map(o.if_contains("env_vars"));
  s.started_at_ms = int_of("started_at_ms");
  s.end_at_ms = int_of("end_at_ms");
  s.auto_pause = bool_of("auto_pause");
  s.paused = bool_of("paused");
  if (s.id.empty() || s.owner.empty() || !ContainerService::valid_id(s.id)) return std::nullopt;
  return s;
}

ApiError sandbox_not_found(const std::string& id) {
  return ApiError::not_found("Sandbox " + id + " not found");
}

ApiError bad_timeout() {
  return ApiError::invalid_request("'timeout' must be from 0 to " +
                                   std::to_string(Sandboxes::kMaxTimeoutSec) + " seconds");
}

}  // namespace

template <typename Fn>
auto Sandboxes::store(Fn fn) {
  return store_call(records_.backend(), std::move(fn));
}

bool Sandboxes::known_template(std::string_view name) {
  return name == "base" || name == "code-interpreter-v1" || name == "code-interpreter";
}

Sandboxes::Sandboxes(asio::io_context& io, ContainerService& containers, store::E2bRecords& records,
                     std::string data_dir)
    : io_(io),
      containers_(containers),
      records_(records),
      json_dir_((fs::path(data_dir) / "e2b" / "sandboxes").string()),
      timer_(io) {}

Sandboxes::~Sandboxes() { stopping_ = true; }

void Sandboxes::import_json_records() {
  std::error_code ec;
  if (!fs::is_directory(json_dir_, ec)) return;
  size_t moved = 0;
  for (const auto& entry : fs::directory_iterator(json_dir_, ec)) {
    if (entry.path().extension() == ".tmp") {  // a write an older version left half done
      fs::remove(entry.path(), ec);
      continue;
    }
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto record = decode_json_record(text.str());
    if (!record) {
      spdlog::warn("e2b: ignoring the unreadable sandbox record {}", entry.path().string());
      continue;
    }
    records_.insert(*record);  // (false: moved already by a start that stopped before the removal)
    fs::remove(entry.path(), ec);
    ++moved;
  }
  if (moved)
    spdlog::info("e2b: {} sandbox record(s) moved from {} into the metadata database", moved, json_dir_);
  fs::remove(json_dir_, ec);                          // only when empty
  fs::remove(fs::path(json_dir_).parent_path(), ec);  // likewise
}

void Sandboxes::start() {
  import_json_records();
  loop_running_ = true;
  asio::co_spawn(io_, end_expired(), asio::detached);
}

asio::awaitable<void> Sandboxes::stop() {
  stopping_ = true;
  timer_.cancel();
  asio::steady_timer pause(io_);
  while (loop_running_) {
    pause.expires_after(std::chrono::milliseconds(20));
    co_await pause.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<void> Sandboxes::end_expired() {
  struct Done {
    std::atomic<bool>& running;
    ~Done() { running = false; }
  } done{loop_running_};
  while (!stopping_) {
    timer_.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || stopping_) co_return;
    try {
      co_await end_due_batch();
    } catch (const std::exception& e) {  // the database: the next pass tries again
      spdlog::warn("e2b: ending sandboxes past their end time: {}", e.what());
    }
  }
}

asio::awaitable<void> Sandboxes::end_due_batch() {
  const int64_t now = now_ms();
  auto due = co_await store([this, now] { return records_.due(now, due_cursor_, kDueBatch); });
  // A short batch reached the end: the next pass starts from the beginning again.
  if (due.size() < kDueBatch)
    due_cursor_ = {};
  else
    due_cursor_ = {due.back().end_at_ms, due.back().id};
  for (const auto& sandbox : due) {
    if (stopping_) co_return;
    try {
      if (may_end_here_) {
        auto storage = co_await store([this, &sandbox] {
          auto record = containers_.metadata().find_container(sandbox.owner, sandbox.id);
          return record ? record->storage : std::string();
        });
        if (!storage.empty() && !co_await may_end_here_(storage)) continue;  // its holder ends it
      }
      co_await end_one(sandbox);
    } catch (const std::exception& e) {
      spdlog::warn("e2b: ending sandbox {} at its end time: {}", sandbox.id, e.what());
    }
  }
}

asio::awaitable<void> Sandboxes::end_one(const Sandbox& s) {
  // Opening the container takes its lease in a cluster: a replica that lost the race to
  // another one (which then ends it) leaves it alone.
  auto container = co_await containers_.lifecycle().async_open(s.owner, s.id, /*create=*/false);
  if (!container) {
    // Its container is gone (a kill through another replica a moment ago, which also
    // removes the record): the record goes with it, and nothing is ended here.
    if (container.error().kind == ErrorKind::not_found)
      co_await store([this, &s] { return records_.remove(s.owner, s.id); });
    co_return;
  }
  const int64_t now = now_ms();
  if (s.auto_pause) {
    if (!co_await store([this, &s, now] { return records_.mark_paused_if_due(s.owner, s.id, now); }))
      co_return;  // resumed or given more time meanwhile
    ops::log_event(spdlog::level::info, "e2b_sandbox_timeout",
                   {{"owner", s.owner},
                    {"sandbox", s.id},
                    {"action", "pause"},
                    {"keep_memory", s.auto_pause_memory ? "true" : "false"}});
    co_await containers_.lifecycle().stop(*container,
                                          s.auto_pause_memory ? "paused" : kStopKeepingFilesOnly.data());
    co_return;
  }
  // Given more time (or paused) since the pass read it: it stays.
  auto current = co_await store([this, &s] { return records_.find(s.owner, s.id); });
  if (!current || current->paused || current->end_at_ms > now) co_return;
  ops::log_event(spdlog::level::info, "e2b_sandbox_timeout",
                 {{"owner", s.owner}, {"sandbox", s.id}, {"action", "kill"}});
  co_await containers_.lifecycle().remove(*container);  // its network options with it
  co_await store([this, &s] { return records_.remove(s.owner, s.id); });
  if (auto* audit = ops::audit())
    audit->record("e2b_sandbox_killed", {{"owner", s.owner}, {"sandbox", s.id}});
}

asio::awaitable<Result<Sandbox>> Sandboxes::create(std::string owner, NewSandbox request) {
  if (!request.seed && !known_template(request.template_id))
    co_return ApiError::not_found("Template '" + request.template_id +
                                  "' not found (this server has 'base' and 'code-interpreter-v1')");
  if (request.timeout_sec < 0 || request.timeout_sec > kMaxTimeoutSec) co_return bad_timeout();
  if (request.metadata.size() > store::E2bRecords::kMaxMetadataEntries)
    co_return ApiError::invalid_request("'metadata' may have at most " +
                                        std::to_string(store::E2bRecords::kMaxMetadataEntries) + " entries");
  // E2B's ids: lower-case letters and digits, 20 of them.
  std::string id = random_alnum(20);
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto container = co_await containers_.lifecycle().async_open(owner, id, /*create=*/true);
  if (!container) co_return container.error();
  containers_.lifecycle().touch(**container);
  if (request.seed) {
    if (auto seeded = co_await request.seed(*container); !seeded) {
      co_await containers_.lifecycle().remove(*container);
      co_return seeded.error();
    }
  }
  // Before its sandbox starts: its first connection is already checked against them.
  if (request.egress) {
    bool kept = false;
    try {
      kept = co_await keep_network(*container, request.egress);
    } catch (const std::exception& e) {
      spdlog::error("e2b: storing the network options of sandbox {}: {}", id, e.what());
    }
    if (!kept) {
      co_await containers_.lifecycle().remove(*container);
      co_return ApiError::internal();
    }
  }
  // An E2B sandbox runs once it is made (its SDK's next call is a command, some
  // milliseconds of the client's own work away): its start overlaps them.
  containers_.lifecycle().start_sandbox_soon(*container);
  Sandbox s;
  s.id = id;
  s.owner = std::move(owner);
  s.template_id = std::move(request.template_id);
  s.metadata = std::move(request.metadata);
  s.env_vars = std::move(request.env_vars);
  s.started_at_ms = now_ms();
  s.end_at_ms = s.started_at_ms + request.timeout_sec * 1000;
  s.auto_pause = request.auto_pause;
  s.auto_pause_memory = request.auto_pause_memory;
  // Held in memory from the start where the scope allows (this replica made it: its
  // container's lease is this replica's).
  std::optional<store::E2bHold> hold;
  if (!cache_scope_)
    hold = store::E2bHold{};
  else if (auto epoch = cache_scope_((*container)->storage))
    hold = store::E2bHold{*epoch, (*container)->storage};
  bool inserted = false;
  try {
    inserted = co_await store([this, &s, &hold] { return records_.insert(s, hold); });
  } catch (const std::exception& e) {
    spdlog::error("e2b: recording sandbox {}: {}", s.id, e.what());
  }
  if (!inserted) {  // (an id of 20 random characters taken already, or the database failed)
    co_await containers_.lifecycle().remove(*container);
    co_return ApiError::internal();
  }
  // With its request's record, which is on disk when the request ends.
  if (auto* audit = ops::audit())
    audit->record_batched("e2b_sandbox_created",
                          {{"owner", s.owner}, {"sandbox", s.id}, {"template", s.template_id}});
  co_return s;
}

asio::awaitable<Result<Sandbox>> Sandboxes::find(const std::string& owner, const std::string& id) {
  // (A named local: GCC 12 destroys a temporary made inside a co_await expression twice.)
  std::optional<store::E2bHold> hold;
  if (!cache_scope_) hold.emplace();
  co_return co_await find_held(owner, id, hold);
}

asio::awaitable<Result<Sandbox>> Sandboxes::find_addressed(const std::string& owner, const std::string& id) {
  if (!cache_scope_) co_return co_await find(owner, id);
  // The token is taken before the database is read: what the read finds is then as
  // new as the lease, and only this replica writes it while the lease stays confirmed.
  std::optional<store::E2bHold> hold;
  if (auto open = containers_.lifecycle().find_open(owner, id))
    if (auto epoch = cache_scope_(open->storage)) hold = store::E2bHold{*epoch, open->storage};
  co_return co_await find_held(owner, id, hold);
}

asio::awaitable<Result<Sandbox>> Sandboxes::find_held(const std::string& owner, const std::string& id,
                                                      const std::optional<store::E2bHold>& hold) {
  if (hold) {
    Sandbox held;
    switch (records_.cached_find(owner, id, hold->token, held)) {
      case store::E2bRecords::Cached::kFound:
        co_return held;
      case store::E2bRecords::Cached::kNotFound:
        co_return sandbox_not_found(id);
      case store::E2bRecords::Cached::kNotHeld:
        break;
    }
  }
  auto found = co_await store([this, &owner, &id, &hold] { return records_.find(owner, id, hold); });
  if (!found) co_return sandbox_not_found(id);
  co_return std::move(*found);
}

asio::awaitable<Result<std::shared_ptr<Container>>> Sandboxes::open_container(const std::string& owner,
                                                                              const std::string& id) {
  if (auto found = co_await find(owner, id); !found) co_return found.error();
  auto container = co_await containers_.lifecycle().async_open(owner, id, /*create=*/false);
  if (!container && container.error().kind == ErrorKind::not_found) co_return sandbox_not_found(id);
  co_return container;
}

asio::awaitable<Result<std::shared_ptr<Container>>> Sandboxes::open(const std::string& owner,
                                                                    const std::string& id) {
  auto found = co_await find(owner, id);
  if (!found) co_return found.error();
  co_return co_await open(*found);
}

asio::awaitable<Result<std::shared_ptr<Container>>> Sandboxes::open(const Sandbox& found) {
  auto container = co_await containers_.lifecycle().async_open(found.owner, found.id, /*create=*/false);
  if (!container && container.error().kind == ErrorKind::not_found) co_return sandbox_not_found(found.id);
  if (!container) co_return container;
  // The filesystem calls work on the container's folders from the host: with the bucket,
  // a copy this replica just took over is made current first (cheap once done).
  if (auto* bucket = containers_.durability())
    if (auto ready = co_await bucket->ensure_local(*container); !ready) co_return ready.error();
  co_return container;
}

asio::awaitable<SandboxPage> Sandboxes::list(const std::string& owner, const SandboxQuery& query) {
  store::E2bRecordQuery select;
  select.owner = owner;
  select.metadata = query.metadata;
  select.paused = query.paused;
  select.template_id = query.template_id;
  select.started_from_ms = query.started_from_ms;
  select.started_to_ms = query.started_to_ms;
  select.newest_first = query.newest_first;
  select.after_started_ms = query.after_started_ms;
  select.after_id = query.after_id;
  select.limit = query.limit;
  co_return co_await store([this, &select] { return records_.list(select); });
}

asio::awaitable<Result<void>> Sandboxes::set_timeout(const std::string& owner, const std::string& id,
                                                     int64_t timeout_sec) {
  if (timeout_sec < 0 || timeout_sec > kMaxTimeoutSec) co_return bad_timeout();
  const int64_t end = now_ms() + timeout_sec * 1000;
  if (!co_await store([this, &owner, &id, end] { return records_.set_end(owner, id, end); }))
    co_return sandbox_not_found(id);
  co_return Result<void>{};
}

asio::awaitable<Result<void>> Sandboxes::pause(const std::string& owner, const std::string& id,
                                               bool keep_memory) {
  auto container = co_await open_container(owner, id);
  if (!container) co_return container.error();
  if (!co_await store([this, &owner, &id] { return records_.mark_paused(owner, id); }))
    co_return ApiError::conflict("Sandbox " + id + " is already paused");
  // In a cluster: flushed to the bucket, the lease let go.
  co_await containers_.lifecycle().stop(*container, keep_memory ? "paused" : kStopKeepingFilesOnly.data());
  if (auto* audit = ops::audit())
    audit->record("e2b_sandbox_paused",
                  {{"owner", owner}, {"sandbox", id}, {"keep_memory", keep_memory ? "true" : "false"}});
  co_return Result<void>{};
}

asio::awaitable<Result<bool>> Sandboxes::resume(const std::string& owner, const std::string& id,
                                                std::optional<int64_t> timeout_sec) {
  if (timeout_sec && (*timeout_sec < 0 || *timeout_sec > kMaxTimeoutSec)) co_return bad_timeout();
  auto container = co_await open_container(owner, id);
  if (!container) co_return container.error();
  containers_.lifecycle().touch(**container);
  const int64_t now = now_ms();
  // A connect never shortens a sandbox's life; it may lengthen it.
  std::optional<int64_t> end_at_least;
  if (timeout_sec) end_at_least = now + *timeout_sec * 1000;
  const int64_t end_if_paused = now + kResumeDefaultSec * 1000;
  auto was_paused = co_await store([this, &owner, &id, end_at_least, end_if_paused] {
    return records_.resume(owner, id, end_at_least, end_if_paused);
  });
  if (!was_paused) co_return sandbox_not_found(id);
  // A resumed sandbox runs, as a new one does (create): what its pause kept (its
  // processes, with the memory) goes on from now, not from its next command.
  if (*was_paused) containers_.lifecycle().start_sandbox_soon(*container);
  co_return *was_paused;
}

asio::awaitable<Result<void>> Sandboxes::kill(const std::string& owner, const std::string& id) {
  if (auto found = co_await find(owner, id); !found) co_return found.error();
  auto container = co_await containers_.lifecycle().async_open(owner, id, /*create=*/false);
  if (container) {
    co_await containers_.lifecycle().remove(*container);  // its network options with it
  } else if (container.error().kind != ErrorKind::not_found)
    co_return container.error();
  co_await store([this, &owner, &id] { return records_.remove(owner, id); });
  if (auto* audit = ops::audit()) audit->record("e2b_sandbox_killed", {{"owner", owner}, {"sandbox", id}});
  co_return Result<void>{};
}

asio::awaitable<Result<void>> Sandboxes::update_network(const std::string& owner, const std::string& id,
                                                        std::shared_ptr<const ops::SandboxEgress> egress) {
  auto container = co_await open_container(owner, id);
  if (!container) co_return container.error();
  if (!co_await keep_network(*container, std::move(egress))) co_return sandbox_not_found(id);
  if (auto* audit = ops::audit()) audit->record("e2b_sandbox_network", {{"owner", owner}, {"sandbox", id}});
  co_return Result<void>{};
}

std::shared_ptr<const ops::SandboxEgress> Sandboxes::network(const std::string& owner,
                                                             const std::string& id) const {
  auto container = containers_.lifecycle().find_open(owner, id);
  return container ? egress_options(*container) : nullptr;
}

asio::awaitable<std::shared_ptr<const ops::SandboxEgress>> Sandboxes::stored_network(const std::string& owner,
                                                                                     const std::string& id) {
  if (auto container = containers_.lifecycle().find_open(owner, id)) co_return egress_options(*container);
  auto stored = co_await store([this, &owner, &id] {
    auto record = containers_.metadata().find_container(owner, id);
    return record ? record->egress : std::string();
  });
  co_return decode_egress_options(stored);
}

asio::awaitable<bool> Sandboxes::keep_network(const std::shared_ptr<Container>& container,
                                              std::shared_ptr<const ops::SandboxEgress> egress) {
  // Stored first: options in force that a restart would forget must never be.
  const std::string encoded = encode_egress_options(egress.get());
  const bool stored = co_await store([this, &container, &encoded] {
    return containers_.metadata().set_container_egress(container->owner, container->id, container->storage,
                                                       encoded);
  });
  if (!stored) co_return false;
  set_egress_options(*container, std::move(egress));
  co_return true;
}

}  // namespace sandboxd::e2b
