// One sandbox's own narrowing of the operator's egress policy (E2B's `allowInternetAccess`
// and `network: {allowOut, denyOut}`, docs/network.md#e2bs-network-options). It never
// widens: every lookup and connection is checked against the operator's policy in force
// and then against this. E2B's meaning: an allowOut entry wins over a denyOut entry;
// without a denyOut entry that covers it, a destination stays allowed (allowOut alone
// narrows nothing), so "only these" is allowOut plus denyOut 0.0.0.0/0 (which
// `allowInternetAccess: false` stands for). denyOut takes addresses and CIDRs only, as
// E2B's API. Pure: parsed and matched without I/O, unit-tested directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/egress_policy.h"

namespace sandboxd::ops {

struct SandboxEgress {
  std::vector<EgressRule> allow_out, deny_out;  // as given
  std::optional<bool> allow_internet_access;    // as given (false: deny 0.0.0.0/0 as well)
  // E2B's network.rules: headers set on HTTPS requests to the hosts they name (they grant
  // no access; the operator's rule for the same host sets its headers after these).
  std::vector<HeaderRule> header_rules;

  // `name` (normalized) is an allowOut entry's (on `port`; 0: on some port).
  bool lists_name(std::string_view name, uint16_t port) const;
  // Whether the sandbox's resolver may answer `name`: it is listed, or not every
  // address is denied (the addresses it resolves to are checked per connection).
  bool may_resolve(std::string_view name) const;
  // A destination address on `port` for a name not listed, or for raw TCP: inside an
  // allowOut CIDR, or outside every denyOut CIDR.
  bool allows_address(uint32_t address, uint16_t port) const;
  // Every address is denied (0.0.0.0/0 in denyOut, or allowInternetAccess false).
  bool denies_everything() const;
};

// The most entries a sandbox's allowOut or denyOut may have.
inline constexpr size_t kMaxSandboxEgressEntries = 64;

// Whether everything `wanted` (one entry of a sandbox's allowOut) could reach is within
// one of the operator's allow entries (`allow`, the policy `policy` is made of): a name
// the policy allows, a wildcard under an allowed wildcard, a CIDR inside an allowed one
// (on the same port or any port). Deny entries are not consulted: they apply to every
// connection anyway.
bool egress_allow_covers(const std::vector<EgressRule>& allow, const EgressPolicy& policy,
                         const EgressRule& wanted);

// Parses a sandbox's request and checks it against the operator's allow entries:
// nullopt and the reason in `error` for an entry that is malformed, a name in denyOut,
// an allowOut entry they do not cover (a request may narrow, never widen) or a list
// longer than kMaxSandboxEgressEntries.
std::optional<SandboxEgress> parse_sandbox_egress(const std::vector<std::string>& allow_out,
                                                  const std::vector<std::string>& deny_out,
                                                  std::optional<bool> allow_internet_access,
                                                  const std::vector<EgressRule>& operator_allow,
                                                  const std::vector<EgressRule>& operator_deny,
                                                  std::string* error);

}  // namespace sandboxd::ops
