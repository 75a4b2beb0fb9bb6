#include "ops/egress_policy.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace sandboxd::ops {
namespace {

// Letters, digits, '-' and '.', labels of 1-63 characters, at most 253 in all.
bool valid_host_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t label = 0;
  for (char ch : name) {
    if (ch == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_') return false;
    if (++label > 63) return false;
  }
  return label > 0;
}

bool port_matches(uint16_t rule_port, uint16_t port) { return rule_port == 0 || rule_port == port; }

}  // namespace

std::string normalize_host_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::string out(name);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return valid_host_name(out) ? out : std::string();
}

std::optional<EgressRule> parse_egress_rule(std::string_view text, std::string* error) {
  EgressRule rule;
  rule.source = std::string(text);
  std::string_view host = text;
  // The port: after the last ':' (IPv6 is not taken, so a ':' can only be that).
  if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    std::string_view digits = text.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || port < 1 ||
        port > 65535) {
      *error = "the port after ':' must be a number from 1 to 65535";
      return std::nullopt;
    }
    rule.port = static_cast<uint16_t>(port);
    host = text.substr(0, colon);
  }
  if (host.empty()) {
    *error = "must name a host, a *.suffix or an IPv4 CIDR";
    return std::nullopt;
  }
  const bool numeric = std::all_of(host.begin(), host.end(), [](char ch) {
    return std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == '/';
  });
  if (numeric) {
    std::string cidr(host);
    if (cidr.find('/') == std::string::npos) cidr += "/32";
    auto network = parse_ipv4_cidr(cidr);
    if (!network) {
      *error = "is not an IPv4 address or CIDR (a.b.c.d or a.b.c.d/n)";
      return std::nullopt;
    }
    rule.kind = EgressRule::Kind::Network;
    rule.network = *network;
    return rule;
  }
  if (host.starts_with("*.")) {
    std::string suffix = normalize_host_name(host.substr(2));
    if (suffix.empty()) {
      *error = "a wildcard is '*.' and a host name (subdomains of it, not the name itself)";
      return std::nullopt;
    }
    rule.kind = EgressRule::Kind::Suffix;
    rule.name = "." + suffix;
    return rule;
  }
  rule.name = normalize_host_name(host);
  if (rule.name.empty() || rule.name.find('*') != std::string::npos) {
    *error = "must be a host name (letters, digits, '-' and '.'), '*.' and one, or an IPv4 CIDR";
    return std::nullopt;
  }
  return rule;
}

std::optional<HeaderRule> parse_header_rule(std::string_view pattern,
                                            std::vector<std::pair<std::string, std::string>> headers,
                                            std::string* error) {
  HeaderRule rule;
  rule.source = std::string(pattern);
  // A rule applies by name: the server intercepts a connection by the TLS server name the
  // client asks for, which is never an address (RFC 6066), and E2B's API takes DNS names
  // and wildcards as keys. An address or a CIDR would match nothing, silently.
  const std::string_view name = pattern.starts_with("*.") ? pattern.substr(2) : pattern;
  const bool address_like =
      !name.empty() && (name.find_first_of(":/") != std::string_view::npos ||
                        std::all_of(name.begin(), name.end(), [](char ch) {
                          return std::isdigit(static_cast<unsigned char>(ch)) || ch == '.';
                        }));
  if (address_like) {
    *error =
        "is an IP address or CIDR: header rules apply to HTTPS by host name (the TLS server name), so a "
        "rule names a host or '*.' and one";
    return std::nullopt;
  }
  if (pattern.starts_with("*.")) {
    rule.wildcard = true;
    const std::string suffix = normalize_host_name(pattern.substr(2));
    if (!suffix.empty()) rule.host = "." + suffix;
  } else {
    rule.host = normalize_host_name(pattern);
  }
  if (rule.host.empty() || rule.host == ".") {
    *error = "must be a host name or '*.' and one (its subdomains), not '" + std::string(pattern) + "'";
    return std::nullopt;
  }
  if (headers.size() > kMaxHeadersPerRule) {
    *error = "sets more than " + std::to_string(kMaxHeadersPerRule) + " headers";
    return std::nullopt;
  }
  for (const auto& [name, value] : headers) {
    // RFC 9110's token characters.
    const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) ||
             std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
    });
    if (!token) {
      *error = "has a header name that is not one: '" + name + "'";
      return std::nullopt;
    }
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    // Those frame the message the relay passes on: set by a rule, they would change it.
    for (std::string_view owned : {"host", "content-length", "transfer-encoding", "connection", "upgrade"})
      if (lower == owned) {
        *error = "may not set '" + name + "' (the relay keeps the request's own)";
        return std::nullopt;
      }
    // A control character (CR, LF above all) would end the header and start another.
    if (std::any_of(value.begin(), value.end(), [](char ch) {
          return (static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7F;
        })) {
      *error = "has a value of header '" + name + "' with a control character";
      return std::nullopt;
    }
  }
  rule.headers = std::move(headers);
  return rule;
}

const HeaderRule* match_header_rule(const std::vector<HeaderRule>& rules, std::string_view host) {
  const HeaderRule* best = nullptr;
  for (const auto& rule : rules) {
    if (!rule.wildcard) {
      if (rule.host == host) return &rule;
      continue;
    }
    if (host.size() > rule.host.size() && host.ends_with(rule.host) &&
        (!best || rule.host.size() > best->host.size()))
      best = &rule;
  }
  return best;
}

bool EgressPolicy::matches(const EgressRule& rule, std::string_view name, uint16_t port) {
  if (!port_matches(rule.port, port)) return false;
  switch (rule.kind) {
    case EgressRule::Kind::Name:
      return name == rule.name;
    case EgressRule::Kind::Suffix:
      return name.size() > rule.name.size() && name.ends_with(rule.name);
    case EgressRule::Kind::Network:
      return false;
  }
  return false;
}

bool EgressPolicy::allows_name(std::string_view name, uint16_t port) const {
  if (name.empty()) return false;
  for (const auto& rule : deny_)
    if (matches(rule, name, port)) return false;
  return std::ranges::any_of(allow_, [&](const EgressRule& rule) { return matches(rule, name, port); });
}

bool EgressPolicy::allows_name_on_any_port(std::string_view name) const {
  if (name.empty()) return false;
  // A deny entry without a port closes the name on every port.
  for (const auto& rule : deny_)
    if (rule.port == 0 && matches(rule, name, 1)) return false;
  for (const auto& rule : allow_) {
    if (!matches(rule, name, rule.port == 0 ? 1 : rule.port)) continue;
    if (rule.port == 0 || allows_name(name, rule.port)) return true;
  }
  return false;
}

std::vector<uint16_t> EgressPolicy::named_ports(std::string_view name) const {
  std::vector<uint16_t> ports;
  for (const auto& rule : allow_)
    if (rule.port != 0 && rule.kind != EgressRule::Kind::Network && matches(rule, name, rule.port) &&
        allows_name(name, rule.port) && std::ranges::find(ports, rule.port) == ports.end())
      ports.push_back(rule.port);
  return ports;
}

bool EgressPolicy::denies_address(uint32_t address, uint16_t port) const {
  return std::ranges::any_of(deny_, [&](const EgressRule& rule) {
    return rule.kind == EgressRule::Kind::Network && port_matches(rule.port, port) &&
           network_contains(rule.network, address);
  });
}

bool EgressPolicy::allows_address(uint32_t address, uint16_t port) const {
  if (denies_address(address, port)) return false;
  return std::ranges::any_of(allow_, [&](const EgressRule& rule) {
    return rule.kind == EgressRule::Kind::Network && port_matches(rule.port, port) &&
           network_contains(rule.network, address);
  });
}

std::vector<const EgressRule*> EgressPolicy::network_rules() const {
  std::vector<const EgressRule*> rules;
  for (const auto& rule : allow_)
    if (rule.kind == EgressRule::Kind::Network) rules.push_back(&rule);
  return rules;
}

std::string EgressPolicy::why_refused(std::string_view name, uint16_t port) const {
  for (const auto& rule : deny_)
    if (matches(rule, name, port)) return "denied by network.egress.deny entry '" + rule.source + "'";
  return "not allowed by network.egress.allow";
}

}  // namespace sandboxd::ops
