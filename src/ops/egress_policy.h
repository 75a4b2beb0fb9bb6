// The egress policy: which outside destinations code in a sandbox may reach
// (network.egress in the configuration, docs/network.md). Nothing by default. Entries
// are exact host names, `*.suffix` wildcards (any subdomain, never the apex itself) and
// IPv4 CIDRs (a bare address is a /32), each optionally with `:port`; a deny entry wins
// over any allow entry. A name that is allowed still reaches only addresses that no deny
// CIDR covers once it is resolved, so `deny: [10.0.0.0/8]` keeps an allowed name that
// resolves into the cluster out of it. Pure: parsed and matched without I/O, unit-tested
// directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/network_peers.h"

namespace sandboxd::ops {

struct EgressRule {
  enum class Kind { Name, Suffix, Network } kind = Kind::Name;
  std::string name;     // Name: the host name; Suffix: ".example.com" (with its dot)
  Ipv4Network network;  // Network
  uint16_t port = 0;    // 0: any port
  std::string source;   // as written, for messages and the audit log
  bool operator==(const EgressRule& other) const { return source == other.source; }
};

// "pypi.internal", "*.example.com:443", "10.1.0.0/16:5432", "192.0.2.7". nullopt and a
// reason in `error` when it is none of those.
std::optional<EgressRule> parse_egress_rule(std::string_view text, std::string* error);

// A host name as DNS and TLS carry it, compared case-insensitively and without a
// trailing dot: lower-cased, the dot removed; empty when it is no host name.
std::string normalize_host_name(std::string_view name);

// A header rule (network.egress.rules, and a sandbox's own: E2B's network.rules): the
// headers the server sets on every HTTPS request to the hosts it names, terminating TLS
// for those hosts only (server/egress_interception.h). A rule grants no access: the
// destination must be allowed on its own.
struct HeaderRule {
  std::string host;       // the normalized name; for a wildcard, ".suffix" (with its dot)
  bool wildcard = false;  // "*.example.com": its subdomains at any depth, not the apex
  std::vector<std::pair<std::string, std::string>> headers;  // name, value; in order
  std::string source;                                        // the host pattern as written
  bool operator==(const HeaderRule&) const = default;
};

// The most rules a configuration or a sandbox has, and headers one rule sets.
inline constexpr size_t kMaxHeaderRules = 64;
inline constexpr size_t kMaxHeadersPerRule = 16;

// A rule for `pattern` ("api.example.com" or "*.example.com"; a bare "*" is none, and
// an IP address or a CIDR is refused with a message of its own: rules apply by name)
// setting `headers`: nullopt and the reason in `error` for a pattern that is not a
// host name or wildcard, a header name that is not an HTTP token (or one the relay owns:
// Host, Content-Length, Transfer-Encoding, Connection, Upgrade), a value with a control
// character, or more than kMaxHeadersPerRule headers.
std::optional<HeaderRule> parse_header_rule(std::string_view pattern,
                                            std::vector<std::pair<std::string, std::string>> headers,
                                            std::string* error);

// The rule that applies to `host` (normalized) by E2B's precedence: an exact rule first,
// then the wildcard with the longest matching suffix; rules are not merged. Null: none.
const HeaderRule* match_header_rule(const std::vector<HeaderRule>& rules, std::string_view host);

class EgressPolicy {
 public:
  EgressPolicy() = default;
  EgressPolicy(std::vector<EgressRule> allow, std::vector<EgressRule> deny)
      : allow_(std::move(allow)), deny_(std::move(deny)) {}

  // Nothing is allowed (the default): sandboxes get no resolver for outside names.
  bool closed() const { return allow_.empty(); }
  // `name` (normalized) on `port`: an allow entry names it, no deny entry does.
  bool allows_name(std::string_view name, uint16_t port) const;
  // The name on some port: whether the sandbox's resolver answers it at all.
  bool allows_name_on_any_port(std::string_view name) const;
  // The ports a name entry allows it on explicitly (beyond HTTP's and HTTPS's).
  std::vector<uint16_t> named_ports(std::string_view name) const;
  // An address reached directly (a CIDR entry) on `port`.
  bool allows_address(uint32_t address, uint16_t port) const;
  // An address an allowed name resolved to: refused only by a deny CIDR.
  bool denies_address(uint32_t address, uint16_t port) const;
  // The CIDR entries' (network, port) pairs, for the listeners a sandbox opens.
  std::vector<const EgressRule*> network_rules() const;

  // What the most specific entry that decided says, for refusals: "denied by '*.x'",
  // "not in network.egress.allow".
  std::string why_refused(std::string_view name, uint16_t port) const;

 private:
  static bool matches(const EgressRule& rule, std::string_view name, uint16_t port);
  std::vector<EgressRule> allow_, deny_;
};

}  // namespace sandboxd::ops
