// The ways a route's request names its container (server/http_server.h).
#include "server/http_server.h"

namespace sandboxd::server {

ContainerScope ContainerScope::path_parameter(std::string name) {
  return ContainerScope([name = std::move(name)](RequestContext& ctx) -> asio::awaitable<std::string> {
    auto found = ctx.params.find(name);
    co_return found == ctx.params.end() ? std::string() : found->second;
  });
}

ContainerScope ContainerScope::query_parameter(std::string name) {
  return ContainerScope([name = std::move(name)](RequestContext& ctx) -> asio::awaitable<std::string> {
    co_return ctx.query_value(name).value_or("");
  });
}

ContainerScope ContainerScope::header(std::string name) {
  return ContainerScope([name = std::move(name)](RequestContext& ctx) -> asio::awaitable<std::string> {
    co_return std::string(ctx.header_value(name));
  });
}

ContainerScope ContainerScope::found_by(Finder finder) { return ContainerScope(std::move(finder)); }

asio::awaitable<std::string> ContainerScope::container_of(RequestContext& ctx) const {
  if (!finder_) co_return std::string();
  co_return co_await finder_(ctx);
}

}  // namespace sandboxd::server
