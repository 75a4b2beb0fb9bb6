#include "server/router.h"

#include <algorithm>
#include <boost/container/small_vector.hpp>

namespace sandboxd::server {
namespace {

// The segments of a path; a request's path has a few of them, kept without allocating.
using PathParts = boost::container::small_vector<std::string_view, 16>;

PathParts split_path(std::string_view path) {
  PathParts parts;
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  while (true) {
    auto slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

size_t Router::add(http::verb method, std::string pattern, std::string name) {
  Route route{method, {}, std::move(name), {}, false};
  for (auto part : split_path(pattern)) {
    const bool is_param = part.size() > 2 && part.front() == '{' && part.back() == '}';
    route.kinds.push_back(!is_param                      ? Segment::kLiteral
                          : part[part.size() - 2] == '+' ? Segment::kRest
                                                         : Segment::kParam);
    route.segments.emplace_back(part);
    if (route.kinds.back() == Segment::kRest) break;  // it takes the rest of the path
  }
  route.rest = route.kinds.back() == Segment::kRest;
  const size_t index = routes_.size();
  const size_t count = route.segments.size();
  for (size_t n = count; n <= kIndexedParts && (n == count || route.rest); ++n) by_parts_[n].push_back(index);
  all_.push_back(index);
  routes_.push_back(std::move(route));
  return index;
}

bool Router::match_segments(const Route& route, std::span<const std::string_view> parts,
                            std::map<std::string, std::string>& params) {
  params.clear();
  // The shape first, without decoding or allocating anything: every route of the table
  // is tried in turn, and most differ from the path in length or in a literal segment.
  // A {key+} takes at least one segment.
  const size_t count = route.segments.size();
  if (route.rest ? parts.size() < count : parts.size() != count) return false;
  for (size_t i = 0; i < count; ++i) {
    if (route.kinds[i] == Segment::kLiteral ? route.segments[i] != parts[i]
                                            : route.kinds[i] == Segment::kParam && parts[i].empty())
      return false;
  }
  for (size_t i = 0; i < count; ++i) {
    const std::string& seg = route.segments[i];
    if (route.kinds[i] == Segment::kRest) {
      // {key+}: the rest of the path, decoded segment by segment so an encoded "/"
      // inside a segment stays distinguishable only as a character.
      std::string rest, decoded;
      for (size_t j = i; j < parts.size(); ++j) {
        if (!percent_decode(parts[j], decoded)) return false;
        if (j > i) rest.push_back('/');
        rest += decoded;
      }
      params[seg.substr(1, seg.size() - 3)] = rest;
      return true;
    }
    if (route.kinds[i] == Segment::kParam) {
      std::string decoded;
      if (!percent_decode(parts[i], decoded)) return false;
      params[seg.substr(1, seg.size() - 2)] = std::move(decoded);
    }
  }
  return true;
}

std::span<const size_t> Router::candidates(size_t parts) const {
  return parts <= kIndexedParts ? std::span<const size_t>(by_parts_[parts]) : std::span<const size_t>(all_);
}

RouteMatch Router::match(http::verb method, std::string_view path) const {
  RouteMatch result;
  const PathParts split = split_path(path);
  const std::span<const std::string_view> parts(split.data(), split.size());
  std::vector<std::string> allowed;
  std::map<std::string, std::string> params;
  const auto tried = candidates(parts.size());
  for (const size_t i : tried) {
    if (!match_segments(routes_[i], parts, params)) continue;
    http::verb route_method = routes_[i].method;
    bool head_via_get = method == http::verb::head && route_method == http::verb::get;
    if (route_method == method || head_via_get) {
      // An explicit HEAD route wins over GET-as-HEAD.
      if (head_via_get) {
        bool explicit_head = false;
        std::map<std::string, std::string> other;
        for (const size_t j : tried)
          if (routes_[j].method == http::verb::head && match_segments(routes_[j], parts, other))
            explicit_head = true;
        if (explicit_head) continue;
      }
      result.kind = RouteMatch::Kind::kFound;
      result.route = i;
      result.params = std::move(params);
      return result;
    }
    std::string name(http::to_string(route_method));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) allowed.push_back(name);
  }
  if (!allowed.empty()) {
    result.kind = RouteMatch::Kind::kMethodNotAllowed;
    for (const auto& m : allowed) result.allow += (result.allow.empty() ? "" : ", ") + m;
  }
  return result;
}

}  // namespace sandboxd::server
