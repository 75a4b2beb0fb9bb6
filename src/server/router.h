// The route table: patterns like /api/gpt/v1/containers/{id}/tools/{tool} and a
// trailing {key+} that takes the rest of the path. Tells 404 (no pattern matches)
// from 405 (a pattern matches, not with this method).
#pragma once

#include <boost/beast/http/verb.hpp>
#include <map>
#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::server {

namespace http = boost::beast::http;

struct RouteMatch {
  enum class Kind { kFound, kNotFound, kMethodNotAllowed } kind = Kind::kNotFound;
  size_t route = 0;                           // index into the table, when found
  std::map<std::string, std::string> params;  // percent-decoded path parameters
  std::string allow;                          // for 405: "GET, POST"
};

class Router {
 public:
  // Adds a route; returns its index. `name` labels metrics and logs ("files.list").
  size_t add(http::verb method, std::string pattern, std::string name);
  RouteMatch match(http::verb method, std::string_view path) const;
  const std::string& name(size_t route) const { return routes_[route].name; }

 private:
  enum class Segment { kLiteral, kParam, kRest };
  struct Route {
    http::verb method;
    std::vector<std::string> segments;
    std::string name;
    std::vector<Segment> kinds;  // of each segment, worked out once
    bool rest = false;           // the last segment is a {key+}
  };
  static bool match_segments(const Route& route, std::span<const std::string_view> parts,
                             std::map<std::string, std::string>& params);
  // The routes that can match a path of n segments, in table order: those of exactly n
  // segments and those ending in a {key+} with fewer (paths up to kIndexedParts
  // segments; a longer one is tried against every route).
  static constexpr size_t kIndexedParts = 32;
  std::span<const size_t> candidates(size_t parts) const;
  std::vector<Route> routes_;
  std::vector<std::vector<size_t>> by_parts_ = std::vector<std::vector<size_t>>(kIndexedParts + 1);
  std::vector<size_t> all_;
};

// Percent-decodes one path segment or query value. nullopt on a malformed escape.
bool percent_decode(std::string_view in, std::string& out);

}  // namespace sandboxd::server
