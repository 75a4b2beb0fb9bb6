#include "ops/sandbox_egress.h"

#include <algorithm>

namespace sandboxd::ops {
namespace {

bool port_matches(uint16_t rule_port, uint16_t port) { return rule_port == 0 || rule_port == port; }

bool name_matches(const EgressRule& rule, std::string_view name) {
  return rule.kind == EgressRule::Kind::Name ? name == rule.name
                                             : name.size() > rule.name.size() && name.ends_with(rule.name);
}

}  // namespace

bool egress_allow_covers(const std::vector<EgressRule>& allow, const EgressPolicy& policy,
                         const EgressRule& wanted) {
  auto port_covers = [&](uint16_t rule_port) { return rule_port == 0 || rule_port == wanted.port; };
  switch (wanted.kind) {
    case EgressRule::Kind::Name:
      return wanted.port == 0 ? policy.allows_name_on_any_port(wanted.name)
                              : policy.allows_name(wanted.name, wanted.port);
    case EgressRule::Kind::Suffix:
      // "*.a.example.com" is under "*.example.com" (every name it matches, that matches).
      return std::ranges::any_of(allow, [&](const EgressRule& rule) {
        return rule.kind == EgressRule::Kind::Suffix && port_covers(rule.port) &&
               wanted.name.ends_with(rule.name);
      });
    case EgressRule::Kind::Network:
      return std::ranges::any_of(allow, [&](const EgressRule& rule) {
        return rule.kind == EgressRule::Kind::Network && port_covers(rule.port) &&
               rule.network.prefix <= wanted.network.prefix &&
               network_contains(rule.network, wanted.network.address);
      });
  }
  return false;
}

bool SandboxEgress::lists_name(std::string_view name, uint16_t port) const {
  return std::ranges::any_of(allow_out, [&](const EgressRule& rule) {
    return rule.kind != EgressRule::Kind::Network && (port == 0 || port_matches(rule.port, port)) &&
           name_matches(rule, name);
  });
}

bool SandboxEgress::denies_everything() const {
  if (allow_internet_access == false) return true;
  return std::ranges::any_of(
      deny_out, [](const EgressRule& rule) { return rule.port == 0 && rule.network.prefix == 0; });
}

bool SandboxEgress::may_resolve(std::string_view name) const {
  return lists_name(name, 0) || !denies_everything();
}

bool SandboxEgress::allows_address(uint32_t address, uint16_t port) const {
  auto in = [&](const EgressRule& rule) {
    return rule.kind == EgressRule::Kind::Network && port_matches(rule.port, port) &&
           network_contains(rule.network, address);
  };
  if (std::ranges::any_of(allow_out, in)) return true;
  if (allow_internet_access == false) return false;
  return std::ranges::none_of(deny_out, in);
}

std::optional<SandboxEgress> parse_sandbox_egress(const std::vector<std::string>& allow_out,
                                                  const std::vector<std::string>& deny_out,
                                                  std::optional<bool> allow_internet_access,
                                                  const std::vector<EgressRule>& operator_allow,
                                                  const std::vector<EgressRule>& operator_deny,
                                                  std::string* error) {
  const EgressPolicy ceiling(operator_allow, operator_deny);
  SandboxEgress egress;
  egress.allow_internet_access = allow_internet_access;
  for (const auto* list : {&allow_out, &deny_out}) {
    const bool allow = list == &allow_out;
    const std::string field = allow ? "allowOut" : "denyOut";
    if (list->size() > kMaxSandboxEgressEntries) {
      *error =
          "'network." + field + "' may have at most " + std::to_string(kMaxSandboxEgressEntries) + " entries";
      return std::nullopt;
    }
    for (const auto& text : *list) {
      std::string why;
      auto rule = parse_egress_rule(text, &why);
      if (!rule) {
        *error = "'network." + field + "' entry '" + text + "' " + why;
        return std::nullopt;
      }
      if (allow) {
        if (!egress_allow_covers(operator_allow, ceiling, *rule)) {
          *error = "'network.allowOut' entry '" + text +
                   "' is not allowed by this server's egress policy (network.egress.allow); a sandbox's "
                   "network options may narrow that policy, never widen it";
          return std::nullopt;
        }
        egress.allow_out.push_back(std::move(*rule));
      } else {
        if (rule->kind != EgressRule::Kind::Network) {
          *error = "'network.denyOut' entry '" + text +
                   "' is not an IP address or CIDR block (domain names are not supported for deny rules)";
          return std::nullopt;
        }
        egress.deny_out.push_back(std::move(*rule));
      }
    }
  }
  return egress;
}

}  // namespace sandboxd::ops
