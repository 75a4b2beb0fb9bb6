#include "api/container_uploads.h"

#include <boost/json.hpp>

#include "api/file_transfer.h"
#include "base/blocking.h"
#include "base/sandbox_paths.h"
#include "model/messages_request.h"
#include "service/store_call.h"
#include "store/keys.h"

namespace sandboxd::api {

using service::ContainerFiles;
namespace {

namespace json = boost::json;

constexpr size_t kContainersPerPage = 500;

// The part of `path` below `mount`, or "" when it is not below it.
std::string below(std::string_view path, std::string_view mount) {
  if (path.size() <= mount.size() + 1 || path.substr(0, mount.size()) != mount || path[mount.size()] != '/')
    return {};
  return std::string(path.substr(mount.size() + 1));
}

// Where a file of another container lands in this one: the same path below uploads/.
std::string uploads_path_for(const std::string& path) {
  for (std::string_view mount : {kUploadsMount, kOutputsMount})
    if (auto relative = below(path, mount); !relative.empty())
      return std::string(kUploadsMount) + "/" + relative;
  return {};
}

// The ids of the owner's other containers whose index holds a file at `path`.
std::vector<std::string> containers_holding(store::Metadata& metadata, const std::string& owner,
                                            const std::string& except, const std::string& path) {
  std::vector<std::string> out;
  std::string after;
  for (;;) {
    auto page = metadata.list_containers(owner, kContainersPerPage, after);
    for (const auto& record : page)
      if (record.id != except && metadata.find_file(record.storage, path)) out.push_back(record.id);
    if (page.size() < kContainersPerPage || out.size() > 1) return out;
    after = page.back().id;
  }
}

json::object note(const std::string& text) { return json::object{{"type", "text"}, {"text", text}}; }

// Places one block's file; returns the path the model is told.
asio::awaitable<Result<std::string>> place(ApiContext& api, const std::string& owner,
                                           const std::shared_ptr<Container>& container,
                                           const std::string& field, const std::string& id,
                                           const std::string& path) {
  auto stat = [&api, &container, &path] {
    return api.files.stat_file(container->storage, container->paths, path);
  };
  // (Two statements: GCC 12 fails on a co_await inside a condition's &&.)
  if (resolve_sandbox_path(container->paths, path)) {
    auto found = co_await run_blocking(std::move(stat));
    if (found) co_return path;
  }
  const std::string target = uploads_path_for(path);
  auto missing = ApiError::not_found(field + ": file '" + id.substr(0, 200) + "' (" + path.substr(0, 300) +
                                     ") is neither in container '" + container->id +
                                     "' nor in another container of yours");
  if (target.empty()) co_return missing;
  auto search = [&api, &owner, &container, &path] {
    return containers_holding(api.containers.metadata(), owner, container->id, path);
  };
  auto holders = co_await store_call(api, std::move(search));
  if (holders.empty()) co_return missing;
  if (holders.size() > 1)
    co_return ApiError::invalid_request(field + ": file '" + id.substr(0, 200) + "' (" + path.substr(0, 300) +
                                        ") is in several of your containers; upload it to container '" +
                                        container->id + "' and send that id");
  ContainerFiles files(api);
  auto source = co_await files.open_ready(owner, holders.front(), /*create=*/false);
  if (!source) co_return source.error();
  auto copied = co_await files.copy(**source, path, *container, target);
  if (!copied) {
    if (copied.error().kind == ErrorKind::not_found) co_return missing;  // gone meanwhile
    co_return copied.error();
  }
  co_return target;
}

}  // namespace

asio::awaitable<Result<void>> place_container_uploads(ApiContext& api, const std::string& owner,
                                                      std::shared_ptr<Container> container,
                                                      json::object& body) {
  auto& messages = body.at("messages").as_array();
  const size_t turn_start = model::current_turn_start(messages);
  bool any = false;
  for (const auto& message : messages)
    if (auto& content = message.at("content"); content.is_array())
      for (const auto& block : content.as_array())
        if (block.at("type").as_string() == "container_upload") any = true;
  if (!any) co_return Result<void>();
  if (!container) co_return ApiError::internal();  // the parser asks for the code tool first
  Result<std::shared_ptr<Container>> request_container = container;
  ContainerFiles files(api);
  auto ready = co_await files.ready(std::move(request_container));
  if (!ready) co_return ready.error();
  for (size_t i = 0; i < messages.size(); ++i) {
    auto& content = messages[i].as_object()["content"];
    if (!content.is_array()) continue;
    for (size_t j = 0; j < content.as_array().size(); ++j) {
      auto& block = content.as_array()[j];
      if (block.at("type").as_string() != "container_upload") continue;
      const std::string field =
          "messages." + std::to_string(i) + ".content." + std::to_string(j) + ".file_id";
      const std::string id(block.at("file_id").as_string());
      auto path = store::path_for_file_id(id);
      if (!path)
        co_return ApiError::not_found(field + ": '" + id.substr(0, 200) +
                                      "' is not a file id of this server");
      if (i < turn_start) {
        block = note("[container_upload of an earlier turn: " + *path + "]");
        continue;
      }
      auto placed = co_await place(api, owner, container, field, id, *path);
      if (!placed) co_return placed.error();
      block = note("[container_upload: the file " + *placed + " is in the container for this turn]");
    }
  }
  co_return Result<void>();
}

}  // namespace sandboxd::api
