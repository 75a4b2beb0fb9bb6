// Messages (docs/http-api.md): POST /api/gpt/v1/messages runs the tool loop against the
// upstream model, as JSON or as server-sent events; /messages/validate checks a body
// and runs nothing. A client that goes away cancels the upstream call and the command.

#include <boost/json.hpp>

#include "api/container_uploads.h"
#include "api/json_body.h"
#include "api/routes.h"
#include "api/sandbox_network.h"
#include "api/tool_loop_support.h"
#include "base/blocking.h"
#include "base/utf8.h"
#include "model/sse.h"
#include "model/tool_loop.h"
#include "service/skill_mounts.h"
#include "service/store_call.h"
#include "service/tool_calls.h"
#include "tools/bash_tool.h"

namespace sandboxd::api {

using service::ensure_local_skills;
using service::LoadedSkill;
using service::resolve_skills;
using service::SkillMounts;
using service::skills_prompt;
namespace {

namespace json = boost::json;

constexpr size_t kMessagesBodyLimit = 32u << 20;

// The container a request's body names: its `container`, a string or an object with a
// string `id`; the default container when there is none.
asio::awaitable<std::string> container_named_in_messages_body(RequestContext& ctx) {
  return container_named_in_json_body(ctx, kMessagesBodyLimit, [](const json::object& body) {
    const auto* container = body.if_contains("container");
    if (!container || container->is_null()) return ContainerService::default_id();
    if (container->is_object()) container = container->as_object().if_contains("id");
    return container && container->is_string() ? std::string(container->as_string()) : std::string();
  });
}

// Stops watching for a disconnect when the work it guards is over.
struct StopWatch {
  std::shared_ptr<server::DisconnectWatch> watch;
  ~StopWatch() {
    if (watch) watch->stop();
  }
};

// Everything one request's loop needs, kept alive until its stream ends.
struct Turn {
  std::shared_ptr<runtime::Cancellation> cancellation = std::make_shared<runtime::Cancellation>();
  std::unique_ptr<ContainerRunner> runner;
  std::unique_ptr<model::ToolLoop> loop;
  std::shared_ptr<server::DisconnectWatch> watch;
  std::shared_ptr<SkillMounts::Lease> skills;  // the request's skills stay loaded while it runs
};

// Adds the skills' list to the system prompt the upstream model gets.
void add_skills_to_system(json::object& body, const std::string& text) {
  auto* system = body.if_contains("system");
  if (!system || system->is_null()) {
    body["system"] = text;
  } else if (system->is_string()) {
    body["system"] = std::string(system->as_string()) + "\n\n" + text;
  } else {
    system->as_array().push_back(json::object{{"type", "text"}, {"text", text}});
  }
}

asio::awaitable<Result<model::MessagesRequest>> read_request(RequestContext& ctx) {
  // Parsed as it arrives, off the I/O threads, charged to the owner (api/json_body.h).
  auto body = co_await read_json_body(ctx, {.max_bytes = kMessagesBodyLimit});
  if (!body) co_return body.error();
  if (!body->is_object()) co_return ApiError::invalid_request("The request body must be a JSON object");
  co_return model::parse_messages_request(std::move(body->as_object()), &ContainerService::valid_id);
}

asio::awaitable<Result<Response>> validate(ApiContext& api, RequestContext& ctx) {
  auto request = co_await read_request(ctx);
  if (!request) co_return request.error();
  if (!request->skills.empty() && api.skills) {
    auto resolve = [&api, &ctx, &request] { return resolve_skills(*api.skills, ctx.owner, request->skills); };
    auto skills = co_await store_call(api, std::move(resolve));
    if (!skills) co_return skills.error();
  }
  co_return json_ok(json::object{{"valid", true}});
}

asio::awaitable<Result<Response>> create_message(ApiContext& api, RequestContext& ctx) {
  auto request = co_await read_request(ctx);
  if (!request) co_return request.error();
  const auto config = api.config();  // this request's settings, whatever a reload does meanwhile
  if (config->model_base_url.empty() || !api.upstream)
    co_return ApiError::invalid_request(
        "No upstream model is configured for /messages: set model.baseUrl in sandboxd's configuration");
  std::string upstream_model = request->model;
  if (auto it = config->model_names.find(request->model); it != config->model_names.end())
    upstream_model = it->second;

  auto turn = std::make_shared<Turn>();
  std::shared_ptr<Container> container;
  const SandboxCaller* caller = sandbox_caller(ctx);
  const int nesting_depth = caller ? caller->nesting_depth : 0;
  if (request->code_tool != model::CodeToolVersion::kNone) {
    if (nesting_depth > config->max_nesting_depth)
      co_return ApiError::invalid_request(
          "Code execution cannot be nested more than " + std::to_string(config->max_nesting_depth) +
          " level(s) deep: this request comes from code that a nested request runs");
    // No container named: the owner's own stable one (for code in a sandbox, the
    // container it runs in).
    const std::string fallback = caller ? caller->container : ContainerService::default_id();
    auto opened = co_await api.containers.lifecycle().async_open(ctx.owner,
                                                                 request->container.value_or(fallback), true);
    if (!opened) co_return opened.error();
    container = *opened;
  }
  // container_upload blocks: the turn's files into the container, a note for the model.
  if (auto placed = co_await place_container_uploads(api, ctx.owner, container, request->body); !placed)
    co_return placed.error();
  std::vector<LoadedSkill> skills;
  if (!request->skills.empty()) {
    if (!api.skills || !api.skill_mounts) co_return ApiError::internal();
    auto resolve = [&api, &ctx, &request] { return resolve_skills(*api.skills, ctx.owner, request->skills); };
    auto resolved = co_await store_call(api, std::move(resolve));
    if (!resolved) co_return resolved.error();
    if (api.durability) {  // cluster mode: a skill made through another replica comes from the bucket
      auto materialise = [&api, &resolved, retry = config->retry_after_sec] {
        return ensure_local_skills(*api.skills, *resolved, retry);
      };
      if (auto ready = co_await run_blocking(std::move(materialise)); !ready) co_return ready.error();
    }
    auto end_users = [container](const std::string& host_dir, const std::string& inside_dir,
                                 size_t max_entries) {
      auto sandbox = container->live_sandbox.load();
      if (sandbox && sandbox->running()) sandbox->end_folder_users(host_dir, inside_dir, max_entries);
    };
    auto lease = api.skill_mounts->load(container->paths.skills, *resolved, std::move(end_users));
    if (!lease) co_return lease.error();
    turn->skills = *lease;
    add_skills_to_system(request->body, skills_prompt(*resolved));
    skills = std::move(*resolved);
  }
  turn->runner = std::make_unique<ContainerRunner>(api, container, turn->cancellation, nesting_depth);
  turn->runner->set_skills(std::move(skills));
  const bool stream = request->stream;
  turn->loop = std::make_unique<model::ToolLoop>(api.upstream, loop_settings(*config), std::move(*request),
                                                 upstream_model, *turn->runner, turn->cancellation);
  turn->watch = server::DisconnectWatch::start(
      ctx.stream().socket(), [cancellation = turn->cancellation] { cancellation->cancel(); });
  // The watch ends with this handler (whatever way it leaves), unless a stream takes it.
  StopWatch stop_watch{turn->watch};
  if (!stream) {
    auto message = co_await turn->loop->run();
    if (!message) co_return message.error();
    co_return json_ok(json::value(std::move(*message)));  // moved: the whole turn is in it
  }
  // The first upstream answer decides between an HTTP error and a stream.
  auto opened = co_await turn->loop->open();
  if (!opened) co_return opened.error();
  stop_watch.watch = nullptr;
  server::StreamResponse response;
  response.header.result(http::status::ok);
  response.header.version(11);
  response.header.set(http::field::content_type, "text/event-stream");
  response.header.set(http::field::cache_control, "no-cache");
  response.produce = [turn](server::ChunkWriter& writer) -> asio::awaitable<void> {
    StopWatch stop{turn->watch};
    SseSink sink(writer);
    co_await turn->loop->stream(sink);
  };
  co_return response;
}

}  // namespace

void install_messages_routes(server::HttpServer& http, ApiContext& api) {
  http.route(http::verb::post, "/api/gpt/v1/messages", "messages.create", with_api(api, create_message),
             {.container = server::ContainerScope::found_by(container_named_in_messages_body)});
  http.route(http::verb::post, "/api/gpt/v1/messages/validate", "messages.validate", with_api(api, validate));
}

}  // namespace sandboxd::api
