#include "service/e2b_sandboxes.h"

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

#include "base/blocking.h"
#include "base/ids.h"
#include "ops/logging.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json::object string_map(const std::map<std::string, std::string>& map) {
  json::object out;
  for (const auto& [key, value] : map) out[key] = value;
  return out;
}

std::map<std::string, std::string> string_map(const json::value* value) {
  std::map<std::string, std::string> out;
  if (!value || !value->is_object()) return out;
  for (const auto& [key, item] : value->as_object())
    if (item.is_string()) out[std::string(key)] = std::string(item.as_string());
  return out;
}

std::string encode_record(const E2bSandbox& s) {
  return json::serialize(json::object{{"id", s.id},
                                      {"owner", s.owner},
                                      {"template", s.template_id},
                                      {"metadata", string_map(s.metadata)},
                                      {"env_vars", string_map(s.env_vars)},
                                      {"started_at_ms", s.started_at_ms},
                                      {"end_at_ms", s.end_at_ms},
                                      {"auto_pause", s.auto_pause},
                                      {"paused", s.paused}});
}

std::optional<E2bSandbox> decode_record(const std::string& text) {
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
  E2bSandbox s;
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

}  // namespace

bool E2bSandboxes::known_template(std::string_view name) {
  return name == "base" || name == "code-interpreter-v1" || name == "code-interpreter";
}

E2bSandboxes::E2bSandboxes(asio::io_context& io, ContainerService& containers, std::string data_dir)
    : io_(io),
      containers_(containers),
      dir_((fs::path(data_dir) / "e2b" / "sandboxes").string()),
      timer_(io) {}

E2bSandboxes::~E2bSandboxes() { stopping_ = true; }

std::string E2bSandboxes::record_path(const std::string& id) const {
  return (fs::path(dir_) / (id + ".json")).string();
}

void E2bSandboxes::start() {
  fs::create_directories(dir_);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    if (auto record = decode_record(text.str())) {
      std::lock_guard lock(mutex_);
      sandboxes_[record->id] = std::move(*record);
    } else {
      spdlog::warn("e2b: ignoring the unreadable sandbox record {}", entry.path().string());
    }
  }
  asio::co_spawn(io_, end_expired(), asio::detached);
}

asio::awaitable<void> E2bSandboxes::end_expired() {
  while (!stopping_) {
    timer_.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || stopping_) co_return;
    const int64_t now = now_ms();
    std::vector<E2bSandbox> due;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [id, s] : sandboxes_)
        if (!s.paused && s.end_at_ms <= now) due.push_back(s);
    }
    for (const auto& s : due) {
      ops::log_event(spdlog::level::info, "e2b_sandbox_timeout",
                     {{"owner", s.owner}, {"sandbox", s.id}, {"action", s.auto_pause ? "pause" : "kill"}});
      if (s.auto_pause)
        co_await pause(s.owner, s.id);
      else
        co_await kill(s.owner, s.id);
    }
  }
}

asio::awaitable<void> E2bSandboxes::save(E2bSandbox record) {
  auto write = [path = record_path(record.id), text = encode_record(record)] {
    // Written aside and renamed: a crash leaves the old record or the new one.
    const std::string temp = path + ".tmp";
    {
      std::ofstream out(temp, std::ios::trunc);
      out << text;
      out.flush();
      if (!out) return false;
    }
    std::error_code ec;
    fs::rename(temp, path, ec);
    return !ec;
  };
  if (!co_await run_blocking(std::move(write)))
    spdlog::error("e2b: could not write the record of sandbox {}", record.id);
}

void E2bSandboxes::forget_record(const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(id);
  }
  std::error_code ec;
  fs::remove(record_path(id), ec);
}

asio::awaitable<Result<E2bSandbox>> E2bSandboxes::create(std::string owner, E2bCreate request) {
  if (!known_template(request.template_id))
    co_return ApiError::not_found("Template '" + request.template_id +
                                  "' not found (this server has 'base' and 'code-interpreter-v1')");
  if (request.timeout_sec < 0 || request.timeout_sec > kMaxTimeoutSec)
    co_return ApiError::invalid_request("'timeout' must be from 0 to " + std::to_string(kMaxTimeoutSec) +
                                        " seconds");
  // E2B's ids: lower-case letters and digits, 20 of them.
  std::string id = random_alnum(20);
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto container = co_await containers_.async_open(owner, id, /*create=*/true);
  if (!container) co_return container.error();
  containers_.touch(**container);
  // An E2B sandbox runs once it is made (its SDK's next call is a command, some
  // milliseconds of the client's own work away): its start overlaps them.
  containers_.start_sandbox_soon(*container);
  E2bSandbox s;
  s.id = id;
  s.owner = std::move(owner);
  s.template_id = std::move(request.template_id);
  s.metadata = std::move(request.metadata);
  s.env_vars = std::move(request.env_vars);
  s.started_at_ms = now_ms();
  s.end_at_ms = s.started_at_ms + request.timeout_sec * 1000;
  s.auto_pause = request.auto_pause;
  {
    std::lock_guard lock(mutex_);
    sandboxes_[s.id] = s;
  }
  co_await save(s);
  // With its request's record, which is on disk when the request ends.
  if (auto* audit = ops::audit())
    audit->record_batched("e2b_sandbox_created",
                          {{"owner", s.owner}, {"sandbox", s.id}, {"template", s.template_id}});
  co_return s;
}

Result<E2bSandbox> E2bSandboxes::find(const std::string& owner, const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.owner != owner) return sandbox_not_found(id);
  return it->second;
}

asio::awaitable<Result<std::shared_ptr<Container>>> E2bSandboxes::open(const std::string& owner,
                                                                       const std::string& id) {
  if (auto found = find(owner, id); !found) co_return found.error();
  auto container = co_await containers_.async_open(owner, id, /*create=*/false);
  if (!container && container.error().status == HttpStatus::not_found) co_return sandbox_not_found(id);
  co_return container;
}

std::vector<E2bSandbox> E2bSandboxes::list(const std::string& owner, const E2bListQuery& query,
                                           bool& has_more) const {
  std::vector<E2bSandbox> out;
  has_more = false;
  std::lock_guard lock(mutex_);
  for (auto it = query.after_id.empty() ? sandboxes_.begin() : sandboxes_.upper_bound(query.after_id);
       it != sandboxes_.end(); ++it) {
    const auto& s = it->second;
    if (s.owner != owner) continue;
    if (query.paused && s.paused != *query.paused) continue;
    bool matches = true;
    for (const auto& [key, value] : query.metadata) {
      auto m = s.metadata.find(key);
      if (m == s.metadata.end() || m->second != value) matches = false;
    }
    if (!matches) continue;
    if (out.size() == query.limit) {
      has_more = true;
      break;
    }
    out.push_back(s);
  }
  return out;
}

asio::awaitable<Result<void>> E2bSandboxes::set_timeout(const std::string& owner, const std::string& id,
                                                        int64_t timeout_sec) {
  if (timeout_sec < 0 || timeout_sec > kMaxTimeoutSec)
    co_return ApiError::invalid_request("'timeout' must be from 0 to " + std::to_string(kMaxTimeoutSec) +
                                        " seconds");
  E2bSandbox copy;
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end() || it->second.owner != owner) co_return sandbox_not_found(id);
    it->second.end_at_ms = now_ms() + timeout_sec * 1000;
    copy = it->second;
  }
  co_await save(copy);
  co_return Result<void>{};
}

asio::awaitable<Result<void>> E2bSandboxes::pause(const std::string& owner, const std::string& id) {
  auto container = co_await open(owner, id);
  if (!container) co_return container.error();
  E2bSandbox copy;
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end() || it->second.owner != owner) co_return sandbox_not_found(id);
    if (it->second.paused)
      co_return ApiError{HttpStatus::conflict, "invalid_request_error",
                         "Sandbox " + id + " is already paused"};
    it->second.paused = true;
    copy = it->second;
  }
  co_await save(copy);
  co_await containers_.stop(*container, "paused");
  co_return Result<void>{};
}

asio::awaitable<Result<bool>> E2bSandboxes::resume(const std::string& owner, const std::string& id,
                                                   std::optional<int64_t> timeout_sec) {
  if (timeout_sec && (*timeout_sec < 0 || *timeout_sec > kMaxTimeoutSec))
    co_return ApiError::invalid_request("'timeout' must be from 0 to " + std::to_string(kMaxTimeoutSec) +
                                        " seconds");
  auto container = co_await open(owner, id);
  if (!container) co_return container.error();
  containers_.touch(**container);
  E2bSandbox copy;
  bool was_paused = false;
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end() || it->second.owner != owner) co_return sandbox_not_found(id);
    was_paused = it->second.paused;
    it->second.paused = false;
    const int64_t now = now_ms();
    // A connect never shortens a sandbox's life; it may lengthen it.
    if (timeout_sec)
      it->second.end_at_ms = std::max(it->second.end_at_ms, now + *timeout_sec * 1000);
    else if (was_paused)
      it->second.end_at_ms = std::max(it->second.end_at_ms, now + 300 * 1000);
    copy = it->second;
  }
  co_await save(copy);
  co_return was_paused;
}

asio::awaitable<Result<void>> E2bSandboxes::kill(const std::string& owner, const std::string& id) {
  if (auto found = find(owner, id); !found) co_return found.error();
  auto container = co_await containers_.async_open(owner, id, /*create=*/false);
  if (container)
    co_await containers_.remove(*container);
  else if (container.error().status != HttpStatus::not_found)
    co_return container.error();
  auto forget = [this, id] { forget_record(id); };
  co_await run_blocking(std::move(forget));
  if (auto* audit = ops::audit()) audit->record("e2b_sandbox_killed", {{"owner", owner}, {"sandbox", id}});
  co_return Result<void>{};
}

}  // namespace sandboxd::service
