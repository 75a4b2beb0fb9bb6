// A request to its handler (HttpServer::dispatch): the target parsed, the route matched
// (404, 405 with Allow), the caller authenticated (the route's own credential first)
// and charged to its owner's connection cap, then the handler (or the interceptor in
// front of it), its exceptions answered as a plain 500.
#include <spdlog/spdlog.h>
#include <boost/url/parse.hpp>

#include "server/http_server.h"

namespace sandboxd::server {

asio::awaitable<Response> HttpServer::dispatch(RequestContext& ctx,
                                               http::request_parser<http::buffer_body>& parser) {
  if (host_router_) host_router_(parser.get());
  auto parsed = boost::urls::parse_origin_form(parser.get().target());
  if (!parsed) co_return error_response(ApiError::invalid_request("Malformed request target"));
  auto url = *parsed;
  for (auto param : url.params()) ctx.query[std::string(param.key)] = std::string(param.value);
  const std::string_view path(url.encoded_path().data(), url.encoded_path().size());
  ctx.credential_headers = credential_headers_;
  const ErrorShape* shape = nullptr;
  for (const auto& [prefix, prefix_shape] : error_shapers_)
    if (path.starts_with(prefix) &&
        (path.size() == prefix.size() || path[prefix.size()] == '/' || prefix.ends_with('/')))
      shape = &prefix_shape;
  // An error in the shape the route's API answers with (the path's until a route
  // matched; sandboxd's own by default).
  auto answer = [&shape](const ApiError& error) -> Response {
    if (shape && *shape) return (*shape)(error);
    return error_response(error);
  };
  RouteMatch match = router_.match(ctx.method(), path);
  if (match.kind == RouteMatch::Kind::kNotFound)
    co_return answer(ApiError::not_found("No route for " + std::string(http::to_string(ctx.method())) + " " +
                                         std::string(path.substr(0, 200))));
  if (match.kind == RouteMatch::Kind::kMethodNotAllowed) {
    Response res = answer(ApiError::method_not_allowed(
        "Method " + std::string(http::to_string(ctx.method())) + " is not allowed here"));
    if (auto* text = std::get_if<StringResponse>(&res))
      text->set(http::field::allow, match.allow);
    else if (auto* stream = std::get_if<StreamResponse>(&res))
      stream->header.set(http::field::allow, match.allow);
    co_return res;
  }
  ctx.params = std::move(match.params);
  ctx.route_name = router_.name(match.route);
  const RouteOptions& options = route_options_[match.route];
  ctx.authenticated_route = options.authenticated;
  ctx.container_scope = &options.container;
  if (options.error_shape) shape = &options.error_shape;
  // A connection from a sandbox is always authenticated: what it may reach is the
  // authenticator's decision, for every route.
  if (options.authenticated || ctx.origin) {
    // The route's own credential first (it declines a request that carries none of it);
    // never for a connection from a sandbox, whose reach is the authenticator's alone.
    std::optional<Result<void>> auth;
    if (options.credential && !ctx.origin) auth = options.credential(ctx);
    if (!auth) {
      if (!authenticator_) co_return answer(ApiError::authentication("Authentication is not configured"));
      auth = authenticator_(ctx);
    }
    if (!*auth) co_return answer(auth->error());
    // The owner is known now: its connections count against its own cap (the body of
    // a refused request is not read, so the connection closes after the answer).
    if (ctx.connection && !ctx.owner.empty() && !ctx.connection->charge(ctx.owner))
      co_return answer(ApiError::rate_limited("Too many open connections for this owner (the limit is " +
                                                  std::to_string(connections_->max_per_owner()) + ")",
                                              1));
  }
  try {
    // (Not a ?: of two co_awaits: GCC 12 miscompiles that.)
    Result<Response> result = Response{};  // (a placeholder that allocates nothing)
    if (interceptor_)
      result = co_await interceptor_(ctx, handlers_[match.route]);
    else
      result = co_await handlers_[match.route](ctx);
    if (!result) co_return answer(result.error());
    co_return std::move(*result);
  } catch (const std::exception& e) {
    // Unexpected: log the detail, answer without it.
    spdlog::error("{} {} failed: {}", ctx.request_id, ctx.route_name, e.what());
    co_return answer(ApiError::internal());
  }
}

}  // namespace sandboxd::server
