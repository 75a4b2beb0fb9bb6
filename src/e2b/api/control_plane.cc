// E2B's control plane (docs/e2b.md) under /e2b: what E2B's SDKs call with E2B_API_URL
// set to http://HOST:PORT/e2b and the API key a sandboxd token. A sandbox is a
// container of the key's owner (e2b/service/sandboxes.h); the same quotas, capacity
// answers, audit and metrics apply to it as to any container.

#include <unistd.h>

#include <boost/algorithm/string/predicate.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>

#include "api/api_calls.h"
#include "e2b/api/common.h"
#include "e2b/api/connect_rpc.h"
#include "server/auth.h"
#include "server/router.h"

namespace sandboxd::e2b {
namespace {

using api::describe_container;

namespace json = boost::json;

constexpr size_t kControlBodyLimit = 256 * 1024;
constexpr size_t kMaxListLimit = 1000;

Result<std::map<std::string, std::string>> string_map_field(const json::object& body, std::string_view key) {
  std::map<std::string, std::string> out;
  const auto* value = body.if_contains(key);
  if (!value || value->is_null()) return out;
  if (!value->is_object())
    return ApiError::invalid_request("'" + std::string(key) + "' must be an object of strings");
  for (const auto& [name, item] : value->as_object()) {
    if (!item.is_string())
      return ApiError::invalid_request("'" + std::string(key) + "." + std::string(name) +
                                       "' must be a string");
    out[std::string(name)] = std::string(item.as_string());
  }
  return out;
}

// An optional integer field (seconds); an error for anything but an integer.
Result<std::optional<int64_t>> seconds_field(const json::object& body, std::string_view key) {
  const auto* value = body.if_contains(key);
  if (!value || value->is_null()) return std::optional<int64_t>{};
  if (value->is_int64()) return std::optional<int64_t>{value->as_int64()};
  if (value->is_uint64() && value->as_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return std::optional<int64_t>{static_cast<int64_t>(value->as_uint64())};
  return ApiError::invalid_request("'" + std::string(key) + "' must be an integer number of seconds");
}

Result<bool> bool_field(const json::object& body, std::string_view key) {
  const auto* value = body.if_contains(key);
  if (!value || value->is_null()) return false;
  if (!value->is_bool()) return ApiError::invalid_request("'" + std::string(key) + "' must be a boolean");
  return value->as_bool();
}

// An optional array of strings (E2B's allowOut and denyOut).
Result<std::vector<std::string>> string_list_field(const json::object& body, std::string_view key) {
  std::vector<std::string> out;
  const auto* value = body.if_contains(key);
  if (!value || value->is_null()) return out;
  if (!value->is_array())
    return ApiError::invalid_request("'network." + std::string(key) + "' must be an array of strings");
  for (const auto& item : value->as_array()) {
    if (!item.is_string())
      return ApiError::invalid_request("'network." + std::string(key) + "' must be an array of strings");
    out.emplace_back(item.as_string());
  }
  return out;
}

// E2B's network.rules (SandboxNetworkConfig.rules): {host pattern: [SandboxNetworkRule]},
// each rule's transform.headers set in order (a later one's value wins for a name). As
// E2B: keys are exact names or one leading "*." wildcard, lower-cased; a bare "*" is not.
Result<std::vector<ops::HeaderRule>> header_rules_field(const json::value& rules) {
  if (!rules.is_object())
    return ApiError::invalid_request("'network.rules' must be an object of host patterns to lists of rules");
  if (rules.as_object().size() > ops::kMaxHeaderRules)
    return ApiError::invalid_request("'network.rules' may have at most " +
                                     std::to_string(ops::kMaxHeaderRules) + " hosts");
  std::vector<ops::HeaderRule> out;
  for (const auto& [pattern, list] : rules.as_object()) {
    const std::string where = "'network.rules[\"" + std::string(pattern) + "\"]'";
    if (!list.is_array()) return ApiError::invalid_request(where + " must be a list of rules");
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& rule : list.as_array()) {
      if (!rule.is_object())
        return ApiError::invalid_request(where + " must be a list of rules ({transform})");
      const auto* transform = rule.as_object().if_contains("transform");
      if (!transform || transform->is_null()) continue;
      if (!transform->is_object())
        return ApiError::invalid_request(where + ": 'transform' must be an object");
      const auto* set = transform->as_object().if_contains("headers");
      if (!set || set->is_null()) continue;
      if (!set->is_object())
        return ApiError::invalid_request(where + ": 'transform.headers' must be an object of strings");
      for (const auto& [name, value] : set->as_object()) {
        if (!value.is_string())
          return ApiError::invalid_request(where + ": the value of header '" + std::string(name) +
                                           "' must be a string");
        std::erase_if(headers,
                      [&](const auto& pair) { return boost::iequals(pair.first, std::string_view(name)); });
        headers.emplace_back(std::string(name), std::string(value.as_string()));
      }
    }
    std::string error;
    auto parsed = ops::parse_header_rule(pattern, std::move(headers), &error);
    if (!parsed) return ApiError::invalid_request(where + " " + error);
    out.push_back(std::move(*parsed));
  }
  return out;
}

// E2B's egress options of a create (NewSandbox) or an update (SandboxNetworkUpdateConfig):
// top-level allow_internet_access and network.allowOut/denyOut, checked against the
// operator's policy (a request may narrow it, never widen it). Null when none is given.
// Header rules (network.rules) are kept with them; a SOCKS5 egress proxy is refused rather
// than ignored: a client that sends one counts on it.
Result<std::shared_ptr<const ops::SandboxEgress>> requested_egress(ApiContext& api,
                                                                   const json::object& body) {
  std::optional<bool> internet;
  if (const auto* value = body.if_contains("allow_internet_access"); value && !value->is_null()) {
    if (!value->is_bool()) return ApiError::invalid_request("'allow_internet_access' must be a boolean");
    internet = value->as_bool();
  }
  // A create nests them under "network"; an update is the network object itself.
  const json::object* network = &body;
  if (const auto* nested = body.if_contains("network")) {
    if (nested->is_null()) {
      network = nullptr;
    } else if (!nested->is_object()) {
      return ApiError::invalid_request("'network' must be an object");
    } else {
      network = &nested->as_object();
    }
  } else if (body.contains("templateID")) {
    network = nullptr;
  }
  std::vector<std::string> allow_out, deny_out;
  std::vector<ops::HeaderRule> header_rules;
  bool listed = false, has_rules = false;
  if (network) {
    if (const auto* rules = network->if_contains("rules"); rules && !rules->is_null()) {
      auto parsed = header_rules_field(*rules);
      if (!parsed) return parsed.error();
      header_rules = std::move(*parsed);
      has_rules = !header_rules.empty();
    }
    if (const auto* proxy = network->if_contains("egressProxy"); proxy && !proxy->is_null())
      return ApiError::invalid_request("'network.egressProxy' is not available on this server");
    auto allow = string_list_field(*network, "allowOut");
    if (!allow) return allow.error();
    auto deny = string_list_field(*network, "denyOut");
    if (!deny) return deny.error();
    listed = network->contains("allowOut") || network->contains("denyOut");
    allow_out = std::move(*allow);
    deny_out = std::move(*deny);
  }
  if (!internet && !listed && !has_rules) return std::shared_ptr<const ops::SandboxEgress>{};
  std::string error;
  const auto config = api.config();
  auto egress = ops::parse_sandbox_egress(allow_out, deny_out, internet, config->egress_allow,
                                          config->egress_deny, &error);
  if (!egress) return ApiError::invalid_request(error);
  egress->header_rules = std::move(header_rules);
  return std::shared_ptr<const ops::SandboxEgress>(std::make_shared<ops::SandboxEgress>(std::move(*egress)));
}

// SandboxDetail's allowInternetAccess and network (SandboxNetworkConfig), as given.
void add_network_detail(json::object& detail, const ops::SandboxEgress* egress) {
  detail["allowInternetAccess"] = egress && egress->allow_internet_access
                                      ? json::value(*egress->allow_internet_access)
                                      : json::value(nullptr);
  if (!egress) return;
  json::array allow, deny;
  for (const auto& rule : egress->allow_out) allow.emplace_back(rule.source);
  for (const auto& rule : egress->deny_out) deny.emplace_back(rule.source);
  json::object network{{"allowOut", std::move(allow)}, {"denyOut", std::move(deny)}};
  // The rules as E2B's info shows them (the owner's own; never reachable from a sandbox,
  // whose token is taken by the messages endpoints only).
  if (!egress->header_rules.empty()) {
    json::object rules;
    for (const auto& rule : egress->header_rules) {
      json::object headers;
      for (const auto& [name, value] : rule.headers) headers[name] = value;
      rules[rule.source] =
          json::array{json::object{{"transform", json::object{{"headers", std::move(headers)}}}}};
    }
    network["rules"] = std::move(rules);
  }
  detail["network"] = std::move(network);
}

asio::awaitable<Result<json::object>> read_object(RequestContext& ctx) {
  auto body = co_await ctx.read_body(kControlBodyLimit);
  if (!body) co_return body.error();
  if (body->empty()) co_return json::object{};
  co_return parse_e2b_object(*body);
}

// The Sandbox schema: what create and connect answer. The envd access token is the
// caller's own token (see e2b/api/common.h); so is the traffic token, which the code
// interpreter's SDK sends on its context calls (they carry no other credential).
json::object sandbox_handle(const e2b::Sandbox& s, RequestContext& ctx, const std::string& domain) {
  return json::object{{"templateID", s.template_id},
                      {"sandboxID", s.id},
                      {"clientID", "sandboxd"},
                      {"envdVersion", kEnvdVersion},
                      {"envdAccessToken", std::string(server::presented_token(ctx))},
                      {"trafficAccessToken", std::string(server::presented_token(ctx))},
                      // The SDKs address the sandbox as PORT-ID.<domain> where it is
                      // given (E2B_SANDBOX_URL, when set, wins for their calls).
                      {"domain", domain.empty() ? json::value(nullptr) : json::value(domain)}};
}

// A sandbox's size as E2B reports it, from the limits every sandbox gets (no limit on
// memory: the host's memory).
struct SandboxSize {
  int64_t cpus = 1, memory_bytes = 0, disk_bytes = 0;
};
SandboxSize sandbox_size(const ops::Config& config) {
  SandboxSize size;
  // A CPU quota in whole CPUs, rounded up; without one, the host's CPUs.
  size.cpus = config.limit_range_enabled && config.limit_cpu_millis > 0
                  ? std::max<int64_t>(1, (config.limit_cpu_millis + 999) / 1000)
                  : std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  size.memory_bytes = static_cast<int64_t>(config.memory_limit_bytes    ? config.memory_limit_bytes
                                           : config.limit_range_enabled ? config.limit_memory_bytes
                                                                        : 0);
  // No limit of its own: the host's memory is what it may take.
  if (size.memory_bytes == 0)
    size.memory_bytes =
        static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  size.disk_bytes = static_cast<int64_t>(config.workspace_size_bytes);
  return size;
}

// ListedSandbox / SandboxDetail.
json::object sandbox_detail(ApiContext& api, const e2b::Sandbox& s) {
  const auto size = sandbox_size(*api.config());
  json::object metadata;
  for (const auto& [key, value] : s.metadata) metadata[key] = value;
  json::object detail{{"templateID", s.template_id},
                      {"sandboxID", s.id},
                      {"clientID", "sandboxd"},
                      {"startedAt", e2b_time(s.started_at_ms)},
                      {"endAt", e2b_time(s.end_at_ms)},
                      {"cpuCount", size.cpus},
                      {"memoryMB", size.memory_bytes >> 20},
                      {"diskSizeMB", size.disk_bytes >> 20},
                      {"metadata", std::move(metadata)},
                      {"state", s.paused ? "paused" : "running"},
                      {"envdVersion", kEnvdVersion},
                      {"volumeMounts", json::array{}}};
  add_network_detail(detail, api.sandboxes.network(s.owner, s.id).get());
  return detail;
}

asio::awaitable<Result<Response>> create_sandbox(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  e2b::NewSandbox request;
  const auto* template_id = body->if_contains("templateID");
  if (!template_id || !template_id->is_string() || template_id->as_string().empty())
    co_return ApiError::invalid_request("'templateID' is required (a template name such as 'base')");
  request.template_id = std::string(template_id->as_string());
  auto metadata = string_map_field(*body, "metadata");
  if (!metadata) co_return metadata.error();
  request.metadata = std::move(*metadata);
  auto env_vars = string_map_field(*body, "envVars");
  if (!env_vars) co_return env_vars.error();
  request.env_vars = std::move(*env_vars);
  for (const auto& [name, value] : request.env_vars)
    if (name.empty() || name.find_first_of("=\0", 0, 2) != std::string::npos ||
        value.find('\0') != std::string::npos)
      co_return ApiError::invalid_request("Environment variable names may not be empty or hold '=' or NUL");
  auto timeout = seconds_field(*body, "timeout");
  if (!timeout) co_return timeout.error();
  // E2B's API defaults to 15 s; its SDKs always send their own default (300 s).
  request.timeout_sec = timeout->value_or(15);
  auto auto_pause = bool_field(*body, "autoPause");
  if (!auto_pause) co_return auto_pause.error();
  request.auto_pause = *auto_pause;
  // What that pause keeps (E2B's lifecycle.onTimeout.keepMemory): memory unless it says
  // false, where the tier keeps memory; files either way.
  if (body->contains("autoPauseMemory")) {
    auto auto_pause_memory = bool_field(*body, "autoPauseMemory");
    if (!auto_pause_memory) co_return auto_pause_memory.error();
    request.auto_pause_memory = *auto_pause_memory;
  }
  if (const auto* mcp = body->if_contains("mcp"); mcp && !mcp->is_null())
    co_return ApiError::invalid_request("MCP gateways are not available on this server");
  // E2B's default lets anyone who knows a port's URL in; here only the owner's
  // credentials (the traffic access token among them) open a sandbox's ports, and a
  // sandbox is never opened to strangers (e2b/api/ports.cc).
  if (const auto* network = body->if_contains("network"); network && network->is_object())
    if (const auto* allow = network->as_object().if_contains("allowPublicTraffic");
        allow && allow->is_bool() && allow->as_bool())
      co_return ApiError::invalid_request(
          "Public traffic is not available on this server: a sandbox's ports open only with its "
          "traffic access token (header e2b-traffic-access-token) or its owner's API key; create it "
          "with network.allowPublicTraffic false");
  if (const auto* mounts = body->if_contains("volumeMounts");
      mounts && mounts->is_array() && !mounts->as_array().empty())
    co_return ApiError::invalid_request("Volumes are not available on this server");
  auto egress = requested_egress(api, *body);
  if (!egress) co_return egress.error();
  request.egress = std::move(*egress);
  Result<e2b::Sandbox> created = ApiError::internal();
  if (e2b::Sandboxes::known_template(request.template_id)) {
    created = co_await api.sandboxes.create(ctx.owner, std::move(request));
  } else {
    // Sandbox.create(snapshotId): a template id that names one of the owner's snapshots.
    const std::string name = request.template_id;
    auto from_snapshot = co_await api.snapshots.create_sandbox(ctx.owner, std::move(request));
    if (!from_snapshot)
      co_return ApiError::not_found("Template '" + name +
                                    "' not found (this server has 'base', 'code-interpreter-v1' and the "
                                    "key's snapshots)");
    created = std::move(*from_snapshot);
  }
  if (!created) co_return created.error();
  co_return json_ok(sandbox_handle(*created, ctx, api.config()->e2b_sandbox_domain), HttpStatus::created);
}

// ?metadata=k1%3Dv1%26k2%3Dv2 (the SDK encodes each key and value, then the pairs as a
// query string) and ?state=running,paused.
Result<e2b::SandboxQuery> list_query(RequestContext& ctx) {
  e2b::SandboxQuery query;
  if (auto metadata = ctx.query_value("metadata"); metadata && !metadata->empty()) {
    std::string_view rest = *metadata;
    while (!rest.empty()) {
      const size_t amp = rest.find('&');
      std::string_view pair = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (pair.empty()) continue;
      const size_t eq = pair.find('=');
      std::string key, value;
      if (eq == std::string_view::npos || !server::percent_decode(pair.substr(0, eq), key) ||
          !server::percent_decode(pair.substr(eq + 1), value) || key.empty())
        return ApiError::invalid_request("'metadata' must be key=value pairs joined by '&'");
      // Each side was encoded twice (once by the SDK, once as a query value).
      std::string key2, value2;
      if (server::percent_decode(key, key2)) key = key2;
      if (server::percent_decode(value, value2)) value = value2;
      query.metadata[key] = value;
    }
    if (query.metadata.size() > store::E2bRecords::kMaxMetadataFilters)
      return ApiError::invalid_request("'metadata' may filter by at most " +
                                       std::to_string(store::E2bRecords::kMaxMetadataFilters) + " pairs");
  }
  // ?state=running&state=paused (what the SDKs send for an array) or
  // ?state=running,paused: every value of every 'state' parameter.
  {
    bool running = false, paused = false, any = false;
    auto target = boost::urls::parse_origin_form(ctx.header().target());
    if (target) {
      for (auto param : target->params()) {
        if (param.key != "state") continue;
        std::string_view rest = param.value;
        while (!rest.empty()) {
          const size_t comma = rest.find(',');
          std::string_view item = rest.substr(0, comma);
          rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
          any = true;
          if (item == "running")
            running = true;
          else if (item == "paused")
            paused = true;
          else
            return ApiError::invalid_request("'state' must be running, paused or both");
        }
      }
    }
    if (any && running != paused) query.paused = paused;
  }
  if (auto order = ctx.query_value("order"); order && !order->empty()) {
    if (*order != "asc" && *order != "desc") return ApiError::invalid_request("'order' must be asc or desc");
    query.newest_first = *order == "desc";
  }
  if (auto template_id = ctx.query_value("template"); template_id && !template_id->empty())
    query.template_id = *template_id;
  if (auto after = ctx.query_value("startedAfter"); after && !after->empty()) {
    auto ms = parse_e2b_time(*after);
    if (!ms) return ApiError::invalid_request("'startedAfter' must be an RFC 3339 date-time");
    query.started_from_ms = *ms;
  }
  if (auto before = ctx.query_value("startedBefore"); before && !before->empty()) {
    auto ms = parse_e2b_time(*before);
    if (!ms) return ApiError::invalid_request("'startedBefore' must be an RFC 3339 date-time");
    query.started_to_ms = *ms;
  }
  if (auto limit = ctx.query_value("limit")) {
    char* end = nullptr;
    const long value = std::strtol(limit->c_str(), &end, 10);
    if (limit->empty() || *end || value < 1 || value > static_cast<long>(kMaxListLimit))
      return ApiError::invalid_request("'limit' must be an integer from 1 to 1000");
    query.limit = static_cast<size_t>(value);
  }
  if (auto token = ctx.query_value("nextToken"); token && !token->empty()) {
    // "<start time in ms>.<id>": the last sandbox of the page before (list_sandboxes).
    const size_t dot = token->find('.');
    int64_t started = 0;
    const char* digits_end = token->data() + (dot == std::string::npos ? 0 : dot);
    auto [end, ec] = std::from_chars(token->data(), digits_end, started);
    if (dot == std::string::npos || dot == 0 || ec != std::errc() || end != digits_end ||
        !ContainerService::valid_id(token->substr(dot + 1)))
      return ApiError::invalid_request("Invalid 'nextToken'");
    query.after_started_ms = started;
    query.after_id = token->substr(dot + 1);
  }
  return query;
}

asio::awaitable<Result<Response>> list_sandboxes(ApiContext& api, RequestContext& ctx) {
  auto query = list_query(ctx);
  if (!query) co_return query.error();
  auto page = co_await api.sandboxes.list(ctx.owner, *query);
  json::array data;
  for (const auto& s : page.records) data.push_back(sandbox_detail(api, s));
  auto res = json_ok(data);
  if (page.has_more && !page.records.empty())
    res.set("x-next-token", std::to_string(page.records.back().started_at_ms) + "." + page.records.back().id);
  co_return res;
}

// The v1 listing: running sandboxes only (its first 1,000: it has no paging).
asio::awaitable<Result<Response>> list_running_sandboxes(ApiContext& api, RequestContext& ctx) {
  auto query = list_query(ctx);
  if (!query) co_return query.error();
  query->paused = false;
  query->limit = kMaxListLimit;
  auto page = co_await api.sandboxes.list(ctx.owner, *query);
  json::array data;
  for (const auto& s : page.records) data.push_back(sandbox_detail(api, s));
  co_return json_ok(data);
}

asio::awaitable<Result<Response>> get_sandbox(ApiContext& api, RequestContext& ctx) {
  auto found = co_await api.sandboxes.find(ctx.owner, ctx.params["id"]);
  if (!found) co_return found.error();
  auto detail = sandbox_detail(api, *found);
  // Its network options as its container keeps them, also when it is not open here.
  detail.erase("network");
  add_network_detail(detail, (co_await api.sandboxes.stored_network(found->owner, found->id)).get());
  co_return json_ok(detail);
}

asio::awaitable<Result<Response>> kill_sandbox(ApiContext& api, RequestContext& ctx) {
  auto killed = co_await api.sandboxes.kill(ctx.owner, ctx.params["id"]);
  if (!killed) co_return killed.error();
  server::StringResponse res{HttpStatus::no_content, 11};
  co_return res;
}

asio::awaitable<Result<Response>> set_timeout(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  auto timeout = seconds_field(*body, "timeout");
  if (!timeout) co_return timeout.error();
  if (!*timeout) co_return ApiError::invalid_request("'timeout' is required");
  auto set = co_await api.sandboxes.set_timeout(ctx.owner, ctx.params["id"], **timeout);
  if (!set) co_return set.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

// updateNetwork: replaces the sandbox's egress options (omitted ones are cleared).
asio::awaitable<Result<Response>> update_network(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  auto egress = requested_egress(api, *body);
  if (!egress) co_return egress.error();
  auto updated = co_await api.sandboxes.update_network(ctx.owner, ctx.params["id"], std::move(*egress));
  if (!updated) co_return updated.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

asio::awaitable<Result<Response>> pause_sandbox(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  // E2B's SDK sends {"memory": keepMemory}; absent, memory is kept (E2B's default) where
  // the isolation tier can keep it (docs/e2b.md).
  bool keep_memory = true;
  if (const auto* memory = body->if_contains("memory"); memory && !memory->is_null()) {
    if (!memory->is_bool()) co_return ApiError::invalid_request("'memory' must be a boolean");
    keep_memory = memory->as_bool();
  }
  auto paused = co_await api.sandboxes.pause(ctx.owner, ctx.params["id"], keep_memory);
  if (!paused) co_return paused.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

// Connect (v2) and resume (v1): 201 when the sandbox was paused, 200 when it ran.
asio::awaitable<Result<Response>> connect_sandbox(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  auto timeout = seconds_field(*body, "timeout");
  if (!timeout) co_return timeout.error();
  const std::string id = ctx.params["id"];
  auto resumed = co_await api.sandboxes.resume(ctx.owner, id, *timeout);
  if (!resumed) co_return resumed.error();
  auto found = co_await api.sandboxes.find(ctx.owner, id);
  if (!found) co_return found.error();
  co_return json_ok(sandbox_handle(*found, ctx, api.config()->e2b_sandbox_domain),
                    *resumed ? HttpStatus::created : HttpStatus::ok);
}

// SnapshotInfo.
json::object snapshot_info(const e2b::Snapshot& snapshot) {
  const std::string id = e2b::Snapshots::snapshot_id(snapshot);
  return json::object{{"snapshotID", id}, {"names", json::array{json::value(id)}}};
}

asio::awaitable<Result<Response>> create_snapshot(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  std::string name;
  if (const auto* value = body->if_contains("name"); value && !value->is_null()) {
    if (!value->is_string()) co_return ApiError::invalid_request("'name' must be a string");
    name = std::string(value->as_string());
  }
  auto snapshot = co_await api.snapshots.create(ctx.owner, ctx.params["id"], std::move(name));
  if (!snapshot) co_return snapshot.error();
  co_return json_ok(snapshot_info(*snapshot), HttpStatus::created);
}

// ?sandboxID, ?name (a name or snapshot id), ?limit, ?nextToken: newest first.
asio::awaitable<Result<Response>> list_snapshots(ApiContext& api, RequestContext& ctx) {
  store::E2bSnapshotQuery query;
  query.owner = ctx.owner;
  if (auto sandbox = ctx.query_value("sandboxID"); sandbox && !sandbox->empty())
    query.source_sandbox = *sandbox;
  if (auto name = ctx.query_value("name"); name && !name->empty()) {
    auto key = e2b::Snapshots::key_of(*name);
    if (!key) co_return json_ok(json::array{});  // nothing of this server's has that name
    query.key = *key;
  }
  if (auto limit = ctx.query_value("limit")) {
    char* end = nullptr;
    const long value = std::strtol(limit->c_str(), &end, 10);
    if (limit->empty() || *end || value < 1 || value > static_cast<long>(kMaxListLimit))
      co_return ApiError::invalid_request("'limit' must be an integer from 1 to 1000");
    query.limit = static_cast<size_t>(value);
  }
  if (auto token = ctx.query_value("nextToken"); token && !token->empty()) {
    // "<creation time in ms>.<id>": the last snapshot of the page before.
    const size_t dot = token->find('.');
    int64_t created = 0;
    const char* digits_end = token->data() + (dot == std::string::npos ? 0 : dot);
    auto [end, ec] = std::from_chars(token->data(), digits_end, created);
    if (dot == std::string::npos || dot == 0 || ec != std::errc() || end != digits_end ||
        !ContainerService::valid_id(token->substr(dot + 1)))
      co_return ApiError::invalid_request("Invalid 'nextToken'");
    query.after_created_ms = created;
    query.after_id = token->substr(dot + 1);
  }
  auto page = co_await api.snapshots.list(std::move(query));
  json::array data;
  for (const auto& snapshot : page.snapshots) data.push_back(snapshot_info(snapshot));
  auto res = json_ok(data);
  if (page.has_more && !page.snapshots.empty())
    res.set("x-next-token",
            std::to_string(page.snapshots.back().created_at_ms) + "." + page.snapshots.back().id);
  co_return res;
}

// deleteSnapshot (a snapshot is a template to E2B): 204, or 404 (the SDK's false).
asio::awaitable<Result<Response>> delete_snapshot(ApiContext& api, RequestContext& ctx) {
  auto removed = co_await api.snapshots.remove(ctx.owner, ctx.params["id"]);
  if (!removed) co_return removed.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

// Fork: 201 with one SandboxForkResult per fork, each {sandbox} or {error}.
asio::awaitable<Result<Response>> fork_sandbox(ApiContext& api, RequestContext& ctx) {
  auto body = co_await read_object(ctx);
  if (!body) co_return body.error();
  int64_t count = 1;  // E2B's default
  if (const auto* value = body->if_contains("count"); value && !value->is_null()) {
    if (value->is_int64())
      count = value->as_int64();
    else if (value->is_uint64())
      count = INT64_MAX;  // (refused below as too many)
    else
      co_return ApiError::invalid_request("'count' must be an integer");
  }
  auto timeout = seconds_field(*body, "timeout");
  if (!timeout) co_return timeout.error();
  auto forks = co_await api.snapshots.fork(ctx.owner, ctx.params["id"], count, timeout->value_or(15));
  if (!forks) co_return forks.error();
  json::array results;
  for (const auto& fork : *forks) {
    if (fork)
      results.push_back(
          json::object{{"sandbox", sandbox_handle(*fork, ctx, api.config()->e2b_sandbox_domain)}});
    else
      results.push_back(
          json::object{{"error", json::object{{"code", static_cast<int>(e2b_status_of(fork.error().kind))},
                                              {"message", fork.error().message}}}});
  }
  co_return json_ok(results, HttpStatus::created);
}

// ?start= and ?end= of the metrics (Unix seconds, what the SDKs send).
Result<std::optional<int64_t>> unix_seconds_query(RequestContext& ctx, const std::string& name) {
  auto text = ctx.query_value(name);
  if (!text || text->empty()) return std::optional<int64_t>{};
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < 0)
    return ApiError::invalid_request("'" + name + "' must be a Unix time in seconds");
  return std::optional<int64_t>{value};
}

// What sandboxd measures of a running sandbox, sampled when asked: the CPU its cgroup
// used since the previous sample (since its start for the first), its memory now
// against its limit, and the bytes its files take. One sample, now's: it is answered
// when now is in the range asked for (start: the sandbox's start by default; end: now,
// a second's slack for the SDK's rounding to seconds), so a range before the sandbox
// existed, or after, is empty.
asio::awaitable<Result<Response>> sandbox_metrics(ApiContext& api, RequestContext& ctx) {
  auto start = unix_seconds_query(ctx, "start");
  if (!start) co_return start.error();
  auto end = unix_seconds_query(ctx, "end");
  if (!end) co_return end.error();
  if (*start && *end && **start > **end) co_return ApiError::invalid_request("'start' is after 'end'");
  auto found = co_await api.sandboxes.find(ctx.owner, ctx.params["id"]);
  if (!found) co_return found.error();
  auto container = co_await api.sandboxes.open(*found);
  if (!container) co_return container.error();
  json::array data;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t now_sec = now_ms / 1000;
  const bool in_range =
      start->value_or(found->started_at_ms / 1000) <= now_sec && end->value_or(now_sec) >= now_sec - 1;
  if (auto sandbox = (*container)->live_sandbox.load(); in_range && sandbox && sandbox->running()) {
    const auto size = sandbox_size(*api.config());
    auto described = co_await describe_container(api.containers, **container);
    json::object sample{{"timestamp", e2b_time(now_ms)}, {"timestampUnix", now_sec},
                        {"cpuCount", size.cpus},         {"memUsed", sandbox->memory_usage()},
                        {"memTotal", size.memory_bytes}, {"diskUsed", described.at("usage").at("bytes")},
                        {"diskTotal", size.disk_bytes}};
    if (auto cpu = sandbox->cpu_used_percent(size.cpus)) sample["cpuUsedPct"] = std::round(*cpu * 100) / 100;
    data.push_back(std::move(sample));
  }
  co_return json_ok(data);
}

// E2B's addressing by name: PORT-SANDBOXID.<domain> (e.g. 49983-k3v9....sandboxes.example)
// is that sandbox's port, as the SDKs' getHost and their file URLs name it. Such a
// request goes where the same call through the sandbox URL goes: /e2b/sandbox plus its
// path, the sandbox and port in the headers (any the client sent itself replaced).
// Authentication is unchanged: the caller's token, or a file URL's signature.
void route_by_host(http::request<http::buffer_body>& request, const std::string& domain) {
  std::string_view host = request[http::field::host];
  if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) host = host.substr(0, colon);
  if (host.size() <= domain.size() + 1 || host[host.size() - domain.size() - 1] != '.' ||
      !boost::beast::iequals(host.substr(host.size() - domain.size()), domain))
    return;
  const std::string_view label = host.substr(0, host.size() - domain.size() - 1);
  const size_t dash = label.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 5) return;
  const std::string_view port = label.substr(0, dash);
  if (port.find_first_not_of("0123456789") != std::string_view::npos) return;
  std::string id(label.substr(dash + 1));
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!ContainerService::valid_id(id)) return;
  const std::string_view target = request.target();
  if (target.empty() || target.front() != '/') return;
  request.set("E2b-Sandbox-Id", id);
  request.set("E2b-Sandbox-Port", port);
  // envd's and the interpreter's ports are served by the server itself; any other is a
  // port a process in the sandbox listens on (e2b/api/ports.cc).
  const bool served_here = port == std::to_string(kEnvdPort) || port == std::to_string(kCodeInterpreterPort);
  request.target((served_here ? std::string("/e2b/sandbox") : std::string(kPortsPath)) + std::string(target));
}

}  // namespace

HttpStatus e2b_status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid:
      return HttpStatus::bad_request;
    case ErrorKind::unauthenticated:
      return HttpStatus::unauthorized;
    case ErrorKind::billing:
      return HttpStatus::payment_required;
    case ErrorKind::forbidden:
      return HttpStatus::forbidden;
    case ErrorKind::not_found:
      return HttpStatus::not_found;
    case ErrorKind::method_not_allowed:
      return HttpStatus::method_not_allowed;
    case ErrorKind::conflict:
      return HttpStatus::conflict;
    case ErrorKind::too_large:
      return HttpStatus::payload_too_large;
    case ErrorKind::range_not_satisfiable:
      return HttpStatus::range_not_satisfiable;
    case ErrorKind::unsupported_media_type:
      return HttpStatus::unsupported_media_type;
    case ErrorKind::headers_too_large:
      return HttpStatus::request_header_fields_too_large;
    case ErrorKind::rate_limited:
      return HttpStatus::too_many_requests;
    case ErrorKind::internal:
      return HttpStatus::internal_server_error;
    case ErrorKind::not_implemented:
      return HttpStatus::not_implemented;
    case ErrorKind::upstream_failed:
      return HttpStatus::bad_gateway;
    case ErrorKind::unavailable:
    case ErrorKind::overloaded:
      return HttpStatus::service_unavailable;
    // Only the Messages API meets it (the upstream's own 529, passed on).
    case ErrorKind::upstream_overloaded:
      return static_cast<HttpStatus>(529);
    case ErrorKind::insufficient_storage:
      return HttpStatus::insufficient_storage;
  }
  return HttpStatus::internal_server_error;
}

server::StringResponse e2b_error_response(const ApiError& error) {
  const HttpStatus status = e2b_status_of(error.kind);
  auto res = server::json_response(
      status, json::serialize(json::object{{"code", static_cast<int>(status)}, {"message", error.message}}));
  if (error.retry_after) res.set(http::field::retry_after, std::to_string(*error.retry_after));
  return res;
}

asio::awaitable<Result<AddressedSandbox>> open_addressed_sandbox(ApiContext& api, RequestContext& ctx,
                                                                 std::optional<uint16_t> port) {
  const std::string id(ctx.header_value(kSandboxIdHeader));
  if (id.empty())
    co_return ApiError::invalid_request(
        "Missing the E2b-Sandbox-Id header (set E2B_SANDBOX_URL for E2B's SDKs)");
  if (!ContainerService::valid_id(id)) co_return ApiError::not_found("Sandbox not found");
  if (port && ctx.header_value("E2b-Sandbox-Port") != std::to_string(*port))
    co_return ApiError::not_found("Nothing answers on port " +
                                  std::string(ctx.header_value("E2b-Sandbox-Port")) + " of sandbox " + id +
                                  " for " + std::string(ctx.header().target()));
  // A missing sandbox (or another owner's) and a paused one answer as E2B's proxy does
  // for a sandbox that is not running: 502 (the SDKs tell the sandbox is gone from it).
  auto found = co_await api.sandboxes.find_addressed(ctx.owner, id);
  if (!found) co_return ApiError::upstream_failed("The sandbox " + id + " was not found");
  if (found->paused)
    co_return ApiError::upstream_failed("Sandbox " + id + " is paused; connect to resume it");
  auto container = co_await api.sandboxes.open(*found);
  if (!container && container.error().kind == ErrorKind::not_found)
    co_return ApiError::upstream_failed("The sandbox " + id + " was not found");
  if (!container) co_return container.error();
  // Being killed: gone already for the SDKs (a /health probe after a dropped stream).
  if ((*container)->deleted) co_return ApiError::upstream_failed("The sandbox " + id + " was not found");
  co_return AddressedSandbox{std::move(*found), std::move(*container)};
}

Result<void> check_json_values(std::string_view text, size_t max_values) {
  // Separators and openings outside strings: a value follows each (and an object's
  // member has two: its key and its value, around the colon).
  size_t values = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == ',' || c == ':' || c == '[' || c == '{')
      ++values;
    if (values > max_values)
      return ApiError::invalid_request("The request holds more than " + std::to_string(max_values) +
                                       " JSON values; this API's messages are a few fields");
  }
  return {};
}

Result<json::object> parse_e2b_object(std::string_view body) {
  if (auto checked = check_json_values(body); !checked) return checked.error();
  return parse_json_object(body);
}

std::string e2b_time(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(unix_ms % 1000));
  return buf;
}

std::optional<int64_t> parse_e2b_time(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS, optional fraction, then Z or +HH:MM / -HH:MM.
  auto number = [&](size_t at, size_t digits) -> std::optional<int> {
    if (at + digits > text.size()) return std::nullopt;
    int value = 0;
    for (size_t i = at; i < at + digits; ++i) {
      if (text[i] < '0' || text[i] > '9') return std::nullopt;
      value = value * 10 + (text[i] - '0');
    }
    return value;
  };
  if (text.size() < 20 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != 't') ||
      text[13] != ':' || text[16] != ':')
    return std::nullopt;
  auto year = number(0, 4), month = number(5, 2), day = number(8, 2), hour = number(11, 2),
       minute = number(14, 2), second = number(17, 2);
  if (!year || !month || !day || !hour || !minute || !second || *month < 1 || *month > 12 || *day < 1 ||
      *day > 31 || *hour > 23 || *minute > 59 || *second > 60)
    return std::nullopt;
  size_t at = 19;
  int64_t millis = 0;
  if (at < text.size() && text[at] == '.') {
    size_t digits = 0;
    for (++at; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits)
      if (digits < 3) millis = millis * 10 + (text[at] - '0');
    if (digits == 0) return std::nullopt;
    for (; digits < 3; ++digits) millis *= 10;
  }
  int64_t offset_sec = 0;
  if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) {
    ++at;
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    auto oh = number(at + 1, 2), om = number(at + 4, 2);
    if (!oh || !om || at + 3 >= text.size() || text[at + 3] != ':' || *oh > 23 || *om > 59)
      return std::nullopt;
    offset_sec = (text[at] == '+' ? 1 : -1) * (*oh * 3600 + *om * 60);
    at += 6;
  } else {
    return std::nullopt;
  }
  if (at != text.size()) return std::nullopt;
  std::tm tm{};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *month - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *minute;
  tm.tm_sec = *second;
  const std::time_t seconds = timegm(&tm);
  return (static_cast<int64_t>(seconds) - offset_sec) * 1000 + millis;
}

void install_control_plane_routes(server::HttpServer& http, ApiContext& api) {
  const std::string base = "/e2b";
  // Every error under /e2b in E2B's shapes, a path with no route included: the SDKs
  // raise their own exceptions (SandboxNotFoundError, ...) from nothing else. (Each
  // route's own options say its shape: e2b_options, in_addressed_sandbox.)
  http.shape_errors(base, e2b_error_shape);
  if (const std::string domain = api.config()->e2b_sandbox_domain; !domain.empty())
    http.set_host_router(
        [domain](http::request<http::buffer_body>& request) { route_by_host(request, domain); });
  // Those that work on the sandbox's container run on its holder (a snapshot and a fork
  // copy it there); the others (get, list, timeout, network, the snapshots' list and
  // deletion) on records only.
  const server::RouteOptions records_only = e2b_options();
  const server::RouteOptions on_container = e2b_options(server::ContainerScope::path_parameter("id"));
  http.route(http::verb::post, base + "/v2/sandboxes", "e2b.sandboxes.create", e2b_route(api, create_sandbox),
             records_only);
  http.route(http::verb::post, base + "/sandboxes", "e2b.sandboxes.create", e2b_route(api, create_sandbox),
             records_only);
  http.route(http::verb::get, base + "/v2/sandboxes", "e2b.sandboxes.list", e2b_route(api, list_sandboxes),
             records_only);
  http.route(http::verb::get, base + "/sandboxes", "e2b.sandboxes.list",
             e2b_route(api, list_running_sandboxes), records_only);
  http.route(http::verb::get, base + "/sandboxes/{id}", "e2b.sandboxes.get", e2b_route(api, get_sandbox),
             records_only);
  http.route(http::verb::delete_, base + "/sandboxes/{id}", "e2b.sandboxes.kill",
             e2b_route(api, kill_sandbox), on_container);
  http.route(http::verb::post, base + "/sandboxes/{id}/timeout", "e2b.sandboxes.timeout",
             e2b_route(api, set_timeout), records_only);
  http.route(http::verb::put, base + "/sandboxes/{id}/network", "e2b.sandboxes.network",
             e2b_route(api, update_network), records_only);
  http.route(http::verb::post, base + "/sandboxes/{id}/pause", "e2b.sandboxes.pause",
             e2b_route(api, pause_sandbox), on_container);
  http.route(http::verb::post, base + "/sandboxes/{id}/resume", "e2b.sandboxes.connect",
             e2b_route(api, connect_sandbox), on_container);
  http.route(http::verb::post, base + "/v2/sandboxes/{id}/connect", "e2b.sandboxes.connect",
             e2b_route(api, connect_sandbox), on_container);
  // The unversioned connect: what E2B's spec serves and its JS SDK 2.45 calls.
  http.route(http::verb::post, base + "/sandboxes/{id}/connect", "e2b.sandboxes.connect",
             e2b_route(api, connect_sandbox), on_container);
  http.route(http::verb::get, base + "/sandboxes/{id}/metrics", "e2b.sandboxes.metrics",
             e2b_route(api, sandbox_metrics), on_container);
  http.route(http::verb::post, base + "/sandboxes/{id}/snapshots", "e2b.snapshots.create",
             e2b_route(api, create_snapshot), on_container);
  http.route(http::verb::get, base + "/snapshots", "e2b.snapshots.list", e2b_route(api, list_snapshots),
             records_only);
  http.route(http::verb::delete_, base + "/templates/{id}", "e2b.snapshots.delete",
             e2b_route(api, delete_snapshot), records_only);
  http.route(http::verb::post, base + "/sandboxes/{id}/fork", "e2b.sandboxes.fork",
             e2b_route(api, fork_sandbox), on_container);
}

}  // namespace sandboxd::e2b
