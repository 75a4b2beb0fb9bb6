#include "service/egress_options.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>

namespace sandboxd::service {
namespace json = boost::json;

std::shared_ptr<const ops::SandboxEgress> egress_options(const Container& container) {
  return container.egress_options.load();
}

void set_egress_options(Container& container, std::shared_ptr<const ops::SandboxEgress> options) {
  container.egress_options.store(std::move(options));
}

std::string encode_egress_options(const ops::SandboxEgress* options) {
  if (!options) return {};
  json::array allow, deny;
  for (const auto& rule : options->allow_out) allow.emplace_back(rule.source);
  for (const auto& rule : options->deny_out) deny.emplace_back(rule.source);
  json::object out{{"allowOut", std::move(allow)}, {"denyOut", std::move(deny)}};
  if (options->allow_internet_access) out["allowInternetAccess"] = *options->allow_internet_access;
  if (!options->header_rules.empty()) {
    // (The database holds the values: it is the server's, never the sandbox's.)
    json::array rules;
    for (const auto& rule : options->header_rules) {
      json::array headers;
      for (const auto& [name, value] : rule.headers)
        headers.push_back(json::array{json::string(name), json::string(value)});
      rules.push_back(json::object{{"host", rule.source}, {"headers", std::move(headers)}});
    }
    out["rules"] = std::move(rules);
  }
  return json::serialize(out);
}

std::shared_ptr<const ops::SandboxEgress> decode_egress_options(std::string_view text) {
  if (text.empty()) return nullptr;
  boost::system::error_code ec;
  const json::value value = json::parse(text, ec);
  auto unreadable = [&](const std::string& why) {
    // (Not the text itself: it may hold a header rule's credential.)
    spdlog::error(
        "a container's stored network options are unreadable ({}); the operator's policy alone applies "
        "to it",
        why);
    return nullptr;
  };
  if (ec || !value.is_object()) return unreadable("not a JSON object");
  const auto& object = value.as_object();
  auto egress = std::make_shared<ops::SandboxEgress>();
  for (const char* key : {"allowOut", "denyOut"}) {
    const auto* list = object.if_contains(key);
    if (!list) continue;
    if (!list->is_array()) return unreadable(std::string(key) + " is not an array");
    for (const auto& item : list->as_array()) {
      std::string why;
      auto rule = item.is_string() ? ops::parse_egress_rule(item.as_string(), &why) : std::nullopt;
      if (!rule) return unreadable(std::string(key) + " has an entry that is not one");
      (std::string_view(key) == "allowOut" ? egress->allow_out : egress->deny_out)
          .push_back(std::move(*rule));
    }
  }
  if (const auto* rules = object.if_contains("rules")) {
    if (!rules->is_array()) return unreadable("rules is not an array");
    for (const auto& item : rules->as_array()) {
      const auto* host = item.is_object() ? item.as_object().if_contains("host") : nullptr;
      const auto* headers = item.is_object() ? item.as_object().if_contains("headers") : nullptr;
      if (!host || !host->is_string() || !headers || !headers->is_array())
        return unreadable("a rule is not one");
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const auto& pair : headers->as_array()) {
        if (!pair.is_array() || pair.as_array().size() != 2 || !pair.as_array()[0].is_string() ||
            !pair.as_array()[1].is_string())
          return unreadable("a rule's header is not a name and a value");
        pairs.emplace_back(pair.as_array()[0].as_string(), pair.as_array()[1].as_string());
      }
      std::string why;
      auto rule = ops::parse_header_rule(host->as_string(), std::move(pairs), &why);
      if (!rule) return unreadable("a rule " + why);
      egress->header_rules.push_back(std::move(*rule));
    }
  }
  if (const auto* internet = object.if_contains("allowInternetAccess")) {
    if (!internet->is_bool()) return unreadable("allowInternetAccess is not a boolean");
    egress->allow_internet_access = internet->as_bool();
  }
  return egress;
}

}  // namespace sandboxd::service
