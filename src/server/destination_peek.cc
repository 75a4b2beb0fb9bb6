#include "server/destination_peek.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace sandboxd::server {
namespace {

using State = PeekedDestination::State;

PeekedDestination state(State s) { return {s, {}}; }

size_t read16(std::string_view data, size_t at) {
  return static_cast<size_t>(static_cast<uint8_t>(data[at])) << 8 | static_cast<uint8_t>(data[at + 1]);
}

// Lower-case, no trailing dot, no port; empty when not a host name.
std::string clean_host(std::string_view host) {
  if (host.starts_with("[")) return {};  // an IPv6 literal: no name
  if (auto colon = host.find(':'); colon != std::string_view::npos) host = host.substr(0, colon);
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return {};
  std::string out;
  for (char ch : host) {
    const auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && ch != '-' && ch != '.' && ch != '_') return {};
    out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

PeekedDestination tls_server_name(std::string_view data) {
  // The record: handshake (22), a version, its length.
  if (data.size() < 5) return state(data.empty() || data[0] == 22 ? State::NeedMore : State::Invalid);
  if (data[0] != 22 || data[1] != 3) return state(State::Invalid);
  const size_t record = read16(data, 3);
  if (record < 4 || record > 16384 + 2048) return state(State::Invalid);
  if (data.size() < 5 + record) return state(State::NeedMore);
  std::string_view hello = data.substr(5, record);
  // The handshake: ClientHello (1), its length (3 bytes), within this record.
  if (hello[0] != 1) return state(State::Invalid);
  const size_t length = static_cast<size_t>(static_cast<uint8_t>(hello[1])) << 16 | read16(hello, 2);
  if (length + 4 > hello.size()) return state(State::Invalid);  // a ClientHello over several records
  hello = hello.substr(4, length);
  size_t at = 2 + 32;  // client_version, random
  auto skip = [&](size_t width) {
    if (at + width > hello.size()) return false;
    const size_t n = width == 1 ? static_cast<uint8_t>(hello[at]) : read16(hello, at);
    at += width + n;
    return at <= hello.size();
  };
  if (!skip(1) || !skip(2) || !skip(1)) return state(State::Invalid);  // session id, suites, compression
  if (at == hello.size()) return state(State::None);                   // no extensions
  if (at + 2 > hello.size()) return state(State::Invalid);
  const size_t extensions_end = at + 2 + read16(hello, at);
  if (extensions_end > hello.size()) return state(State::Invalid);
  at += 2;
  while (at + 4 <= extensions_end) {
    const size_t type = read16(hello, at), size = read16(hello, at + 2);
    at += 4;
    if (at + size > extensions_end) return state(State::Invalid);
    if (type == 0) {  // server_name: a list of (type, length, name); host_name is type 0
      std::string_view list = hello.substr(at, size);
      if (list.size() < 2 || read16(list, 0) + 2 != list.size()) return state(State::Invalid);
      size_t entry = 2;
      while (entry + 3 <= list.size()) {
        const uint8_t name_type = static_cast<uint8_t>(list[entry]);
        const size_t name_length = read16(list, entry + 1);
        if (entry + 3 + name_length > list.size()) return state(State::Invalid);
        if (name_type == 0) {
          std::string host = clean_host(list.substr(entry + 3, name_length));
          if (host.empty()) return state(State::Invalid);
          return {State::Found, std::move(host)};
        }
        entry += 3 + name_length;
      }
      return state(State::None);
    }
    at += size;
  }
  return state(State::None);
}

PeekedDestination http_host(std::string_view data) {
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    // A request line starts with a method token: letters only, then a space.
    for (char ch : data.substr(0, 16)) {
      if (ch == ' ') break;
      if (!std::isupper(static_cast<unsigned char>(ch))) return state(State::Invalid);
    }
    return state(State::NeedMore);
  }
  std::string_view head = data.substr(0, end);
  const size_t line_end = head.find("\r\n");
  std::string_view request_line = head.substr(0, line_end);
  const size_t first_space = request_line.find(' ');
  if (first_space == std::string_view::npos) return state(State::Invalid);
  std::string_view target = request_line.substr(first_space + 1);
  target = target.substr(0, target.find(' '));
  // Absolute form (a proxy request): its authority is where the request goes.
  if (target.starts_with("http://")) {
    std::string_view authority = target.substr(7);
    authority = authority.substr(0, authority.find_first_of("/?#"));
    if (auto at = authority.rfind('@'); at != std::string_view::npos) authority = authority.substr(at + 1);
    std::string host = clean_host(authority);
    return host.empty() ? state(State::Invalid) : PeekedDestination{State::Found, std::move(host)};
  }
  std::optional<std::string> found;
  size_t at = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (at < head.size()) {
    size_t next = head.find("\r\n", at);
    if (next == std::string_view::npos) next = head.size();
    std::string_view line = head.substr(at, next - at);
    at = next + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !iequals(line.substr(0, colon), "host")) continue;
    if (found) return state(State::Invalid);  // two Host headers: which one a server reads is anyone's guess
    found = clean_host(trim(line.substr(colon + 1)));
    if (found->empty()) return state(State::Invalid);
  }
  if (!found) return state(State::None);
  return {State::Found, std::move(*found)};
}

namespace {

ProxyRequest invalid_proxy_request(std::string why) {
  ProxyRequest request;
  request.state = ProxyRequest::State::Invalid;
  request.error = std::move(why);
  return request;
}

// "host[:port]" with a default port; false when either part is malformed.
bool split_authority(std::string_view authority, uint16_t default_port, bool port_required, std::string& host,
                     uint16_t& port) {
  if (authority.find('@') != std::string_view::npos || authority.starts_with("[")) return false;
  std::string_view host_part = authority;
  port = default_port;
  if (auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    std::string_view digits = authority.substr(colon + 1);
    unsigned value = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value < 1 ||
        value > 65535)
      return false;
    port = static_cast<uint16_t>(value);
    host_part = authority.substr(0, colon);
  } else if (port_required) {
    return false;
  }
  host = clean_host(host_part);
  return !host.empty();
}

}  // namespace

ProxyRequest proxy_request(std::string_view data) {
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kMaxPeekBytes) return invalid_proxy_request("the request head is larger than 16 KiB");
    for (char ch : data.substr(0, 16)) {
      if (ch == ' ') break;
      if (!std::isupper(static_cast<unsigned char>(ch))) return invalid_proxy_request("not an HTTP request");
    }
    return {};
  }
  std::string_view head = data.substr(0, end);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  std::string_view line = head.substr(0, line_end);
  const size_t first = line.find(' ');
  const size_t last = line.rfind(' ');
  if (first == std::string_view::npos || first == last)
    return invalid_proxy_request("malformed request line");
  std::string_view method = line.substr(0, first);
  std::string_view target = line.substr(first + 1, last - first - 1);
  std::string_view version = line.substr(last + 1);
  if (method.empty() || !version.starts_with("HTTP/1."))
    return invalid_proxy_request("malformed request line");
  for (char ch : method)
    if (!std::isupper(static_cast<unsigned char>(ch))) return invalid_proxy_request("malformed request line");
  ProxyRequest request;
  request.head_size = end + 4;
  if (method == "CONNECT") {
    if (!split_authority(target, 0, true, request.host, request.port))
      return invalid_proxy_request("CONNECT takes host:port");
    request.state = ProxyRequest::State::Connect;
    return request;
  }
  if (target.size() >= 8 && iequals(target.substr(0, 8), "https://"))
    return invalid_proxy_request("an https:// URL is reached through CONNECT (HTTPS_PROXY)");
  if (target.size() < 7 || !iequals(target.substr(0, 7), "http://"))
    return invalid_proxy_request("a proxy request names an absolute http:// URL");
  std::string_view rest = target.substr(7);
  const size_t path_at = std::min(rest.find_first_of("/?#"), rest.size());
  if (!split_authority(rest.substr(0, path_at), 80, false, request.host, request.port))
    return invalid_proxy_request("the URL's host is not a host name or an IPv4 address");
  std::string path(rest.substr(path_at));
  if (auto hash = path.find('#'); hash != std::string::npos) path.resize(hash);
  if (path.empty() || path.front() != '/') path.insert(0, "/");
  request.forward_head = std::string(method) + " " + path + " " + std::string(version) + "\r\n";
  size_t at = line_end + 2;
  while (at < head.size()) {
    size_t next = std::min(head.find("\r\n", at), head.size());
    std::string_view header = head.substr(at, next - at);
    at = next + 2;
    const size_t colon = header.find(':');
    if (colon == std::string_view::npos) return invalid_proxy_request("malformed header line");
    std::string_view name = header.substr(0, colon);
    if (name.size() >= 6 && iequals(name.substr(0, 6), "proxy-")) continue;
    if (iequals(name, "host") && clean_host(trim(header.substr(colon + 1))) != request.host)
      return invalid_proxy_request("the Host header names another host than the URL");
    request.forward_head.append(header).append("\r\n");
  }
  request.forward_head += "\r\n";
  request.state = ProxyRequest::State::Forward;
  return request;
}

}  // namespace sandboxd::server
